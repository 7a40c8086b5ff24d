/* test_gpu_cli_graphs.c: whole-step CUDA graphs (train.cuda_graphs auto, runner/
 * train_graph.c) against normal launches (false) on the GPU, bit for bit:
 *  1. single, data on the device: each step — the augmentation kernel (RandAugment, random
 *     erasing) reading the step's indices and epoch from device memory, mixup/cutmix from
 *     the step's uploaded draws, 2 micro-batches, fp16 with the dynamic loss scaler (an
 *     init scale that overflows: skipped steps, backoff, growth, all inside replays),
 *     clipping, SGD at a warm-up + milestone learning rate read from the step control, the
 *     EMA with timm's warm-up decay — is one graph per shape, the epoch's short last step
 *     one more, evaluation batches recorded too; counted exactly (summary.json
 *     graph_recordings / graph_launches).
 *  2. single, data.on_device false: the CPU loader's batches through the copy stream, a
 *     recorded segment per micro-batch.
 *  3. DDP over NCCL, world 1, SyncBN (statistics all-gathered and combined on the device),
 *     fp16 gradient compression, EMA: the bucket all-reduces, the buffer broadcast and
 *     SyncBN recorded with the kernels (ordered collectives, no host polling).
 *  4. DDP over shm, 2 ranks sharing GPU 0: auto resolves off (the plan says why: host
 *     collectives between the GPU's kernels); the run is the false run.
 *  5. resume: an auto run stopped mid-epoch by train.max_steps and resumed records again and
 *     ends where an uninterrupted false run ends.
 *  6. the default is auto: `runner plan` without the key says on for single and DDP over
 *     NCCL, off for DDP over shm and DP, each with its reason.
 * Compared for each pair: last.ckpt params, buffers, optimizer state, EMA; meta
 * optim_steps, loss_scale, growth_tracker, step, bn_counters; steps.csv loss, top1,
 * loss_scale, grad_norm of every step (read back 4 steps at a time, RUNNER_STEP_WINDOW);
 * metrics.csv validation columns; the graphs run reports no failed recording. Skipped (77) without a GPU. The dry run
 * (RUNNER_GPU_CLI_DRYRUN=cpu) runs it on the CPU with the cpu backend's graph ops
 * (RUNNER_CPU_GRAPHS=1), where auto is on for shm too and the CPU loader gives each
 * micro-batch its own segment (the exact counts are the GPU's).
 */
#include "tests/gpu/gpu_cli_util.h"

static char exp_path[700];

static const char *exp_yaml =
    "name: graphs\n"
    "seed: 7\n"
    "device: %s\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 200, val_size: 64, image: [3, 32, 32], classes: 4}\n"
    "  workers: 2\n"
    "  augment: {random_crop: {size: 32, padding: 4}, horizontal_flip: true, rotation: 0}\n"
    "model: {arch: resnet20}\n"
    "optimizer: {name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 5.0e-4, clip_grad_norm: 2.0}\n"
    "schedule: {name: multistep, milestones: [2], gamma: 0.2, warmup_epochs: 1}\n"
    "train: {epochs: 3, batch_size: 32, grad_accum: 2, deterministic: true, ema: {decay: 0.9, warmup: true}}\n"
    "amp: {enabled: true, dtype: fp16, init_scale: 16777216.0, growth_interval: 3}\n"
    "parallel: {mode: single}\n"
    "logging: {print_every: 1}\n"
    "checkpoint: {every_epochs: 1, keep_last: 1, resume: never}\n";

static const char *recipe =
    "--set data.augment.auto=randaugment --set data.augment.random_erasing.prob=0.5 "
    "--set data.augment.random_erasing.mode=rand --set data.mixup.alpha=0.2 --set data.mixup.cutmix_alpha=1.0 "
    "--set train.label_smoothing=0.1";

static int steps_of(const char *dir) { return (int)cli_json_number(dir, "summary.json", "steps"); }

/* Rows 1..rows of column `name` of two runs' steps.csv that differ as text; unlike
 * gc_same_cells, two empty cells agree (grad_norm of an overflowed fp16 step is inf,
 * written empty), but most must be filled. */
static int same_column(const char *a, const char *b, const char *name, int rows) {
    int bad = 0, empty = 0;
    for (int r = 1; r <= rows; r++) {
        char x[64], y[64];
        gc_csv_text(a, "steps.csv", r, name, x, sizeof x);
        gc_csv_text(b, "steps.csv", r, name, y, sizeof y);
        empty += !x[0];
        if (strcmp(x, y) && bad++ < 5) fprintf(stderr, "  steps.csv row %d %s: \"%s\" vs \"%s\"\n", r, name, x, y);
    }
    if (2 * empty > rows) {
        fprintf(stderr, "  steps.csv %s: %d of %d rows empty\n", name, empty, rows);
        bad++;
    }
    return bad;
}

