/* config_test_util.h: helpers shared by the tests of valid experiment files
 * (test_config_load.c, test_config_merge.c, test_config_schema.c): the minimal file MIN,
 * a scratch directory per test program, paths in it, and load(), which writes a file
 * there and loads it, counting a load error as a failed check.
 *
 * Not a library: static functions and the scratch directory, included by each test.
 */
#ifndef RUNNER_TESTS_CONFIG_TEST_UTIL_H
#define RUNNER_TESTS_CONFIG_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "runner/config.h"
#include "tests/test.h"

#define MIN "data: {dataset: cifar10}\nmodel: {arch: resnet18}\n"

static char dir[512];   /* this test program's scratch directory (config_test_begin) */

/* dir/name, in one of four rotating buffers (so a call may use a few paths at once). */
static inline const char *at(const char *name) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Writes text to dir/name and loads it; a failure is a check failure (message printed).
 * text NULL loads the file already there. The caller frees the result. */
static inline experiment_t *load(const char *name, const char *text, const char *const *sets, int n) {
    if (text) test_write_file(at(name), text);
    experiment_t *x = malloc(sizeof *x);
    err_t e;
    if (config_load(at(name), sets, n, x, &e)) {
        fprintf(stderr, "unexpected error: %s\n", e.msg);
        test_failures_++;
        config_defaults(x);
    }
    return x;
}

/* Makes the scratch directory dir; nonzero if it could not. */
static inline int config_test_begin(void) {
    return test_tmpdir(dir, sizeof dir);
}

/* Removes the scratch directory and returns test_main_end()'s exit status. */
static inline int config_test_end(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    test_run_cmd(cmd, NULL, 0);
    return test_main_end();
}

#endif
