/* test_launch.c: the DDP launcher with a fake worker program: the torchrun environment
 * contract, per-rank logs and the rank 0 tee, kill -9 of a rank ending the run with no
 * process left behind, a failing rank's status and log tail in the error, SIGKILL after
 * the grace period, SIGINT forwarding (exit 130) and a second SIGINT; SIGUSR1/SIGTERM
 * preemption (exit 75, also when only the ranks got the signal); restarts after a failed
 * rank (parallel.max_restarts: environment, restarts.jsonl, budget, never after exit 2);
 * and the worker-side detection of torchrun and Slurm variables. */
#include "runner/launch.h"
#include "tests/test.h"

#include <errno.h>
#include <pty.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Forks a process that runs launch_run on the fake worker with argv, world nproc, and
 * writes the error message to DIR/err.txt and rank 0's tee to DIR/tee.txt. */
static int tee_fd = -1;   /* test-only: when >= 0 the launcher tees into this fd */
static int max_restarts;  /* test-only: launch_opts_t.max_restarts of the next start */
static char restart_resume[4096];

static pid_t start_launcher(const char *dir, int nproc, int node_rank, int nnodes, int port,
                            double grace, char *const argv[]) {
    pid_t p = fork();
    if (p != 0) return p;
    char path[4096];
    snprintf(path, sizeof path, "%s/tee.txt", dir);
    FILE *tee = tee_fd >= 0 ? fdopen(tee_fd, "w") : fopen(path, "w");
    static const char *const extra[] = { "FAKE_EXTRA=hello", NULL };
    launch_opts_t o = {0};
    o.nproc_per_node = nproc;
    o.nnodes = nnodes;
    o.node_rank = node_rank;
    o.master_port = port;
    o.run_dir = dir;
    o.exe = FAKE_WORKER;
    o.grace_s = grace;
    o.extra_env = extra;
    o.tee = tee;
    o.max_restarts = max_restarts;
    o.restart_resume = restart_resume[0] ? restart_resume : NULL;
    err_t e = {0};
    int rc = launch_run(&o, argv, &e);
    fclose(tee);
    snprintf(path, sizeof path, "%s/err.txt", dir);
    test_write_file(path, e.msg);
    _exit(rc);
}

static int wait_exit(pid_t p) {
    int st = 0;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Reads an integer from DIR/NAME, waiting up to 10 s for the file; -1 if absent. */
static long read_pid(const char *dir, const char *name) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    for (int i = 0; i < 1000; i++) {
        char *t = test_read_file(path, NULL);
        if (t) { long v = atol(t); free(t); return v; }
        usleep(10000);
    }
    return -1;
}

static char *read_in(const char *dir, const char *name) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *t = test_read_file(path, NULL);
    return t ? t : calloc(1, 1);
}

/* Reaps grandchildren re-parented to this (subreaper) process. */
static void reap_orphans(void) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
}

static bool gone(long pid) { return pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH; }

static void test_env_contract_logs_tee(void) {
    char dir[4096];
    test_tmpdir(dir, sizeof dir);
    char *argv[] = { "runner", "env", dir, NULL };
    CHECK_INT(wait_exit(start_launcher(dir, 2, 0, 1, 0, 1, argv)), 0);
    char *l0 = read_in(dir, "logs/rank0.log"), *l1 = read_in(dir, "logs/rank1.log");
    char *tee = read_in(dir, "tee.txt");
    CHECK_CONTAINS(l0, "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=");
    CHECK_CONTAINS(l0, "GROUP_RANK=0 NODE_RANK=0 EXTRA=hello TTY=(unset)");  /* tee: a file */
    CHECK_CONTAINS(l0, "stderr line from rank 0");
    CHECK_CONTAINS(l1, "RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1");
    CHECK_CONTAINS(l1, "stderr line from rank 1");
    /* both ranks got the same, real port picked by the launcher */
    const char *p0 = strstr(l0, "MASTER_PORT="), *p1 = strstr(l1, "MASTER_PORT=");
    CHECK(p0 && p1);
    if (p0 && p1) {
        CHECK_INT(atoi(p0 + 12), atoi(p1 + 12));
        CHECK(atoi(p0 + 12) > 0 && atoi(p0 + 12) < 65536);
    }
    /* rank 0 is teed, rank 1 is not */
    CHECK_CONTAINS(tee, "RANK=0 LOCAL_RANK=0");
    CHECK_CONTAINS(tee, "stderr line from rank 0");
    CHECK(!strstr(tee, "rank 1"));
    free(l0); free(l1); free(tee);
}

