/* fake_worker.c: a stand-in for the runner that test_launch starts through the
 * launcher. argv: fake_worker MODE DIR [ARG]. Every mode first writes its pid to
 * DIR/pid<RANK> (and DIR/gpid<RANK> for a grandchild where it starts one).
 *   env        print the launcher's environment contract to stdout, a line to stderr, exit 0
 *   fail R N [stubborn]  rank R prints 15 numbered lines and exits N; the others behave
 *              as hang (as stubborn when the 5th argument is "stubborn")
 *   hang       start a grandchild that sleeps, then sleep until killed
 *   stubborn   sleep, ignoring SIGTERM and SIGINT (only SIGKILL ends it)
 *   sigint     on SIGINT/SIGTERM print "rank N stopping" and exit 130
 *   preempt    like the runner: SIGINT exits 130, SIGTERM/SIGUSR1 exit 75 (once every
 *              signal seen so far is counted: "rank N got K signals")
 *   flaky R N  first start (RUNNER_RESTARTS unset): rank R exits N after a moment, the
 *              others hang; a restart: print RUNNER_RESTARTS and RUNNER_RESUME_FROM, exit 0
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_flag;   /* test program: a signal handler needs it */

static void on_stop(int sig) { (void)sig; stop_flag = 1; }

static volatile sig_atomic_t got_int, got_term, n_signals;
static void on_preempt(int sig) {
    n_signals++;
    if (sig == SIGINT) got_int = 1;
    else got_term = 1;
}

static void write_pid(const char *dir, const char *what, const char *rank, long pid) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%s", dir, what, rank);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%ld\n", pid);
    fclose(f);
    rename(tmp, path);
}

static const char *env(const char *k) { const char *v = getenv(k); return v ? v : "(unset)"; }

static void hang(const char *dir, const char *rank) {
    pid_t g = fork();
    if (g == 0) { for (;;) pause(); }
    write_pid(dir, "gpid", rank, (long)g);
    for (;;) sleep(1);
}

int main(int argc, char **argv) {
    if (argc < 3) return 64;
    const char *mode = argv[1], *dir = argv[2], *rank = env("RANK");
    write_pid(dir, "pid", rank, (long)getpid());
    if (!strcmp(mode, "env")) {
        printf("RANK=%s LOCAL_RANK=%s WORLD_SIZE=%s LOCAL_WORLD_SIZE=%s MASTER_ADDR=%s "
               "MASTER_PORT=%s GROUP_RANK=%s NODE_RANK=%s EXTRA=%s TTY=%s\n", env("RANK"),
               env("LOCAL_RANK"), env("WORLD_SIZE"), env("LOCAL_WORLD_SIZE"), env("MASTER_ADDR"),
               env("MASTER_PORT"), env("GROUP_RANK"), env("NODE_RANK"), env("FAKE_EXTRA"),
               env("RUNNER_TTY"));
        fflush(stdout);
        fprintf(stderr, "stderr line from rank %s\n", rank);
        return 0;
    }
    if (!strcmp(mode, "fail") && argc >= 5) {
        if (!strcmp(rank, argv[3])) {
            usleep(300000);
            for (int i = 1; i <= 15; i++) printf("progress line %d\n", i);
            fflush(stdout);
            return atoi(argv[4]);
        }
        if (argc >= 6 && !strcmp(argv[5], "stubborn")) {
            signal(SIGTERM, SIG_IGN);
            for (;;) sleep(1);
        }
        hang(dir, rank);
    }
    if (!strcmp(mode, "flaky") && argc >= 5) {
        if (getenv("RUNNER_RESTARTS")) {
            printf("rank %s restarted: RUNNER_RESTARTS=%s RUNNER_RESUME_FROM=%s\n", rank, env("RUNNER_RESTARTS"),
                   env("RUNNER_RESUME_FROM"));
            fflush(stdout);
            return 0;
        }
        if (!strcmp(rank, argv[3])) {
            usleep(300000);
            printf("rank %s fails with %s\n", rank, argv[4]);
            fflush(stdout);
            return atoi(argv[4]);
        }
        hang(dir, rank);
    }
    if (!strcmp(mode, "preempt")) {
        signal(SIGINT, on_preempt);
        signal(SIGTERM, on_preempt);
        signal(SIGUSR1, on_preempt);
        printf("rank %s ready\n", rank);
        fflush(stdout);
        while (!got_int && !got_term) usleep(20000);
        usleep(300000);   /* "finish the step": a second signal may arrive meanwhile */
        printf("rank %s got %d signals\n", rank, (int)n_signals);
        fflush(stdout);
        return got_int ? 130 : 75;
    }
    if (!strcmp(mode, "hang")) hang(dir, rank);
    if (!strcmp(mode, "stubborn")) {
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
        for (;;) sleep(1);
    }
    if (!strcmp(mode, "sigint")) {
        signal(SIGINT, on_stop);
        signal(SIGTERM, on_stop);
        printf("rank %s ready\n", rank);
        fflush(stdout);
        while (!stop_flag) usleep(20000);
        printf("rank %s stopping\n", rank);
        fflush(stdout);
        return 130;
    }
    return 64;
}
