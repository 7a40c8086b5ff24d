/* test_cli_photos.c: a few hundred training steps on real photographs with an
 * ImageNet-style ResNet, end to end: a folder made from four of scikit-image's
 * photographs (python3-skimage; each class is one photograph, cropped at random places and
 * scales, 96x72 JPEG q90), resnet18 with `model.stem: imagenet` (7x7/2 conv + 3x3/2
 * max-pool), RandomResizedCrop(32) + flip, 200 steps of batch 8. Asserts the loss falls
 * (mean of the last 20 steps below 0.6 x the first 20's) and validation beats chance.
 * Skipped (77) when the fixtures cannot be made (python3 + PIL + python3-skimage).
 */
#include <stdlib.h>
#include <string.h>

#include "data/image.h"
#include "tests/cli/cli_util.h"

static char dir[2048];

/* Mean of steps.csv's loss column (4th) over rows [from, to). */
static double mean_loss(const char *csv, int from, int to) {
    const char *p = strchr(csv, '\n');
    double sum = 0;
    int row = 0, n = 0;
    while (p && *++p) {
        if (row >= from && row < to) {
            const char *c = p;
            for (int k = 0; k < 3 && c; k++) c = strchr(c, ',') ? strchr(c, ',') + 1 : NULL;
            if (c) sum += atof(c), n++;
        }
        row++;
        p = strchr(p, '\n');
    }
    return n ? sum / n : -1;
}

static void test_photos_imagenet_stem(void) {
    char body[4096], out[32768], args[6000];
    snprintf(body, sizeof body,
             "name: photos\nseed: 5\ndevice: cpu\noutput: {root: %s/runs}\n"
             "data: {dataset: image_folder, root: %s/ph, image_size: 32, workers: 1}\n"
             "model: {arch: resnet18, stem: imagenet}\n"
             "optimizer: {lr: 0.05, weight_decay: 0.0001}\n"
             "schedule: {name: cosine, warmup_epochs: 1}\n"
             "train: {epochs: 10, batch_size: 8}\nparallel: {mode: single}\n"
             "logging: {print_every: 1}\ncheckpoint: {every_epochs: 0}\n", dir, dir);
    snprintf(args, sizeof args, "%s/photos.yaml", dir);
    CHECK_INT(test_write_file(args, body), 0);
    int rc = run_runner(args, out, sizeof out);
    if (rc) fprintf(stderr, "%s\n", out);
    CHECK_INT(rc, 0);
    snprintf(args, sizeof args, "%s/runs", dir);
    char *run = only_run_dir(args, "photos");
    CHECK(run != NULL);
    if (!run) return;
    snprintf(args, sizeof args, "%s/steps.csv", run);
    char *csv = test_read_file(args, NULL);
    CHECK(csv != NULL);
    if (!csv) return;
    double first = mean_loss(csv, 0, 20), last = mean_loss(csv, 180, 200);
    printf("  loss: first 20 steps %.3f, last 20 steps %.3f\n", first, last);
    CHECK(first > 1.0);
    CHECK(last > 0 && last < 0.6 * first);
    free(csv);
    snprintf(args, sizeof args, "%s/summary.json", run);
    char *s = test_read_file(args, NULL);
    double top1 = cli_json_number(run, "summary.json", "val_top1");
    printf("  val top-1 %.3f (chance 0.25)\n", top1);
    CHECK(top1 > 0.4);
    CHECK_CONTAINS(s, "\"steps\": 200");
    free(s);
}

int main(void) {
    char cmd[4200], out[8192];
    if (!img_have_jpeg() || !img_have_png()) test_skip("built without libjpeg or libpng");
    if (test_tmpdir(dir, sizeof dir)) return 1;
    setenv("RUNNER_CACHE_DIR", dir, 1);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/cli/images_fixtures.py photos %s/ph 40 10 2>&1",
             test_source_dir(), dir);
    if (test_run_cmd(cmd, out, sizeof out))
        test_skip("the photo folder needs python3 with PIL and python3-skimage (scripts/deps.sh --test)");
    TEST_RUN(test_photos_imagenet_stem);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_main_end();
}