/* Teed to a terminal (a pty here): rank 0 gets RUNNER_TTY=1, rank 1 does not. */
static void test_tty_env(void) {
    char dir[4096];
    test_tmpdir(dir, sizeof dir);
    int master, slave;
    if (openpty(&master, &slave, NULL, NULL, NULL) < 0) { CHECK(!"openpty"); return; }
    tee_fd = slave;
    char *argv[] = { "runner", "env", dir, NULL };
    CHECK_INT(wait_exit(start_launcher(dir, 2, 0, 1, 0, 1, argv)), 0);
    tee_fd = -1;
    close(slave);
    close(master);
    char *l0 = read_in(dir, "logs/rank0.log"), *l1 = read_in(dir, "logs/rank1.log");
    CHECK_CONTAINS(l0, "EXTRA=hello TTY=1");
    CHECK_CONTAINS(l1, "EXTRA=hello TTY=(unset)");
    free(l0); free(l1);
}

/* Rank 0's framed output (TRACK_PROGRESS_TEE) split into terminal and log, fed in every
 * possible pair of chunks: the redraws reach only the terminal, the plain periodic line
 * only the log, everything else both; no framing byte leaks. */
static void test_tee_split(void) {
    const char in[] = "run x\n\x1eT\repoch 1  step 1/4     \x1f\x1eLepoch 1  step 2/4\n\x1f"
                      "\x1eT\repoch 1  step 2/4     \x1fwarning: w\n\x1eT\n\x1f"
                      "epoch 1 done\n\x1eX?\x1f";
    const char want_log[] = "run x\nepoch 1  step 2/4\nwarning: w\nepoch 1 done\n?";
    const char want_tty[] = "run x\n\repoch 1  step 1/4     \repoch 1  step 2/4     warning: w\n\nepoch 1 done\n?";
    size_t n = sizeof in - 1;
    for (size_t cut = 0; cut <= n; cut++) {
        char log[256], tty[256], lo[256], to[256];
        size_t ln = 0, tn = 0, a, b;
        int state = 0;
        launch_tee_split(in, cut, &state, lo, &a, to, &b);
        memcpy(log, lo, a); ln = a; memcpy(tty, to, b); tn = b;
        launch_tee_split(in + cut, n - cut, &state, lo, &a, to, &b);
        memcpy(log + ln, lo, a); ln += a; memcpy(tty + tn, to, b); tn += b;
        log[ln] = tty[tn] = '\0';
        if (strcmp(log, want_log) || strcmp(tty, want_tty)) {
            fprintf(stderr, "cut at %zu\n", cut);
            CHECK_STR(log, want_log);
            CHECK_STR(tty, want_tty);
            break;
        }
    }
}

/* Node 1 of 2 with 2 ranks each: global ranks 2 and 3, nothing teed (rank 0 is remote). */
static void test_second_node_ranks(void) {
    char dir[4096];
    test_tmpdir(dir, sizeof dir);
    char *argv[] = { "runner", "env", dir, NULL };
    CHECK_INT(wait_exit(start_launcher(dir, 2, 1, 2, 29613, 1, argv)), 0);
    char *l2 = read_in(dir, "logs/rank2.log"), *l3 = read_in(dir, "logs/rank3.log");
    char *tee = read_in(dir, "tee.txt");
    CHECK_CONTAINS(l2, "RANK=2 LOCAL_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
                       "MASTER_PORT=29613 GROUP_RANK=1 NODE_RANK=1");
    CHECK_CONTAINS(l3, "RANK=3 LOCAL_RANK=1 WORLD_SIZE=4");
    CHECK_STR(tee, "");
    free(l2); free(l3); free(tee);
    /* master_port 0 with two nodes is bad input */
    pid_t p = start_launcher(dir, 2, 0, 2, 0, 1, argv);
    CHECK_INT(wait_exit(p), 2);
    char *err = read_in(dir, "err.txt");
    CHECK_CONTAINS(err, "master_port");
    free(err);
}

