/* test_compare_cli.c: `runner compare` end to end on a tiny matrix (synthetic data, CPU,
 * a few steps): every member runs through the real run function, the comparison
 * directory gets compare.json and the report; a member that fails at run time is
 * recorded while the others still run (exit 1). SIGINT sent to the compare process alone
 * stops the running member, records the comparison as interrupted, exits 130, and the
 * same command resumes it. Missing data is found once, before any member starts (exit 2,
 * one message, no comparison directory). With repeats: 2 every entry runs over two seeds
 * and the report's images/s is the steady-state rate of every step (timing.csv), which
 * cannot contradict s/epoch. Label e2e: needs the runner executable and a working CPU
 * training path. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/report/fixture.h"
#include "tests/test.h"

static char root[1024];
static char out[65536];

/* Writes a matrix file named name.yaml with the given entries; returns its path in buf. */
static void write_matrix(char *buf, size_t cap, const char *name, const char *entries) {
    char text[8192];
    snprintf(text, sizeof text,
             "name: %s\n"
             "base: %s/experiments/ci_smoke.yaml\n"
             "data: {synthetic: {train_size: 128, val_size: 64, image: [3, 8, 8], classes: 4}}\n"
             "train: {epochs: 1, batch_size: 32, max_steps: 3}\n"
             "logging: {print_every: 1}\n"
             "output: {root: %s/runs}\n"
             "matrix:\n%s",
             name, test_source_dir(), root, entries);
    snprintf(buf, cap, "%s/%s.yaml", root, name);
    test_write_file(buf, text);
}

/* The one comparison directory under runs/<name>/ (path in buf); 0 when found. */
static int find_parent(const char *name, char *buf, size_t cap) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/runs/%s", root, name);
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *de;
    int found = -1;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') {
            snprintf(buf, cap, "%s/%s", dir, de->d_name);
            found = 0;
        }
    closedir(d);
    return found;
}

static char *slurp(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return test_read_file(path, NULL);
}

static void test_compare_ok(void) {
    char matrix[2048], cmd[4300], parent[4200];
    write_matrix(matrix, sizeof matrix, "tiny_ok",
                 "  - {name: single}\n"
                 "  - {name: single_bf16, amp.enabled: true, amp.dtype: bf16}\n");
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' compare '%s'", root, test_runner_exe(), matrix);
    int rc = test_run_cmd(cmd, out, sizeof out);
    if (rc != 0) fprintf(stderr, "%s\n", out);
    CHECK_INT(rc, 0);
    CHECK_INT(find_parent("tiny_ok", parent, sizeof parent), 0);
    char *state = slurp(parent, "compare.json"), *csv = slurp(parent, "comparison.csv");
    char *html = slurp(parent, "report.html");
    CHECK_CONTAINS(state, "\"status\": \"completed\"");
    CHECK_CONTAINS(csv, "\nsingle,single,1,");
    CHECK_CONTAINS(csv, "\nsingle_bf16,single,1,bf16,");
    CHECK_CONTAINS(html, "single_bf16");
    free(state);
    free(csv);
    free(html);
    char path[4300];
    snprintf(path, sizeof path, "%s/single/summary.json", parent);
    char *summary = test_read_file(path, NULL);
    CHECK_CONTAINS(summary, "\"status\": \"completed\"");
    free(summary);
}

static void test_compare_one_fails(void) {
    char matrix[2048], cmd[4300], parent[4200];
    write_matrix(matrix, sizeof matrix, "tiny_fail",
                 "  - {name: broken, model.init_from: /nonexistent/weights.safetensors}\n"
                 "  - {name: after}\n");
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' compare '%s'", root, test_runner_exe(), matrix);
    int rc = test_run_cmd(cmd, out, sizeof out);
    CHECK_INT(rc, 1);
    CHECK_CONTAINS(out, "1 of 2 runs failed: broken (exit 2)");
    CHECK_INT(find_parent("tiny_fail", parent, sizeof parent), 0);
    char *state = slurp(parent, "compare.json"), *csv = slurp(parent, "comparison.csv");
    CHECK_CONTAINS(state, "\"status\": \"failed\"");
    CHECK_CONTAINS(csv, "\nbroken,single,1,fp32,32,cpu,,,,,");
    CHECK_CONTAINS(csv, ",failed,2,");
    CHECK_CONTAINS(csv, "\nafter,single,1,fp32,");
    free(state);
    free(csv);
}

