/* test_config_merge.c: how experiment files combine. base: inheritance (deep merge,
 * relative paths, chains, switching off what a base switched on), --set overrides, and
 * matrix files: expansion, --set over every entry, repeats:, and the messages of bad
 * matrices.
 * Single files key by key are in test_config_load.c; bad files in test_config_errors.c.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/config/config_test_util.h"

static void test_base_inheritance(void) {
    char sub[1100];
    snprintf(sub, sizeof sub, "%s/common", dir);
    mkdir(sub, 0755);
    snprintf(sub, sizeof sub, "%s/exps", dir);
    mkdir(sub, 0755);
    test_write_file(at("common/root.yaml"),
                    "name: root_name\nseed: 7\ntrain: {epochs: 30, batch_size: 64}\n");
    test_write_file(at("common/mid.yaml"),
                    "base: root.yaml\n"
                    "data: {dataset: cifar100, augment: {random_crop: {size: 28, padding: 2}}}\n"
                    "model: {arch: resnet50}\n"
                    "optimizer: {lr: 0.2, momentum: 0.8}\n"
                    "schedule: {milestones: [10, 20, 25]}\n"
                    "train: {epochs: 40}\n");
    experiment_t *x = load("exps/child.yaml",
                           "base: ../common/mid.yaml\n"
                           "optimizer: {lr: 0.05}\n"
                           "schedule: {milestones: [15]}\n"
                           "data: {augment: {random_crop: {padding: 0}}}\n",
                           NULL, 0);
    CHECK_STR(x->name, "child");               /* name: is not inherited */
    CHECK_INT(x->seed, 7);                     /* from the root of the chain */
    CHECK_STR(x->data.dataset, "cifar100");
    CHECK_STR(x->model.arch, "resnet50");
    CHECK_NEAR(x->optimizer.lr, 0.05, 0, 0);   /* this file wins */
    CHECK_NEAR(x->optimizer.momentum, 0.8, 0, 0); /* mappings merge */
    CHECK_INT(x->schedule.n_milestones, 1);    /* lists replace */
    CHECK_INT(x->schedule.milestones[0], 15);
    CHECK_INT(x->train.epochs, 40);            /* mid beats root */
    CHECK_INT(x->train.batch_size, 64);
    CHECK_INT(x->data.augment.crop_size, 28);  /* nested merge two levels down */
    CHECK_INT(x->data.augment.crop_padding, 0);
    char real[1100];
    CHECK(realpath(at("exps/child.yaml"), real) != NULL);
    CHECK_STR(x->source_path, real);
    free(x);
    /* a child may switch off what the base switched on, or set null */
    test_write_file(at("b1.yaml"), MIN "train: {max_steps: 10}\nparallel: {devices: [0, 1]}\n");
    x = load("c1.yaml", "base: b1.yaml\ntrain: {max_steps: null}\nparallel: {devices: null}\n",
             NULL, 0);
    CHECK_INT(x->train.max_steps, -1);
    CHECK_INT(x->parallel.n_devices, 0);
    free(x);
}

static void test_set_overrides(void) {
    test_write_file(at("s.yaml"), MIN "train: {max_steps: 10}\n");
    const char *sets[] = {"optimizer.lr=0.05",   "parallel.devices=[0,1]",
                          "train.max_steps=null", "data.augment.random_crop=false",
                          "train.epochs=3",      "train.epochs=4",
                          " name = renamed ",    "logging.wandb.tags=[x, y]",
                          "optimizer={momentum: 0.5}"};
    experiment_t *x = load("s.yaml", NULL, sets, 9);
    CHECK_NEAR(x->optimizer.lr, 0.05, 0, 0);
    CHECK_NEAR(x->optimizer.momentum, 0.5, 0, 0);
    CHECK_INT(x->parallel.n_devices, 2);
    CHECK_INT(x->parallel.devices[1], 1);
    CHECK_INT(x->train.max_steps, -1);
    CHECK(!x->data.augment.random_crop);
    CHECK_INT(x->train.epochs, 4); /* later --set wins */
    CHECK_STR(x->name, "renamed");
    CHECK_INT(x->logging.wandb.n_tags, 2);
    CHECK_STR(x->logging.wandb.tags[1], "y");
    free(x);
}