/* Everything but timings of two finished runs, bit for bit. */
static void same_runs(const char *on, const char *off, int steps, const char *opt_state) {
    CHECK_INT(gc_diff_bits(on, off, "params", false), 0);
    CHECK_INT(gc_diff_bits(on, off, "buffers", false), 0);
    CHECK_INT(gc_diff_bits(on, off, opt_state, false), 0);
    CHECK_INT(gc_diff_bits(on, off, "ema.params", false), 0);
    CHECK_INT(gc_diff_bits(on, off, "ema.buffers", false), 0);
    cli_same_meta_counters(on, off);
    const char *sc[] = {"loss", "top1", "loss_scale", "grad_norm"};
    for (int i = 0; i < 4; i++) CHECK_INT(same_column(on, off, sc[i], steps), 0);
    const char *mc[] = {"train_loss", "val_loss", "val_top1", "val_loss_ema", "val_top1_ema"};
    for (int i = 0; i < 5; i++) CHECK_INT(gc_same_cells(on, off, "metrics.csv", mc[i], 3), 0);
    CHECK(cli_json_number(off, "summary.json", "graph_recordings") == 0);
}

/* Runs the experiment with `sets` and graphs auto, then false; compares; on/off get the
 * run directories. */
static bool pair(const char *root, const char *sets, char *on, char *off, int steps, const char *opt_state) {
    char all[2048], r[256];
    snprintf(all, sizeof all, "%s --set train.cuda_graphs=auto", sets);
    snprintf(r, sizeof r, "%s-on", root);
    if (!gc_run(exp_path, r, all, on, 4096)) {
        CHECK(!"the graphs run failed");
        return false;
    }
    CHECK(strstr(gc_out, "recording a") == NULL);
    snprintf(all, sizeof all, "%s --set train.cuda_graphs=false", sets);
    snprintf(r, sizeof r, "%s-off", root);
    if (!gc_run(exp_path, r, all, off, 4096)) {
        CHECK(!"the run without graphs failed");
        return false;
    }
    CHECK_INT(steps_of(on), steps);
    fprintf(stderr, "%s: graphs auto vs false:\n", root);
    same_runs(on, off, steps, opt_state);
    return true;
}

static double summary(const char *dir, const char *key) { return cli_json_number(dir, "summary.json", key); }

/* 200 samples, micro-batches of 16, 2 per step: 6 steps of 16 + 16 and one of 8 per
 * epoch (21 steps). Data on the device: one graph per step shape, recorded at its second
 * run: the full step from step 2 (5 + 6 + 6 launches), the short one from epoch 2 (2).
 * Evaluation: 64 in batches of 16, twice per epoch (weights, EMA): recorded at the second
 * batch, 3 + 4 + 8 + 8 launches. */
static void single_on_device(void) {
    char on[4096], off[4096];
    if (!pair("single", recipe, on, off, 21, "optim.momentum_buffer")) return;
    char p[4400];
    snprintf(p, sizeof p, "%s/plan.json", on);
    char *plan = test_read_file(p, NULL);
    CHECK_CONTAINS(plan, "\"cuda_graphs\": true");
    free(plan);
    if (gc_dry) {
        CHECK(summary(on, "graph_launches") > 0);
        return;
    }
    CHECK_INT((int)summary(on, "graph_recordings"), 3);
    CHECK_INT((int)summary(on, "graph_launches"), 19 + 23);
    /* the loss scale moved both ways (overflows, then growth) */
    double s[32];
    int n = gc_csv_column(on, "steps.csv", "loss_scale", s, 32);
    bool down = false, up = false;
    for (int i = 1; i < n; i++) {
        down |= s[i] < s[i - 1];
        up |= s[i] > s[i - 1];
    }
    CHECK(down && up);
}

static void single_cpu_loader(void) {
    char on[4096], off[4096];
    if (!pair("loader", "--set data.on_device=false", on, off, 21, "optim.momentum_buffer")) return;
    CHECK(summary(on, "graph_launches") > 0);
}

static void ddp_nccl_world1(void) {
    char on[4096], off[4096], sets[1024];
    snprintf(sets, sizeof sets, "--set parallel.mode=ddp --set parallel.world_size=1 --set parallel.backend=%s "
             "--set parallel.sync_bn=true --set parallel.grad_compression=fp16 --set parallel.bucket_mb=0.1",
             gc_nccl);
    if (!pair("ddp1", sets, on, off, 21, "optim.momentum_buffer")) return;
    CHECK(summary(on, "graph_launches") > 0);
    if (!gc_dry) CHECK_INT((int)summary(on, "graph_recordings"), 3);
}