/* kill -INT <compare pid>: before the fix the compare process ignored it, ran every
 * remaining member and exited 0. */
static void test_compare_sigint_to_compare_process(void) {
    char matrix[2048], parent[4200], log[1200], path[4400];
    write_matrix(matrix, sizeof matrix, "tiny_sig",
                 "  - {name: long, train.epochs: 30, train.max_steps: null,"
                 " data.synthetic: {train_size: 512, image: [3, 16, 16]}}\n"
                 "  - {name: short, train.max_steps: 2}\n");
    snprintf(log, sizeof log, "%s/sig.log", root);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        if (chdir(root) != 0) _exit(127);
        execl(test_runner_exe(), "runner", "compare", matrix, (char *)NULL);
        _exit(127);
    }
    /* wait until the first member has taken a few steps, then signal the compare process only */
    bool started = false;
    for (int i = 0; i < 3000 && !started; i++) {
        if (find_parent("tiny_sig", parent, sizeof parent) == 0) {
            snprintf(path, sizeof path, "%s/long/steps.csv", parent);
            started = test_count_lines(path) >= 4;
        }
        if (!started) usleep(100000);
    }
    CHECK(started);
    /* the same command meanwhile: refused with exit 2, naming the running compare's pid
     * and host as a busy run directory does (before, it named neither) */
    char again[4400], host[256] = "", want[512];
    snprintf(again, sizeof again, "cd '%s' && '%s' compare '%s' 2>&1", root, test_runner_exe(), matrix);
    CHECK_INT(test_run_cmd(again, out, sizeof out), 2);
    gethostname(host, sizeof host - 1);
    snprintf(want, sizeof want, "another runner compare is running this comparison (pid %d on host %s, since ",
             (int)pid, host);
    CHECK_CONTAINS(out, want);
    snprintf(want, sizeof want, "or stop it (kill -INT %d on host %s: the running member saves a checkpoint first)",
             (int)pid, host);
    CHECK_CONTAINS(out, want);
    kill(pid, SIGINT);
    int st = 0;
    waitpid(pid, &st, 0);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    CHECK_INT(rc, 130);
    char *text = test_read_file(log, NULL);
    CHECK_CONTAINS(text, "compare: interrupted during 'long'; run the same command again to resume");
    free(text);
    char *state = slurp(parent, "compare.json");
    CHECK_CONTAINS(state, "\"status\": \"interrupted\"");
    CHECK_CONTAINS(state, "\"name\": \"short\",\n      \"entry\": \"short\",\n      \"seed\": 0,\n      \"status\": \"pending\"");
    free(state);
    snprintf(path, sizeof path, "%s/long/summary.json", parent);
    char *summary = test_read_file(path, NULL);
    CHECK_CONTAINS(summary, "\"status\": \"interrupted\"");
    free(summary);
    snprintf(path, sizeof path, "%s/long/checkpoints/last.ckpt", parent);
    CHECK(access(path, R_OK) == 0);
    /* the same command (max_steps is outside the hash: a shorter finish) resumes it */
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' compare '%s' --set train.max_steps=40", root, test_runner_exe(),
             matrix);
    rc = test_run_cmd(cmd, out, sizeof out);
    if (rc) fprintf(stderr, "%s\n", out);
    CHECK_INT(rc, 0);
    CHECK_CONTAINS(out, "compare: resuming ");
    state = slurp(parent, "compare.json");
    CHECK_CONTAINS(state, "\"status\": \"completed\"");
    free(state);
    /* every one of the 40 steps is timed once, across the interruption: timing.csv lost the
     * rows after the checkpoint, summary.json's sums came back from it */
    snprintf(path, sizeof path, "%s/long", parent);
    char *timing = slurp(path, "timing.csv");
    long steps_timed = 0;
    for (char *line = timing ? strchr(timing, '\n') : NULL; line && line[1]; line = strchr(line + 1, '\n')) {
        long step, steps;
        if (sscanf(line + 1, "%ld,%ld", &step, &steps) == 2) steps_timed += steps;
    }
    free(timing);
    CHECK_INT(steps_timed, 40);
    summary = slurp(path, "summary.json");
    const char *sd = summary ? strstr(summary, "\"steady_steps\": ") : NULL;
    const char *wu = summary ? strstr(summary, "\"warmup_steps\": ") : NULL;
    CHECK(sd && wu);
    if (sd && wu) CHECK_INT(atoi(sd + 16) + atoi(wu + 16), 40);
    free(summary);
}

