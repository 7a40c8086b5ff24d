/* test_cli_limits.c: what the plan assumed against what the run gets, through the CLI.
 *
 *  1. A dataset fetched with data.download from a mirror (a file:// tarball made here:
 *     CIFAR-10 in the real binary format with 24 training and 6 test images instead of
 *     50000 / 10000) is planned again from the files: `runner plan` before the download
 *     shows the official sizes, the run trains on the real ones (3 steps of 8, not 6250),
 *     finishes with exit 0, and its plan.json says 24 / 6; before, the run stopped with
 *     "internal: loader has 3 batches per epoch, plan says 6250".
 *     A mirror whose archive lacks a split's file is refused with exit 2 naming the file.
 *  2. A run that cannot fit in memory (synthetic 4x4096x4096 images on resnet152, over
 *     100 TiB of activations) is refused by `runner plan` and by the run with exit 2 before
 *     anything is allocated or a run directory is made; the message names the planned and
 *     the physical figure and the keys to change. The same experiment at 3x32x32 plans.
 */
#include "tests/cli/cli_util.h"

#include <sys/stat.h>
#include <unistd.h>

static char out[1 << 16];
static char tmp[512];

/* Writes n CIFAR-10 records (label byte + 3072 pixel bytes) to path. */
static void write_cifar_file(const char *path, int n, unsigned seed) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        fputc((int)((seed >> 16) % 10), f);
        for (int b = 0; b < 3072; b++) {
            seed = seed * 1103515245u + 12345u;
            fputc((int)((seed >> 16) & 0xff), f);
        }
    }
    fclose(f);
}

/* A cifar-10-binary.tar.gz under tmp/name with per_file records in each training file
 * and test_n in the test file (none: no test file); its file:// URL in url. */
static int make_mirror(const char *name, int per_file, int test_n, char *url, size_t len) {
    char dir[700], path[800], cmd[2200];
    snprintf(dir, sizeof dir, "%s/%s/cifar-10-batches-bin", tmp, name);
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (test_run_cmd(cmd, NULL, 0) != 0) return -1;
    for (int i = 1; i <= 5; i++) {
        snprintf(path, sizeof path, "%s/data_batch_%d.bin", dir, i);
        write_cifar_file(path, per_file, 17u * (unsigned)i);
    }
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    if (test_n) write_cifar_file(path, test_n, 99u);
    snprintf(cmd, sizeof cmd, "tar czf %s/%s/mirror.tar.gz -C %s/%s cifar-10-batches-bin", tmp, name, tmp,
             name);
    if (test_run_cmd(cmd, NULL, 0) != 0) return -1;
    snprintf(url, len, "file://%s/%s/mirror.tar.gz", tmp, name);
    return 0;
}

