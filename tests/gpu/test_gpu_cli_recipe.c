/* test_gpu_cli_recipe.c: the recipe features of issue 17 in a GPU run (the CPU versions
 * are tests/cli/test_cli_recipe.c and tests/dist/test_dist_recipe.c). Skipped (77) without
 * a GPU; RUNNER_GPU_CLI_DRYRUN=cpu runs the same logic on the CPU (gpu_cli_util.h).
 *
 * The experiment: resnet20 on synthetic 3x32x32 images (960 train, 64 val), global batch
 * 32, 2 epochs of 30 steps, fp16 AMP, EMA (decay 0.99 with warm-up), gradient clipping at
 * 1.0 and a step checkpoint every 4 steps, with RUNNER_STEP_WINDOW=8 (a GPU reads its step
 * records back 8 at a time; a step checkpoint must cut the window short).
 *  - The reference has step_<N>.ckpt files at multiples of 4 (the newest two), grad_norm
 *    in every steps.csv row and val_top1_ema in metrics.csv; its first step's gradient
 *    norm (same initial weights, same first batch; init_scale 256 does not overflow) is
 *    within 1e-2 of a CPU run's (fp16 convolutions round differently).
 *  - SIGTERM once 2 rows are written: exit 75, "preempted"; the same command again
 *    continues the run directory and ends bit for bit equal to the reference: params,
 *    buffers, momentum, ema.params, ema.buffers; the loss, top1 and grad_norm of every
 *    step and the validation of both weights as text.
 */
#include "tests/gpu/gpu_cli_util.h"

enum { TOTAL = 60 };

static char exp_path[700];

static const char *exp_yaml =
    "name: rec\n"
    "seed: 9\n"
    "device: %s\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 960, val_size: 64, image: [3, 32, 32], classes: 4}\n"
    "  workers: 2\n"
    "  augment: {random_crop: {size: 32, padding: 4}, horizontal_flip: true, rotation: 0}\n"
    "model: {arch: resnet20}\n"
    "optimizer: {name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 5.0e-4, clip_grad_norm: 1.0}\n"
    "schedule: {name: constant, warmup_epochs: 0}\n"
    "train: {epochs: 2, batch_size: 32, deterministic: true, ema: {decay: 0.99, warmup: true}}\n"
    "amp: {enabled: true, dtype: fp16, init_scale: 256}\n"
    "parallel: {mode: single}\n"
    "logging: {print_every: 1}\n"
    "checkpoint: {every_epochs: 1, every_steps: 4, keep_last: 2, resume: auto}\n";

static void preempt_and_requeue_is_bit_exact(void) {
    char ref[4096], p[4400];
    if (!gc_run(exp_path, "ref", NULL, ref, sizeof ref)) {
        CHECK(!"the reference run failed");
        return;
    }
    CHECK_INT(cli_json_number(ref, "summary.json", "steps"), TOTAL);
    snprintf(p, sizeof p, "%s/checkpoints/step_56.ckpt", ref);
    CHECK(access(p, R_OK) == 0);
    snprintf(p, sizeof p, "%s/checkpoints/step_52.ckpt", ref);
    CHECK(access(p, R_OK) == 0);
    double norm[TOTAL], ema1[2];
    CHECK_INT(gc_csv_column(ref, "steps.csv", "grad_norm", norm, TOTAL), TOTAL);
    CHECK(norm[0] > 0 && isfinite(norm[TOTAL - 1]));
    CHECK_INT(gc_csv_column(ref, "metrics.csv", "val_top1_ema", ema1, 2), 2);
    /* the first step's norm against the CPU's (same weights, same batch) */
    char cpu[4096];
    if (gc_run(exp_path, "cpu", "--set device=cpu --set train.epochs=1 --set train.max_steps=2", cpu, sizeof cpu)) {
        double cn[2];
        CHECK_INT(gc_csv_column(cpu, "steps.csv", "grad_norm", cn, 2), 2);
        fprintf(stderr, "  step 1 grad_norm: %s %.7g, cpu %.7g\n", gc_dev, norm[0], cn[0]);
        CHECK_NEAR(norm[0], cn[0], 0, 1e-2);   /* fp16 convolutions differ in rounding */
    }

    char root[800], log[800], dir[4096] = "";
    snprintf(root, sizeof root, "%s/pre", gc_tmp);
    snprintf(log, sizeof log, "%s/pre.log", gc_tmp);
    pid_t pid = gc_spawn(exp_path, root, NULL, log);
    double t0 = dist_now();
    bool sent = false;
    while (dist_now() - t0 < 300 && !sent) {
        if (!dir[0]) gc_find_run_dir(root, "rec", dir, sizeof dir);
        if (dir[0]) {
            snprintf(p, sizeof p, "%s/steps.csv", dir);
            if (gc_count_lines(p) >= 3) {
                kill(pid, SIGTERM);
                sent = true;
            }
        }
        if (!sent && waitpid(pid, NULL, WNOHANG) == pid) break;
        usleep(200);
    }
    CHECK(sent);
    if (!sent) { kill(pid, SIGKILL); gc_wait(pid, 60, NULL); return; }
    double waited = 0;
    int rc = gc_wait(pid, 120, &waited);
    CHECK_INT(rc, 75);
    char buf[64];
    CHECK_STR(gc_json_string(dir, "summary.json", "status", buf, sizeof buf), "preempted");
    double k = cli_meta_number(dir, "step");
    fprintf(stderr, "  preempted at step %g of %d\n", k, TOTAL);
    CHECK(k >= 2 && k < TOTAL);
    /* requeued: the same command, which finds the unfinished run (checkpoint.resume auto) */
    pid = gc_spawn(exp_path, root, NULL, log);
    rc = gc_wait(pid, 300, &waited);
    CHECK_INT(rc, 0);
    char *s = test_read_file(log, NULL);
    CHECK_CONTAINS(s, "continuing at step");
    free(s);
    const char *sec[] = {"params", "buffers", "optim.momentum_buffer", "ema.params", "ema.buffers"};
    for (int i = 0; i < 5; i++) CHECK_INT(gc_diff_bits(dir, ref, sec[i], false), 0);
    const char *sc[] = {"step", "loss", "top1", "grad_norm", "loss_scale"};
    for (int i = 0; i < 5; i++) CHECK_INT(gc_same_cells(dir, ref, "steps.csv", sc[i], TOTAL), 0);
    const char *mc[] = {"val_loss", "val_top1", "val_loss_ema", "val_top1_ema"};
    for (int i = 0; i < 4; i++) CHECK_INT(gc_same_cells(dir, ref, "metrics.csv", mc[i], 2), 0);
}

int main(void) {
    gc_setup();
    setenv("RUNNER_STEP_WINDOW", "8", 1);
    gc_write_exp(exp_path, sizeof exp_path, "rec", exp_yaml, gc_dev);
    TEST_RUN(preempt_and_requeue_is_bit_exact);
    return gc_finish();
}