static const char *MATRIX =
    "base: mbase.yaml\n"
    "train: {epochs: 2}\n"
    "matrix:\n"
    "  - {name: dp,       parallel.mode: dp,  amp.enabled: false}\n"
    "  - {name: ddp,      parallel.mode: ddp, amp.enabled: false}\n"
    "  - name: ddp_amp\n"
    "    parallel.mode: ddp\n"
    "    amp: {enabled: true, dtype: bf16}\n";

static void test_matrix(void) {
    test_write_file(at("mbase.yaml"), "data: {dataset: cifar100}\nmodel: {arch: resnet50}\n"
                                      "train: {epochs: 200}\nparallel: {mode: single}\n");
    test_write_file(at("cmp.yaml"), MATRIX);
    err_t e;
    experiment_matrix_t *m = config_load_matrix(at("cmp.yaml"), NULL, 0, &e);
    CHECK(m != NULL);
    if (!m) {
        fprintf(stderr, "%s\n", e.msg);
        return;
    }
    CHECK_STR(m->name, "cmp");
    CHECK_INT(m->n, 3);
    CHECK_STR(m->entry_names[0], "dp");
    CHECK_STR(m->entry_names[2], "ddp_amp");
    CHECK_STR(m->runs[1].name, "ddp");
    CHECK_INT(m->runs[0].parallel.mode, PAR_DP);
    CHECK_INT(m->runs[1].parallel.mode, PAR_DDP);
    CHECK_INT(m->runs[2].parallel.mode, PAR_DDP);
    CHECK(!m->runs[1].amp.enabled);
    CHECK(m->runs[2].amp.enabled);
    CHECK_INT(m->runs[2].amp.dtype, PREC_BF16);
    for (int i = 0; i < 3; i++) {
        CHECK_INT(m->runs[i].train.epochs, 2);
        CHECK_STR(m->runs[i].data.dataset, "cifar100");
        CHECK(m->runs[i].source_path[0] == '/');
    }
    free(m);
    /* --set applies to every entry, after the entry's own overrides */
    const char *sets[] = {"amp.enabled=false", "optimizer.lr=0.4"};
    m = config_load_matrix(at("cmp.yaml"), sets, 2, &e);
    CHECK(m != NULL);
    if (m) {
        CHECK(!m->runs[2].amp.enabled);
        CHECK_NEAR(m->runs[0].optimizer.lr, 0.4, 0, 0);
        free(m);
    }
    /* many entries x many --set items, and the most --set items config_load takes */
    char big[8192] = "base: mbase.yaml\nmatrix:\n";
    for (int i = 0; i < 64; i++) {
        size_t l = strlen(big);
        snprintf(big + l, sizeof big - l, "  - {name: r%d, seed: %d}\n", i, i);
    }
    test_write_file(at("big.yaml"), big);
    const char *many[64];
    for (int i = 0; i < 64; i++) many[i] = i % 2 ? "optimizer.lr=0.3" : "train.epochs=3";
    m = config_load_matrix(at("big.yaml"), many, 64, &e);
    CHECK(m != NULL);
    if (!m) fprintf(stderr, "%s\n", e.msg);
    if (m) {
        CHECK_INT(m->n, 64);
        CHECK_INT(m->runs[63].seed, 63);
        CHECK_INT(m->runs[63].train.epochs, 3);
        free(m);
    }
    experiment_t *x = load("mbase.yaml", NULL, many, 64);
    CHECK_NEAR(x->optimizer.lr, 0.3, 0, 0);
    free(x);
    /* the file's own name: names the matrix */
    test_write_file(at("cmp2.yaml"), "name: study\nbase: mbase.yaml\nmatrix: [{name: only}]\n");
    m = config_load_matrix(at("cmp2.yaml"), NULL, 0, &e);
    CHECK(m != NULL);
    if (m) {
        CHECK_STR(m->name, "study");
        CHECK_STR(m->runs[0].name, "only");
        CHECK_INT(m->n, 1);
        free(m);
    }
}