/* kill -9 of rank 1: the launcher stops rank 0 and its grandchild, exits 1 within 15 s
 * naming rank 1 and signal 9, and no process is left. */
static void test_kill9_ends_run(void) {
    char dir[4096];
    test_tmpdir(dir, sizeof dir);
    char *argv[] = { "runner", "hang", dir, NULL };
    pid_t l = start_launcher(dir, 2, 0, 1, 0, 2, argv);
    long p0 = read_pid(dir, "pid0"), p1 = read_pid(dir, "pid1");
    long g0 = read_pid(dir, "gpid0"), g1 = read_pid(dir, "gpid1");
    CHECK(p0 > 0 && p1 > 0 && g0 > 0 && g1 > 0);
    double t0 = now_s();
    kill((pid_t)p1, SIGKILL);
    CHECK_INT(wait_exit(l), 1);
    CHECK(now_s() - t0 < 15.0);
    char *err = read_in(dir, "err.txt");
    char want[128];
    snprintf(want, sizeof want, "rank 1 (pid %ld) was killed by signal 9", p1);
    CHECK_CONTAINS(err, want);
    CHECK_CONTAINS(err, "logs/rank1.log");
    usleep(100000);
    reap_orphans();
    CHECK(gone(p0));
    CHECK(gone(p1));
    CHECK(gone(g0));
    CHECK(gone(g1));
    free(err);
}

/* Rank 1 of 3 exits 3 after printing 15 lines: its status and lines 6..15 are in the
 * error, lines before 6 are not. */
static void test_failing_rank_log_tail(void) {
    char dir[4096];
    test_tmpdir(dir, sizeof dir);
    char *argv[] = { "runner", "fail", dir, "1", "3", NULL };
    CHECK_INT(wait_exit(start_launcher(dir, 3, 0, 1, 0, 2, argv)), 1);
    char *err = read_in(dir, "err.txt");
    CHECK_CONTAINS(err, "rank 1 (pid ");
    CHECK_CONTAINS(err, "exited with status 3");
    CHECK_CONTAINS(err, "progress line 6\n");
    CHECK_CONTAINS(err, "progress line 15");
    CHECK(!strstr(err, "progress line 5\n"));
    reap_orphans();
    for (int r = 0; r < 3; r++) {
        char name[16];
        snprintf(name, sizeof name, "pid%d", r);
        CHECK(gone(read_pid(dir, name)));
    }
    free(err);
}

/* A rank that exits 2 (bad input) makes the launcher return 2 as well. */
static void test_input_error_exit_code(void) {
    char dir[4096];
    test_tmpdir(dir, sizeof dir);
    char *argv[] = { "runner", "fail", dir, "1", "2", NULL };
    CHECK_INT(wait_exit(start_launcher(dir, 2, 0, 1, 0, 2, argv)), 2);
    char *err = read_in(dir, "err.txt");
    CHECK_CONTAINS(err, "exited with status 2");
    reap_orphans();
    free(err);
}

/* The other rank ignores SIGTERM: it is SIGKILLed after the 1 s grace period. */
static void test_sigkill_after_grace(void) {
    char dir[4096];
    test_tmpdir(dir, sizeof dir);
    char *argv[] = { "runner", "fail", dir, "0", "7", "stubborn", NULL };
    double t0 = now_s();
    CHECK_INT(wait_exit(start_launcher(dir, 2, 0, 1, 0, 1.0, argv)), 1);
    double dt = now_s() - t0;
    CHECK(dt >= 1.0 && dt < 8.0);
    char *err = read_in(dir, "err.txt");
    CHECK_CONTAINS(err, "rank 0 (pid ");
    CHECK_CONTAINS(err, "exited with status 7");
    reap_orphans();
    CHECK(gone(read_pid(dir, "pid1")));
    free(err);
}

