/* test_gpu_cli_train.c: training on the GPU through the CLI against the CPU backend and
 * the parallel modes on the GPU against one process. Skipped (77) without a GPU; see
 * gpu_cli_util.h for the CPU dry run.
 *
 * The experiment: resnet20, synthetic 3x32x32 images of 4 classes (640 train, 64 val),
 * shuffle on, random crop (padding 4) + horizontal flip (so `device: cuda` uses the GPU
 * augmentation kernel of runner/train.c), global batch 32, one epoch = 20 steps, SGD lr
 * 0.001 momentum 0.9 wd 5e-4, fp32 with amp.tf32 false, train.deterministic true, one
 * steps.csv row per step.
 *
 * Why lr 0.001: this tiny problem is ill-conditioned. Measured on the CPU with two
 * summation orders (DDP + SyncBN on 2 ranks vs one process, which is what GPU vs CPU
 * amounts to): at lr 0.02 (batch 16) the per-step losses of the two drift apart by 1e-1
 * relative by step 18 (a ReLU whose input rounds either side of 0 flips one gradient
 * element, and BN over 16 images amplifies it); at lr 0.005 by 2e-2; at lr 0.001 and
 * batch 32 the largest relative difference over 20 steps was 4.1e-4 (step 18), 2.6e-6
 * over the first 5 steps, and the final val_loss agreed to 7e-5. The tolerances below
 * have ~10x margin over that.
 *
 *  1. cuda (single) vs cpu (single): summary.json status completed, device cuda, 20 steps;
 *     steps.csv: the same lr every step, loss at step k within relative 2e-4 * k (2e-4 at
 *     step 1, where only the forward pass differs: same weights, same images, the GPU's
 *     other summation order; 4e-3 at step 20, the drift measured above x10), top-1 within
 *     2 of the 32 images; metrics.csv: train_loss and val_loss within relative 2e-3,
 *     val_top1 within 2 of the 64 images (a near-tie may flip); the final params and BN
 *     buffers within 1e-3 in relative L2 norm.
 *  1b. The same GPU run twice (two processes) gives the same bits: params, buffers and
 *     momentum of last.ckpt, steps.csv losses. What 2 (tests/gpu/test_gpu_cli_resume.c),
 *     4 and 6 build on; if this fails they fail too, for the reason below.
 *  4. parallel.mode ddp, world_size 1, backend nccl on cuda == mode single on cuda BIT FOR
 *     BIT: params, buffers and momentum of last.ckpt; steps.csv loss, top-1 and lr cells;
 *     metrics.csv train loss and the accuracies. Expected exact: with one rank NCCL's
 *     average is the gradient itself (x / 1), the broadcasts copy nothing, both use the
 *     GPU augmentation with the same sampler, and a step's loss sum is a float either
 *     way. Except val_loss, within relative 1e-6: DDP all-reduces the evaluation sums as
 *     floats, one process keeps a double.
 *  6. parallel.mode dp, world_size 1 on cuda == mode single on cuda, bit for bit up to the
 *     sign of zero (values compared with ==): comm/dp.c with one replica computes the same
 *     forward/backward on replica 0, then sets the gradient to 0 + g on the host
 *     (prev + acc; only -0 becomes +0) and uploads it. Its images come from the CPU loader
 *     (dp never uses the GPU augmentation), which test_gpu_augment shows equal to the GPU
 *     kernel bit for bit for crop + flip, so the inputs are the same too.
 *  5. parallel.mode ddp, world_size 2, backend shm on cuda (both ranks on GPU 0: with
 *     backend shm and no parallel.devices, runner/train.c setup_backend puts every rank
 *     on device 0; parallel.devices: [0, 0] is refused, F_UNIQUE) vs the same DDP run on
 *     the cpu: the tolerances of 1, except the loss at step k within relative 5e-4 * k:
 *     each rank normalises 16 images, and with BN over 16 the drift measured as above
 *     (one process, batch 16, lr 0.001) reached 5.7e-4 at step 14 and 1.2e-3 at step 20.
 *     Control: the GPU DDP run's step-1 loss differs from the single GPU run's by more
 *     than the step-1 tolerance (BN over 16 vs 32 images; 5.7e-3 on the CPU), so the
 *     comparison can tell the two computations apart.
 *
 * Bit-exact comparisons between two GPU processes also need cuDNN to pick the same
 * algorithms in both: with train.deterministic model/cuda/conv.cu takes the first
 * deterministic algorithm in the heuristic's order, not the fastest by timing (which two
 * processes could measure differently). Should that not hold, 1b, 4 and 6 fail with
 * differences of rounding size; the messages print the largest difference to tell that
 * apart from a real bug.
 */
