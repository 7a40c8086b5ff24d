/* bn_combine.h: the statistics of the union of several ranks' batches from each rank's
 * batch mean and biased variance (SyncBN), as torch's batch_norm_gather_stats_with_counts
 * combines them: Chan's pairwise update in double, over the ranks in rank order. Shared
 * by DDP's host path (comm/ddp.c), the cpu backend's bn_combine op and the CUDA kernel,
 * so SyncBN gives the same bits on the host and on the device; the device side spells
 * every double operation out with round-to-nearest intrinsics, so the compiler cannot
 * fuse a multiply and an add that the host computes separately.
 */
#ifndef RUNNER_MODEL_BN_COMBINE_H
#define RUNNER_MODEL_BN_COMBINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define BNC_HD __host__ __device__
#else
#define BNC_HD
#endif

static inline BNC_HD double bnc_add(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
static inline BNC_HD double bnc_sub(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dsub_rn(a, b);
#else
    return a - b;
#endif
}
static inline BNC_HD double bnc_mul(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
static inline BNC_HD double bnc_div(double a, double b) {
#ifdef __CUDA_ARCH__
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}

/* One channel: rank j's mean and variance are means[j * stride] and vars[j * stride] over
 * counts[j] rows (counts NULL: every rank `count` rows). Writes the combined mean and
 * biased variance (0 when no rank has rows). */
static inline BNC_HD void bn_combine_channel(int n, const int64_t *counts, int64_t count, const float *means,
                                             const float *vars, size_t stride, float *mean_out, float *var_out) {
    double cnt = 0, avg = 0, var_n = 0;
    for (int j = 0; j < n; j++) {
        double k = (double)(counts ? counts[j] : count);
        if (k <= 0) continue;
        double m = means[(size_t)j * stride], v = bnc_mul(vars[(size_t)j * stride], k);
        double f = bnc_div(1.0, bnc_add(cnt, k));
        double d = bnc_sub(avg, m);
        var_n = bnc_add(var_n, bnc_add(v, bnc_mul(bnc_mul(bnc_mul(bnc_mul(d, d), cnt), k), f)));
        avg = bnc_add(bnc_mul(bnc_mul(cnt, f), avg), bnc_mul(bnc_mul(k, f), m));
        cnt = bnc_add(cnt, k);
    }
    *mean_out = (float)avg;
    *var_out = cnt > 0 ? (float)bnc_div(var_n, cnt) : 0.0f;
}

#endif
