/* test_config_images.c: the image_folder keys (issue 16): their defaults (which differ
 * from the CIFAR-style augmentation), refusals, `auto` workers, the resolved.yaml round
 * trip, and config_hash (image keys count only for image_folder, so other runs keep the
 * hash their checkpoints hold).
 */
#include <stdlib.h>
#include <string.h>

#include "runner/config.h"
#include "tests/test.h"

static char dir[512];

static int try_load(const char *text, const char *const *sets, int n, experiment_t *x, err_t *e) {
    char p[600];
    snprintf(p, sizeof p, "%s/exp.yaml", dir);
    if (test_write_file(p, text)) return -2;
    return config_load(p, sets, n, x, e);
}

static experiment_t *load(const char *text, const char *const *sets, int n) {
    experiment_t *x = malloc(sizeof *x);
    err_t e = {0};
    if (try_load(text, sets, n, x, &e)) {
        fprintf(stderr, "load failed: %s\n", e.msg);
        free(x);
        return NULL;
    }
    return x;
}

#define FOLDER "data: {dataset: image_folder, root: /data/pets}\nmodel: {arch: resnet50}\n"
#define CIFAR "data: {dataset: cifar10}\nmodel: {arch: resnet18}\n"

static void test_folder_defaults(void) {
    experiment_t *x = load(FOLDER, NULL, 0);
    CHECK(x != NULL);
    if (!x) return;
    CHECK(x->data.augment.random_resized_crop);
    CHECK_NEAR(x->data.augment.rrc_scale[0], 0.08, 0, 0);
    CHECK_NEAR(x->data.augment.rrc_scale[1], 1.0, 0, 0);
    CHECK_NEAR(x->data.augment.rrc_ratio[0], 0.75, 0, 0);
    CHECK_NEAR(x->data.augment.rrc_ratio[1], 1.3333, 0, 0);
    CHECK(!x->data.augment.random_crop);
    CHECK(x->data.augment.horizontal_flip);
    CHECK_NEAR(x->data.augment.rotation, 0, 0, 0);
    CHECK_INT(x->data.workers, -1);
    CHECK_INT(x->data.image_size, 224);
    CHECK_INT(x->data.resize, 256);
    CHECK_STR(x->data.train_dir, "train");
    CHECK_STR(x->data.val_dir, "val");
    CHECK_INT(x->data.image_mode, 0);
    CHECK_INT(x->data.bad_images, 0);
    CHECK(x->data.jpeg_dct_scaling);
    CHECK_INT(x->data.n_norm, 3);
    CHECK_NEAR(x->data.mean[0], 0.485, 0, 0);
    CHECK_NEAR(x->data.std[2], 0.225, 0, 0);
    CHECK_INT(x->model.num_classes, 0); /* the folders decide (the plan) */
    free(x);
    /* grayscale: one channel, timm's mean of ImageNet's three values */
    const char *gray[] = {"data.image_mode=grayscale", "data.image_size=28"};
    x = load(FOLDER, gray, 2);
    CHECK(x && x->data.n_norm == 1);
    if (x) {
        CHECK_NEAR(x->data.mean[0], (0.485 + 0.456 + 0.406) / 3, 1e-12, 0);
        CHECK_NEAR(x->data.std[0], (0.229 + 0.224 + 0.225) / 3, 1e-12, 0);
        CHECK_INT(x->data.resize, 32); /* round(28 / 0.875) */
    }
    free(x);
    /* explicit values win */
    x = load("data:\n  dataset: image_folder\n  workers: 3\n  resize: 300\n  augment:\n"
             "    random_resized_crop: false\n    rotation: 10\n  bad_images: skip\n"
             "model: {arch: resnet18}\n", NULL, 0);
    CHECK(x != NULL);
    if (x) {
        CHECK_INT(x->data.workers, 3);
        CHECK_INT(x->data.resize, 300);
        CHECK(!x->data.augment.random_resized_crop);
        CHECK_NEAR(x->data.augment.rotation, 10, 0, 0);
        CHECK_INT(x->data.bad_images, 1);
        CHECK_STR(x->data.root, "data/images");
    }
    free(x);
    /* other datasets: unchanged defaults, auto workers = 2 */
    const char *autow[] = {"data.workers=auto"};
    x = load(CIFAR, autow, 1);
    CHECK(x && x->data.workers == 2 && !x->data.augment.random_resized_crop &&
          x->data.augment.random_crop && x->data.augment.rotation == 15);
    free(x);
}