#include "tests/gpu/gpu_cli_util.h"

static char exp_path[700];
static char gpu_single[4096], cpu_single[4096];
static bool have_gpu_single, have_cpu_single;

enum { STEPS = 20, BATCH = 32, VAL = 64 };

static const char *exp_yaml =
    "name: eq\n"
    "seed: 11\n"
    "device: %s\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 640, val_size: 64, image: [3, 32, 32], classes: 4}\n"
    "  workers: 2\n"
    "  shuffle: true\n"
    "  augment: {random_crop: {size: 32, padding: 4}, horizontal_flip: true, rotation: 0}\n"
    "model: {arch: resnet20}\n"
    "optimizer: {name: sgd, lr: 0.001, momentum: 0.9, weight_decay: 5.0e-4}\n"
    "schedule: {name: constant, warmup_epochs: 0}\n"
    "train: {epochs: 1, batch_size: 32, deterministic: true}\n"
    "amp: {enabled: false, tf32: false}\n"
    "parallel: {mode: single}\n"
    "logging: {print_every: 1}\n"
    "checkpoint: {every_epochs: 1, keep_last: 1, resume: never}\n";

/* Relative tolerance of the loss at step k (1-based): per_step * k. */
static double loss_rtol(double per_step, int step) { return per_step * step; }

/* Summary checks every run of this file shares. */
static void check_summary(const char *dir, const char *device, const char *mode, int world) {
    char buf[64];
    CHECK_STR(gc_json_string(dir, "summary.json", "status", buf, sizeof buf), "completed");
    CHECK_STR(gc_json_string(dir, "summary.json", "device", buf, sizeof buf), device);
    CHECK_STR(gc_json_string(dir, "summary.json", "mode", buf, sizeof buf), mode);
    CHECK_STR(gc_json_string(dir, "summary.json", "precision", buf, sizeof buf), "fp32");
    CHECK_INT(cli_json_number(dir, "summary.json", "world_size"), world);
    CHECK_INT(cli_json_number(dir, "summary.json", "steps"), STEPS);
    CHECK_INT(cli_json_number(dir, "summary.json", "exit_code"), 0);
    /* env.json names the convolution algorithms that ran (the conv_engine op) */
    char path[4200];
    snprintf(path, sizeof path, "%s/env.json", dir);
    char *env = test_read_file(path, NULL);
    CHECK(env != NULL);
    /* graph_conv on (train.cuda_fusion's default [all] has it, as RUNNER_CUDA_FUSION
     * lists may): the graph API's plans report; with train.cuda_fusion [] and no such
     * list, the legacy API's algorithms */
    const char *fusion = getenv("RUNNER_CUDA_FUSION");
    snprintf(path, sizeof path, "%s/resolved.yaml", dir);
    char *res = test_read_file(path, NULL);
    CHECK(res != NULL);
    const char *key = res ? strstr(res, "cuda_fusion:") : NULL;
    CHECK(key != NULL);
    size_t klen = key ? strcspn(key, "#\n") : 0;
    char line[256] = "";
    snprintf(line, sizeof line, "%.*s", (int)(klen < sizeof line ? klen : sizeof line - 1), key ? key : "");
    bool graph_conv = (fusion && (strstr(fusion, "graph_conv") || strstr(fusion, "all"))) || strstr(line, "all") ||
                      strstr(line, "graph_conv");
    free(res);
    if (env && !strcmp(device, "cuda") && strcmp(mode, "dp") && graph_conv) {
        CHECK_CONTAINS(env, "\"fwd\": \"cudnn-graph eng");
    } else if (env && !strcmp(device, "cuda") && strcmp(mode, "dp")) {
        CHECK_CONTAINS(env, "\"fwd\": \"cudnn fwd ");
        CHECK_CONTAINS(env, "\"bwd_filter\": \"cudnn bwd_filter ");
        CHECK_CONTAINS(env, "deterministic, heuristic order");
    } else if (env) {
        CHECK_CONTAINS(env, "\"conv_engines\"");
    }
    free(env);
}

