/* test_gpu_cli_images.c: image_folder on the GPU. Its batches are decoded by the CPU
 * loader into pinned buffers and go up on the copy stream (model/cuda/stager.cu); the
 * built-in Fashion-MNIST reader on CUDA instead keeps the split on the GPU and augments
 * there (model/cuda/augment.cu). Fed the same images in the same order
 * (tests/cli/images_fixtures.py fmnist: a PNG folder and class-sorted IDX files), with the
 * same flip and normalisation, the two paths must train to the same bits on the GPU:
 *  1. image_folder on cuda == fashion_mnist on cuda (on-device data), bit for bit: last.ckpt
 *     params, buffers and momentum; steps.csv loss and top1 cells; metrics.csv columns.
 * Against the CPU, the yardstick is what rounding alone does on the same run: the CPU forced
 * onto each of three convolution engines (RUNNER_CPU_CONV_ENGINE gemm, dnnl, dnnl_blk:
 * other summation orders, as the GPU's are; whichever is the CPU's own choice adds
 * nothing) against the CPU's own choice, the largest distance of the three.
 *  2. forward, image_folder on cuda vs cpu at lr 1e-30: the weights stay as initialised (up
 *     to 1e-30), so each step's loss is the initial net's forward on that step's batch, and
 *     every training image, its label, the flip draw, the normalisation and the upload pass
 *     through a well-conditioned computation: the CPU engines agree to 1.2e-7 relative per
 *     step (measured, 16 steps). Each step's loss within FWD_TOL (3e-5) relative and its
 *     top-1 within one image of 25; metrics.csv's val_loss within FWD_TOL (running BN
 *     statistics from the same batches); the engines' own spread must stay under FWD_TOL / 10
 *     (the conditioning, checked).
 *  3. training, image_folder on cuda vs cpu at lr 0.001: ill-conditioned on this fixture.
 *     Fashion-MNIST's constant backgrounds give many activations one shared value, so a
 *     rounding that flips one ReLU mask flips many: the CPU engines' per-step losses drift
 *     apart by up to 3.1e-3 (gemm) and 2.6e-3 (dnnl_blk) relative over the 16 steps
 *     (measured; the first H100 run's GPU drifted 2.7e-3 and failed the fixed 2e-4 x step
 *     this test had). So the GPU's largest relative per-step loss difference over the run,
 *     and its final parameters' relative L2 distance, are held to RATIO (3) times the
 *     largest of the engines' own (with floors of 1e-5 and 1e-6), and the engines' spread
 *     must stay under COND_LOSS (2e-2): above it the fixture judges nothing and the test
 *     says so. What this can see: a defect that changes training by a few times what
 *     rounding does (gradients 1.5x too large: the plant below); not a small one (weight
 *     decay ignored moves this run less than rounding does: 3.0e-3).
 * Planted defects (RUNNER_GPU_TEST_PLANT, applied by this test to the GPU side's runs; with
 * RUNNER_GPU_CLI_DRYRUN=cpu the GPU side is the CPU on the Winograd engine, a fourth
 * summation order; tests/gpu/gpu_dryrun.sh shows each failing its case):
 *   img_flip_off     the flip draws ignored (data.augment.horizontal_flip false): case 2
 *   img_label_swap   two training images of classes 0 and 1 trade files: case 2
 *   img_grad_scale   gradients 1.5x (optimizer.lr 1.5x: a wrong batch divisor): case 3
 * Skipped (77) without a GPU or the fixtures; RUNNER_GPU_CLI_DRYRUN=cpu runs it on the CPU.
 */
#include "data/image.h"
#include "tests/gpu/gpu_cli_util.h"