static void test_refusals(void) {
    experiment_t x;
    err_t e = {0};
    CHECK_INT(try_load("data: {dataset: cifar10, augment: {random_resized_crop: true}}\n"
                       "model: {arch: resnet18}\n", NULL, 0, &x, &e), -1);
    CHECK_CONTAINS(e.msg, "data.augment.random_resized_crop applies to data.dataset image_folder; "
                          "for cifar10 use data.augment.random_crop");
    CHECK_INT(try_load("data: {dataset: image_folder, augment: {random_crop: {size: 200}}}\n"
                       "model: {arch: resnet18}\n", NULL, 0, &x, &e), -1);
    CHECK_CONTAINS(e.msg, "data.augment.random_crop pads and crops images of one size");
    CHECK_INT(try_load("data: {dataset: image_folder, augment: {random_resized_crop: "
                       "{scale: [0.9, 0.2]}}}\nmodel: {arch: resnet18}\n", NULL, 0, &x, &e), -1);
    CHECK_CONTAINS(e.msg, "scale [0.9, 0.2] is not [min, max]");
    CHECK_INT(try_load("data: {dataset: image_folder, augment: {random_resized_crop: "
                       "{ratio: [0.75]}}}\nmodel: {arch: resnet18}\n", NULL, 0, &x, &e), -1);
    CHECK_CONTAINS(e.msg, "data.augment.random_resized_crop.ratio: 1 entries; it needs exactly 2");
    CHECK_INT(try_load("data: {dataset: image_folder, augment: {random_resized_crop: 3}}\n"
                       "model: {arch: resnet18}\n", NULL, 0, &x, &e), -1);
    CHECK_CONTAINS(e.msg, "{scale: [0.08, 1.0], ratio: [0.75, 1.3333]}");
    CHECK_INT(try_load("data: {dataset: image_folder, workers: many}\nmodel: {arch: resnet18}\n",
                       NULL, 0, &x, &e), -1);
    CHECK_CONTAINS(e.msg, "data.workers: expected an integer, found 'many'");
    CHECK_INT(try_load("data: {dataset: image_folder, image_mode: cmyk}\nmodel: {arch: resnet18}\n",
                       NULL, 0, &x, &e), -1);
    CHECK_CONTAINS(e.msg, "'cmyk' is not one of rgb, grayscale");
    CHECK_INT(try_load("data: {dataset: image_folder, bad_images: ignore}\nmodel: {arch: resnet18}\n",
                       NULL, 0, &x, &e), -1);
    CHECK_CONTAINS(e.msg, "'ignore' is not one of error, skip");
    CHECK_INT(try_load("data: {dataset: image_folder, image_size: 0}\nmodel: {arch: resnet18}\n",
                       NULL, 0, &x, &e), -1);
    CHECK_CONTAINS(e.msg, "data.image_size");
}

static void test_round_trip_and_hash(void) {
    const char *sets[] = {"data.image_size=160", "data.augment.random_resized_crop.scale=[0.35, 1]",
                          "data.bad_images=skip", "data.image_mode=grayscale"};
    experiment_t *a = load(FOLDER, sets, 4);
    CHECK(a != NULL);
    if (!a) return;
    char *yaml = config_yaml_string(a, NULL);
    CHECK(yaml && strstr(yaml, "random_resized_crop: {scale: [0.35, 1.0], ratio: [0.75, 1.3333]}"));
    CHECK(yaml && strstr(yaml, "workers: auto"));
    CHECK(yaml && strstr(yaml, "resize: 183"));
    experiment_t *b = load(yaml, NULL, 0);
    CHECK(b != NULL);
    if (b) {
        CHECK(config_hash(a) == config_hash(b));
        CHECK_INT(b->data.image_size, 160);
        CHECK_INT(b->data.resize, 183);
        CHECK_NEAR(b->data.augment.rrc_scale[0], 0.35, 0, 0);
        CHECK_INT(b->data.workers, -1);
        CHECK_INT(b->data.image_mode, 1);
    }
    free(yaml);
    free(b);
    /* image keys change an image_folder run's hash ... */
    const char *diff[] = {"data.image_size=200", "data.resize=300", "data.image_mode=rgb",
                          "data.bad_images=error", "data.jpeg_dct_scaling=false",
                          "data.augment.random_resized_crop=false",
                          "data.augment.random_resized_crop.ratio=[0.5, 2]"};
    for (int i = 0; i < (int)(sizeof diff / sizeof diff[0]); i++) {
        const char *s2[5] = {sets[0], sets[1], sets[2], sets[3], diff[i]};
        b = load(FOLDER, s2, 5);
        if (b && config_hash(b) == config_hash(a)) fprintf(stderr, "hash unchanged by %s\n", diff[i]);
        CHECK(b && config_hash(b) != config_hash(a));
        free(b);
    }
    free(a);
    /* ... but not a CIFAR run's, where they do nothing (its pinned hash is kept) */
    a = load(CIFAR, NULL, 0);
    const char *same[] = {"data.image_size=100", "data.resize=7", "data.image_mode=grayscale",
                          "data.bad_images=skip", "data.jpeg_dct_scaling=false",
                          "data.train_dir=x", "data.workers=auto"};
    for (int i = 0; a && i < (int)(sizeof same / sizeof same[0]); i++) {
        b = load(CIFAR, &same[i], 1);
        CHECK(b && config_hash(b) == config_hash(a));
        free(b);
    }
    CHECK(a && config_hash(a) == 0xd990ee4582c82628ULL);
    free(a);
}

int main(void) {
    if (test_tmpdir(dir, sizeof dir)) return 1;
    TEST_RUN(test_folder_defaults);
    TEST_RUN(test_refusals);
    TEST_RUN(test_round_trip_and_hash);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_main_end();
}
