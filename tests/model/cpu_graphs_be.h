/* cpu_graphs_be.h: a cpu backend (1 thread) with or without the graph recorder of
 * model/cpu/cpu_graph.c, for the tests of recorded steps: mode NULL for the plain backend,
 * else RUNNER_CPU_GRAPHS's value ("1", "stale", ...), set only while the backend is made.
 * Exits the test on failure. Not a library: a static function for the including test.
 */
#ifndef RUNNER_TESTS_MODEL_CPU_GRAPHS_BE_H
#define RUNNER_TESTS_MODEL_CPU_GRAPHS_BE_H

#include <stdio.h>
#include <stdlib.h>

#include "model/cpu/cpu_backend.h"

static inline backend_t *cpu_graphs_be(const char *mode) {
    err_t e = {0};
    if (mode) setenv("RUNNER_CPU_GRAPHS", mode, 1);
    else unsetenv("RUNNER_CPU_GRAPHS");
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 1};
    backend_t *be = cpu_backend_create(&bo, &e);
    unsetenv("RUNNER_CPU_GRAPHS");
    if (!be) {
        fprintf(stderr, "backend: %s\n", e.msg);
        exit(1);
    }
    return be;
}

#endif
