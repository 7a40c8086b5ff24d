/* test_dist_resume.c: SIGINT to the launcher of a 2-rank DDP run, then `runner resume
 * DIR` at world size 2, ends BIT-identical to an uninterrupted 2-rank run: params, BN
 * buffers and momentum of last.ckpt, and the final metrics row up to its timing columns.
 * Shuffled data with random crop and flip, no SyncBN (so the per-step buffer broadcast is
 * part of what must continue exactly). Also: the launcher exits 130, summary.json says
 * "interrupted", both ranks stopped at the same step (rank 1's log says so), and the
 * resumed rank 1 says where it continued.
 */
#include "tests/dist/dist_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp[512];

static const char *aug = "{random_crop: {size: 8, padding: 1}, horizontal_flip: true, rotation: 0}";

static pid_t spawn_runner(const char *exp, const char *root, const char *log) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        char set[800];
        snprintf(set, sizeof set, "output.root=%s", root);
        execl(test_runner_exe(), "runner", exp, "--set", set, "--set", "data.synthetic.train_size=400",
              (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void sigint_then_resume_is_bit_exact(void) {
    char exp[700], root[800];
    dist_write_exp(exp, sizeof exp, tmp, "res", true, aug, 3);
    /* 400 samples: 50 steps per epoch, 150 in all, so the interrupt lands mid-run */
    snprintf(root, sizeof root, "%s/ref", tmp);
    const char *r = dist_run(exp, root, "--set data.synthetic.train_size=400", 0);
    CHECK(r != NULL);
    if (!r) return;
    char ref[4096];
    snprintf(ref, sizeof ref, "%s", r);
    CHECK_INT(dist_json_number(ref, "summary.json", "steps"), 150);

    snprintf(root, sizeof root, "%s/int", tmp);
    char log[800];
    snprintf(log, sizeof log, "%s/int.log", tmp);
    pid_t launcher = spawn_runner(exp, root, log);
    char dir[4096] = "", steps[4200];
    for (int i = 0; i < 30000 && !dir[0]; i++) {   /* up to 300 s on a loaded machine */
        const char *d = only_run_dir(root, "res");
        if (d) {
            snprintf(steps, sizeof steps, "%s/steps.csv", d);
            if (dist_count_lines(steps) >= 3) snprintf(dir, sizeof dir, "%s", d);   /* 2 steps done */
        }
        if (!dir[0]) usleep(10000);
    }
    CHECK(dir[0] != '\0');
    kill(launcher, SIGINT);
    int st = 0;
    waitpid(launcher, &st, 0);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    CHECK_INT(rc, 130);
    if (!dir[0] || rc != 130) return;
    double stopped = dist_json_number(dir, "summary.json", "steps");
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
    CHECK_INT(dist_json_number(dir, "summary.json", "steps"), 150);
    snprintf(want, sizeof want, "resuming at step %d of 150", (int)stopped);
    s = test_read_file(path, NULL);
    CHECK_CONTAINS(s, want);
    free(s);

    const char *sections[] = {"params", "buffers", "optim.momentum_buffer"};
    for (int i = 0; i < 3; i++) {
        double m;
        CHECK_INT(dist_compare_section(dir, ref, sections[i], 0, 0, &m), 0);   /* bit for bit */
        CHECK(m == 0);
    }
    /* the last epoch row, up to the timing columns: loss, accuracy, validation */
    char a[4300], b[4300];
    snprintf(a, sizeof a, "%s/metrics.csv", ref);
    snprintf(b, sizeof b, "%s/metrics.csv", dir);
    CHECK_INT(dist_count_lines(a), 4);
    CHECK_INT(dist_count_lines(b), 4);
    for (int col = 0; col < 8; col++) {
        char ca[64], cb[64];
        CHECK_STR(dist_csv_cell(a, 3, col, ca, sizeof ca), dist_csv_cell(b, 3, col, cb, sizeof cb));
    }
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(sigint_then_resume_is_bit_exact);
    return test_main_end();
}
