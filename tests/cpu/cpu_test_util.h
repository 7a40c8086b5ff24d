/* cpu_test_util.h: helpers shared by the CPU backend tests: a backend per test program,
 * deterministic random fills, and comparisons that print the worst element.
 *
 * Not a library: static functions, included by each test in tests/cpu/.
 */
#ifndef RUNNER_TESTS_CPU_TEST_UTIL_H
#define RUNNER_TESTS_CPU_TEST_UTIL_H

#include <stdlib.h>

#include "model/backend.h"
#include "model/cpu/cpu_backend.h"
#include "util/half.h"
#include "util/rng.h"
#include "tests/test.h"

/* Uniform values in [lo, hi) from (seed, stream MISC, tag). */
static inline void fill_uniform(float *x, int64_t n, uint64_t seed, float lo, float hi) {
    rng_t r = rng_make(seed, RNG_STREAM_MISC, 7, 0);
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(&r);
}

static inline float *falloc(int64_t n) {
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    return p;
}

static inline double *dalloc(int64_t n) {
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    return p;
}

/* Largest violation of |a - b| <= atol + rtol*|b| over n elements; prints the worst one and
 * returns the number of violating elements. */
static inline int compare_arrays(const char *what, const float *a, const double *b, int64_t n,
                                 double atol, double rtol) {
    int bad = 0;
    int64_t worst = -1;
    double worst_excess = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)a[i] - b[i]), lim = atol + rtol * fabs(b[i]);
        if (!(err <= lim)) {
            bad++;
            if (worst < 0 || err - lim > worst_excess) { worst = i; worst_excess = err - lim; }
        }
    }
    if (bad)
        fprintf(stderr, "  %s: %d of %lld elements off; worst [%lld] got %.9g expected %.9g\n",
                what, bad, (long long)n, (long long)worst, (double)a[worst], b[worst]);
    return bad;
}

static inline backend_t *make_cpu(int threads) {
    backend_opts_t o = {0};
    o.kind = BACKEND_CPU;
    o.threads = threads;
    err_t e = {0};
    backend_t *be = backend_create(&o, &e);
    if (!be) { fprintf(stderr, "backend_create: %s\n", e.msg); exit(1); }
    return be;
}

static inline void round_all(float *x, int64_t n, dtype_t dt) {
    for (int64_t i = 0; i < n; i++)
        x[i] = dt == DT_F16 ? round_f16(x[i]) : dt == DT_BF16 ? round_bf16(x[i]) : x[i];
}

#endif