static void ddp_shm_world2_shares_gpu0(void) {
    char on[4096], off[4096];
    const char *sets = "--set parallel.mode=ddp --set parallel.world_size=2 --set parallel.backend=shm";
    if (!pair("shm2", sets, on, off, 21, "optim.momentum_buffer")) return;
    char p[4400];
    snprintf(p, sizeof p, "%s/plan.json", on);
    char *plan = test_read_file(p, NULL);
    if (gc_dry) {
        CHECK_CONTAINS(plan, "\"cuda_graphs\": true");   /* the cpu hook records shm too */
    } else {
        CHECK_CONTAINS(plan, "\"cuda_graphs\": false");
        CHECK_CONTAINS(plan, "ddp over shm runs its all-reduces on the host");
        CHECK(summary(on, "graph_recordings") == 0);
    }
    free(plan);
}

static void resume_mid_epoch(void) {
    char ref[4096], cut[4096], args[4600];
    if (!gc_run(exp_path, "res-ref", "--set train.cuda_graphs=false", ref, sizeof ref) ||
        !gc_run(exp_path, "res-cut", "--set train.cuda_graphs=auto --set train.max_steps=10", cut, sizeof cut)) {
        CHECK(!"a run failed");
        return;
    }
    snprintf(args, sizeof args, "resume %s --set train.max_steps=null", cut);
    CHECK_INT(gc_runner("%s", args), 0);
    CHECK(strstr(gc_out, "continuing at step 10") != NULL);
    CHECK(strstr(gc_out, "recording a") == NULL);
    fprintf(stderr, "resumed graphs run vs an uninterrupted run without graphs:\n");
    CHECK_INT(gc_diff_bits(cut, ref, "params", false), 0);
    CHECK_INT(gc_diff_bits(cut, ref, "buffers", false), 0);
    CHECK_INT(gc_diff_bits(cut, ref, "optim.momentum_buffer", false), 0);
    CHECK_INT(gc_diff_bits(cut, ref, "ema.params", false), 0);
    const char *sc[] = {"loss", "top1", "loss_scale", "grad_norm"};
    for (int i = 0; i < 4; i++) CHECK_INT(same_column(cut, ref, sc[i], 21), 0);
    CHECK(summary(cut, "graph_launches") > 0);
}

/* The default is auto: `runner plan` without the key says on in single mode and over
 * NCCL, off (and why) for ddp over shm with GPUs and for dp. */
static void default_is_auto(void) {
    const char *sets[] = {"--set parallel.mode=single",
                          "--set parallel.mode=ddp --set parallel.world_size=1 --set parallel.backend=nccl",
                          "--set parallel.mode=ddp --set parallel.world_size=2 --set parallel.backend=shm",
                          "--set parallel.mode=dp --set parallel.world_size=1"};
    const char *want[] = {"graphs       on: train.cuda_graphs auto: each step (forward to optimizer)",
                          "graphs       on: train.cuda_graphs auto: each step (all-reduces included)",
                          "graphs       off: train.cuda_graphs auto: not here: ddp over shm runs its all-reduces",
                          "graphs       off: train.cuda_graphs auto: not here: dp drives"};
    for (int i = 0; i < 4; i++) {
        if (gc_dry && i == 1) continue;   /* no nccl on the cpu */
        if (gc_dry && i == 2) continue;   /* the cpu hook records shm */
        CHECK_INT(gc_runner("plan %s %s", exp_path, sets[i]), 0);
        CHECK_CONTAINS(gc_out, want[i]);
    }
}

int main(void) {
    gc_setup();
    if (gc_dry) setenv("RUNNER_CPU_GRAPHS", "1", 1);   /* the cpu backend's graph ops */
    /* a row per step, read back 4 steps at a time (the host runs ahead of the device) */
    setenv("RUNNER_STEP_WINDOW", "4", 1);
    gc_write_exp(exp_path, sizeof exp_path, "graphs", exp_yaml, gc_dev);
    TEST_RUN(default_is_auto);
    TEST_RUN(single_on_device);
    TEST_RUN(single_cpu_loader);
    TEST_RUN(ddp_nccl_world1);
    TEST_RUN(ddp_shm_world2_shares_gpu0);
    TEST_RUN(resume_mid_epoch);
    return gc_finish();
}
