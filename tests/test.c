/* test.c: the small harness behind test.h. */
#include "tests/test.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int test_failures_ = 0;
int test_cases_passed_ = 0, test_cases_failed_ = 0;

/* RUNNER_TEST_ONLY="a,b": run only the cases named (the dry runs of the gpu tests pick
 * the cases that can run on the CPU); unset or empty: all. */
static bool test_selected(const char *name) {
    const char *only = getenv("RUNNER_TEST_ONLY");
    if (!only || !*only) return true;
    size_t len = strlen(name);
    for (const char *p = only; *p;) {
        const char *end = strchr(p, ',');
        size_t l = end ? (size_t)(end - p) : strlen(p);
        if (l == len && !strncmp(p, name, len)) return true;
        p += l + (end ? 1 : 0);
    }
    return false;
}

void test_run_(const char *name, void (*fn)(void)) {
    if (!test_selected(name)) return;
    test_failures_ = 0;
    fn();
    if (test_failures_) {
        test_cases_failed_++;
        fprintf(stderr, "FAIL %s (%d checks failed)\n", name, test_failures_);
    } else {
        test_cases_passed_++;
        fprintf(stderr, "ok   %s\n", name);
    }
}

int test_main_end(void) {
    printf("%d passed, %d failed\n", test_cases_passed_, test_cases_failed_);
    return test_cases_failed_ ? 1 : 0;
}

void test_skip(const char *why) {
    printf("skipped: %s\n", why);
    exit(77);
}

int test_run_cmd(const char *cmd, char *out, size_t cap) {
    char full[8192];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t n = 0;
    if (out && cap) {
        int c;
        while ((c = fgetc(p)) != EOF) if (n + 1 < cap) out[n++] = (char)c;
        out[n] = '\0';
    } else {
        while (fgetc(p) != EOF) {}
    }
    int st = pclose(p);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

int test_tmpdir(char *buf, size_t len) {
    const char *t = getenv("TMPDIR");
    snprintf(buf, len, "%s/runner-test-XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(buf) ? 0 : -1;
}

const char *test_source_dir(void) {
    const char *s = getenv("RUNNER_SOURCE_DIR");
    return s ? s : ".";
}
const char *test_binary_dir(void) {
    const char *s = getenv("RUNNER_BINARY_DIR");
    return s ? s : ".";
}
const char *test_runner_exe(void) {
    const char *s = getenv("RUNNER_EXE");
    return s ? s : "./runner";
}

char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (!b) { fclose(f); return NULL; }
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    b[got] = '\0';
    if (len) *len = got;
    return b;
}

int test_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

int test_count_lines(const char *path) {
    size_t n = 0;
    char *s = test_read_file(path, &n);
    if (!s) return 0;
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += s[i] == '\n';
    free(s);
    return lines;
}

void test_remove_dir_if_passed(const char *dir) {
    if (test_failures_ || test_cases_failed_ || !dir || !*dir) return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}