/* SIGINT to the launcher reaches every rank; they exit 130; so does the launcher. */
static void test_sigint_forwarded(void) {
    char dir[4096];
    test_tmpdir(dir, sizeof dir);
    char *argv[] = { "runner", "sigint", dir, NULL };
    pid_t l = start_launcher(dir, 2, 0, 1, 0, 2, argv);
    CHECK(read_pid(dir, "pid0") > 0 && read_pid(dir, "pid1") > 0);
    usleep(200000);   /* handlers installed after the pid file */
    kill(l, SIGINT);
    CHECK_INT(wait_exit(l), 130);
    char *l0 = read_in(dir, "logs/rank0.log"), *l1 = read_in(dir, "logs/rank1.log");
    CHECK_CONTAINS(l0, "rank 0 stopping");
    CHECK_CONTAINS(l1, "rank 1 stopping");
    char *err = read_in(dir, "err.txt");
    CHECK_CONTAINS(err, "interrupted");
    free(l0); free(l1); free(err);
}

/* Ranks that ignore SIGINT: a second SIGINT kills them at once; exit 130. */
static void test_second_sigint_kills(void) {
    char dir[4096];
    test_tmpdir(dir, sizeof dir);
    char *argv[] = { "runner", "stubborn", dir, NULL };
    pid_t l = start_launcher(dir, 2, 0, 1, 0, 2, argv);
    long p0 = read_pid(dir, "pid0"), p1 = read_pid(dir, "pid1");
    usleep(200000);
    kill(l, SIGINT);
    usleep(300000);
    double t0 = now_s();
    kill(l, SIGINT);
    CHECK_INT(wait_exit(l), 130);
    CHECK(now_s() - t0 < 3.0);
    char *err = read_in(dir, "err.txt");
    CHECK_CONTAINS(err, "interrupted twice");
    reap_orphans();
    CHECK(gone(p0));
    CHECK(gone(p1));
    free(err);
}

/* max_restarts 1: rank 1 exits 3 on the first start; the group is stopped and started
 * again with RUNNER_RESTARTS=1 and RUNNER_RESUME_FROM=the checkpoint; the run succeeds,
 * restarts.jsonl has the one restart with its cause, the console says so. */
static void test_restart_after_failure(void) {
    char dir[512];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    snprintf(restart_resume, sizeof restart_resume, "%s/last.ckpt", dir);
    test_write_file(restart_resume, "x");
    max_restarts = 1;
    char *argv[] = {"fake", "flaky", dir, "1", "3", NULL};
    int rc = wait_exit(start_launcher(dir, 2, 0, 1, 0, 1, argv));
    max_restarts = 0;
    restart_resume[0] = '\0';
    CHECK_INT(rc, 0);
    char *j = read_in(dir, "restarts.jsonl"), *tee = read_in(dir, "tee.txt"), *l1 = read_in(dir, "logs/rank1.log");
    int lines = 0;
    for (char *p = j; *p; p++) lines += *p == '\n';
    CHECK_INT(lines, 1);
    CHECK_CONTAINS(j, "\"restart\":1,");
    CHECK_CONTAINS(j, "\"rank\":1,");
    CHECK_CONTAINS(j, "\"exit_status\":3,");
    CHECK_CONTAINS(j, "\"signal\":null,");
    CHECK_CONTAINS(j, "exited with status 3");
    CHECK_CONTAINS(j, "/last.ckpt\"");
    CHECK_CONTAINS(tee, "restart 1 of 1: every rank starts again from");
    CHECK_CONTAINS(l1, "rank 1 fails with 3");
    CHECK_CONTAINS(l1, "rank 1 restarted: RUNNER_RESTARTS=1 RUNNER_RESUME_FROM=");
    CHECK_CONTAINS(tee, "rank 0 restarted: RUNNER_RESTARTS=1");
    free(j);
    free(tee);
    free(l1);
    reap_orphans();
}

/* The budget runs out: a rank that always fails ends the run (exit 1) after one restart;
 * a rank that exits 2 (bad input) is never restarted. */