/* The steady-state rate of a run directory's timing.csv, computed here from the file
 * (images over seconds of the windows that start at step 10 or later of their epoch). */
static double timing_rate(const char *run_dir, int *steady) {
    char path[4400];
    snprintf(path, sizeof path, "%s/timing.csv", run_dir);
    char *text = test_read_file(path, NULL);
    double images = 0, seconds = 0;
    *steady = 0;
    for (char *line = text ? strchr(text, '\n') : NULL; line && line[1]; line = strchr(line + 1, '\n')) {
        long step, steps, epoch, since, img;
        double sec;
        if (sscanf(line + 1, "%ld,%ld,%ld,%ld,%ld,%lf", &step, &steps, &epoch, &since, &img, &sec) != 6) continue;
        if (since < 10) continue;
        images += (double)img;
        seconds += sec;
        *steady += (int)steps;
    }
    free(text);
    return images / seconds;
}

/* repeats: 2 on 3 entries, 30 steps each (one epoch of 240 images in batches of 8) with
 * print_every 50, so steps.csv has one row a run: the case where images/s came from that
 * row and contradicted s/epoch. Every row's images/s is the rate of its timing.csv and
 * times s/epoch gives the epoch's 240 images; "short" stops at 25 steps (15 steady), so the
 * verdict says the comparison is too short instead of ranking. */
static void test_compare_repeats(void) {
    char matrix[2048], cmd[4400], parent[4200];
    write_matrix(matrix, sizeof matrix, "tiny_rep",
                 "  - {name: a, train.max_steps: null}\n"
                 "  - {name: b, train.max_steps: null, amp.enabled: true, amp.dtype: bf16}\n"
                 "  - {name: short, train.max_steps: 25}\n");
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' compare '%s' --set repeats=2 --set data.synthetic.train_size=240 "
             "--set train.batch_size=8 --set logging.print_every=50", root, test_runner_exe(), matrix);
    int rc = test_run_cmd(cmd, out, sizeof out);
    if (rc != 0) fprintf(stderr, "%s\n", out);
    CHECK_INT(rc, 0);
    CHECK_CONTAINS(out, "compare: 6 runs (3 entries x 2 seeds) in ");
    CHECK_CONTAINS(out, "compare: [4/6] a/seed1 -> ");
    CHECK_CONTAINS(out, "\ncompare: Too short to rank throughput: short had 15 steady-state steps in a run; at least "
                        "20 are needed (the first 10 steps of each epoch are warm-up and do not count). Run more "
                        "steps (train.max_steps or train.epochs).\ncompare: Accuracy ");
    CHECK_INT(find_parent("tiny_rep", parent, sizeof parent), 0);
    char *csv = slurp(parent, "comparison.csv"), *md = slurp(parent, "comparison.md");
    CHECK(csv && !strncmp(csv, REPORT_CSV_HEADER, strlen(REPORT_CSV_HEADER)));
    CHECK_CONTAINS(md, "**Too short to rank throughput: short had 15 steady-state steps");
    CHECK_CONTAINS(md, "\n| a | 2 | ");
    int rows = 0;
    for (char *line = csv ? strchr(csv, '\n') : NULL; line && line[1]; line = strchr(line + 1, '\n')) {
        char buf[8192], *field[64];
        snprintf(buf, sizeof buf, "%.*s", (int)strcspn(line + 1, "\n"), line + 1);
        CHECK(!strchr(buf, '"'));   /* no note, no quoted field: split at commas */
        int n = 0;
        for (char *p = buf; n < 64; n++) {
            field[n] = p;
            char *c = strchr(p, ',');
            if (!c) { n++; break; }
            *c = '\0';
            p = c + 1;
        }
        CHECK_INT(n, 44);
        if (n != 44) break;
        rows++;
        bool is_short = !strcmp(field[18], "short");
        char name[300];
        snprintf(name, sizeof name, "%s/seed%s", field[18], field[19]);
        CHECK_STR(field[0], name);
        CHECK_STR(field[20], is_short ? "15" : "20");
        CHECK_STR(field[21], "10");
        CHECK_STR(field[24], "timing.csv");
        double ips = atof(field[6]), spe = atof(field[7]);
        int steady = 0;
        double want = timing_rate(field[16], &steady);
        CHECK_INT(steady, is_short ? 15 : 20);
        CHECK_NEAR(ips, want, 0, 1e-9);
        CHECK_NEAR(ips * spe, 240, 0, 2e-9);   /* both printed with 10 digits */
        /* the trainer's own steady-state rate in summary.json agrees (timing.csv keeps 10 digits) */
        char *summary = slurp(field[16], "summary.json");
        const char *k = summary ? strstr(summary, "\"images_per_second\": ") : NULL;
        CHECK(k != NULL);
        if (k) CHECK_NEAR(atof(k + 21), want, 0, 1e-7);
        CHECK_CONTAINS(summary, is_short ? "\"steady_steps\": 15," : "\"steady_steps\": 20,");
        CHECK_CONTAINS(summary, "\"images_per_epoch\": 240,");
        free(summary);
        char path[4400];
        snprintf(path, sizeof path, "%s/steps.csv", field[16]);
        CHECK_INT(test_count_lines(path), 2);   /* one printed row: the last step */
    }
    CHECK_INT(rows, 6);
    free(csv);
    free(md);
}