/* The GPU run's curves against the CPU run's, within the tolerances of case 1. */
static void compare_within_tolerance(const char *g, const char *c, double per_step) {
    double gl[64], cl[64], gt[64], ct[64], glr[64], clr[64];
    CHECK_INT(gc_csv_column(g, "steps.csv", "loss", gl, 64), STEPS);
    CHECK_INT(gc_csv_column(c, "steps.csv", "loss", cl, 64), STEPS);
    CHECK_INT(gc_csv_column(g, "steps.csv", "top1", gt, 64), STEPS);
    CHECK_INT(gc_csv_column(c, "steps.csv", "top1", ct, 64), STEPS);
    CHECK_INT(gc_csv_column(g, "steps.csv", "lr", glr, 64), STEPS);
    CHECK_INT(gc_csv_column(c, "steps.csv", "lr", clr, 64), STEPS);
    if (test_failures_) return;
    double worst = 0;
    int worst_k = 0;
    for (int k = 1; k <= STEPS; k++) {
        double rel = fabs(gl[k - 1] - cl[k - 1]) / fabs(cl[k - 1]);
        fprintf(stderr, "    step %2d: loss %.9g (gpu) %.9g (cpu), rel diff %.2e (tol %.1e); top1 %.4f %.4f\n", k,
                gl[k - 1], cl[k - 1], rel, loss_rtol(per_step, k), gt[k - 1], ct[k - 1]);
        if (rel > worst) { worst = rel; worst_k = k; }
        CHECK(isfinite(gl[k - 1]));
        CHECK_NEAR(gl[k - 1], cl[k - 1], 0.0, loss_rtol(per_step, k));
        CHECK_NEAR(gt[k - 1], ct[k - 1], 2.0 / BATCH + 1e-9, 0.0);
        CHECK(glr[k - 1] == clr[k - 1]);
    }
    fprintf(stderr, "  largest relative loss difference %.2e at step %d\n", worst, worst_k);
    /* the epoch row: training loss over the epoch, the evaluation */
    double a[4] = {0}, b[4] = {0};
    const char *cols[] = {"train_loss", "val_loss", "val_top1", "train_top1"};
    for (int i = 0; i < 4; i++) {
        CHECK_INT(gc_csv_column(g, "metrics.csv", cols[i], &a[i], 1), 1);
        CHECK_INT(gc_csv_column(c, "metrics.csv", cols[i], &b[i], 1), 1);
        fprintf(stderr, "  %s: %.9g (gpu) %.9g (cpu)\n", cols[i], a[i], b[i]);
    }
    CHECK_NEAR(a[0], b[0], 0.0, 2e-3);
    CHECK_NEAR(a[1], b[1], 0.0, 2e-3);
    CHECK_NEAR(a[2], b[2], 2.0 / VAL + 1e-9, 0.0);
    CHECK_NEAR(a[3], b[3], 2.0 * STEPS / (STEPS * BATCH) + 1e-9, 0.0);
    double m;
    double lp = gc_rel_l2(g, c, "params", &m), lb = gc_rel_l2(g, c, "buffers", &m);
    CHECK(lp <= 1e-3);
    CHECK(lb <= 1e-3);
}

