/* test_gpu_cli_resume.c: a GPU run stopped by SIGINT and continued with `runner resume`
 * ends bit-identical to a GPU run that never stopped (the CPU version is
 * tests/cli/test_cli_resume.c). Skipped (77) without a GPU; see gpu_cli_util.h for the CPU
 * dry run.
 *
 * The experiment: resnet20, synthetic 3x32x32 images of 4 classes (960 train, 64 val),
 * random crop + flip + rotation 10 (the GPU augmentation kernel, whose draws are keyed by
 * epoch and sample, so a resumed epoch must continue at the right micro-batch), global
 * batch 32, 2 epochs of 30 steps, SGD with Nesterov momentum, label smoothing 0.1,
 * multistep LR with half an epoch of warm-up, train.deterministic true, one steps.csv row
 * per step.
 *
 * The interrupted run: as soon as its steps.csv has 2 rows (polled every 0.2 ms; a GPU
 * step of this size takes milliseconds, the run 60 of them), SIGINT; the runner finishes
 * the step, writes last.ckpt and exits 130 with summary.json "interrupted". Then
 * `runner resume DIR` exits 0 and says "continuing at step". Compared with the reference:
 *  - last.ckpt sections params, buffers and optim.momentum_buffer: bit for bit (memcmp);
 *  - meta step (60) and optim_steps equal;
 *  - steps.csv: the step, epoch, lr, loss and top1 cells of all 60 rows equal as text (the
 *    resumed file keeps the rows up to the interruption and appends the rest);
 *  - metrics.csv: both epoch rows' train_loss, train_top1, val_loss, val_top1, val_top5;
 *  - summary.json: completed, 60 steps, the same train_loss, val_loss and val_top1.
 * The same again with RUNNER_STEP_WINDOW=4 (the read-back of GPU runs that print less
 * often than every step): stopped at a window boundary, the same bits after resume.
 * cuDNN note: the resumed process chooses its convolution algorithms again (with
 * train.deterministic, model/cuda/conv.cu takes the heuristic's first deterministic one,
 * not the fastest by timing); a different pick would show here as params differing by
 * rounding-sized amounts (test_gpu_cli_train's repeat case checks the same thing).
 */
#include "tests/gpu/gpu_cli_util.h"

enum { TOTAL = 60 };

static char exp_path[700];

static const char *exp_yaml =
    "name: res\n"
    "seed: 3\n"
    "device: %s\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 960, val_size: 64, image: [3, 32, 32], classes: 4}\n"
    "  workers: 2\n"
    "  augment: {random_crop: {size: 32, padding: 4}, horizontal_flip: true, rotation: 10}\n"
    "model: {arch: resnet20}\n"
    "optimizer: {name: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 5.0e-4}\n"
    "schedule: {name: multistep, milestones: [1], gamma: 0.5, warmup_epochs: 0.5}\n"
    "train: {epochs: 2, batch_size: 32, label_smoothing: 0.1, deterministic: true}\n"
    "parallel: {mode: single}\n"
    "logging: {print_every: 1}\n"
    "checkpoint: {every_epochs: 1, keep_last: 2, resume: never}\n";

/* Spawns the run and sends SIGINT once its steps.csv has `rows` data rows; returns the
 * runner's exit status (-1 when it did not end within the limit) and the run directory. */
static int run_and_interrupt(const char *root, int rows, char *dir, size_t len, int *rows_at_signal) {
    char log[800];
    snprintf(log, sizeof log, "%s/interrupted.log", gc_tmp);
    pid_t pid = gc_spawn(exp_path, root, NULL, log);
    double t0 = dist_now();
    bool found = false, sent = false;
    char steps[4400] = "";
    off_t last_size = -1;
    *rows_at_signal = -1;
    while (dist_now() - t0 < 300) {
        if (!found && gc_find_run_dir(root, "res", dir, len)) {
            found = true;
            snprintf(steps, sizeof steps, "%s/steps.csv", dir);
        }
        if (found) {
            struct stat st;
            if (stat(steps, &st) == 0 && st.st_size != last_size) {
                last_size = st.st_size;
                int lines = gc_count_lines(steps);
                if (lines >= rows + 1) {
                    kill(pid, SIGINT);
                    sent = true;
                    *rows_at_signal = lines - 1;
                    break;
                }
            }
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) {   /* ended before the signal */
            fprintf(stderr, "the run ended before it could be interrupted; its output:\n");
            char *s = test_read_file(log, NULL);
            fprintf(stderr, "%s\n", s ? s : "");
            free(s);
            return -2;
        }
        usleep(200);
    }
    if (!sent) kill(pid, SIGKILL);
    double waited = 0;
    int rc = gc_wait(pid, 120, &waited);
    fprintf(stderr, "  SIGINT after %d rows (%.2f s after the start); runner exited %d\n", *rows_at_signal,
            dist_now() - t0, rc);
    if (rc != 130) {
        char *s = test_read_file(log, NULL);
        fprintf(stderr, "its output:\n%s\n", s ? s : "");
        free(s);
    }
    return sent ? rc : -1;
}

/* Cells of column `name` of DIR/FILE equal as text in every one of `rows` rows. */
#define same_cells(a, b, file, name, rows) CHECK_INT(gc_same_cells(a, b, file, name, rows), 0)