static const char *exp_yaml =
    "name: %s\n"
    "seed: 7\n"
    "device: %s\n"
    "data:\n%s"
    "  workers: 2\n"
    "  normalize: {mean: [0.2860], std: [0.3530]}\n"
    "model: {arch: resnet20}\n"
    "optimizer: {name: sgd, lr: 0.001, momentum: 0.9, weight_decay: 5.0e-4}\n"
    "schedule: {name: constant, warmup_epochs: 0}\n"
    "train: {epochs: 2, batch_size: 25, deterministic: true}\n"
    "amp: {tf32: false}\n"
    "parallel: {mode: single}\n"
    "logging: {print_every: 1}\n";

static char folder_data[1200], idx_data[1200];

static void folder_equals_on_device_reader(void) {
    char p1[700], p2[700], d1[4096], d2[4096];
    gc_write_exp(p1, sizeof p1, "folder", exp_yaml, "folder", gc_dev, folder_data);
    gc_write_exp(p2, sizeof p2, "builtin", exp_yaml, "builtin", gc_dev, idx_data);
    if (!gc_run(p1, "a", NULL, d1, sizeof d1) || !gc_run(p2, "a", NULL, d2, sizeof d2)) {
        CHECK(!"a run failed");
        return;
    }
    int steps = (int)cli_json_number(d1, "summary.json", "steps");
    CHECK_INT(steps, 16);
    CHECK_INT(gc_diff_bits(d1, d2, "params", false), 0);
    CHECK_INT(gc_diff_bits(d1, d2, "buffers", false), 0);
    CHECK_INT(gc_diff_bits(d1, d2, "optim.momentum_buffer", false), 0);
    CHECK_INT(gc_same_cells(d1, d2, "steps.csv", "loss", steps), 0);
    CHECK_INT(gc_same_cells(d1, d2, "steps.csv", "top1", steps), 0);
    const char *mc[] = {"train_loss", "val_loss", "val_top1"};
    for (int i = 0; i < 3; i++) CHECK_INT(gc_same_cells(d1, d2, "metrics.csv", mc[i], 2), 0);
}

static const double FWD_TOL = 3e-5, RATIO = 3.0, COND_LOSS = 2e-2;
enum { STEPS = 16 };

/* The GPU side's planted defect (RUNNER_GPU_TEST_PLANT), "" for none. */
static const char *plant(void) {
    const char *p = getenv("RUNNER_GPU_TEST_PLANT");
    return p ? p : "";
}

/* Runs exp (written from exp_yaml with `data`) on `dev` with the cpu convolution engine
 * `engine` (NULL: the backend's choice) and `sets`; the run directory into dir. */
static bool run_on(const char *name, const char *dev, const char *data, const char *engine, const char *sets,
                   char *dir, size_t len) {
    char p[700];
    gc_write_exp(p, sizeof p, name, exp_yaml, name, dev, data);
    if (engine) setenv("RUNNER_CPU_CONV_ENGINE", engine, 1);
    const char *d = gc_run(p, name, sets, dir, len);
    unsetenv("RUNNER_CPU_CONV_ENGINE");
    return d != NULL;
}

/* The GPU side's run with the planted defect, if any (dry run: the cpu's Winograd engine). */
static bool run_gpu_side(const char *name, const char *sets, char *dir, size_t len) {
    char all[1024], data[1400];
    const char *pl = plant();
    if (!sets) sets = "";
    snprintf(data, sizeof data, "%s", folder_data);
    snprintf(all, sizeof all, "%s", sets);
    if (!strcmp(pl, "img_flip_off")) {
        snprintf(all, sizeof all, "%s --set data.augment.horizontal_flip=false", sets);
    } else if (!strcmp(pl, "img_grad_scale")) {
        snprintf(all, sizeof all, "%s --set optimizer.lr=%s", sets, strstr(sets, "1e-30") ? "1.5e-30" : "0.0015");
    } else if (!strcmp(pl, "img_label_swap")) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "rm -rf %s/fm/swap && cp -r %s/fm/folder %s/fm/swap && "
                 "cp %s/fm/folder/train/0/00000.png %s/fm/swap/train/1/00000.png && "
                 "cp %s/fm/folder/train/1/00000.png %s/fm/swap/train/0/00000.png",
                 gc_tmp, gc_tmp, gc_tmp, gc_tmp, gc_tmp, gc_tmp, gc_tmp);
        if (test_run_cmd(cmd, NULL, 0)) return false;
        snprintf(data, sizeof data,
                 "  dataset: image_folder\n  root: %s/fm/swap\n  image_mode: grayscale\n"
                 "  image_size: 28\n  resize: 28\n  augment: {random_resized_crop: false}\n", gc_tmp);
    } else if (*pl) {
        fprintf(stderr, "unknown planted defect %s\n", pl);
        exit(2);
    }
    if (*pl) fprintf(stderr, "  planted defect %s on the gpu side\n", pl);
    return run_on(name, gc_dev, data, gc_dry ? "dnnl_wino" : NULL, all, dir, len);
}

