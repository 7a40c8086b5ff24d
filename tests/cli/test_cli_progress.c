/* test_cli_progress.c: the console progress on a terminal (a pseudo-terminal here), in
 * every mode: a line redrawn with \r every step (step/steps, images/s, ETA) and during
 * evaluation (batch/batches, images/s, ETA). In DDP rank 0's output reaches the terminal
 * through the launcher: before the fix it printed only every print_every steps there, and
 * evaluation printed nothing in any mode. logs/rank0.log keeps the plain periodic lines
 * (no \r, no framing bytes), as does a run whose output is not a terminal; in single and dp
 * mode too (before, their logs/rank0.log was empty: only the DDP launcher wrote one). */
#include "tests/cli/cli_util.h"

#include <errno.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp[512];

static const char *exp_text =
    "name: prog\n"
    "seed: 1\n"
    "device: cpu\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 128, val_size: 64, image: [3, 8, 8], classes: 4}\n"
    "  workers: 0\n"
    "model: {arch: resnet20}\n"
    "train: {epochs: 2, batch_size: 16}\n"
    "parallel: {world_size: 2}\n"
    "logging: {print_every: 4}\n"
    "checkpoint: {resume: never}\n";

/* Runs `runner EXP --set output.root=ROOT --set parallel.mode=MODE` on a pseudo-terminal
 * and returns everything it wrote there (malloc'd); *rc gets the exit status. */
static char *run_on_pty(const char *exp, const char *root, const char *mode, int *rc) {
    int master;
    pid_t pid = forkpty(&master, NULL, NULL, NULL);
    if (pid == 0) {
        char set_root[700], set_mode[64], set_ws[64];
        snprintf(set_root, sizeof set_root, "output.root=%s", root);
        snprintf(set_mode, sizeof set_mode, "parallel.mode=%s", mode);
        snprintf(set_ws, sizeof set_ws, "parallel.world_size=%d", strcmp(mode, "single") ? 2 : 1);
        execl(test_runner_exe(), "runner", exp, "--set", set_root, "--set", set_mode, "--set", set_ws, (char *)NULL);
        _exit(127);
    }
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        ssize_t r = read(master, buf + n, cap - 1 - n);
        if (r > 0) { n += (size_t)r; if (n + 1 >= cap) break; continue; }
        if (r < 0 && errno == EINTR) continue;
        break;   /* EIO: the child side closed */
    }
    buf[n] = '\0';
    close(master);
    int st = 0;
    waitpid(pid, &st, 0);
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return buf;
}

/* The terminal saw a redrawn step line for every step and the evaluation's last batch. */
static void check_terminal(const char *term, int eval_batches) {
    /* 128 samples / 16 per step = 8 steps per epoch, 16 in all */
    for (int step = 1; step <= 16; step++) {
        char want[64];
        snprintf(want, sizeof want, "\repoch %d/2  step %d/16  loss ", (step - 1) / 8 + 1, step);
        CHECK_CONTAINS(term, want);
    }
    /* evaluation: 64 samples in batches of 16 (single), 8 (dp: 16 over 2 replicas) or 8
     * per rank of a 32-sample shard (ddp) */
    char want[64];
    snprintf(want, sizeof want, "\repoch 2/2  evaluating %d/%d  ", eval_batches, eval_batches);
    CHECK_CONTAINS(term, want);
    CHECK_CONTAINS(term, "\repoch 1/2  evaluating 1/");
    CHECK_CONTAINS(term, "img/s  ETA ");
    CHECK_CONTAINS(term, "epoch 2 done  step 16");
    CHECK(!strchr(term, '\x1e') && !strchr(term, '\x1f'));   /* no framing reaches the terminal */
}

/* The run's logs/rank0.log keeps the plain periodic lines: steps 4, 8, 12, 16 only, no \r,
 * no framing bytes, and the epoch lines. */
static void check_log(const char *root) {
    char path[4400];
    const char *d = only_run_dir(root, "prog");
    CHECK(d != NULL);
    if (!d) return;
    snprintf(path, sizeof path, "%s/logs/rank0.log", d);
    char *log = test_read_file(path, NULL);
    CHECK(log != NULL);
    if (!log) return;
    CHECK(!strchr(log, '\r') && !strchr(log, '\x1e') && !strchr(log, '\x1f'));
    CHECK_CONTAINS(log, "\nepoch 1/2  step 4/16  loss ");
    CHECK_CONTAINS(log, "\nepoch 2/2  step 16/16  loss ");
    CHECK(!strstr(log, "step 3/16"));
    CHECK(!strstr(log, "evaluating"));
    CHECK_CONTAINS(log, "epoch 1 done  step 8");
    CHECK_CONTAINS(log, "epoch 2 done  step 16");
    free(log);
}

static void ddp_terminal_gets_live_line(void) {
    char exp[700], root[700];
    snprintf(exp, sizeof exp, "%s/prog.yaml", tmp);
    test_write_file(exp, exp_text);
    snprintf(root, sizeof root, "%s/ddp", tmp);
    int rc;
    char *term = run_on_pty(exp, root, "ddp", &rc);
    CHECK_INT(rc, 0);
    check_terminal(term, 4);
    free(term);
    check_log(root);
}

static void single_and_dp_terminal_show_evaluation(void) {
    char exp[700], root[700];
    snprintf(exp, sizeof exp, "%s/prog.yaml", tmp);
    const char *modes[] = {"single", "dp"};
    for (int i = 0; i < 2; i++) {
        snprintf(root, sizeof root, "%s/%s", tmp, modes[i]);
        int rc;
        char *term = run_on_pty(exp, root, modes[i], &rc);
        CHECK_INT(rc, 0);
        check_terminal(term, i == 0 ? 4 : 8);
        free(term);
        check_log(root);
    }
}

/* Not a terminal: plain lines every print_every steps, no redraws, no evaluation lines. */
static void pipe_gets_plain_lines(void) {
    char args[2048], out[1 << 16];
    snprintf(args, sizeof args, "%s/prog.yaml --set output.root=%s/plain --set parallel.mode=ddp", tmp, tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK(!strchr(out, '\r') && !strchr(out, '\x1e'));
    CHECK_CONTAINS(out, "epoch 1/2  step 4/16  loss ");
    CHECK(!strstr(out, "step 3/16"));
    CHECK(!strstr(out, "evaluating"));
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(ddp_terminal_gets_live_line);
    TEST_RUN(single_and_dp_terminal_show_evaluation);
    TEST_RUN(pipe_gets_plain_lines);
    test_remove_dir_if_passed(tmp);
    return test_main_end();
}