/* Loads a matrix that must fail and returns its message without the directory. */
static const char *matrix_fail(const char *text, const char *const *sets, int n) {
    static err_t e;
    test_write_file(at("bad.yaml"), text);
    experiment_matrix_t *m = config_load_matrix(at("bad.yaml"), sets, n, &e);
    CHECK(m == NULL);
    free(m);
    CHECK_INT(e.code, ERR_INPUT);
    const char *msg = strstr(e.msg, "bad.yaml") ? strstr(e.msg, "bad.yaml") : e.msg;
    printf("  %s\n", msg);
    return msg;
}

static void test_matrix_errors(void) {
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix:\n  - {name: a}\n  - {name: b, "
                          "parallel.mdoe: dp}\n",
                          NULL, 0),
              "bad.yaml:4:15: matrix[1] (line 4): parallel.mdoe: unknown key; did you mean "
              "parallel.mode?");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix:\n  - {name: a}\n  - {name: a, seed: 1}\n",
                          NULL, 0),
              "bad.yaml:4:12: matrix[1] (line 4): name 'a' is already used by matrix[0]; entry "
              "names must be unique");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix:\n  - {seed: 1}\n", NULL, 0),
              "bad.yaml:3:5: matrix[0] (line 3): the entry has no name; add `name: <run name>` "
              "to it");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix:\n  - {name: a/b}\n", NULL, 0),
              "bad.yaml:3:12: matrix[0] (line 3): name: 'a/b' is not a plain name: it contains "
              "'/' (names one directory, not a path); use letters, digits and . _ - +");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix:\n  - {name: a, train.batch_size: 100, "
                          "parallel.mode: ddp, parallel.world_size: 3}\n",
                          NULL, 0),
              "bad.yaml:3:33: matrix[0] (line 3): train.batch_size 100 is not divisible by "
              "parallel.world_size 3 x train.grad_accum 1 = 3; use a multiple of 3");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix:\n  - {name: a, base: x.yaml}\n", NULL, 0),
              "bad.yaml:3:15: matrix[0] (line 3): base: only allowed at the top level of an "
              "experiment file, not in --set or a matrix entry");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix: {name: a}\n", NULL, 0),
              "bad.yaml:2:9: matrix: expected a list of entries like `- {name: a, optimizer.lr: "
              "0.05}`, found a mapping");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix: []\n", NULL, 0),
              "bad.yaml:2:9: matrix: expected a list of entries like `- {name: a, optimizer.lr: "
              "0.05}`, found an empty list");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix: [a]\n", NULL, 0),
              "bad.yaml:2:10: matrix[0] (line 2): expected a mapping like {name: a, "
              "optimizer.lr: 0.05}, found 'a'");
    char big[8192] = "base: mbase.yaml\nmatrix:\n";
    for (int i = 0; i < 65; i++) {
        size_t l = strlen(big);
        snprintf(big + l, sizeof big - l, "  - {name: r%d}\n", i);
    }
    CHECK_STR(matrix_fail(big, NULL, 0), "bad.yaml:3:3: matrix: 65 entries; at most 64");
    CHECK_CONTAINS(matrix_fail(MIN, NULL, 0),
                   "bad.yaml: no matrix: key, so this is a single experiment; run it with "
                   "`runner ");
    const char *nm[] = {"name=x"};
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix: [{name: a}]\n", nm, 1),
              "--set name=x: name cannot be set for a matrix, whose entries name their runs; put "
              "the matrix's own name in the file (name: ...)");
    const char *sets[] = {"amp.dtype=fp8"};
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix: [{name: a}]\n", sets, 1),
              "--set amp.dtype=fp8: amp.dtype: 'fp8' is not one of fp16, bf16");
}

