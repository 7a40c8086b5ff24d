/* test_gpu_cli_paths.c: the ways a GPU run can take change nothing but speed.
 *  1. train.cuda_graphs true (each step recorded whole as a CUDA graph per shape and
 *     replayed; test_gpu_cli_graphs covers auto, DDP and resume) vs false: bit-identical.
 *  2. data.on_device false (the CPU loader, pinned buffers, the copy stream and a cast on
 *     the device; with train.cuda_graphs' default, auto, each micro-batch's device work
 *     recorded and replayed) vs the base run (the split on the GPU, the augmentation
 *     kernel, graphs false): bit-identical, since crop and flip give the same pixels on
 *     both paths (test_gpu_augment), fp16 rounding happens once on either and a replay
 *     computes what the launches it holds compute.
 *  3. the same two comparisons with issue 17's data recipe on (RandAugment, random erasing
 *     of mode rand, mixup + cutmix in elem mode): the GPU kernels (auto-augment ops,
 *     erasing, cuda_mixup_batch, the soft-target loss, recorded in the graph) against the
 *     CPU loader's ops on the copy-stream path, bit for bit (erasing's values use double
 *     log/cos on two libms; a difference needs a value within ~1e-16 of a float rounding
 *     boundary, which mode rand's handful of values per image makes vanishingly unlikely).
 * Skipped (77) without a GPU; the dry run on the CPU (RUNNER_GPU_CLI_DRYRUN=cpu, see
 * gpu_cli_util.h) checks that both keys are ignored there.
 *
 * The experiment: resnet20, synthetic 3x32x32 images of 4 classes, 200 train samples at
 * global batch 32 (6 full micro-batches and a short one of 8 per epoch: two step shapes,
 * the short one recorded in the second epoch), 64 validation samples (evaluation batches
 * are recorded too), 3 epochs, fp16 AMP (the loss scale is read and updated on the device
 * inside the recording), SGD with momentum,
 * train.deterministic true, one steps.csv row per step. Compared, each pair of runs:
 *  - last.ckpt params, buffers, optim.momentum_buffer: bit for bit;
 *  - meta optim_steps, loss_scale, growth_tracker and the BN counters (bn_counters, which
 *    the host advances for a replay without running net_forward);
 *  - steps.csv loss, top1, loss_scale of every step as text; metrics.csv val columns;
 *  - the graphs run's output does not say that recording failed.
 */
#include "tests/gpu/gpu_cli_util.h"

static char exp_path[700];

static const char *exp_yaml =
    "name: graphs\n"
    "seed: 5\n"
    "device: %s\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 200, val_size: 64, image: [3, 32, 32], classes: 4}\n"
    "  workers: 2\n"
    "  augment: {random_crop: {size: 32, padding: 4}, horizontal_flip: true, rotation: 0}\n"
    "model: {arch: resnet20}\n"
    "optimizer: {name: sgd, lr: 0.02, momentum: 0.9, weight_decay: 5.0e-4}\n"
    "schedule: {name: constant, warmup_epochs: 0}\n"
    "train: {epochs: 3, batch_size: 32, deterministic: true}\n"
    "amp: {enabled: true, dtype: fp16, init_scale: 1024.0, growth_interval: 5}\n"
    "parallel: {mode: single}\n"
    "logging: {print_every: 1}\n"
    "checkpoint: {every_epochs: 1, keep_last: 1, resume: never}\n";

static char base_dir[4096];   /* the base run: graphs false, data on the device */
static char recipe_dir[4096]; /* the same with the recipe on */

static const char *recipe_sets =
    "--set data.augment.auto=randaugment --set data.augment.random_erasing.prob=0.5 "
    "--set data.augment.random_erasing.mode=rand --set data.mixup.alpha=0.2 "
    "--set data.mixup.cutmix_alpha=1.0 --set data.mixup.mode=elem --set train.label_smoothing=0.1";

/* Runs the experiment with `sets` and compares it bit for bit with the run (made once,
 * cached in dir) of base_sets + graphs off. */
static void same_as(char *dir, const char *base_root, const char *base_sets, const char *root, const char *sets,
                    const char *what) {
    char off_buf[4096], on_buf[4096], all[2048];
    if (!dir[0]) {
        snprintf(all, sizeof all, "%s --set train.cuda_graphs=false", base_sets);
        if (!gc_run(exp_path, base_root, all, off_buf, sizeof off_buf)) {
            CHECK(!"the default run failed");
            return;
        }
        snprintf(dir, 4096, "%s", off_buf);
    }
    const char *off = dir, *on = on_buf;
    if (!gc_run(exp_path, root, sets, on_buf, sizeof on_buf)) {
        CHECK(!"the run failed");
        return;
    }
    CHECK(strstr(gc_out, "recording a micro-batch failed") == NULL);
    int steps = (int)cli_json_number(on, "summary.json", "steps");
    CHECK_INT(steps, 21);
    fprintf(stderr, "%s:\n", what);
    CHECK_INT(gc_diff_bits(on, off, "params", false), 0);
    CHECK_INT(gc_diff_bits(on, off, "buffers", false), 0);
    CHECK_INT(gc_diff_bits(on, off, "optim.momentum_buffer", false), 0);
    cli_same_meta_counters(on, off);
    const char *sc[] = {"loss", "top1", "loss_scale"};
    for (int i = 0; i < 3; i++) CHECK_INT(gc_same_cells(on, off, "steps.csv", sc[i], steps), 0);
    const char *mc[] = {"train_loss", "val_loss", "val_top1"};
    for (int i = 0; i < 3; i++) CHECK_INT(gc_same_cells(on, off, "metrics.csv", mc[i], 3), 0);
}

static void same_as_default(const char *root, const char *sets, const char *what) {
    same_as(base_dir, "base", "", root, sets, what);
}

static void graphs_change_nothing(void) {
    same_as_default("graphs", "--set train.cuda_graphs=true", "graphs on vs off");
}

static void copy_stream_path_changes_nothing(void) {
    same_as_default("loader", "--set data.on_device=false", "CPU loader + copy stream vs data on the device");
}

static void recipe_paths_change_nothing(void) {
    char sets[2048];
    snprintf(sets, sizeof sets, "%s --set train.cuda_graphs=true", recipe_sets);
    same_as(recipe_dir, "rbase", recipe_sets, "rgraphs", sets, "recipe: graphs on vs off");
    snprintf(sets, sizeof sets, "%s --set data.on_device=false", recipe_sets);
    same_as(recipe_dir, "rbase", recipe_sets, "rloader", sets, "recipe: CPU loader ops vs the GPU kernels");
}

int main(void) {
    gc_setup();
    gc_write_exp(exp_path, sizeof exp_path, "graphs", exp_yaml, gc_dev);
    TEST_RUN(graphs_change_nothing);
    TEST_RUN(copy_stream_path_changes_nothing);
    TEST_RUN(recipe_paths_change_nothing);
    return gc_finish();
}
