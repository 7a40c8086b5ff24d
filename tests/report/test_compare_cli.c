/* test_compare_cli.c: `runner compare` end to end on a tiny matrix (synthetic data, CPU,
 * a few steps): every member runs through the real run function, the comparison
 * directory gets compare.json and the report; a member that fails at run time is
 * recorded while the others still run (exit 1). SIGINT sent to the compare process alone
 * stops the running member, records the comparison as interrupted, exits 130, and the
 * same command resumes it. Missing data is found once, before any member starts (exit 2,
 * one message, no comparison directory). Label e2e: needs the runner executable and a
 * working CPU training path. */
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
    TEST_RUN(test_compare_one_fails);
    TEST_RUN(test_compare_sigint_to_compare_process);
    TEST_RUN(test_compare_missing_data_once);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return test_main_end();
}
