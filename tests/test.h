/* test.h: the assertions every test uses.
 *
 * A test program calls its cases through TEST_RUN(fn); each CHECK failing prints
 * file:line, the expression and the values, and marks the case failed. test_main_end()
 * prints "N passed, N failed" and returns the exit status (0, or 1 if any failed).
 * test_skip(why) exits 77, which ctest reports as skipped (used by gpu tests without a GPU).
 * RUNNER_TEST_ONLY="case1,case2" runs only the cases named (by their function names).
 */
#ifndef RUNNER_TESTS_TEST_H
#define RUNNER_TESTS_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern int test_failures_;   /* failed checks in the current case */
extern int test_cases_passed_, test_cases_failed_;

#define CHECK(cond) do { if (!(cond)) { test_failures_++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_INT(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); if (a_ != b_) { \
    test_failures_++; fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, \
    __LINE__, #a, a_, #b, b_); } } while (0)
#define CHECK_STR(a, b) do { const char *a_ = (a), *b_ = (b); if (!a_ || !b_ || strcmp(a_, b_)) { \
    test_failures_++; fprintf(stderr, "%s:%d: %s == \"%s\", expected \"%s\"\n", __FILE__, \
    __LINE__, #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); } } while (0)
#define CHECK_CONTAINS(hay, needle) do { const char *h_ = (hay), *n_ = (needle); \
    if (!h_ || !strstr(h_, n_)) { test_failures_++; fprintf(stderr, \
    "%s:%d: expected \"%s\" to contain \"%s\"\n", __FILE__, __LINE__, h_ ? h_ : "(null)", n_); } } while (0)
/* |a - b| <= atol + rtol * |b| */
#define CHECK_NEAR(a, b, atol, rtol) do { double a_ = (double)(a), b_ = (double)(b); \
    if (!(fabs(a_ - b_) <= (atol) + (rtol) * fabs(b_))) { test_failures_++; fprintf(stderr, \
    "%s:%d: %s = %.9g, expected %.9g (atol %g, rtol %g)\n", __FILE__, __LINE__, #a, a_, b_, \
    (double)(atol), (double)(rtol)); } } while (0)

#define TEST_RUN(fn) test_run_(#fn, fn)
void test_run_(const char *name, void (*fn)(void));
int test_main_end(void);
void test_skip(const char *why) __attribute__((noreturn));

/* Runs a shell command, captures combined stdout+stderr into out (NUL-terminated, cut at
 * cap), returns the exit status (or 128+signal). */
int test_run_cmd(const char *cmd, char *out, size_t cap);
/* A fresh empty directory under $TMPDIR or /tmp, path written to buf. */
int test_tmpdir(char *buf, size_t len);
/* Path to a file in the source tree / the build tree / the runner executable. */
const char *test_source_dir(void);
const char *test_binary_dir(void);
const char *test_runner_exe(void);
/* Reads a whole file into a malloc'd NUL-terminated buffer (NULL if unreadable). */
char *test_read_file(const char *path, size_t *len);
/* Writes text to path; returns 0 on success. */
int test_write_file(const char *path, const char *text);
/* Number of '\n' in the file at path (0 when it cannot be read). */
int test_count_lines(const char *path);
/* Removes dir (rm -rf) when no check has failed so far, so a failure's files stay. */
void test_remove_dir_if_passed(const char *dir);

#endif
