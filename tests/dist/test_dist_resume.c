/* test_dist_resume.c: SIGINT to the launcher of a 2-rank DDP run, then `runner resume
 * DIR` at world size 2, ends BIT-identical to an uninterrupted 2-rank run: params, BN
 * buffers and momentum of last.ckpt, and the final metrics row up to its timing columns.
 * Shuffled data with random crop and flip, no SyncBN (so the per-step buffer broadcast is
 * part of what must continue exactly). Also: the launcher exits 130, summary.json says
 * "interrupted", both ranks stopped at the same step (rank 1's log says so), and the
 * resumed rank 1 says where it continued.
 * The same under another launcher's contract (the ranks started by hand with RANK,
 * WORLD_SIZE, MASTER_ADDR/PORT, as torchrun or srun do) and checkpoint.resume: auto:
 * only rank 0 looks for the unfinished run, and every rank must continue it from the
 * same step (before the fix rank 1 started again at step 0 and the ranks deadlocked).
 * And an interrupt that lands on the last step of an epoch (one step per epoch here, so
 * every interrupt does): the epoch is finished first (its metrics row, its sums reset),
 * so after resume every metrics row equals the uninterrupted run's; with 2 DDP ranks and
 * with one process. Before the fix that epoch's row was never written and its sums were
 * counted into the next epoch.
 * And the first case again with a GPU's step window (RUNNER_STEP_WINDOW=4): the steps'
 * numbers read back four at a time, the stop on a window boundary, the same bits.
 */
#include "tests/dist/dist_util.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp[512];

static const char *aug = "{random_crop: {size: 8, padding: 1}, horizontal_flip: true, rotation: 0}";

/* Starts `runner EXP` on 400 samples with output to log; rank >= 0: as that rank of a
 * world of 2 started by an outside launcher (MASTER_PORT port). resume: auto or never. */
static pid_t spawn_runner_as(const char *exp, const char *root, const char *log, int rank, int port,
                             const char *resume) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        if (rank >= 0) {
            char v[32];
            snprintf(v, sizeof v, "%d", rank);
            setenv("RANK", v, 1);
            setenv("WORLD_SIZE", "2", 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            snprintf(v, sizeof v, "%d", port);
            setenv("MASTER_PORT", v, 1);
        }
        char set[800], res[64];
        snprintf(set, sizeof set, "output.root=%s", root);
        snprintf(res, sizeof res, "checkpoint.resume=%s", resume);
        execl(test_runner_exe(), "runner", exp, "--set", set, "--set", "data.synthetic.train_size=400",
              "--set", res, "--set", "parallel.timeout_s=60", (char *)NULL);
        _exit(127);
    }
    return pid;
}

static pid_t spawn_runner(const char *exp, const char *root, const char *log) {
    return spawn_runner_as(exp, root, log, -1, 0, "never");
}

/* Interrupts a fresh 2-rank run under root after 2 steps; returns its run dir (static) or
 * NULL. */
static const char *interrupted_run(const char *exp, const char *root, const char *log, const char *resume) {
    static char dir[4096];
    dir[0] = '\0';
    pid_t launcher = spawn_runner_as(exp, root, log, -1, 0, resume);
    const char *d = cli_wait_steps(root, "res", 2);   /* 2 steps done, or NULL after 300 s */
    snprintf(dir, sizeof dir, "%s", d ? d : "");
    kill(launcher, SIGINT);
    int rc = cli_wait(launcher);
    CHECK_INT(rc, 130);
    return dir[0] && rc == 130 ? dir : NULL;
}

static char exp_path[700], ref[4096];

