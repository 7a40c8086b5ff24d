/* test_gpu_cli_hang.c: a hung DDP peer on the GPU is detected within parallel.timeout_s and
 * the whole run ends, through the CLI. Argument: the communicator, shm or nccl.
 *   shm:  two ranks sharing GPU 0 (backend shm puts every rank on device 0);
 *   nccl: two ranks on GPUs 0 and 1; skipped (77) with fewer than 2 GPUs.
 * Skipped (77) without a GPU; see gpu_cli_util.h for the CPU dry run (shm only).
 *
 * The run: DDP world 2, parallel.timeout_s 5, resnet20 on synthetic 3x32x32 images, a
 * practically endless number of epochs. Once rank 0's steps.csv has 3 rows, rank 1 (found
 * among the launcher's children by RANK=1 in its environment) gets SIGSTOP: alive, so the
 * "peer exited" check of comm/shm.c does not fire, only the timeout can. Expected:
 *  - rank 0's collective fails after the timeout: logs/rank0.log gets the message (shm:
 *    "timed out after 5 s on rank 0: rank(s) 1 never arrived"; nccl: "did not finish
 *    within 5 s (parallel.timeout_s)") between 4 and 15 s after the SIGSTOP (the timeout
 *    counts from rank 0's arrival at the collective, which may precede the SIGSTOP by up
 *    to a step; after it rank 0 unwinds, writes summary.json and frees the GPU);
 *  - the launcher exits 1 within 25 s of the SIGSTOP (the detection, then its 5 s grace
 *    period between SIGTERM and SIGKILL for the stopped rank), with one message naming
 *    rank 0 and its exit status and quoting rank 0's error from its log;
 *  - summary.json says "failed"; no process of the run is left (both rank pids gone, no
 *    process with the run's RUNNER_RUN_DIR in its environment).
 * Whatever happens, the test continues and kills (SIGCONT + SIGKILL) the ranks it found.
 */
#include "tests/gpu/gpu_cli_util.h"

static const char *comm_name = "shm";
static char exp_path[700];

static const char *exp_yaml =
    "name: hang\n"
    "seed: 1\n"
    "device: %s\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 256, val_size: 32, image: [3, 32, 32], classes: 4}\n"
    "  workers: 1\n"
    "  augment: {random_crop: false, horizontal_flip: false, rotation: 0}\n"
    "model: {arch: resnet20}\n"
    "optimizer: {name: sgd, lr: 0.01}\n"
    "schedule: {name: constant, warmup_epochs: 0}\n"
    "train: {epochs: 100000, batch_size: 32, eval_every: 1000000}\n"
    "parallel: {mode: ddp, world_size: 2, backend: %s, timeout_s: 5}\n"
    "logging: {print_every: 1}\n"
    "checkpoint: {every_epochs: 1000000, keep_last: 1, keep_best: false, resume: never}\n";

static const double TIMEOUT = 5.0;