static void test_restart_budget_and_bad_input(void) {
    char dir[512];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    max_restarts = 1;
    char *argv[] = {"fake", "fail", dir, "1", "3", NULL};
    CHECK_INT(wait_exit(start_launcher(dir, 2, 0, 1, 0, 1, argv)), 1);
    char *j = read_in(dir, "restarts.jsonl"), *err = read_in(dir, "err.txt");
    int lines = 0;
    for (char *p = j; *p; p++) lines += *p == '\n';
    CHECK_INT(lines, 1);
    CHECK_CONTAINS(j, "\"resume_from\":null}");   /* no checkpoint: from the beginning */
    CHECK_CONTAINS(err, "rank 1");
    free(j);
    free(err);
    reap_orphans();
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    max_restarts = 2;
    char *argv2[] = {"fake", "fail", dir, "1", "2", NULL};
    CHECK_INT(wait_exit(start_launcher(dir, 2, 0, 1, 0, 1, argv2)), 2);
    max_restarts = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/restarts.jsonl", dir);
    CHECK(access(path, F_OK) != 0);
    reap_orphans();
}

/* SIGUSR1 (Slurm's --signal=USR1@90) to the launcher reaches every rank; a SIGTERM after it
 * kills nothing; the ranks exit 75 and so does the launcher, with no restart. Then the
 * signal sent to the ranks only (the launcher never sees it): still 75, not a failure. */
static void test_preempt_signals(void) {
    char dir[512];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    max_restarts = 1;
    char *argv[] = {"fake", "preempt", dir, NULL};
    pid_t l = start_launcher(dir, 2, 0, 1, 0, 2, argv);
    CHECK(read_pid(dir, "pid0") > 0 && read_pid(dir, "pid1") > 0);
    usleep(200000);
    kill(l, SIGUSR1);
    usleep(50000);
    kill(l, SIGTERM);
    CHECK_INT(wait_exit(l), 75);
    char *tee = read_in(dir, "tee.txt"), *l1 = read_in(dir, "logs/rank1.log"), *err = read_in(dir, "err.txt");
    CHECK_CONTAINS(tee, "rank 0 got 2 signals");
    CHECK_CONTAINS(l1, "rank 1 got 2 signals");
    CHECK_CONTAINS(err, "preempted");
    free(tee);
    free(l1);
    free(err);
    reap_orphans();
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    l = start_launcher(dir, 2, 0, 1, 0, 2, argv);
    long p0 = read_pid(dir, "pid0"), p1 = read_pid(dir, "pid1");
    CHECK(p0 > 0 && p1 > 0);
    usleep(200000);
    kill((pid_t)p0, SIGTERM);
    kill((pid_t)p1, SIGTERM);
    CHECK_INT(wait_exit(l), 75);
    max_restarts = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/restarts.jsonl", dir);
    CHECK(access(path, F_OK) != 0);
    reap_orphans();
}

