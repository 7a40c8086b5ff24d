/* test_cli_images.c: image_folder through the runner binary.
 *
 * - Fashion-MNIST written as a PNG image folder (grayscale, class folders 0..9) trains to
 *   the bit-identical result of the built-in IDX reader fed the same images in the same
 *   (class-sorted) order: same metrics.csv numbers, same parameters and BN buffers in the
 *   last checkpoint. That is: PNG decoding = the IDX bytes, labels = ImageFolder's,
 *   Resize(28)/CenterCrop(28) on 28x28 = identity, the flip drawn as the built-in loader
 *   draws it.
 * - `runner plan` on a photo folder shows images per split and class, the classes, the
 *   index cache (built in memory by the plan, cached by the run, then reused), the
 *   transforms and the planned workers; plan.json
 *   and the run directory carry the class list.
 * - A text file named .jpg stops the run with exit 2 and one message naming it; with
 *   data.bad_images: skip the run completes and summary.json counts it (the plan's count)
 *   and a truncated JPEG found while decoding, apart and together.
 * - SIGINT mid-epoch, then `runner resume`: params, BN buffers and momentum equal the
 *   uninterrupted run's bit for bit (the decoded crops are keyed by sample, not by time).
 * Skipped (77) without python3 + PIL + numpy, Debian's Fashion-MNIST or skimage's photos.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "data/image.h"
#include "tests/cli/cli_util.h"

static char dir[2048];

static int fixtures(const char *kind, const char *sub, const char *args) {
    char cmd[6000], out[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/cli/images_fixtures.py %s %s/%s %s 2>&1",
             test_source_dir(), kind, dir, sub, args);
    int rc = test_run_cmd(cmd, out, sizeof out);
    if (rc) fprintf(stderr, "images_fixtures.py %s: %d %s\n", kind, rc, out);
    return rc;
}

static int write_exp(const char *name, const char *body) {
    char p[2300];
    snprintf(p, sizeof p, "%s/%s.yaml", dir, name);
    return test_write_file(p, body);
}

/* metrics.csv without its timing columns (epoch_seconds onwards). */
static char *metrics_numbers(const char *run) {
    char p[4300];
    snprintf(p, sizeof p, "%s/metrics.csv", run);
    char *s = test_read_file(p, NULL);
    if (!s) return NULL;
    char *o = malloc(strlen(s) + 1), *q = o;
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        int commas = 0;
        for (char *c = line; *c && commas < 8; c++) {
            if (*c == ',') commas++;
            if (commas < 8) *q++ = *c;
        }
        *q++ = '\n';
    }
    *q = 0;
    free(s);
    return o;
}

static void test_fashion_mnist_folder_bit_identical(void) {
    const char *common =
        "seed: 3\ndevice: cpu\nmodel: {arch: resnet20}\ntrain: {epochs: 2, batch_size: 25}\n"
        "parallel: {mode: single}\nlogging: {print_every: 1}\n";
    char body[4096], out[16384], args[6000], runs[2][4200];
    snprintf(body, sizeof body, "%sname: builtin\noutput: {root: %s/runs}\ndata:\n  dataset: fashion_mnist\n"
             "  root: %s/fm/idx\n  workers: 2\n  augment: {random_crop: false, rotation: 0}\n"
             "  normalize: {mean: [0.2860], std: [0.3530]}\n", common, dir, dir);
    CHECK_INT(write_exp("builtin", body), 0);
    snprintf(body, sizeof body, "%sname: folder\noutput: {root: %s/runs}\ndata:\n  dataset: image_folder\n"
             "  root: %s/fm/folder\n  image_mode: grayscale\n  image_size: 28\n  resize: 28\n"
             "  workers: 2\n  augment: {random_resized_crop: false}\n"
             "  normalize: {mean: [0.2860], std: [0.3530]}\n", common, dir, dir);
    CHECK_INT(write_exp("folder", body), 0);
    const char *names[2] = {"builtin", "folder"};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "%s/%s.yaml", dir, names[i]);
        int rc = run_runner(args, out, sizeof out);
        if (rc) fprintf(stderr, "%s\n", out);
        CHECK_INT(rc, 0);
        snprintf(args, sizeof args, "%s/runs", dir);
        char *r = only_run_dir(args, names[i]);
        CHECK(r != NULL);
        snprintf(runs[i], sizeof runs[i], "%s", r ? r : "");
    }
    char *m0 = metrics_numbers(runs[0]), *m1 = metrics_numbers(runs[1]);
    CHECK(m0 && strlen(m0) > 60);
    CHECK_STR(m1, m0);
    free(m0);
    free(m1);
    const char *sections[] = {"params", "buffers"};
    cli_check_same_sections(runs[0], runs[1], sections, 2);
    snprintf(args, sizeof args, "%s/classes.txt", runs[1]);
    char *cls = test_read_file(args, NULL);
    CHECK_STR(cls, "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n");
    free(cls);
}

