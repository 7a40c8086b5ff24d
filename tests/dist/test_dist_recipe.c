/* test_dist_recipe.c: issue 17 in 2-rank DDP runs on the CPU (shm), driving the binary.
 *
 * Preemption: SIGUSR1 sent to rank 1 only (Slurm may signal some processes and not the
 * launcher) stops every rank after the same step: rank 0 writes the checkpoint, every
 * rank exits 75, the launcher exits 75 and summary.json says "preempted"; running the same
 * command again (checkpoint.resume: auto) continues the same run directory and ends bit
 * for bit equal to an uninterrupted run, EMA and its evaluation included (which also
 * shows the EMA is the same on both ranks: after the resume both start from rank 0's, so
 * a rank whose average had drifted would change the val_*_ema numbers). The same with fp16
 * AMP and SIGINT to the launcher, then `runner resume`.
 * Elastic restart: kill -9 of rank 1 in the middle of an epoch with parallel.max_restarts 1
 * and a checkpoint every 2 steps: the launcher restarts both ranks from the last
 * checkpoint, the run completes (exit 0), restarts.jsonl and summary.json record the one
 * restart and its cause, and the final weights equal the uninterrupted run's bit for bit.
 */
#include "tests/dist/dist_util.h"

#include <signal.h>
#include <sys/wait.h>

static char tmp[512];

/* 160 samples, global batch 8 (4 per rank): 20 steps per epoch, 2 epochs. */
static const char *yaml =
    "name: dr\n"
    "seed: 11\n"
    "device: cpu\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 160, val_size: 24, image: [3, 8, 8], classes: 4}\n"
    "  workers: 1\n"
    "  augment: {random_crop: {size: 8, padding: 1}, horizontal_flip: true, rotation: 0}\n"
    "model: {arch: resnet20}\n"
    "optimizer: {name: sgd, lr: 0.01, momentum: 0.9, weight_decay: 5.0e-4, clip_grad_norm: 1.0}\n"
    "schedule: {name: constant, warmup_epochs: 0}\n"
    "train: {epochs: 2, batch_size: 8, ema: {decay: 0.95, warmup: true}}\n"
    "parallel: {mode: ddp, world_size: 2, timeout_s: 60}\n"
    "logging: {print_every: 1}\n"
    "checkpoint: {every_epochs: 1, every_steps: 4, keep_last: 2, best_metric: val_loss_ema}\n";

static const char *sections[] = {"params", "buffers", "optim.momentum_buffer", "ema.params", "ema.buffers"};
static char exp_path[700];

/* The launcher's child that is rank r (-1 if none). */
static pid_t rank_pid(pid_t launcher, int r) {
    pid_t kids[8];
    char v[32], want[8];
    snprintf(want, sizeof want, "%d", r);
    for (int t = 0; t < 3000; t++) {
        int n = dist_children_of(launcher, kids, 8);
        for (int i = 0; i < n; i++)
            if (!strcmp(dist_proc_env(kids[i], "RANK", v, sizeof v), want)) return kids[i];
        usleep(10000);
    }
    return -1;
}

/* Bit-equal sections, and equal steps.csv (step..top1, grad_norm) and metrics.csv (up to
 * val_top5, and the three _ema columns) rows, two epochs of them. */
static void same_run(const char *dir, const char *ref) {
    dist_check_same_sections(dir, ref, sections, 5);
    char a[4300];
    snprintf(a, sizeof a, "%s/metrics.csv", ref);
    CHECK_INT(dist_count_lines(a), 3);
    cli_check_same_ema_csvs(dir, ref);
}

static char ref[4096];

static void reference(void) {
    snprintf(exp_path, sizeof exp_path, "%s/dr.yaml", tmp);
    test_write_file(exp_path, yaml);
    char root[800];
    snprintf(root, sizeof root, "%s/ref", tmp);
    const char *r = dist_run(exp_path, root, "", 0);
    CHECK(r != NULL);
    if (r) snprintf(ref, sizeof ref, "%s", r);
}