static void sigint_then_resume_is_bit_exact(void) {
    char *exp = exp_path, root[800];
    dist_write_exp(exp, sizeof exp_path, tmp, "res", true, aug, 3);
    /* 400 samples: 50 steps per epoch, 150 in all, so the interrupt lands mid-run */
    snprintf(root, sizeof root, "%s/ref", tmp);
    const char *r = dist_run(exp, root, "--set data.synthetic.train_size=400", 0);
    CHECK(r != NULL);
    if (!r) return;
    snprintf(ref, sizeof ref, "%s", r);
    CHECK_INT(cli_json_number(ref, "summary.json", "steps"), 150);

    snprintf(root, sizeof root, "%s/int", tmp);
    char log[800];
    snprintf(log, sizeof log, "%s/int.log", tmp);
    pid_t launcher = spawn_runner(exp, root, log);
    char dir[4096];
    const char *d = cli_wait_steps(root, "res", 2);   /* 2 steps done, or NULL after 300 s */
    snprintf(dir, sizeof dir, "%s", d ? d : "");
    CHECK(dir[0] != '\0');
    kill(launcher, SIGINT);
    int rc = cli_wait(launcher);
    CHECK_INT(rc, 130);
    if (!dir[0] || rc != 130) return;
    double stopped = cli_json_number(dir, "summary.json", "steps");
    fprintf(stderr, "interrupted at step %g of 150\n", stopped);
    CHECK(stopped >= 2 && stopped < 150);
    char path[4300];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    char *s = test_read_file(path, NULL);
    CHECK_CONTAINS(s, "\"status\": \"interrupted\"");
    free(s);
    char want[128];
    snprintf(want, sizeof want, "interrupted at step %d with every rank", (int)stopped);
    snprintf(path, sizeof path, "%s/logs/rank1.log", dir);
    s = test_read_file(path, NULL);
    CHECK_CONTAINS(s, want);
    free(s);

    char args[4400], out[1 << 16];
    snprintf(args, sizeof args, "resume %s", dir);
    rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 0);
    if (rc) fprintf(stderr, "%s\n", out);
    CHECK_CONTAINS(out, "continuing at step");
    CHECK_INT(cli_json_number(dir, "summary.json", "steps"), 150);
    snprintf(want, sizeof want, "resuming at step %d of 150", (int)stopped);
    s = test_read_file(path, NULL);
    CHECK_CONTAINS(s, want);
    free(s);

    const char *sections[] = {"params", "buffers", "optim.momentum_buffer"};
    dist_check_same_sections(dir, ref, sections, 3);   /* bit for bit */
    /* the last epoch row, up to the timing columns: loss, accuracy, validation */
    char a[4300], b[4300];
    snprintf(a, sizeof a, "%s/metrics.csv", ref);
    snprintf(b, sizeof b, "%s/metrics.csv", dir);
    CHECK_INT(dist_count_lines(a), 4);
    CHECK_INT(dist_count_lines(b), 4);
    dist_check_same_cells(ref, dir, "metrics.csv", 3, 3, 0, 7);
}

/* The same with the step window a GPU uses (RUNNER_STEP_WINDOW=4: steps are read back,
 * agreed across ranks and checked for a stop four at a time): the stop lands on a window
 * boundary, and the interrupted + resumed run still equals the reference run, which read
 * every step back at once, bit for bit, with the same steps.csv numbers. */
static void sigint_with_step_windows_is_bit_exact(void) {
    if (!ref[0]) return;
    setenv("RUNNER_STEP_WINDOW", "4", 1);
    char root[800], log[800];
    snprintf(root, sizeof root, "%s/win", tmp);
    snprintf(log, sizeof log, "%s/win.log", tmp);
    const char *d = interrupted_run(exp_path, root, log, "never");
    CHECK(d != NULL);
    if (!d) { unsetenv("RUNNER_STEP_WINDOW"); return; }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", d);
    double stopped = cli_json_number(dir, "summary.json", "steps");
    fprintf(stderr, "window 4: interrupted at step %g of 150\n", stopped);
    CHECK(stopped >= 4 && stopped < 150);
    CHECK((int)stopped % 4 == 0 || (int)stopped % 50 == 0);   /* a window or epoch end */
    char args[4400], out[1 << 16];
    snprintf(args, sizeof args, "resume %s", dir);
    int rc = run_runner(args, out, sizeof out);
    unsetenv("RUNNER_STEP_WINDOW");
    CHECK_INT(rc, 0);
    if (rc) { fprintf(stderr, "%s\n", out); return; }
    const char *sections[] = {"params", "buffers", "optim.momentum_buffer"};
    dist_check_same_sections(dir, ref, sections, 3);
    char b[4300];
    snprintf(b, sizeof b, "%s/steps.csv", dir);
    CHECK_INT(dist_count_lines(b), 151);
    dist_check_same_cells(ref, dir, "steps.csv", 1, 150, 0, 4);   /* step, epoch, lr, loss, top1 */
    dist_check_same_cells(ref, dir, "metrics.csv", 1, 3, 0, 7);
}

static void outside_launcher_auto_resume_is_bit_exact(void) {
    if (!ref[0]) return;
    char root[800], log[800];
    snprintf(root, sizeof root, "%s/ext", tmp);
    snprintf(log, sizeof log, "%s/ext.log", tmp);
    const char *d = interrupted_run(exp_path, root, log, "auto");
    CHECK(d != NULL);
    if (!d) return;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", d);
    double stopped = cli_json_number(dir, "summary.json", "steps");
    CHECK(stopped >= 2 && stopped < 150);
    /* the ranks as torchrun would start them: same command, RANK/WORLD_SIZE/MASTER_* */
    int port = dist_free_port();
    CHECK(port > 0);
    char l0[800], l1[800];
    snprintf(l0, sizeof l0, "%s/ext-rank0.log", tmp);
    snprintf(l1, sizeof l1, "%s/ext-rank1.log", tmp);
    pid_t r1 = spawn_runner_as(exp_path, root, l1, 1, port, "auto");
    pid_t r0 = spawn_runner_as(exp_path, root, l0, 0, port, "auto");
    int rc0 = cli_wait(r0), rc1 = cli_wait(r1);
    CHECK_INT(rc0, 0);
    CHECK_INT(rc1, 0);
    char *o0 = test_read_file(l0, NULL), *o1 = test_read_file(l1, NULL);
    char want[128];
    snprintf(want, sizeof want, "continuing at step %d", (int)stopped);
    CHECK_CONTAINS(o0, want);
    snprintf(want, sizeof want, "resuming at step %d of 150", (int)stopped);
    CHECK_CONTAINS(o1, want);
    if (test_failures_) fprintf(stderr, "rank 0:\n%s\nrank 1:\n%s\n", o0 ? o0 : "", o1 ? o1 : "");
    free(o0);
    free(o1);
    CHECK(only_run_dir(root, "res") != NULL);   /* continued the same directory, made no new one */
    CHECK_INT(cli_json_number(dir, "summary.json", "steps"), 150);
    const char *sections[] = {"params", "buffers", "optim.momentum_buffer"};
    dist_check_same_sections(dir, ref, sections, 3);
}

