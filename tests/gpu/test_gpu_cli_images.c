/* test_gpu_cli_images.c: image_folder on the GPU. Its batches are decoded by the CPU
 * loader into pinned buffers and go up on the copy stream (model/cuda/stager.cu); the
 * built-in Fashion-MNIST reader on CUDA instead keeps the split on the GPU and augments
 * there (model/cuda/augment.cu). Fed the same images in the same order
 * (tests/cli/images_fixtures.py fmnist: a PNG folder and class-sorted IDX files), with the
 * same flip and normalisation, the two paths must train to the same bits on the GPU:
 *  1. image_folder on cuda == fashion_mnist on cuda (on-device data), bit for bit: last.ckpt
 *     params, buffers and momentum; steps.csv loss and top1 cells; metrics.csv columns.
 *  2. image_folder on cuda vs on cpu: per-step loss within relative 2e-4 x step (the
 *     tolerance of test_gpu_cli_train.c, same lr 0.001 reasoning), the final params within
 *     1e-3 relative L2.
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

static void folder_gpu_vs_cpu(void) {
    char p1[700], p2[700], dg[4096], dc[4096];
    gc_write_exp(p1, sizeof p1, "fgpu", exp_yaml, "fgpu", gc_dev, folder_data);
    gc_write_exp(p2, sizeof p2, "fcpu", exp_yaml, "fcpu", "cpu", folder_data);
    if (!gc_run(p1, "b", NULL, dg, sizeof dg) || !gc_run(p2, "b", NULL, dc, sizeof dc)) {
        CHECK(!"a run failed");
        return;
    }
    double lg[64], lc[64];
    int n = gc_csv_column(dg, "steps.csv", "loss", lg, 64);
    CHECK_INT(gc_csv_column(dc, "steps.csv", "loss", lc, 64), n);
    CHECK_INT(n, 16);
    for (int k = 0; k < n; k++) {
        double rel = fabs(lg[k] - lc[k]) / fabs(lc[k]);
        if (rel > 2e-4 * (k + 1)) fprintf(stderr, "  step %d: loss %.9g (gpu) vs %.9g (cpu)\n", k + 1, lg[k], lc[k]);
        CHECK(rel <= 2e-4 * (k + 1));
    }
    double maxabs = 0;
    CHECK(gc_rel_l2(dg, dc, "params", &maxabs) < 1e-3);
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
    TEST_RUN(folder_gpu_vs_cpu);
    return gc_finish();
}