/* Cells of column `name` of DIR/FILE equal as text in every one of `rows` rows. */
#define same_cells(a, b, file, name, rows) CHECK_INT(gc_same_cells(a, b, file, name, rows), 0)

/* 1 */
static void gpu_matches_cpu(void) {
    have_gpu_single = gc_run(exp_path, "single_gpu", NULL, gpu_single, sizeof gpu_single) != NULL;
    have_cpu_single = gc_run(exp_path, "single_cpu", "--set device=cpu", cpu_single, sizeof cpu_single) != NULL;
    CHECK(have_gpu_single && have_cpu_single);
    if (!have_gpu_single || !have_cpu_single) return;
    check_summary(gpu_single, gc_dev, "single", 1);
    check_summary(cpu_single, "cpu", "single", 1);
    char buf[64];
    CHECK_STR(gc_json_string(gpu_single, "plan.json", "device", buf, sizeof buf), gc_dev);
    if (!gc_dry) CHECK(cli_json_number(gpu_single, "summary.json", "peak_memory_bytes") > 0);
    fprintf(stderr, "cuda vs cpu, mode single:\n");
    compare_within_tolerance(gpu_single, cpu_single, 2e-4);
}

/* 1b */
static void gpu_run_repeats_bit_exact(void) {
    CHECK(have_gpu_single);
    if (!have_gpu_single) return;
    char d[4096];
    const char *again = gc_run(exp_path, "single_gpu_again", NULL, d, sizeof d);
    CHECK(again != NULL);
    if (!again) return;
    fprintf(stderr, "the same %s run twice:\n", gc_dev);
    CHECK_INT(gc_diff_bits(again, gpu_single, "params", false), 0);
    CHECK_INT(gc_diff_bits(again, gpu_single, "buffers", false), 0);
    CHECK_INT(gc_diff_bits(again, gpu_single, "optim.momentum_buffer", false), 0);
    same_cells(again, gpu_single, "steps.csv", "loss", STEPS);
    same_cells(again, gpu_single, "metrics.csv", "val_loss", 1);
}

/* 4 */
static void ddp_nccl_world1_equals_single(void) {
    CHECK(have_gpu_single);
    if (!have_gpu_single) return;
    char sets[256], d[4096];
    snprintf(sets, sizeof sets, "--set parallel.mode=ddp --set parallel.world_size=1 --set parallel.backend=%s", gc_nccl);
    const char *ddp = gc_run(exp_path, "ddp1", sets, d, sizeof d);
    CHECK(ddp != NULL);
    if (!ddp) return;
    check_summary(ddp, gc_dev, "ddp", 1);
    char buf[64];
    CHECK_STR(gc_json_string(ddp, "plan.json", "comm_backend", buf, sizeof buf), gc_nccl);
    fprintf(stderr, "ddp world 1 (%s) vs single, both %s:\n", gc_nccl, gc_dev);
    CHECK_INT(gc_diff_bits(ddp, gpu_single, "params", false), 0);
    CHECK_INT(gc_diff_bits(ddp, gpu_single, "buffers", false), 0);
    CHECK_INT(gc_diff_bits(ddp, gpu_single, "optim.momentum_buffer", false), 0);
    same_cells(ddp, gpu_single, "steps.csv", "lr", STEPS);
    same_cells(ddp, gpu_single, "steps.csv", "loss", STEPS);
    same_cells(ddp, gpu_single, "steps.csv", "top1", STEPS);
    const char *cols[] = {"step", "train_loss", "train_top1", "val_top1", "val_top5"};
    for (int i = 0; i < 5; i++) same_cells(ddp, gpu_single, "metrics.csv", cols[i], 1);
    /* val_loss: DDP all-reduces the evaluation sums as floats (runner/train.c evaluate,
     * sums[0] = (float)loss) where one process keeps the double sum, so the two differ in
     * about the 8th digit (seen on the CPU: 1.267216921 vs 1.26721698) */
    double a = NAN, b = NAN;
    CHECK_INT(gc_csv_column(ddp, "metrics.csv", "val_loss", &a, 1), 1);
    CHECK_INT(gc_csv_column(gpu_single, "metrics.csv", "val_loss", &b, 1), 1);
    CHECK_NEAR(a, b, 0.0, 1e-6);
}