static const char *PHOTOS =
    "seed: 1\ndevice: cpu\nmodel: {arch: resnet20}\ntrain: {epochs: 1, batch_size: 16}\n"
    "parallel: {mode: single}\nlogging: {print_every: 1}\n";

static void test_plan_and_bad_files(void) {
    char body[4096], out[16384], args[6000];
    snprintf(body, sizeof body, "%sname: ph\noutput: {root: %s/runs}\ndata: {dataset: image_folder, "
             "root: %s/ph, image_size: 32}\n", PHOTOS, dir, dir);
    CHECK_INT(write_exp("ph", body), 0);
    snprintf(args, sizeof args, "plan %s/ph.yaml", dir);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "image_folder from");
    CHECK_CONTAINS(out, ": 32 train / 8 test samples, 3x32x32 input, 4 classes");
    CHECK_CONTAINS(out, "images       train 32 in 4 classes (8 each)");
    CHECK_CONTAINS(out, "val 8 in 4 classes (2 each)");
    CHECK_CONTAINS(out, "classes      0 astronaut, 1 chelsea, 2 coffee, 3 rocket");
    /* the plan writes nothing: the index is built in memory; the run caches it */
    CHECK_CONTAINS(out, " (built in memory: the plan writes nothing; the run caches it there)");
    CHECK_CONTAINS(out, "train RandomResizedCrop(32, scale=(0.08, 1), ratio=(0.75, 1.3333)) + "
                        "RandomHorizontalFlip; eval Resize(37) + CenterCrop(32)");
    CHECK_CONTAINS(out, "loader       1 worker per rank (auto: decode + transform measured at");
    snprintf(args, sizeof args, "%s/ph.yaml --set train.max_steps=1", dir);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(args, sizeof args, "plan %s/ph.yaml", dir);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "(reused: no walk of the tree)");
    snprintf(args, sizeof args, "plan --json %s/ph.yaml", dir);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "\"classes\": [\n    \"astronaut\",\n    \"chelsea\",\n    \"coffee\",\n    \"rocket\"\n  ]");
    CHECK_CONTAINS(out, "\"train_per_class\": [\n    8,\n    8,\n    8,\n    8\n  ]");
    CHECK_CONTAINS(out, "\"loader_workers\": 1");
    /* a text file named .jpg: exit 2, one message naming it */
    snprintf(args, sizeof args, "echo 'not a photo' > %s/ph/train/coffee/zz_notes.jpg && "
             "head -c 1000 %s/ph/train/rocket/000.jpg > %s/ph/train/rocket/001.jpg", dir, dir, dir);
    CHECK_INT(system(args), 0);
    snprintf(args, sizeof args, "%s/ph.yaml", dir);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "ph/train/coffee/zz_notes.jpg: not an image (it starts with the text "
                        "\"not a photo\"): expected a JPEG or PNG file; fix or remove the file, "
                        "or set data.bad_images: skip");
    CHECK_CONTAINS(out, "(1 bad file in ");
    /* skip: the text file left out (the plan says so), the truncated JPEG replaced while
     * decoding; both counted in summary.json */
    snprintf(body, sizeof body, "%sname: phskip\noutput: {root: %s/runs}\ndata: {dataset: image_folder, "
             "root: %s/ph, image_size: 32, bad_images: skip}\n", PHOTOS, dir, dir);
    CHECK_INT(write_exp("phskip", body), 0);
    snprintf(args, sizeof args, "plan %s/phskip.yaml", dir);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "bad files    1 left out (data.bad_images: skip), found while indexing; first: ");
    CHECK_CONTAINS(out, "images       train 32 in 4 classes (8 each)");
    snprintf(args, sizeof args, "%s/phskip.yaml", dir);
    int rc = run_runner(args, out, sizeof out);
    if (rc) fprintf(stderr, "%s\n", out);
    CHECK_INT(rc, 0);
    snprintf(args, sizeof args, "%s/runs", dir);
    char *run = only_run_dir(args, "phskip");
    CHECK(run != NULL);
    if (run) {
        snprintf(args, sizeof args, "%s/summary.json", run);
        char *s = test_read_file(args, NULL);
        CHECK_CONTAINS(s, "\"bad_images_skipped\": 2");
        CHECK_CONTAINS(s, "\"bad_images_skipped_indexing\": 1");   /* the plan's 1 */
        CHECK_CONTAINS(s, "\"bad_images_skipped_decoding\": 1");
        CHECK_CONTAINS(s, "\"status\": \"completed\"");
        free(s);
        snprintf(args, sizeof args, "%s/classes.txt", run);
        s = test_read_file(args, NULL);
        CHECK_STR(s, "astronaut\nchelsea\ncoffee\nrocket\n");
        free(s);
    }
}

