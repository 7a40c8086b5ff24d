/* test_config_schema.c: checks over the whole schema. config_hash is pinned for the
 * minimal file, kept by every setting that does not change the numbers and changed by
 * every one that does; every key of the schema table is in docs/experiment-files.md and
 * in resolved.yaml; every experiment file shipped in experiments/ loads.
 * Values key by key are in test_config_load.c.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "runner/config_internal.h"
#include "tests/config/config_test_util.h"

static void test_hash(void) {
    experiment_t *a = load("h.yaml", MIN, NULL, 0);
    experiment_t *b = load("h.yaml", NULL, NULL, 0);
    uint64_t h = config_hash(a);
    CHECK(h == config_hash(b));
    /* pinned: a change here changes every checkpoint's hash (resume refuses old ones) */
    printf("  hash of the minimal cifar10/resnet18 file: %016llx\n", (unsigned long long)h);
    CHECK(h == 0xd990ee4582c82628ULL);
    free(b);
    /* settings that do not change the numbers keep the hash */
    const char *same[] = {"name=other",          "logging.print_every=3", "output.root=/x",
                          "checkpoint.keep_last=9", "checkpoint.resume=never",
                          "data.root=/elsewhere", "data.workers=7",        "train.max_steps=5",
                          "parallel.master_port=1234", "logging.wandb.mode=offline",
                          "train.eval_every=5",  "parallel.bucket_mb=1", "checkpoint.every_steps=10",
                          "parallel.max_restarts=3", "train.early_stopping.metric=val_loss",
                          "checkpoint.best_metric=val_loss", "optimizer.clip_grad_norm=null",
                          "train.ema.decay=null", "train.ema.warmup_power=0.6666666666666666",
                          /* keys added later hash only when not at their default */
                          "model.stem=auto", "model.init_head=strict"};
    for (int i = 0; i < (int)(sizeof same / sizeof same[0]); i++) {
        b = load("h.yaml", NULL, &same[i], 1);
        if (config_hash(b) != h) fprintf(stderr, "hash changed by --set %s\n", same[i]);
        CHECK(config_hash(b) == h);
        free(b);
    }
    /* every setting that defines the numbers changes it */
    const char *diff[] = {"seed=1", "device=cpu", "data.dataset=cifar100", "data.shuffle=false",
                          "data.augment.random_crop=false", "data.augment.random_crop.padding=2",
                          "data.augment.horizontal_flip=false", "data.augment.rotation=0",
                          "data.normalize=false", "model.arch=resnet34", "model.num_classes=11",
                          "model.zero_init_residual=true", "model.init_from=w.safetensors",
                          "model.stem=imagenet", "model.stem=cifar", "model.init_head=reinit",
                          "optimizer.name=adamw", "optimizer.lr=0.2", "optimizer.momentum=0.8",
                          "optimizer.nesterov=true", "optimizer.weight_decay=0",
                          "optimizer.no_weight_decay_on_bn_and_bias=true",
                          "optimizer.betas=[0.9, 0.99]", "optimizer.eps=1e-7",
                          "schedule.name=cosine", "schedule.milestones=[50]", "schedule.gamma=0.1",
                          "schedule.warmup_epochs=0", "schedule.min_lr=0.001", "train.epochs=100",
                          "train.batch_size=256", "train.grad_accum=2",
                          "train.label_smoothing=0.1", "train.deterministic=false",
                          "amp.enabled=true", "amp.dtype=bf16", "amp.init_scale=1024",
                          "amp.growth_interval=100", "amp.tf32=false", "parallel.mode=dp",
                          "parallel.world_size=4", "parallel.grad_compression=fp16",
                          "parallel.sync_bn=true", "data.synthetic.classes=5",
                          "optimizer.clip_grad_norm=1", "train.ema.decay=0.9998", "train.ema.warmup=true",
                          "train.ema.warmup_gamma=2", "train.ema.warmup_power=0.75"};
    for (int i = 0; i < (int)(sizeof diff / sizeof diff[0]); i++) {
        b = load("h.yaml", NULL, &diff[i], 1);
        if (config_hash(b) == h) fprintf(stderr, "hash not changed by --set %s\n", diff[i]);
        CHECK(config_hash(b) != h);
        free(b);
    }
    free(a);
}

/* docs/experiment-files.md and resolved.yaml name every key of the schema table. */
static void test_every_key_documented_and_written(void) {
    char path[1100];
    snprintf(path, sizeof path, "%s/docs/experiment-files.md", test_source_dir());
    char *doc = test_read_file(path, NULL);
    CHECK(doc != NULL);
    experiment_t *x = load("exp.yaml", MIN, NULL, 0);
    char *yaml = NULL;
    size_t ylen = 0;
    FILE *f = open_memstream(&yaml, &ylen);
    config_write_yaml(x, f);
    fclose(f);
    for (int i = 0; doc && i < cfg_n_rows; i++) {
        char want[CFG_STR + 4];
        snprintf(want, sizeof want, "`%s`", cfg_rows[i].key);
        if (!strstr(doc, want)) fprintf(stderr, "not documented: %s\n", cfg_rows[i].key);
        CHECK(strstr(doc, want) != NULL);
        if (cfg_rows[i].flags & F_CHILD) continue; /* written inline by its parent */
        const char *leafname = strrchr(cfg_rows[i].key, '.');
        snprintf(want, sizeof want, "%s: ", leafname ? leafname + 1 : cfg_rows[i].key);
        bool found = false; /* at the start of a line, after its indentation */
        for (const char *p = strstr(yaml, want); p && !found; p = strstr(p + 1, want)) {
            const char *q = p;
            while (q > yaml && q[-1] == ' ') q--;
            found = q == yaml || q[-1] == '\n';
        }
        if (!found) fprintf(stderr, "not in resolved.yaml: %s\n", cfg_rows[i].key);
        CHECK(found);
    }
    free(yaml);
    free(doc);
    free(x);
}

/* Every experiment file shipped in experiments/ loads (matrix files as matrices). */
static void test_shipped_experiments(void) {
    char edir[1100];
    snprintf(edir, sizeof edir, "%s/experiments", test_source_dir());
    DIR *d = opendir(edir);
    CHECK(d != NULL);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".yaml")) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", edir, de->d_name);
        char *text = test_read_file(path, NULL);
        bool is_matrix = text && strstr(text, "\nmatrix:");
        free(text);
        err_t e;
        int rc;
        if (is_matrix) {
            experiment_matrix_t *m = config_load_matrix(path, NULL, 0, &e);
            rc = m ? 0 : -1;
            if (m) printf("  %s: matrix %s, %d runs\n", de->d_name, m->name, m->n);
            free(m);
        } else {
            experiment_t *x = malloc(sizeof *x);
            rc = config_load(path, NULL, 0, x, &e);
            if (!rc) printf("  %s: %s %s/%s\n", de->d_name, x->name, x->data.dataset, x->model.arch);
            free(x);
        }
        if (rc) fprintf(stderr, "%s\n", e.msg);
        CHECK_INT(rc, 0);
        n++;
    }
    if (d) closedir(d);
    CHECK(n >= 1);
}

int main(void) {
    if (config_test_begin()) return 1;
    TEST_RUN(test_hash);
    TEST_RUN(test_every_key_documented_and_written);
    TEST_RUN(test_shipped_experiments);
    return config_test_end();
}
