/* test_datasets.c: CIFAR-10/100 binary, Fashion-MNIST IDX (plain, gzip, and Debian's
 * installed files) and synthetic datasets: pixels, labels, class names, and every input
 * error's message. Files are written here in the real formats. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset.h"
#include "tests/data/data_test_util.h"
#include "tests/test.h"

static char tmp[512];

/* Pixel byte of CIFAR record r in file f at plane ch, position px. */
static uint8_t cifar_px(int f, int r, int ch, int px) {
    return (uint8_t)(px * 3 + ch * 50 + r * 7 + f * 11);
}

/* Writes a CIFAR-10 style file of n records with labels (f*7 + r) % 10. */
static void write_cifar10(const char *dir, const char *name, int f, int n) {
    uint8_t *buf = malloc((size_t)n * 3073);
    for (int r = 0; r < n; r++) {
        uint8_t *rec = buf + (size_t)r * 3073;
        rec[0] = (uint8_t)((f * 7 + r) % 10);
        for (int ch = 0; ch < 3; ch++)
            for (int px = 0; px < 1024; px++) rec[1 + ch * 1024 + px] = cifar_px(f, r, ch, px);
    }
    CHECK_INT(tw_write(dir, name, buf, (size_t)n * 3073), 0);
    free(buf);
}

static dataset_t *open_ds(const char *name, const char *root, data_split_t split, err_t *e) {
    dataset_opts_t o = {0};
    o.name = name;
    o.root = root;
    o.split = split;
    dataset_t *d = NULL;
    err_clear(e);
    if (dataset_open(&o, &d, e)) return NULL;
    return d;
}