/* Largest relative per-step loss difference of run a against run c. */
static double loss_dist(const char *a, const char *c, bool print) {
    double la[64], lc[64], worst = 0;
    int n = gc_csv_column(a, "steps.csv", "loss", la, 64);
    if (gc_csv_column(c, "steps.csv", "loss", lc, 64) != n || n != STEPS) {
        fprintf(stderr, "  steps.csv: %d rows, expected %d\n", n, STEPS);
        return INFINITY;
    }
    for (int k = 0; k < n; k++) {
        double rel = fabs(la[k] - lc[k]) / fabs(lc[k]);
        if (print) fprintf(stderr, "  step %2d: loss %.9g vs %.9g (cpu), rel %.2e\n", k + 1, la[k], lc[k], rel);
        if (!(rel <= worst)) worst = rel;
    }
    return worst;
}

/* The GPU side, the CPU and the CPU forced onto each of three engines (one of them may be
 * the CPU's own choice for a shape, which then adds nothing), with `sets`; dirs[0..4]. */
enum { RUNS = 5 };
static bool all_runs(const char *tag, const char *sets, char dirs[RUNS][4096]) {
    static const char *const engines[RUNS - 1] = {NULL, "gemm", "dnnl", "dnnl_blk"};
    char name[64];
    snprintf(name, sizeof name, "%s_gpu", tag);
    if (!run_gpu_side(name, sets, dirs[0], 4096)) return false;
    for (int i = 0; i < RUNS - 1; i++) {
        snprintf(name, sizeof name, "%s_cpu%d", tag, i);
        if (!run_on(name, "cpu", folder_data, engines[i], sets, dirs[i + 1], 4096)) return false;
    }
    return true;
}

/* The largest distance of the engines' runs d[2..] to the CPU's own d[1]: per-step loss
 * (what loss_dist says) or final params (relative L2). */
static double engines_loss(char d[RUNS][4096]) {
    double m = 0;
    for (int i = 2; i < RUNS; i++) m = fmax(m, loss_dist(d[i], d[1], false));
    return m;
}

static double engines_params(char d[RUNS][4096]) {
    double m = 0;
    for (int i = 2; i < RUNS; i++) m = fmax(m, gc_rel_l2(d[i], d[1], "params", NULL));
    return m;
}