static void sigint_then_resume_is_bit_exact(void) {
    char ref[4096];
    if (!gc_run(exp_path, "ref", NULL, ref, sizeof ref)) {
        CHECK(!"the reference run failed");
        return;
    }
    CHECK_INT(cli_json_number(ref, "summary.json", "steps"), TOTAL);

    char root[800], dir[4096];
    snprintf(root, sizeof root, "%s/int", gc_tmp);
    int rows = -1;
    int rc = run_and_interrupt(root, 2, dir, sizeof dir, &rows);
    CHECK_INT(rc, 130);
    if (rc != 130) return;
    char buf[64];
    CHECK_STR(gc_json_string(dir, "summary.json", "status", buf, sizeof buf), "interrupted");
    CHECK_INT(cli_json_number(dir, "summary.json", "exit_code"), 130);
    double k = cli_meta_number(dir, "step");
    char steps[4400];
    snprintf(steps, sizeof steps, "%s/steps.csv", dir);
    fprintf(stderr, "  interrupted at step %g of %d\n", k, TOTAL);
    CHECK(k >= 2 && k < TOTAL);
    CHECK_INT(gc_count_lines(steps), (int)k + 1);

    rc = gc_runner("resume %s", dir);
    CHECK_INT(rc, 0);
    CHECK_CONTAINS(gc_out, "continuing at step");
    if (rc != 0) {
        fprintf(stderr, "%s\n", gc_out);
        return;
    }
    fprintf(stderr, "resumed vs uninterrupted:\n");
    CHECK_INT(gc_diff_bits(dir, ref, "params", false), 0);
    CHECK_INT(gc_diff_bits(dir, ref, "buffers", false), 0);
    CHECK_INT(gc_diff_bits(dir, ref, "optim.momentum_buffer", false), 0);
    CHECK_INT(cli_meta_number(dir, "step"), TOTAL);
    CHECK_INT(cli_meta_number(dir, "optim_steps"), cli_meta_number(ref, "optim_steps"));
    CHECK_INT(gc_count_lines(steps), TOTAL + 1);
    const char *sc[] = {"step", "epoch", "lr", "loss", "top1"};
    for (int i = 0; i < 5; i++) same_cells(dir, ref, "steps.csv", sc[i], TOTAL);
    const char *mc[] = {"epoch", "step", "train_loss", "train_top1", "val_loss", "val_top1", "val_top5"};
    for (int i = 0; i < 7; i++) same_cells(dir, ref, "metrics.csv", mc[i], 2);
    CHECK_STR(gc_json_string(dir, "summary.json", "status", buf, sizeof buf), "completed");
    CHECK_INT(cli_json_number(dir, "summary.json", "steps"), TOTAL);
    const char *keys[] = {"train_loss", "val_loss", "val_top1", "best_val_top1"};
    for (int i = 0; i < 4; i++) {
        double a = cli_json_number(dir, "summary.json", keys[i]), b = cli_json_number(ref, "summary.json", keys[i]);
        if (a != b) fprintf(stderr, "  summary %s: %.9g vs %.9g\n", keys[i], a, b);
        CHECK(a == b);
    }
}

/* The same with the step window a GPU run with logging.print_every >= 4 uses
 * (RUNNER_STEP_WINDOW=4: the steps' numbers read back four at a time, the stop decided at
 * a window boundary): the resumed run still equals the uninterrupted one bit for bit. */
static void sigint_with_step_windows_is_bit_exact(void) {
    char ref[4096];
    setenv("RUNNER_STEP_WINDOW", "4", 1);
    if (!gc_run(exp_path, "wref", NULL, ref, sizeof ref)) {
        unsetenv("RUNNER_STEP_WINDOW");
        CHECK(!"the reference run failed");
        return;
    }
    char root[800], dir[4096];
    snprintf(root, sizeof root, "%s/wint", gc_tmp);
    int rows = -1;
    int rc = run_and_interrupt(root, 2, dir, sizeof dir, &rows);
    CHECK_INT(rc, 130);
    if (rc == 130) {
        double k = cli_meta_number(dir, "step");
        fprintf(stderr, "  window 4: interrupted at step %g of %d\n", k, TOTAL);
        CHECK(k >= 4 && k < TOTAL && ((int)k % 4 == 0 || (int)k % 30 == 0));
        rc = gc_runner("resume %s", dir);
        CHECK_INT(rc, 0);
    }
    unsetenv("RUNNER_STEP_WINDOW");
    if (rc != 0) return;
    CHECK_INT(gc_diff_bits(dir, ref, "params", false), 0);
    CHECK_INT(gc_diff_bits(dir, ref, "buffers", false), 0);
    CHECK_INT(gc_diff_bits(dir, ref, "optim.momentum_buffer", false), 0);
    const char *sc[] = {"step", "loss", "top1"};
    for (int i = 0; i < 3; i++) same_cells(dir, ref, "steps.csv", sc[i], TOTAL);
}

int main(void) {
    gc_setup();
    gc_write_exp(exp_path, sizeof exp_path, "res", exp_yaml, gc_dev);
    TEST_RUN(sigint_then_resume_is_bit_exact);
    TEST_RUN(sigint_with_step_windows_is_bit_exact);
    return gc_finish();
}