/* repeats: N runs every entry N times (compare.h lays the seeds out); --set repeats=N
 * wins and never reaches the entries; bad values and places name the fix. */
static void test_matrix_repeats(void) {
    err_t e;
    test_write_file(at("rep.yaml"), "base: mbase.yaml\nseed: 7\nrepeats: 3\nmatrix:\n  - {name: a}\n"
                                    "  - {name: b, seed: 40}\n");
    experiment_matrix_t *m = config_load_matrix(at("rep.yaml"), NULL, 0, &e);
    CHECK(m != NULL);
    if (m) {
        CHECK_INT(m->repeats, 3);
        CHECK_INT(m->n, 2);
        CHECK_INT(m->runs[0].seed, 7);
        CHECK_INT(m->runs[1].seed, 40);
        free(m);
    }
    const char *sets[] = {"repeats=5", "optimizer.lr=0.2"};
    m = config_load_matrix(at("rep.yaml"), sets, 2, &e);
    CHECK(m != NULL);
    if (m) {
        CHECK_INT(m->repeats, 5);
        CHECK_NEAR(m->runs[1].optimizer.lr, 0.2, 0, 0);
        free(m);
    }
    m = config_load_matrix(at("cmp.yaml"), NULL, 0, &e);   /* no repeats: one run per entry */
    CHECK(m != NULL);
    if (m) CHECK_INT(m->repeats, 1);
    free(m);
    CHECK_STR(matrix_fail("base: mbase.yaml\nrepeats: 0\nmatrix: [{name: a}]\n", NULL, 0),
              "bad.yaml:2:10: repeats: expected a whole number from 1 to 100 (the runs of each entry, with "
              "seeds seed, seed+1, ...), found '0'");
    CHECK_STR(matrix_fail("base: mbase.yaml\nrepeats: [2]\nmatrix: [{name: a}]\n", NULL, 0),
              "bad.yaml:2:10: repeats: expected a whole number from 1 to 100 (the runs of each entry, with "
              "seeds seed, seed+1, ...), found a list");
    const char *bad[] = {"repeats=two"};
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix: [{name: a}]\n", bad, 1),
              "--set repeats=two: repeats: expected a whole number from 1 to 100 (the runs of each entry, with "
              "seeds seed, seed+1, ...)");
    const char *many[] = {"repeats=100"};
    CHECK_CONTAINS(matrix_fail("base: mbase.yaml\nmatrix: [{name: a}, {name: b}, {name: c}]\n", many, 1),
                   "bad.yaml: 3 entries x repeats 100 = 300 runs; a comparison holds at most 256: lower repeats "
                   "or split the matrix");
    /* only at the top of the matrix file */
    err_t e2;
    experiment_t x;
    test_write_file(at("one.yaml"), "base: mbase.yaml\nrepeats: 2\n");
    CHECK_INT(config_load(at("one.yaml"), NULL, 0, &x, &e2), -1);
    CHECK_CONTAINS(e2.msg, "one.yaml:2:1: repeats: repeats the entries of a matrix: list over seeds, so it "
                           "belongs at the top of the matrix file given to `runner compare`; for one run set "
                           "seed: instead");
    test_write_file(at("repbase.yaml"), "data: {dataset: cifar100}\nrepeats: 2\n");
    CHECK_CONTAINS(matrix_fail("base: repbase.yaml\nmatrix: [{name: a}]\n", NULL, 0),
                   "repbase.yaml:2:1: repeats: repeats the entries of a matrix: list over seeds, so it belongs "
                   "at the top of the matrix file given to `runner compare`, not in a base file");
}

int main(void) {
    if (config_test_begin()) return 1;
    TEST_RUN(test_base_inheritance);
    TEST_RUN(test_set_overrides);
    TEST_RUN(test_matrix);
    TEST_RUN(test_matrix_errors);
    TEST_RUN(test_matrix_repeats);
    return config_test_end();
}