/* Runs argv (argv[0] = the runner) with output to log, in the background. */
static pid_t spawn_argv(const char *log, char *const argv[]) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(test_runner_exe(), argv);
        _exit(127);
    }
    return pid;
}

static void epoch_end_interrupt(const char *mode) {
    char exp[700], root[800], log[800], sets[512];
    dist_write_exp(exp, sizeof exp, tmp, "ep1", true, aug, 30);
    bool single = !strcmp(mode, "single");
    /* 8 samples, batch 8: one step per epoch; epoch checkpoints every 4th epoch only */
    snprintf(sets, sizeof sets, "--set data.synthetic.train_size=8 --set checkpoint.every_epochs=4 %s",
             single ? "--set parallel.mode=single --set parallel.world_size=1" : "");
    snprintf(root, sizeof root, "%s/ep_ref_%s", tmp, mode);
    const char *r = dist_run(exp, root, sets, 1);
    CHECK(r != NULL);
    if (!r) return;
    char refd[4096];
    snprintf(refd, sizeof refd, "%s", r);

    snprintf(root, sizeof root, "%s/ep_int_%s", tmp, mode);
    snprintf(log, sizeof log, "%s/ep_int_%s.log", tmp, mode);
    char set_root[900];
    snprintf(set_root, sizeof set_root, "output.root=%s", root);
    char *argv[] = {"runner", exp, "--set", set_root, "--set", "data.synthetic.train_size=8", "--set",
                    "checkpoint.every_epochs=4", "--set", single ? "parallel.mode=single" : "parallel.mode=ddp",
                    "--set", single ? "parallel.world_size=1" : "parallel.world_size=2", NULL};
    pid_t pid = spawn_argv(log, argv);
    char dir[4096];
    const char *d = cli_wait_steps(root, "ep1", 2);   /* 2 steps done, or NULL after 300 s */
    snprintf(dir, sizeof dir, "%s", d ? d : "");
    CHECK(dir[0] != '\0');
    kill(pid, SIGINT);
    int rc = cli_wait(pid);
    CHECK_INT(rc, 130);
    if (!dir[0] || rc != 130) return;
    double stopped = cli_json_number(dir, "summary.json", "steps");
    fprintf(stderr, "%s: interrupted at step %g of 30 (the end of epoch %g)\n", mode, stopped, stopped);
    CHECK(stopped >= 2 && stopped < 30);
    char path[4300];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    CHECK_INT(dist_count_lines(path), 1 + (int)stopped);   /* the interrupted epoch's row is there */

    char args[4400], out[1 << 16];
    snprintf(args, sizeof args, "resume %s", dir);
    rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 0);
    if (rc) fprintf(stderr, "%s\n", out);
    const char *sections[] = {"params", "buffers", "optim.momentum_buffer"};
    dist_check_same_sections(dir, refd, sections, 3);
    /* every epoch row, up to the timing columns, equals the uninterrupted run's */
    char a[4300], b[4300];
    snprintf(a, sizeof a, "%s/metrics.csv", refd);
    snprintf(b, sizeof b, "%s/metrics.csv", dir);
    CHECK_INT(dist_count_lines(a), 31);
    CHECK_INT(dist_count_lines(b), 31);
    int differ = 0;
    for (int row = 1; row <= 30; row++)
        for (int col = 0; col < 8; col++) {
            char ca[64], cb[64];
            dist_csv_cell(a, row, col, ca, sizeof ca);
            dist_csv_cell(b, row, col, cb, sizeof cb);
            if (strcmp(ca, cb)) {
                if (!differ++) fprintf(stderr, "metrics row %d col %d: %s vs %s\n", row, col, cb, ca);
            }
        }
    CHECK_INT(differ, 0);
}

static void epoch_end_interrupt_ddp(void) { epoch_end_interrupt("ddp"); }
static void epoch_end_interrupt_single(void) { epoch_end_interrupt("single"); }

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(sigint_then_resume_is_bit_exact);
    TEST_RUN(sigint_with_step_windows_is_bit_exact);
    TEST_RUN(outside_launcher_auto_resume_is_bit_exact);
    TEST_RUN(epoch_end_interrupt_ddp);
    TEST_RUN(epoch_end_interrupt_single);
    return test_main_end();
}
