/* test_dist_failures.c: a DDP run fails cleanly, through the CLI, on the CPU.
 *
 *  4. kill -9 of one rank (rank 1, then rank 0, which hosts the store) ends the run
 *     within 15 s with exit status 1, ONE message (the launcher's) naming the rank, its
 *     pid and the signal, summary.json "failed" (written by rank 0, or by the launcher
 *     when rank 0 is the one killed), and no process of the run left: the worker pids
 *     are gone and no process carries the run's RUNNER_RUN_DIR in its environment.
 *  6. A worker whose master is unreachable (RANK=1 WORLD_SIZE=2, MASTER_PORT a closed
 *     port, parallel.timeout_s 3) exits non-zero within 10 s, after retrying for the
 *     timeout, with a message naming the address; a rank 0 whose peer never comes fails
 *     the same way naming the missing rank.
 */
#include "tests/dist/dist_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp[512];
static char long_exp[700], short_exp[700];
static int count_substr(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Waits for pid up to limit_s; returns its exit code (128 + signal), or -1 on timeout
 * (then the launcher is killed). *elapsed gets the seconds waited. */
static int wait_for(pid_t pid, double limit_s, double *elapsed) {
    double t0 = dist_now();
    for (;;) {
        int st = 0;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            *elapsed = dist_now() - t0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (dist_now() - t0 > limit_s) {
            *elapsed = dist_now() - t0;
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(20000);
    }
}

static void kill_rank(int victim) {
    char root[800], log[800];
    snprintf(root, sizeof root, "%s/k%d", tmp, victim);
    snprintf(log, sizeof log, "%s/k%d.log", tmp, victim);
    pid_t launcher = cli_spawn(long_exp, root, log, NULL, 0);
    /* wait until training runs: steps.csv has 3 rows (up to 300 s on a loaded machine) */
    char run_dir[4096];
    const char *d = cli_wait_steps(root, "long", 3);
    snprintf(run_dir, sizeof run_dir, "%s", d ? d : "");
    CHECK(run_dir[0] != '\0');
    pid_t kids[8];
    int nk = dist_children_of(launcher, kids, 8);
    CHECK_INT(nk, 2);
    pid_t target = -1, other = -1;
    char v[64];
    for (int i = 0; i < nk; i++) {
        if (atoi(dist_proc_env(kids[i], "RANK", v, sizeof v)) == victim) target = kids[i];
        else other = kids[i];
    }
    CHECK(target > 0 && other > 0);
    if (!run_dir[0] || target <= 0 || other <= 0) {
        kill(launcher, SIGKILL);
        waitpid(launcher, NULL, 0);
        return;
    }
    kill(target, SIGKILL);
    double elapsed = 0;
    int rc = wait_for(launcher, 60, &elapsed);
    fprintf(stderr, "kill -9 rank %d: launcher exited %d after %.2f s\n", victim, rc, elapsed);
    CHECK_INT(rc, 1);
    CHECK(elapsed < 15);
    char *out = test_read_file(log, NULL);
    char want[128];
    snprintf(want, sizeof want, "rank %d (pid %d) was killed by signal 9", victim, (int)target);
    CHECK_CONTAINS(out, want);
    CHECK_INT(count_substr(out, "was killed by signal"), 1);
    /* "runner: run directory ..." and the launcher's one message; the surviving rank's
     * own error ("rank N exited without joining") stays in its log */
    CHECK_INT(count_substr(out, "runner: "), 2);
    if (test_failures_) fprintf(stderr, "launcher output:\n%s\n", out ? out : "");
    free(out);
    /* nothing left: both workers reaped, no process of this run anywhere */
    CHECK(kill(target, 0) == -1 && errno == ESRCH);
    CHECK(kill(other, 0) == -1 && errno == ESRCH);
    CHECK_INT(dist_processes_of_run(run_dir, true), 0);
    /* rank 0 writes summary.json on its way out; when rank 0 is the one killed, the
     * launcher writes a minimal one with its message */
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.json", run_dir);
    char *s = test_read_file(path, NULL);
    CHECK_CONTAINS(s, "\"status\": \"failed\"");
    CHECK_CONTAINS(s, "\"exit_code\": 1");
    if (victim == 0) CHECK_CONTAINS(s, "rank 0 (pid");
    free(s);
}

static void kill9_rank1(void) { kill_rank(1); }
static void kill9_rank0(void) { kill_rank(0); }

/* A TCP port on 127.0.0.1 that nothing listens on (bound, then closed). */
static int closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &l)) return -1;
    close(fd);
    return ntohs(a.sin_port);
}

static void unreachable_master(void) {
    int port = closed_port();
    CHECK(port > 0);
    char cmd[4096], out[1 << 14];
    snprintf(cmd, sizeof cmd, "RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d %s %s "
             "--set parallel.timeout_s=3 --set output.root=%s/u", port, test_runner_exe(), short_exp, tmp);
    double t0 = dist_now();
    int rc = test_run_cmd(cmd, out, sizeof out);
    double dt = dist_now() - t0;
    fprintf(stderr, "unreachable master: exit %d after %.2f s: %s", rc, dt, out);
    CHECK(rc != 0 && rc < 128);
    CHECK(dt >= 2.5);   /* it retried for the timeout ... */
    CHECK(dt < 10);     /* ... and not longer */
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d", port);
    CHECK_CONTAINS(out, want);
    CHECK_INT(count_substr(out, "runner:"), 1);
}

static void peer_never_comes(void) {
    int port = closed_port();
    char cmd[4096], out[1 << 14];
    snprintf(cmd, sizeof cmd, "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d %s %s "
             "--set parallel.timeout_s=3 --set output.root=%s/p", port, test_runner_exe(), short_exp, tmp);
    double t0 = dist_now();
    int rc = test_run_cmd(cmd, out, sizeof out);
    double dt = dist_now() - t0;
    fprintf(stderr, "rank 0 alone: exit %d after %.2f s: %s", rc, dt, out);
    CHECK(rc != 0 && rc < 128);
    CHECK(dt < 10);
    CHECK_CONTAINS(out, "rank(s) 1 never arrived");
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    const char *aug = "{random_crop: false, horizontal_flip: false, rotation: 0}";
    dist_write_exp(long_exp, sizeof long_exp, tmp, "long", true, aug, 100000);
    dist_write_exp(short_exp, sizeof short_exp, tmp, "short", true, aug, 1);
    TEST_RUN(kill9_rank1);
    TEST_RUN(kill9_rank0);
    TEST_RUN(unreachable_master);
    TEST_RUN(peer_never_comes);
    return test_main_end();
}