static void test_sigint_resume(void) {
    char body[4096], out[16384], root[2300], log[2300], args[6000], dir2[4096];
    snprintf(body, sizeof body, "seed: 4\ndevice: cpu\nname: phres\nmodel: {arch: resnet20}\n"
             "train: {epochs: 6, batch_size: 4}\nparallel: {mode: single}\nlogging: {print_every: 1}\n"
             "checkpoint: {resume: never}\ndata: {dataset: image_folder, root: %s/phr, image_size: 32, "
             "workers: 2}\n", dir);
    CHECK_INT(write_exp("phres", body), 0);
    snprintf(args, sizeof args, "%s/phres.yaml", dir);
    snprintf(root, sizeof root, "%s/ref", dir);
    const char *ref = cli_run(args, root, NULL, 0, out, sizeof out);
    CHECK(ref != NULL);
    if (!ref) return;
    snprintf(root, sizeof root, "%s/int", dir);
    snprintf(log, sizeof log, "%s/int.log", dir);
    CHECK_INT(cli_interrupt_at(args, root, log, "phres", NULL, 0, 5, SIGINT, dir2, sizeof dir2), 130);
    snprintf(args, sizeof args, "resume %s", dir2);
    int rc = run_runner(args, out, sizeof out);
    if (rc) fprintf(stderr, "%s\n", out);
    CHECK_INT(rc, 0);
    CHECK_CONTAINS(out, "continuing at step");
    const char *sections[] = {"params", "buffers", "optim.momentum_buffer"};
    cli_check_same_sections(ref, dir2, sections, 3);
}

int main(void) {
    if (!img_have_jpeg() || !img_have_png()) test_skip("built without libjpeg or libpng");
    if (test_tmpdir(dir, sizeof dir)) return 1;
    setenv("RUNNER_CACHE_DIR", dir, 1);
    if (fixtures("fmnist", "fm", "20 5") || fixtures("photos", "ph", "8 2") ||
        fixtures("photos", "phr", "8 2"))
        test_skip("the fixtures need python3 with PIL and numpy, dataset-fashion-mnist and "
                  "python3-skimage (scripts/deps.sh --test)");
    TEST_RUN(test_fashion_mnist_folder_bit_identical);
    TEST_RUN(test_plan_and_bad_files);
    TEST_RUN(test_sigint_resume);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_main_end();
}
