/* test_compare_cli.c: `runner compare` end to end on a tiny matrix (synthetic data, CPU,
 * a few steps): every member runs through the real run function, the comparison
 * directory gets compare.json and the report; a member that fails at run time is
 * recorded while the others still run (exit 1). Label e2e: needs the runner executable
 * and a working CPU training path. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

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

int main(void) {
    if (test_tmpdir(root, sizeof root)) return 1;
    TEST_RUN(test_compare_ok);
    TEST_RUN(test_compare_one_fails);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return test_main_end();
}