/* 6 */
static void dp_world1_equals_single(void) {
    CHECK(have_gpu_single);
    if (!have_gpu_single) return;
    char d[4096];
    const char *dp = gc_run(exp_path, "dp1", "--set parallel.mode=dp --set parallel.world_size=1", d, sizeof d);
    CHECK(dp != NULL);
    if (!dp) return;
    check_summary(dp, gc_dev, "dp", 1);
    fprintf(stderr, "dp world 1 vs single, both %s (values compared with ==):\n", gc_dev);
    CHECK_INT(gc_diff_bits(dp, gpu_single, "params", true), 0);
    CHECK_INT(gc_diff_bits(dp, gpu_single, "buffers", true), 0);
    CHECK_INT(gc_diff_bits(dp, gpu_single, "optim.momentum_buffer", true), 0);
    same_cells(dp, gpu_single, "steps.csv", "lr", STEPS);
    same_cells(dp, gpu_single, "steps.csv", "loss", STEPS);
    same_cells(dp, gpu_single, "steps.csv", "top1", STEPS);
    const char *cols[] = {"train_loss", "train_top1", "val_loss", "val_top1", "val_top5"};
    for (int i = 0; i < 5; i++) same_cells(dp, gpu_single, "metrics.csv", cols[i], 1);
}

/* 5 */
static void ddp_shm_world2_gpu_matches_cpu(void) {
    char dg[4096], dc[4096];
    const char *sets = "--set parallel.mode=ddp --set parallel.world_size=2 --set parallel.backend=shm";
    const char *g = gc_run(exp_path, "ddp2_gpu", sets, dg, sizeof dg);
    char csets[300];
    snprintf(csets, sizeof csets, "%s --set device=cpu", sets);
    const char *c = gc_run(exp_path, "ddp2_cpu", csets, dc, sizeof dc);
    CHECK(g && c);
    if (!g || !c) return;
    check_summary(g, gc_dev, "ddp", 2);
    check_summary(c, "cpu", "ddp", 2);
    char buf[64], log[4200];
    CHECK_STR(gc_json_string(g, "plan.json", "comm_backend", buf, sizeof buf), "shm");
    snprintf(log, sizeof log, "%s/logs/rank1.log", g);
    char *l1 = test_read_file(log, NULL);
    CHECK_CONTAINS(l1, "[rank 1/2] finished at step 20");
    free(l1);
    fprintf(stderr, "ddp world 2 over shm, %s vs cpu:\n", gc_dev);
    compare_within_tolerance(g, c, 5e-4);
    /* control: one process on the whole batch is a different computation (BN over 32
     * images instead of 16 per rank), and the step-1 tolerance tells them apart */
    if (have_gpu_single) {
        double a[1] = {NAN}, b[1] = {NAN};
        CHECK_INT(gc_csv_column(g, "steps.csv", "loss", a, 1), 1);
        CHECK_INT(gc_csv_column(gpu_single, "steps.csv", "loss", b, 1), 1);
        fprintf(stderr, "  control: step-1 loss ddp %.9g vs single %.9g, rel diff %.2e\n", a[0], b[0],
                fabs(a[0] - b[0]) / fabs(b[0]));
        CHECK(fabs(a[0] - b[0]) > loss_rtol(5e-4, 1) * fabs(b[0]));
    }
}

int main(void) {
    gc_setup();
    gc_write_exp(exp_path, sizeof exp_path, "eq", exp_yaml, gc_dev);
    TEST_RUN(gpu_matches_cpu);
    TEST_RUN(gpu_run_repeats_bit_exact);
    TEST_RUN(ddp_nccl_world1_equals_single);
    TEST_RUN(dp_world1_equals_single);
    TEST_RUN(ddp_shm_world2_gpu_matches_cpu);
    return gc_finish();
}