static void clear_env(void) {
    static const char *const vars[] = { "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
        "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "NODE_RANK", "SLURM_PROCID", "SLURM_LOCALID",
        "SLURM_NTASKS", "SLURM_NODEID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
        "SLURM_LAUNCH_NODE_IPADDR" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

static void test_worker_env_torchrun(void) {
    launch_env_t w;
    err_t e = {0};
    clear_env();
    CHECK_INT(launch_worker_env(&w, &e), 0);
    setenv("RANK", "5", 1);
    setenv("WORLD_SIZE", "8", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "4", 1);
    setenv("MASTER_ADDR", "node-a", 1);
    setenv("MASTER_PORT", "29400", 1);
    setenv("GROUP_RANK", "1", 1);
    CHECK_INT(launch_worker_env(&w, &e), 1);
    CHECK_INT(w.rank, 5);
    CHECK_INT(w.world_size, 8);
    CHECK_INT(w.local_rank, 1);
    CHECK_INT(w.local_world_size, 4);
    CHECK_INT(w.node_rank, 1);
    CHECK_STR(w.master_addr, "node-a");
    CHECK_INT(w.master_port, 29400);
    CHECK(!w.slurm);
    /* defaults when only RANK and WORLD_SIZE are set */
    clear_env();
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    CHECK_INT(launch_worker_env(&w, &e), 1);
    CHECK_INT(w.local_rank, 1);
    CHECK_INT(w.local_world_size, 2);
    CHECK_STR(w.master_addr, "127.0.0.1");
    CHECK_INT(w.master_port, 29500);
    /* malformed values are bad input naming the variable */
    setenv("RANK", "1x", 1);
    err_t e2 = {0};
    CHECK_INT(launch_worker_env(&w, &e2), -1);
    CHECK_INT(e2.code, ERR_INPUT);
    CHECK_CONTAINS(e2.msg, "RANK='1x'");
    setenv("RANK", "2", 1);
    err_t e3 = {0};
    CHECK_INT(launch_worker_env(&w, &e3), -1);
    CHECK_CONTAINS(e3.msg, "RANK=2 does not fit WORLD_SIZE=2");
    unsetenv("WORLD_SIZE");
    err_t e5 = {0};
    CHECK_INT(launch_worker_env(&w, &e5), -1);
    CHECK_CONTAINS(e5.msg, "RANK is set but WORLD_SIZE is not");
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "0", 1);
    setenv("MASTER_PORT", "70000", 1);
    err_t e4 = {0};
    CHECK_INT(launch_worker_env(&w, &e4), -1);
    CHECK_CONTAINS(e4.msg, "MASTER_PORT='70000'");
    clear_env();
}

static void test_worker_env_slurm(void) {
    launch_env_t w;
    err_t e = {0};
    clear_env();
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_LOCALID", "1", 1);
    setenv("SLURM_NODEID", "2", 1);
    setenv("SLURM_TASKS_PER_NODE", "2(x4)", 1);
    setenv("SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3", 1);
    CHECK_INT(launch_worker_env(&w, &e), 1);
    CHECK(w.slurm);
    CHECK_INT(w.rank, 5);
    CHECK_INT(w.world_size, 8);
    CHECK_INT(w.local_rank, 1);
    CHECK_INT(w.local_world_size, 2);
    CHECK_INT(w.node_rank, 2);
    CHECK_STR(w.master_addr, "10.1.2.3");
    CHECK_INT(w.master_port, 29500);
    /* MASTER_ADDR / MASTER_PORT win; an uneven task list picks this node's entry */
    setenv("MASTER_ADDR", "10.9.9.9", 1);
    setenv("MASTER_PORT", "1234", 1);
    setenv("SLURM_TASKS_PER_NODE", "3(x2),2", 1);
    setenv("SLURM_LOCALID", "0", 1);
    CHECK_INT(launch_worker_env(&w, &e), 1);
    CHECK_STR(w.master_addr, "10.9.9.9");
    CHECK_INT(w.master_port, 1234);
    CHECK_INT(w.local_world_size, 2);
    setenv("SLURM_TASKS_PER_NODE", "2(y4)", 1);
    err_t e2 = {0};
    CHECK_INT(launch_worker_env(&w, &e2), -1);
    CHECK_INT(e2.code, ERR_INPUT);
    CHECK_CONTAINS(e2.msg, "SLURM_TASKS_PER_NODE='2(y4)'");
    /* torchrun variables take precedence over Slurm's */
    setenv("SLURM_TASKS_PER_NODE", "2(x4)", 1);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    CHECK_INT(launch_worker_env(&w, &e), 1);
    CHECK(!w.slurm);
    CHECK_INT(w.world_size, 1);
    clear_env();
}

int main(void) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    clear_env();
    TEST_RUN(test_worker_env_torchrun);
    TEST_RUN(test_worker_env_slurm);
    TEST_RUN(test_env_contract_logs_tee);
    TEST_RUN(test_tty_env);
    TEST_RUN(test_tee_split);
    TEST_RUN(test_second_node_ranks);
    TEST_RUN(test_kill9_ends_run);
    TEST_RUN(test_failing_rank_log_tail);
    TEST_RUN(test_input_error_exit_code);
    TEST_RUN(test_sigkill_after_grace);
    TEST_RUN(test_sigint_forwarded);
    TEST_RUN(test_second_sigint_kills);
    TEST_RUN(test_restart_after_failure);
    TEST_RUN(test_restart_budget_and_bad_input);
    TEST_RUN(test_preempt_signals);
    return test_main_end();
}