static void hung_peer_is_detected(void) {
    char root[800], log[800], dir[4096] = "", steps[4400] = "";
    snprintf(root, sizeof root, "%s/%s", gc_tmp, comm_name);
    snprintf(log, sizeof log, "%s/%s.log", gc_tmp, comm_name);
    pid_t launcher = gc_spawn(exp_path, root, NULL, log);
    pid_t ranks[2] = {-1, -1};
    bool running = false;
    double t0 = dist_now();
    /* wait until training runs: rank 0's steps.csv has 3 rows */
    while (dist_now() - t0 < 180) {
        if (!dir[0] && gc_find_run_dir(root, "hang", dir, sizeof dir)) snprintf(steps, sizeof steps, "%s/steps.csv", dir);
        if (dir[0] && gc_count_lines(steps) >= 4) {
            running = true;
            break;
        }
        if (waitpid(launcher, NULL, WNOHANG) == launcher) {
            launcher = -1;
            break;
        }
        usleep(20000);
    }
    if (!running) {
        char *s = test_read_file(log, NULL);
        fprintf(stderr, "the run did not start training; launcher output:\n%s\n", s ? s : "");
        free(s);
        CHECK(running);
        if (launcher > 0) {
            kill(launcher, SIGTERM);
            gc_wait(launcher, 30, NULL);
        }
        return;
    }
    pid_t kids[8];
    int nk = dist_children_of(launcher, kids, 8);
    CHECK_INT(nk, 2);
    char v[64];
    for (int i = 0; i < nk; i++) {
        int r = atoi(dist_proc_env(kids[i], "RANK", v, sizeof v));
        if (r == 0 || r == 1) ranks[r] = kids[i];
    }
    CHECK(ranks[0] > 0 && ranks[1] > 0);
    if (ranks[0] <= 0 || ranks[1] <= 0) {
        gc_kill_ranks(kids, nk, dir);
        gc_wait(launcher, 30, NULL);
        return;
    }
    int rows_before = gc_count_lines(steps) - 1;
    double t_stop = dist_now();
    CHECK_INT(kill(ranks[1], SIGSTOP), 0);
    usleep(50000);
    CHECK(dist_proc_state(ranks[1]) == 'T');

    /* watch rank 0's log for the message and the launcher for its exit */
    char rank0_log[4400];
    snprintf(rank0_log, sizeof rank0_log, "%s/logs/rank0.log", dir);
    const char *want = !strcmp(comm_name, "nccl") ? "did not finish within 5 s (parallel.timeout_s)"
                                                  : "timed out after 5 s on rank 0: rank(s) 1 never arrived";
    double t_detect = -1, t_exit = -1;
    int rc = -1;
    while (dist_now() - t_stop < 60) {
        if (t_detect < 0) {
            char *s = test_read_file(rank0_log, NULL);
            if (s && strstr(s, want)) t_detect = dist_now() - t_stop;
            free(s);
        }
        int st = 0;
        if (waitpid(launcher, &st, WNOHANG) == launcher) {
            t_exit = dist_now() - t_stop;
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            break;
        }
        usleep(20000);
    }
    if (t_exit < 0) {   /* still running after 60 s: end everything */
        gc_kill_ranks(ranks, 2, dir);
        kill(launcher, SIGKILL);
        waitpid(launcher, NULL, 0);
    }
    if (t_detect < 0) {
        char *s = test_read_file(rank0_log, NULL);
        if (s && strstr(s, want)) t_detect = t_exit;
        free(s);
    }
    int rows_after = gc_count_lines(steps) - 1;
    fprintf(stderr, "  %s: SIGSTOP rank 1 (pid %d) after %d steps; rank 0 stopped at %d; message in rank0.log "
            "after %.2f s; launcher exited %d after %.2f s\n", comm_name, (int)ranks[1], rows_before, rows_after,
            t_detect, rc, t_exit);
    char *out = test_read_file(log, NULL);
    CHECK_INT(rc, 1);
    CHECK(t_detect >= TIMEOUT - 1.0);
    CHECK(t_detect <= TIMEOUT + 10.0);
    CHECK(t_exit > 0 && t_exit <= TIMEOUT + 20.0);
    char name[96];
    snprintf(name, sizeof name, "rank 0 (pid %d) exited with status 1", (int)ranks[0]);
    CHECK_CONTAINS(out, name);
    CHECK_CONTAINS(out, want);
    CHECK_INT(gc_count_substr(out, "the other ranks were stopped"), 1);
    if (test_failures_) {
        fprintf(stderr, "launcher output:\n%s\n", out ? out : "");
        char *r0 = test_read_file(rank0_log, NULL);
        fprintf(stderr, "rank0.log:\n%s\n", r0 ? r0 : "");
        free(r0);
    }
    free(out);
    char buf[64];
    CHECK_STR(gc_json_string(dir, "summary.json", "status", buf, sizeof buf), "failed");
    /* nothing left behind */
    usleep(200000);
    for (int r = 0; r < 2; r++) {
        bool gone = kill(ranks[r], 0) == -1 && errno == ESRCH;
        if (!gone) fprintf(stderr, "rank %d (pid %d) still exists (state %c)\n", r, (int)ranks[r], dist_proc_state(ranks[r]));
        CHECK(gone || dist_proc_state(ranks[r]) == 'Z');
    }
    CHECK_INT(dist_processes_of_run(dir, false), 0);
    gc_kill_ranks(ranks, 2, dir);
}

int main(int argc, char **argv) {
    if (argc > 1) comm_name = argv[1];
    if (strcmp(comm_name, "shm") && strcmp(comm_name, "nccl")) {
        fprintf(stderr, "usage: test_gpu_cli_hang shm|nccl\n");
        return 2;
    }
    gc_setup();
    if (!strcmp(comm_name, "nccl")) {
        if (gc_dry) test_skip("NCCL needs GPUs (dry run)");
        if (gc_gpus < 2) test_skip("the NCCL variant needs 2 GPUs (one rank per GPU)");
    }
    gc_write_exp(exp_path, sizeof exp_path, "hang", exp_yaml, gc_dev, comm_name);
    TEST_RUN(hung_peer_is_detected);
    return gc_finish();
}