static void preempt_one_rank_then_requeue(void) {
    if (!ref[0]) return;
    char root[800], log[800], p[4400];
    snprintf(root, sizeof root, "%s/pre", tmp);
    snprintf(log, sizeof log, "%s/pre.log", tmp);
    pid_t l = cli_spawn(exp_path, root, log, NULL, 0);
    const char *d = cli_wait_steps(root, "dr", 3);
    CHECK(d != NULL);
    pid_t r1 = rank_pid(l, 1);
    CHECK(r1 > 0);
    if (r1 > 0) kill(r1, SIGUSR1);   /* rank 1 only: the ranks must agree among themselves */
    CHECK_INT(cli_wait(l), 75);
    if (!d) return;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", d);
    double stopped = cli_json_number(dir, "summary.json", "steps");
    fprintf(stderr, "  preempted at step %g of 40\n", stopped);
    CHECK(stopped >= 3 && stopped < 40);
    snprintf(p, sizeof p, "%s/summary.json", dir);
    char *s = test_read_file(p, NULL);
    CHECK_CONTAINS(s, "\"status\": \"preempted\"");
    free(s);
    snprintf(p, sizeof p, "%s/logs/rank1.log", dir);
    s = test_read_file(p, NULL);
    char want[96];
    snprintf(want, sizeof want, "preempted at step %d with every rank", (int)stopped);
    CHECK_CONTAINS(s, want);
    free(s);
    /* the requeued job: the same command */
    pid_t again = cli_spawn(exp_path, root, log, NULL, 0);
    CHECK_INT(cli_wait(again), 0);
    s = test_read_file(log, NULL);
    snprintf(want, sizeof want, "continuing at step %d", (int)stopped);
    CHECK_CONTAINS(s, want);
    free(s);
    const char *same = only_run_dir(root, "dr");
    CHECK(same && !strcmp(same, dir));
    CHECK_INT(cli_json_number(dir, "summary.json", "steps"), 40);
    same_run(dir, ref);
}

static void fp16_sigint_resume(void) {
    if (!ref[0]) return;
    char root[800], log[800];
    snprintf(root, sizeof root, "%s/amp_ref", tmp);
    const char *r = dist_run(exp_path, root, "--set amp.enabled=true --set amp.dtype=fp16", 1);
    CHECK(r != NULL);
    if (!r) return;
    char amp_ref[4096];
    snprintf(amp_ref, sizeof amp_ref, "%s", r);
    snprintf(root, sizeof root, "%s/amp", tmp);
    snprintf(log, sizeof log, "%s/amp.log", tmp);
    const char *sets[] = {"amp.enabled=true", "amp.dtype=fp16"};
    char dir[4096], args[4400], out[1 << 15];
    CHECK_INT(cli_interrupt_at(exp_path, root, log, "dr", sets, 2, 3, SIGINT, dir, sizeof dir), 130);
    CHECK(dir[0] != '\0');
    if (!dir[0]) return;
    snprintf(args, sizeof args, "resume %s", dir);
    int rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 0);
    if (rc) fprintf(stderr, "%s\n", out);
    same_run(dir, amp_ref);
}

static void kill9_rank_restarts_bit_exact(void) {
    if (!ref[0]) return;
    char root[800], log[800], p[4400];
    snprintf(root, sizeof root, "%s/el", tmp);
    snprintf(log, sizeof log, "%s/el.log", tmp);
    const char *sets[] = {"parallel.max_restarts=1", "checkpoint.every_steps=2"};
    pid_t l = cli_spawn(exp_path, root, log, sets, 2);
    const char *d = cli_wait_steps(root, "dr", 5);   /* step_4.ckpt is being written or done */
    CHECK(d != NULL);
    pid_t r1 = rank_pid(l, 1);
    CHECK(r1 > 0);
    if (r1 > 0) kill(r1, SIGKILL);
    int rc = cli_wait(l);
    CHECK_INT(rc, 0);
    if (!d) return;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", d);
    char *out = test_read_file(log, NULL);
    CHECK_CONTAINS(out, "was killed by signal 9 (Killed); restart 1 of 1: every rank starts again from");
    if (rc) fprintf(stderr, "%s\n", out ? out : "");
    free(out);
    snprintf(p, sizeof p, "%s/restarts.jsonl", dir);
    char *j = test_read_file(p, NULL);
    CHECK_CONTAINS(j, "\"restart\":1,");
    CHECK_CONTAINS(j, "\"rank\":1,");
    CHECK_CONTAINS(j, "\"signal\":9,");
    CHECK_CONTAINS(j, "checkpoints/last.ckpt\"}");
    CHECK_INT(dist_count_lines(p), 1);
    free(j);
    CHECK_INT(cli_json_number(dir, "summary.json", "restarts"), 1);
    CHECK_INT(cli_json_number(dir, "summary.json", "steps"), 40);
    snprintf(p, sizeof p, "%s/summary.json", dir);
    char *s = test_read_file(p, NULL);
    CHECK_CONTAINS(s, "\"status\": \"completed\"");
    free(s);
    snprintf(p, sizeof p, "%s/logs/rank1.log", dir);
    s = test_read_file(p, NULL);
    CHECK_CONTAINS(s, "resuming at step");
    free(s);
    same_run(dir, ref);
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(reference);
    TEST_RUN(preempt_one_rank_then_requeue);
    TEST_RUN(fp16_sigint_resume);
    TEST_RUN(kill9_rank_restarts_bit_exact);
    return test_main_end();
}