static void folder_forward_gpu_vs_cpu(void) {
    char d[RUNS][4096];
    if (!all_runs("fwd", "--set optimizer.lr=1e-30", d)) {
        CHECK(!"a run failed");
        return;
    }
    double ref = engines_loss(d);
    fprintf(stderr, "  forward: the cpu engines' largest per-step relative loss difference %.2e\n", ref);
    CHECK(ref <= FWD_TOL / 10);   /* conditioning: rounding alone stays far below the tolerance */
    double g = loss_dist(d[0], d[1], true);
    fprintf(stderr, "  forward: gpu vs cpu largest %.2e (tolerance %.1e)\n", g, FWD_TOL);
    CHECK(g <= FWD_TOL);
    double tg[64], tc[64];
    int n = gc_csv_column(d[0], "steps.csv", "top1", tg, 64);
    CHECK_INT(gc_csv_column(d[1], "steps.csv", "top1", tc, 64), n);
    for (int k = 0; k < n; k++) CHECK(fabs(tg[k] - tc[k]) * 25 <= 1.0 + 1e-9);
    double vg[4], vc[4];
    CHECK_INT(gc_csv_column(d[0], "metrics.csv", "val_loss", vg, 4), 2);
    CHECK_INT(gc_csv_column(d[1], "metrics.csv", "val_loss", vc, 4), 2);
    for (int k = 0; k < 2; k++) CHECK(fabs(vg[k] - vc[k]) <= FWD_TOL * fabs(vc[k]));
}

static void folder_training_gpu_vs_cpu(void) {
    char d[RUNS][4096];
    if (!all_runs("train", NULL, d)) {
        CHECK(!"a run failed");
        return;
    }
    double ref_loss = engines_loss(d), ref_params = engines_params(d);
    fprintf(stderr, "  training: the cpu engines' spread: loss %.2e, params rel L2 %.2e\n", ref_loss, ref_params);
    if (!(ref_loss <= COND_LOSS))
        fprintf(stderr, "  the cpu engines alone differ by %.2e > %.0e: this fixture is too ill-conditioned to judge "
                "the GPU by\n", ref_loss, COND_LOSS);
    CHECK(ref_loss <= COND_LOSS);
    double g = loss_dist(d[0], d[1], true), gp = gc_rel_l2(d[0], d[1], "params", NULL);
    double tol_loss = fmax(RATIO * ref_loss, 1e-5), tol_params = fmax(RATIO * ref_params, 1e-6);
    fprintf(stderr, "  training: gpu vs cpu loss %.2e (tolerance %.2e), params rel L2 %.2e (tolerance %.2e)\n", g,
            tol_loss, gp, tol_params);
    CHECK(g <= tol_loss);
    CHECK(gp <= tol_params);
}

int main(void) {
    gc_setup();
    if (!img_have_png()) test_skip("built without libpng (the Fashion-MNIST folder is PNG)");
    char cmd[2048], out[4096];
    /* RUNNER_TEST_PYTHON: a python3 with PIL and numpy where /usr/bin/python3 has none (the GPU
     * machine's is its venv's), run without the runner's library path (the GPU session
     * points it at Debian's libraries); RUNNER_FASHION_MNIST: the idx files
     * (images_fixtures.py) */
    const char *py = getenv("RUNNER_TEST_PYTHON");
    snprintf(cmd, sizeof cmd, "env -u LD_LIBRARY_PATH %s %s/tests/cli/images_fixtures.py fmnist %s/fm 20 5 2>&1",
             py && *py ? py : "/usr/bin/python3", test_source_dir(), gc_tmp);
    if (test_run_cmd(cmd, out, sizeof out))
        test_skip("the Fashion-MNIST fixtures need python3 with PIL and numpy and dataset-fashion-mnist");
    snprintf(folder_data, sizeof folder_data,
             "  dataset: image_folder\n  root: %s/fm/folder\n  image_mode: grayscale\n"
             "  image_size: 28\n  resize: 28\n  augment: {random_resized_crop: false}\n", gc_tmp);
    snprintf(idx_data, sizeof idx_data,
             "  dataset: fashion_mnist\n  root: %s/fm/idx\n"
             "  augment: {random_crop: false, rotation: 0}\n", gc_tmp);
    setenv("RUNNER_CACHE_DIR", gc_tmp, 1);
    TEST_RUN(folder_equals_on_device_reader);
    TEST_RUN(folder_forward_gpu_vs_cpu);
    TEST_RUN(folder_training_gpu_vs_cpu);
    return gc_finish();
}