static void test_info(void) {
    dataset_info_t i;
    err_t e = {0};
    CHECK_INT(dataset_info("cifar10", &i, &e), 0);
    CHECK_STR(i.default_root, "data/cifar-10-batches-bin");
    CHECK_INT(i.num_classes, 10);
    CHECK_NEAR(i.mean[0], 0.4914, 1e-6, 0);
    CHECK_NEAR(i.std[2], 0.2616, 1e-6, 0);
    CHECK_STR(i.md5, "c32a1d4ab5d03f1284b67883e8d87530");
    CHECK_INT(dataset_info("cifar100", &i, &e), 0);
    CHECK_STR(i.default_root, "data/cifar-100-binary");
    CHECK_INT(i.num_classes, 100);
    CHECK_NEAR(i.mean[1], 0.4865, 1e-6, 0);
    CHECK_STR(i.url, "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz");
    CHECK_STR(i.md5, "03b5dce01913d631647c71ecec9e9cb8");
    CHECK_INT(dataset_info("fashion_mnist", &i, &e), 0);
    CHECK_STR(i.default_root, "/usr/share/datasets/fashion-mnist");
    CHECK_INT(i.channels, 1);
    CHECK_INT(i.height, 28);
    CHECK_NEAR(i.mean[0], 0.2860, 1e-6, 0);
    CHECK_NEAR(i.std[0], 0.3530, 1e-6, 0);
    CHECK_INT(dataset_info("synthetic", &i, &e), 0);
    CHECK_NEAR(i.mean[2], 0.5, 0, 0);
    CHECK_NEAR(i.std[0], 0.25, 0, 0);
    CHECK_INT(dataset_info("imagenet", &i, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "unknown dataset \"imagenet\"");
    CHECK_CONTAINS(e.msg, "cifar10, cifar100, fashion_mnist, synthetic");
}

static void test_cifar10(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/c10", tmp);
    mkdir(dir, 0755);
    int counts[5] = {2, 1, 1, 1, 3};
    for (int f = 0; f < 5; f++) {
        char name[32];
        snprintf(name, sizeof name, "data_batch_%d.bin", f + 1);
        write_cifar10(dir, name, f, counts[f]);
    }
    write_cifar10(dir, "test_batch.bin", 9, 2);
    err_t e = {0};
    char missing[512] = "";
    CHECK_INT(dataset_files_present("cifar10", dir, DATA_SPLIT_TRAIN, missing, sizeof missing, &e), 1);
    const char *meta = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n";
    CHECK_INT(tw_write(dir, "batches.meta.txt", meta, strlen(meta)), 0);
    dataset_t *d = open_ds("cifar10", dir, DATA_SPLIT_TRAIN, &e);
    CHECK(d != NULL);
    if (!d) { fprintf(stderr, "%s\n", e.msg); return; }
    CHECK_INT(dataset_size(d), 8);
    int c, h, w;
    dataset_shape(d, &c, &h, &w);
    CHECK_INT(c, 3); CHECK_INT(h, 32); CHECK_INT(w, 32);
    CHECK_INT(dataset_num_classes(d), 10);
    CHECK_STR(dataset_class_name(d, 0), "airplane");
    CHECK_STR(dataset_class_name(d, 9), "truck");
    /* images 0-1 come from data_batch_1, 2, 3, 4 from batches 2-4, 5-7 from data_batch_5 */
    int label;
    const uint8_t *img = dataset_get(d, 4, &label);
    CHECK_INT(label, (3 * 7 + 0) % 10);
    CHECK_INT(img[(5 * 32 + 7) * 3 + 0], cifar_px(3, 0, 0, 5 * 32 + 7));
    CHECK_INT(img[(5 * 32 + 7) * 3 + 2], cifar_px(3, 0, 2, 5 * 32 + 7));
    img = dataset_get(d, 7, &label);
    CHECK_INT(label, (4 * 7 + 2) % 10);
    CHECK_INT(img[(31 * 32 + 31) * 3 + 1], cifar_px(4, 2, 1, 1023));
    CHECK_INT(dataset_labels(d)[1], 1);
    CHECK(dataset_pixels(d) + 7 * 3072 == img);
    dataset_free(d);
    d = open_ds("cifar10", dir, DATA_SPLIT_VAL, &e);
    CHECK(d != NULL);
    if (d) {
        CHECK_INT(dataset_size(d), 2);
        img = dataset_get(d, 1, &label);
        CHECK_INT(label, (9 * 7 + 1) % 10);
        CHECK_INT(img[(0 * 32 + 1) * 3 + 1], cifar_px(9, 1, 1, 1));
        dataset_free(d);
    }
    /* errors: not a whole number of records, label out of range, missing file */
    uint8_t bad[2 * 3073] = {0};
    CHECK_INT(tw_write(dir, "test_batch.bin", bad, 3074), 0);
    d = open_ds("cifar10", dir, DATA_SPLIT_VAL, &e);
    CHECK(d == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "test_batch.bin has 3074 bytes, expected a whole number of 3073-byte records");
    bad[3073] = 10;  /* record 1's label */
    CHECK_INT(tw_write(dir, "test_batch.bin", bad, 2 * 3073), 0);
    d = open_ds("cifar10", dir, DATA_SPLIT_VAL, &e);
    CHECK(d == NULL);
    CHECK_CONTAINS(e.msg, "test_batch.bin record 1 (byte offset 3073): label 10 is outside 0..9");
    char p[700];
    snprintf(p, sizeof p, "%s/data_batch_3.bin", dir);
    unlink(p);
    CHECK_INT(dataset_files_present("cifar10", dir, DATA_SPLIT_TRAIN, missing, sizeof missing, &e), 0);
    CHECK_STR(missing, p);
    d = open_ds("cifar10", dir, DATA_SPLIT_TRAIN, &e);
    CHECK(d == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "data_batch_3.bin not found");
    CHECK_CONTAINS(e.msg, "data.download: true");
    CHECK_CONTAINS(e.msg, "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz");
    CHECK_CONTAINS(e.msg, dir);
}

static void test_cifar100(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/c100", tmp);
    mkdir(dir, 0755);
    uint8_t rec[3 * 3074];
    int fine[3] = {99, 0, 42}, coarse[3] = {19, 0, 5};
    for (int r = 0; r < 3; r++) {
        rec[r * 3074] = (uint8_t)coarse[r];
        rec[r * 3074 + 1] = (uint8_t)fine[r];
        for (int i = 0; i < 3072; i++) rec[r * 3074 + 2 + i] = (uint8_t)(i * 5 + r);
    }
    CHECK_INT(tw_write(dir, "train.bin", rec, sizeof rec), 0);
    CHECK_INT(tw_write(dir, "test.bin", rec, 3074), 0);
    err_t e = {0};
    dataset_t *d = open_ds("cifar100", dir, DATA_SPLIT_TRAIN, &e);
    CHECK(d != NULL);
    if (!d) { fprintf(stderr, "%s\n", e.msg); return; }
    CHECK_INT(dataset_size(d), 3);
    CHECK_INT(dataset_num_classes(d), 100);
    CHECK_INT(dataset_labels(d)[0], 99);
    CHECK_INT(dataset_labels(d)[2], 42);
    CHECK_STR(dataset_class_name(d, 42), "42");
    const uint8_t *img = dataset_get(d, 2, NULL);
    /* HWC (y=1, x=2, ch=2) <- plane 2 offset 1*32+2 */
    CHECK_INT(img[(1 * 32 + 2) * 3 + 2], (uint8_t)((2048 + 34) * 5 + 2));
    dataset_free(d);
    char names[2000] = "";
    for (int k = 0; k < 100; k++) {
        char line[32];
        snprintf(line, sizeof line, "class_%d\n", k);
        strcat(names, line);
    }
    CHECK_INT(tw_write(dir, "fine_label_names.txt", names, strlen(names)), 0);
    d = open_ds("cifar100", dir, DATA_SPLIT_VAL, &e);
    CHECK(d != NULL);
    if (d) {
        CHECK_INT(dataset_size(d), 1);
        CHECK_STR(dataset_class_name(d, 42), "class_42");
        dataset_free(d);
    }
    rec[3074 + 1] = 100;
    CHECK_INT(tw_write(dir, "train.bin", rec, sizeof rec), 0);
    d = open_ds("cifar100", dir, DATA_SPLIT_TRAIN, &e);
    CHECK(d == NULL);
    CHECK_CONTAINS(e.msg, "train.bin record 1 (byte offset 3075): label 100 is outside 0..99");
    rec[3074 + 1] = 1;
    rec[2 * 3074] = 20;
    CHECK_INT(tw_write(dir, "train.bin", rec, sizeof rec), 0);
    d = open_ds("cifar100", dir, DATA_SPLIT_TRAIN, &e);
    CHECK(d == NULL);
    CHECK_CONTAINS(e.msg, "record 2 (byte offset 6148): coarse label 20 is outside 0..19");
    CHECK_INT(tw_write(dir, "train.bin", rec, 3074 * 2 + 100), 0);
    d = open_ds("cifar100", dir, DATA_SPLIT_TRAIN, &e);
    CHECK(d == NULL);
    CHECK_CONTAINS(e.msg, "train.bin has 6248 bytes, expected a whole number of 3074-byte records");
}

/* Writes an IDX pair (images + labels) with n images of rows x cols. */
static void write_idx(const char *dir, const char *prefix, int gz, uint32_t img_magic,
                      uint32_t n_img, uint32_t rows, uint32_t cols, uint32_t n_lab,
                      const uint8_t *labels, size_t cut) {
    size_t isz = 16 + (size_t)n_img * rows * cols, lsz = 8 + n_lab;
    uint8_t *ib = malloc(isz), *lb = malloc(lsz);
    tw_be32(ib, img_magic); tw_be32(ib + 4, n_img); tw_be32(ib + 8, rows); tw_be32(ib + 12, cols);
    for (size_t i = 16; i < isz; i++) ib[i] = (uint8_t)((i - 16) * 13 % 256);
    tw_be32(lb, 0x801); tw_be32(lb + 4, n_lab);
    memcpy(lb + 8, labels, n_lab);
    char in[128], ln[128];
    snprintf(in, sizeof in, "%s-images-idx3-ubyte%s", prefix, gz ? ".gz" : "");
    snprintf(ln, sizeof ln, "%s-labels-idx1-ubyte%s", prefix, gz ? ".gz" : "");
    if (gz) {
        CHECK_INT(tw_write_gz(dir, in, ib, isz - cut), 0);
        CHECK_INT(tw_write_gz(dir, ln, lb, lsz), 0);
    } else {
        CHECK_INT(tw_write(dir, in, ib, isz - cut), 0);
        CHECK_INT(tw_write(dir, ln, lb, lsz), 0);
    }
    free(ib);
    free(lb);
}

static void test_fashion_mnist_files(void) {
    char dir[600], dirgz[600];
    snprintf(dir, sizeof dir, "%s/fm", tmp);
    snprintf(dirgz, sizeof dirgz, "%s/fmgz", tmp);
    mkdir(dir, 0755);
    mkdir(dirgz, 0755);
    uint8_t labels[3] = {9, 0, 3};
    write_idx(dir, "train", 0, 0x803, 3, 28, 28, 3, labels, 0);
    write_idx(dirgz, "t10k", 1, 0x803, 3, 28, 28, 3, labels, 0);
    err_t e = {0};
    const char *dirs[2] = {dir, dirgz};
    data_split_t splits[2] = {DATA_SPLIT_TRAIN, DATA_SPLIT_VAL};
    for (int t = 0; t < 2; t++) {
        dataset_t *d = open_ds("fashion_mnist", dirs[t], splits[t], &e);
        CHECK(d != NULL);
        if (!d) { fprintf(stderr, "%s\n", e.msg); continue; }
        CHECK_INT(dataset_size(d), 3);
        int c, h, w;
        dataset_shape(d, &c, &h, &w);
        CHECK_INT(c, 1); CHECK_INT(h, 28); CHECK_INT(w, 28);
        CHECK_INT(dataset_labels(d)[0], 9);
        CHECK_INT(dataset_labels(d)[2], 3);
        CHECK_STR(dataset_class_name(d, 9), "Ankle boot");
        const uint8_t *img = dataset_get(d, 2, NULL);
        CHECK_INT(img[5 * 28 + 6], (uint8_t)((2 * 784 + 5 * 28 + 6) * 13 % 256));
        dataset_free(d);
    }
    /* wrong magic */
    write_idx(dir, "train", 0, 0x801, 3, 28, 28, 3, labels, 0);
    CHECK(open_ds("fashion_mnist", dir, DATA_SPLIT_TRAIN, &e) == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "train-images-idx3-ubyte: IDX magic is 0x00000801, expected 0x00000803");
    /* wrong dimensions */
    write_idx(dir, "train", 0, 0x803, 3, 27, 28, 3, labels, 0);
    CHECK(open_ds("fashion_mnist", dir, DATA_SPLIT_TRAIN, &e) == NULL);
    CHECK_CONTAINS(e.msg, "images are 27x28, expected 28x28");
    /* count mismatch */
    write_idx(dir, "train", 0, 0x803, 3, 28, 28, 2, labels, 0);
    CHECK(open_ds("fashion_mnist", dir, DATA_SPLIT_TRAIN, &e) == NULL);
    CHECK_CONTAINS(e.msg, "has 3 images but");
    CHECK_CONTAINS(e.msg, "train-labels-idx1-ubyte has 2 labels");
    /* truncated */
    write_idx(dir, "train", 0, 0x803, 3, 28, 28, 3, labels, 352);
    CHECK(open_ds("fashion_mnist", dir, DATA_SPLIT_TRAIN, &e) == NULL);
    CHECK_CONTAINS(e.msg, "train-images-idx3-ubyte is truncated: expected 2352 bytes of pixels, found 2000");
    /* trailing bytes */
    write_idx(dir, "train", 0, 0x803, 2, 28, 28, 2, labels, 0);
    {
        char p[700];
        snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
        FILE *f = fopen(p, "ab");
        fputs("xyz", f);
        fclose(f);
    }
    CHECK(open_ds("fashion_mnist", dir, DATA_SPLIT_TRAIN, &e) == NULL);
    CHECK_CONTAINS(e.msg, "has 3 bytes after the 1584 its header announces");
    /* label out of range */
    uint8_t bad_labels[3] = {1, 10, 2};
    write_idx(dir, "train", 0, 0x803, 3, 28, 28, 3, bad_labels, 0);
    CHECK(open_ds("fashion_mnist", dir, DATA_SPLIT_TRAIN, &e) == NULL);
    CHECK_CONTAINS(e.msg, "label 10 of image 1 (byte offset 9) is outside 0..9");
    /* corrupt gzip: flip bytes inside the deflate stream */
    char p[700];
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte.gz", dirgz);
    size_t len;
    char *gz = test_read_file(p, &len);
    CHECK(gz && len > 40);
    if (gz) {
        for (size_t i = 12; i < len - 10; i += 3) gz[i] ^= 0x5a;
        CHECK_INT(tw_write(p, NULL, gz, len), 0);
        CHECK(open_ds("fashion_mnist", dirgz, DATA_SPLIT_VAL, &e) == NULL);
        CHECK_INT(e.code, ERR_INPUT);
        CHECK_CONTAINS(e.msg, "t10k-images-idx3-ubyte.gz: corrupt");
        /* a gzip cut in half */
        write_idx(dirgz, "t10k", 1, 0x803, 3, 28, 28, 3, labels, 0);
        free(gz);
        gz = test_read_file(p, &len);
        CHECK_INT(tw_write(p, NULL, gz, len / 2), 0);
        CHECK(open_ds("fashion_mnist", dirgz, DATA_SPLIT_VAL, &e) == NULL);
        CHECK_CONTAINS(e.msg, "t10k-images-idx3-ubyte.gz");
        CHECK_CONTAINS(e.msg, "truncated");
        free(gz);
    }
    /* missing */
    CHECK(open_ds("fashion_mnist", tmp, DATA_SPLIT_VAL, &e) == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "t10k-images-idx3-ubyte not found");
    CHECK_CONTAINS(e.msg, "apt-get install dataset-fashion-mnist");
}

/* Debian's dataset-fashion-mnist package, when installed. */
static void test_fashion_mnist_installed(void) {
    err_t e = {0};
    if (dataset_files_present("fashion_mnist", NULL, DATA_SPLIT_TRAIN, NULL, 0, &e) != 1) {
        printf("fashion-mnist not installed: skipping the real-file case\n");
        return;
    }
    dataset_t *d = open_ds("fashion_mnist", NULL, DATA_SPLIT_TRAIN, &e);
    CHECK(d != NULL);
    if (!d) { fprintf(stderr, "%s\n", e.msg); return; }
    CHECK_INT(dataset_size(d), 60000);
    /* first labels, checked with Python's gzip module on the same files */
    int want[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
    for (int i = 0; i < 10; i++) CHECK_INT(dataset_labels(d)[i], want[i]);
    long sum = 0;
    const uint8_t *img = dataset_get(d, 0, NULL);
    for (int i = 0; i < 784; i++) sum += img[i];
    CHECK_INT(sum, 76247);
    CHECK_STR(dataset_class_name(d, 0), "T-shirt/top");
    dataset_free(d);
    d = open_ds("fashion_mnist", NULL, DATA_SPLIT_VAL, &e);
    CHECK(d != NULL);
    if (d) {
        CHECK_INT(dataset_size(d), 10000);
        CHECK_INT(dataset_labels(d)[0], 9);
        CHECK_INT(dataset_labels(d)[1], 2);
        dataset_free(d);
    }
}

static dataset_t *open_synth(uint64_t seed, data_split_t split, int n, err_t *e) {
    dataset_opts_t o = {0};
    o.name = "synthetic";
    o.split = split;
    o.seed = seed;
    o.synthetic = (data_synthetic_opts_t){n, n / 4, 3, 32, 32, 10};
    dataset_t *d = NULL;
    err_clear(e);
    dataset_open(&o, &d, e);
    return d;
}

static void test_synthetic(void) {
    err_t e = {0};
    dataset_t *a = open_synth(7, DATA_SPLIT_TRAIN, 2000, &e), *b = open_synth(7, DATA_SPLIT_TRAIN, 2000, &e);
    dataset_t *c = open_synth(8, DATA_SPLIT_TRAIN, 2000, &e), *v = open_synth(7, DATA_SPLIT_VAL, 2000, &e);
    CHECK(a && b && c && v);
    if (!a || !b || !c || !v) return;
    CHECK_INT(dataset_size(a), 2000);
    CHECK_INT(dataset_size(v), 500);
    CHECK(memcmp(dataset_pixels(a), dataset_pixels(b), 2000 * 3072) == 0);
    CHECK(memcmp(dataset_labels(a), dataset_labels(b), 2000 * 4) == 0);
    CHECK(memcmp(dataset_pixels(a), dataset_pixels(c), 3072) != 0);
    CHECK(memcmp(dataset_pixels(a), dataset_pixels(v), 3072) != 0);
    int hist[10] = {0};
    for (int i = 0; i < 2000; i++) {
        int l = dataset_labels(a)[i];
        CHECK(l >= 0 && l < 10);
        if (l >= 0 && l < 10) hist[l]++;
    }
    for (int k = 0; k < 10; k++) CHECK(hist[k] > 120 && hist[k] < 280);
    /* the class signal: nearest class mean (from train) classifies val well above chance */
    static double mean[10][3072];
    memset(mean, 0, sizeof mean);
    for (int i = 0; i < 2000; i++) {
        int l = dataset_labels(a)[i];
        const uint8_t *p = dataset_get(a, i, NULL);
        for (int j = 0; j < 3072; j++) mean[l][j] += p[j] / (double)hist[l];
    }
    int correct = 0;
    for (int i = 0; i < 500; i++) {
        int label;
        const uint8_t *p = dataset_get(v, i, &label);
        double best = 1e300;
        int arg = -1;
        for (int k = 0; k < 10; k++) {
            double d2 = 0;
            for (int j = 0; j < 3072; j++) d2 += (p[j] - mean[k][j]) * (p[j] - mean[k][j]);
            if (d2 < best) { best = d2; arg = k; }
        }
        correct += arg == label;
    }
    printf("synthetic: nearest-class-mean val accuracy %.3f\n", correct / 500.0);
    CHECK(correct > 400);
    dataset_free(a); dataset_free(b); dataset_free(c); dataset_free(v);
    dataset_opts_t o = {0};
    o.name = "synthetic";
    o.synthetic = (data_synthetic_opts_t){16, 4, 5, 32, 32, 10};
    dataset_t *d = NULL;
    CHECK_INT(dataset_open(&o, &d, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "data.synthetic.image is [5, 32, 32]");
    o.synthetic = (data_synthetic_opts_t){16, 4, 1, 8, 8, 1};
    CHECK_INT(dataset_open(&o, &d, &e), -1);
    CHECK_CONTAINS(e.msg, "data.synthetic.classes is 1");
}

static void test_from_memory(void) {
    uint8_t px[2 * 2 * 2 * 1] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t lab[2] = {1, 0};
    dataset_t *d = NULL;
    err_t e = {0};
    CHECK_INT(dataset_from_memory("m", px, lab, 2, 1, 2, 2, 2, &d, &e), 0);
    CHECK_INT(dataset_get(d, 1, NULL)[3], 8);
    dataset_free(d);
    lab[1] = 2;
    CHECK_INT(dataset_from_memory("m", px, lab, 2, 1, 2, 2, 2, &d, &e), -1);
    CHECK_CONTAINS(e.msg, "label 2 of image 1 is outside [0, 2)");
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(test_info);
    TEST_RUN(test_cifar10);
    TEST_RUN(test_cifar100);
    TEST_RUN(test_fashion_mnist_files);
    TEST_RUN(test_fashion_mnist_installed);
    TEST_RUN(test_synthetic);
    TEST_RUN(test_from_memory);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    test_run_cmd(cmd, NULL, 0);
    return test_main_end();
}