static void download_replans(void) {
    char url[800], exp[700], args[4096];
    CHECK_INT(make_mirror("m1", 24 / 5 + 1, 6, url, sizeof url), 0);   /* 5 x 5 = 25 training */
    snprintf(exp, sizeof exp, "%s/dl.yaml", tmp);
    char text[2048];
    snprintf(text, sizeof text,
             "name: dl\nseed: 0\ndevice: cpu\n"
             "data: {dataset: cifar10, root: %s/data/c10, download: true, download_url: \"%s\", workers: 0}\n"
             "model: {arch: resnet20}\n"
             "train: {epochs: 1, batch_size: 8}\n"
             "schedule: {name: constant, warmup_epochs: 0}\n"
             "parallel: {mode: single}\n"
             "checkpoint: {resume: never}\n"
             "output: {root: %s/runs}\n", tmp, url, tmp);
    test_write_file(exp, text);
    /* before the download the plan can only show the official sizes, and says so */
    snprintf(args, sizeof args, "plan %s", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "50000 train / 10000 test samples");
    CHECK_CONTAINS(out, "(will download)");
    CHECK_CONTAINS(out, "the run plans again from the downloaded files");
    /* the run: 25 images at batch 8 = 4 steps */
    snprintf(args, sizeof args, "%s", exp);
    int rc = run_runner(args, out, sizeof out);
    if (rc != 0) fprintf(stderr, "%s\n", out);
    CHECK_INT(rc, 0);
    CHECK(strstr(out, "internal") == NULL);
    CHECK_CONTAINS(out, "4 steps");
    char root[700];
    snprintf(root, sizeof root, "%s/runs", tmp);
    const char *run = only_run_dir(root, "dl");
    CHECK(run != NULL);
    if (run) {
        char p[4200];
        snprintf(p, sizeof p, "%s/plan.json", run);
        size_t n = 0;
        char *plan = test_read_file(p, &n);
        CHECK(plan != NULL);
        if (plan) {
            CHECK_CONTAINS(plan, "\"train_size\": 25");
            CHECK_CONTAINS(plan, "\"val_size\": 6");
            CHECK_CONTAINS(plan, "\"steps_per_epoch\": 4");
            free(plan);
        }
        snprintf(p, sizeof p, "%s/summary.json", run);
        plan = test_read_file(p, &n);
        CHECK(plan != NULL);
        if (plan) {
            CHECK_CONTAINS(plan, "\"status\": \"completed\"");
            free(plan);
        }
    }
    /* the files are there now: a plan shows their sizes */
    snprintf(args, sizeof args, "plan %s", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "25 train / 6 test samples");

    /* a mirror whose archive lacks the test split: an input error (exit 2) naming the
     * file, not an internal one */
    CHECK_INT(make_mirror("m2", 2, 0, url, sizeof url), 0);
    snprintf(args, sizeof args, "%s --set data.root=%s/data/partial --set data.download_url=%s", exp,
             tmp, url);
    rc = run_runner(args, out, sizeof out);
    if (rc != 2) fprintf(stderr, "%s\n", out);
    CHECK_INT(rc, 2);
    CHECK(strstr(out, "internal") == NULL);
    CHECK_CONTAINS(out, "test_batch.bin");
}

static void memory_refused(void) {
    char exp[700], args[2048];
    snprintf(exp, sizeof exp, "%s/big.yaml", tmp);
    char text[1024];
    snprintf(text, sizeof text,
             "name: big\ndevice: cpu\n"
             "data: {dataset: synthetic, synthetic: {image: [4, 4096, 4096]}}\n"
             "model: {arch: resnet152}\n"
             "parallel: {mode: single}\n"
             "output: {root: %s/bigruns}\n", tmp);
    test_write_file(exp, text);
    const char *verbs[2] = {"plan ", ""};
    for (int v = 0; v < 2; v++) {
        snprintf(args, sizeof args, "%s%s", verbs[v], exp);
        CHECK_INT(run_runner(args, out, sizeof out), 2);
        CHECK_CONTAINS(out, "TiB of memory on this host");
        CHECK_CONTAINS(out, "but the host has");
        CHECK_CONTAINS(out, "activations for a micro-batch of 128 on resnet152 at 4x4096x4096");
        CHECK_CONTAINS(out, "train.batch_size");
        CHECK_CONTAINS(out, "model.arch");
        CHECK_CONTAINS(out, "data.synthetic.train_size");
        CHECK_CONTAINS(out, "big.yaml");
    }
    /* refused before anything was made */
    char dir[800];
    snprintf(dir, sizeof dir, "%s/bigruns", tmp);
    CHECK(access(dir, F_OK) != 0);
    /* the same at 3x32x32 plans, and shows what it needs against what there is */
    snprintf(args, sizeof args, "plan %s --set data.synthetic.image=[3,32,32]", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "on this host (of ");
    snprintf(args, sizeof args, "plan %s --set data.synthetic.image=[3,32,32] --json", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "\"host_total_bytes\": ");
    CHECK_CONTAINS(out, "\"device_total_bytes\": 0");
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(download_replans);
    TEST_RUN(memory_refused);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (!test_failures_) test_run_cmd(cmd, NULL, 0);
    return test_main_end();
}