/* Offline / missing data: one message before anything starts, exit 2, nothing created.
 * Before, every member failed on its own (with 4 download attempts each) and the report
 * repeated the message over empty charts. */
static void test_compare_missing_data_once(void) {
    char matrix[2048], cmd[4400], parent[4200];
    write_matrix(matrix, sizeof matrix, "tiny_nodata",
                 "  - {name: a}\n  - {name: b}\n  - {name: c, amp.enabled: true}\n");
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' compare '%s' --set data.dataset=cifar10 --set data.root=%s/nodata "
             "--set data.download=true --set data.download_url=file://%s/no-such-archive.tar.gz", root,
             test_runner_exe(), matrix, root, root);
    int rc = test_run_cmd(cmd, out, sizeof out);
    CHECK_INT(rc, 2);
    CHECK_CONTAINS(out, "compare: no member was started: the data of matrix entry 'a'");
    CHECK_CONTAINS(out, "no-such-archive.tar.gz");
    /* one message: the failure is not repeated per member */
    const char *first = strstr(out, "no member was started");
    CHECK(first && !strstr(first + 1, "no member was started"));
    CHECK(!strstr(out, "compare: [1/3]"));
    CHECK_INT(find_parent("tiny_nodata", parent, sizeof parent), -1);
    /* without download: the same, naming the file looked for */
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' compare '%s' --set data.dataset=cifar10 --set data.root=nodata "
             "--set data.download=false", root, test_runner_exe(), matrix);
    CHECK_INT(test_run_cmd(cmd, out, sizeof out), 2);
    CHECK_CONTAINS(out, "nodata/data_batch_1.bin is missing (data.root: nodata); a relative data.root is looked "
                   "up in the current directory");
    CHECK_INT(find_parent("tiny_nodata", parent, sizeof parent), -1);
}

int main(void) {
    if (test_tmpdir(root, sizeof root)) return 1;
    TEST_RUN(test_compare_ok);
    TEST_RUN(test_compare_repeats);
    TEST_RUN(test_compare_one_fails);
    TEST_RUN(test_compare_sigint_to_compare_process);
    TEST_RUN(test_compare_missing_data_once);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return test_main_end();
}
