/* bn_sweep.c: bench_gpu_bench --bn-sweep (issue 25; contract in fusion_bench.h): the BN
 * row kernels' time per ResNet-50 shape under launch geometries other than the default,
 * each op replayed inside a CUDA graph (the way the runner's step runs it).
 *
 * Why: the fifth GPU run's replayed profile (H200, bf16 batch 128) had the BN reductions
 * at 1.0 (bn_stats) and 1.2 TB/s (bn_bwd_reduce) and the apply passes at 2.1 and 2.4 TB/s,
 * the small layers far below (8192 x 256 bn_bwd_reduce: 22 us a call at 0.38 TB/s, on 64
 * blocks for 132 SMs): 4.4 of the step's ~8.4 instrumented ms. bn_more_splits, one guess
 * at a better geometry applied to every layer, measured slower; this sweep measures
 * every shape under a grid of geometries in one call, so that a rule (a fixed function of
 * the shape, which keeps the reductions deterministic) can be chosen from measurements.
 */
#include "bench/fusion/fusion_bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RUNNER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "model/cuda/cuda_backend.h"
#endif
#include "model/net.h"
#include "model/net_fusion.h"
#include "model/arch/resnet.h"
#include "util/half.h"

#ifdef RUNNER_HAVE_CUDA
enum { SW_STATS, SW_APPLY, SW_BWD_REDUCE, SW_BWD_APPLY, SW_OPS };
static const char *const SW_NAMES[SW_OPS] = {"bn_stats", "bn_apply", "bn_bwd_reduce", "bn_bwd_apply"};
/* bytes each op moves per element (act dtype): x | x, y | x, dy | x, dy, dx (bn_remask's
 * paths: the mask recomputed from x, as `all` runs the 33 BN + ReLU layers) */
static const int SW_PASSES[SW_OPS] = {1, 2, 2, 3};

/* The geometries {rows_min, blocks_per_sm, v_max, one_pass}: the default first, then one
 * knob at a time, then pairs, then the reductions in one pass (the apply ops ignore
 * one_pass: their rows there repeat others, a measure of the noise). */
static const cuda_bn_geom_t SW_GEOMS[] = {
    {0, 0, 0, 0, 0, 0},  {8, 0, 0, 0, 0, 0},  {4, 0, 0, 0, 0, 0},  {32, 0, 0, 0, 0, 0}, {0, 16, 0, 0, 0, 0}, {0, 32, 0, 0, 0, 0}, {0, 4, 0, 0, 0, 0},
    {0, 0, 4, 0, 0, 0},  {0, 0, 2, 0, 0, 0},  {4, 16, 0, 0, 0, 0}, {8, 16, 0, 0, 0, 0}, {4, 32, 0, 0, 0, 0}, {8, 0, 4, 0, 0, 0}, {4, 16, 4, 0, 0, 0},
    {0, 0, 0, 1, 0, 0},  {8, 0, 0, 1, 0, 0},  {32, 0, 0, 1, 0, 0}, {64, 0, 0, 1, 0, 0}, {0, 4, 0, 1, 0, 0},  {8, 16, 0, 1, 0, 0},
};
enum { SW_NGEOMS = (int)(sizeof SW_GEOMS / sizeof SW_GEOMS[0]), SW_SHAPES = 64, SW_CALLS = 20 };

typedef struct sw_bufs {
    void *x, *dy, *y, *dx;
    float *p;   /* mean, var, gamma, beta, sum_dy, sum_dy_xhat, dgamma, dbeta: 8 x c */
} sw_bufs_t;

/* bn_persist's comparison (the backend made with the option): each direction as the
 * separate ops (the forward: bn_stats then bn_apply; the backward: bn_bwd_reduce then
 * bn_bwd_apply) and as the one op (bn_fwd_fused, bn_bwd_fused; 1, it cannot here: -2). */
enum { SW_FWD_SEP = SW_OPS, SW_FWD_ONE, SW_BWD_SEP, SW_BWD_ONE, SW_ALL_OPS };
static const char *const SW_PNAMES[4] = {"bn_fwd_separate", "bn_fwd_fused", "bn_bwd_separate", "bn_bwd_fused"};

static int sw_pair(backend_t *be, int op, int64_t m, int c, dtype_t dt, const sw_bufs_t *b);
/* the geometries bn_persist is timed under: the default, 4 and 8 rows a thread */
static const cuda_bn_geom_t SW_PG[] = {{0, 0, 0, 0, 0, 0}, {4, 0, 0, 0, 0, 0}, {8, 0, 0, 0, 0, 0}};
enum { SW_PGEOMS = (int)(sizeof SW_PG / sizeof SW_PG[0]) };

static int sw_call(backend_t *be, int op, int64_t m, int c, dtype_t dt, const sw_bufs_t *b) {
    if (op >= SW_OPS) return sw_pair(be, op, m, c, dt, b);
    float *mean = b->p, *var = b->p + c, *gamma = b->p + 2 * c, *beta = b->p + 3 * c;
    float *sdy = b->p + 4 * c, *sdyx = b->p + 5 * c, *dg = b->p + 6 * c, *db = b->p + 7 * c;
    switch (op) {
    case SW_STATS: return be->ops->bn_stats(be, m, c, dt, b->x, mean, var);
    case SW_APPLY: return be->ops->bn_apply(be, m, c, dt, b->x, mean, var, gamma, beta, 1e-5f, NULL, ACT_RELU, b->y);
    case SW_BWD_REDUCE:
        return be->ops->bn_bwd_reduce(be, m, c, dt, b->x, b->y, ACT_RELU, b->dy, mean, var, gamma, beta, 1e-5f, sdy,
                                      sdyx, dg, db);
    default:
        return be->ops->bn_bwd_apply(be, m, c, dt, b->x, b->y, ACT_RELU, b->dy, mean, var, gamma, beta, 1e-5f, sdy,
                                     sdyx, m, b->dx, NULL);
    }
}

static int sw_pair(backend_t *be, int op, int64_t m, int c, dtype_t dt, const sw_bufs_t *b) {
    float *mean = b->p, *var = b->p + c, *gamma = b->p + 2 * c, *beta = b->p + 3 * c;
    float *sdy = b->p + 4 * c, *sdyx = b->p + 5 * c, *dg = b->p + 6 * c, *db = b->p + 7 * c;
    int r;
    switch (op) {
    case SW_FWD_SEP:
        return sw_call(be, SW_STATS, m, c, dt, b) || sw_call(be, SW_APPLY, m, c, dt, b) ? -1 : 0;
    case SW_FWD_ONE:
        r = be->ops->bn_fwd_fused(be, m, c, dt, b->x, mean, var, m, 0.1f, NULL, NULL, gamma, beta, 1e-5f, NULL,
                                  ACT_RELU, b->y, NULL);
        return r == 1 ? -2 : r;
    case SW_BWD_SEP:
        return sw_call(be, SW_BWD_REDUCE, m, c, dt, b) || sw_call(be, SW_BWD_APPLY, m, c, dt, b) ? -1 : 0;
    default:
        r = be->ops->bn_bwd_fused(be, m, c, dt, b->x, b->y, ACT_RELU, b->dy, mean, var, gamma, beta, 1e-5f, sdy, sdyx,
                                  dg, db, m, b->dx, NULL, NULL);
        return r == 1 ? -2 : r;
    }
}

/* us per call of op inside a graph of SW_CALLS calls (one eager call first, so scratch
 * is grown outside the capture; the graph launched once, then reps times between
 * events); -1 on failure. */
static double sw_time(backend_t *be, int op, int64_t m, int c, dtype_t dt, const sw_bufs_t *b, int reps) {
    void *g = NULL;
    if (sw_call(be, op, m, c, dt, b) || be->ops->sync(be) || be->ops->graph_capture_begin(be)) return -1.0;
    int rc = 0;
    for (int i = 0; i < SW_CALLS && !rc; i++) rc = sw_call(be, op, m, c, dt, b);
    if (be->ops->graph_capture_end(be, &g) || !g || rc) {
        if (g) be->ops->graph_free(be, g);
        return -1.0;
    }
    cudaStream_t st = (cudaStream_t)cuda_backend_stream(be);
    cudaEvent_t a, z;
    double us = -1.0;
    if (cudaEventCreate(&a) == cudaSuccess) {
        if (cudaEventCreate(&z) == cudaSuccess) {
            if (be->ops->graph_launch(be, g) == 0 && cudaEventRecord(a, st) == cudaSuccess) {
                for (int r = 0; r < reps && !rc; r++) rc = be->ops->graph_launch(be, g) != 0;
                float ms = 0.0f;
                if (!rc && cudaEventRecord(z, st) == cudaSuccess && cudaEventSynchronize(z) == cudaSuccess &&
                    cudaEventElapsedTime(&ms, a, z) == cudaSuccess)
                    us = 1e3 * ms / ((double)reps * SW_CALLS);
            }
            cudaEventDestroy(z);
        }
        cudaEventDestroy(a);
    }
    be->ops->graph_free(be, g);
    return us;
}

/* The op's output under the current geometry, downloaded: y (apply), dx (bwd apply), or
 * the 2 x c statistics / sums (reductions), as floats (zeroed before the call, which runs
 * after the timing's graph replays: a one-pass ticket the replays left set would leave
 * it unwritten). NULL on failure. */
static float *sw_output(backend_t *be, int op, int64_t m, int c, dtype_t dt, const sw_bufs_t *b, size_t *n) {
    size_t esz = backend_elem_size(be, dt);
    bool red = op == SW_STATS || op == SW_BWD_REDUCE;
    size_t bytes = red ? 2 * (size_t)c * sizeof(float) : (size_t)m * c * esz;
    const void *src = op == SW_STATS ? (const void *)b->p : op == SW_BWD_REDUCE ? (const void *)(b->p + 4 * c)
                      : op == SW_APPLY || op == SW_FWD_SEP || op == SW_FWD_ONE ? b->y : b->dx;
    /* the pairs (bn_persist's comparison): the tensor and the two per-channel vectors, the
     * statistics (forward) or the sums (backward) */
    bool pair = op >= SW_OPS;
    const void *vecs = op == SW_FWD_SEP || op == SW_FWD_ONE ? (const void *)b->p : (const void *)(b->p + 4 * c);
    size_t vbytes = pair ? 2 * (size_t)c * sizeof(float) : 0;
    float *h = malloc(bytes + vbytes);
    /* zeroed first: an output the op left unwritten (after the graph's replays, say) shows */
    if (!h || be->ops->zero(be, (void *)src, bytes) || (pair && be->ops->zero(be, (void *)vecs, vbytes)) ||
        sw_call(be, op, m, c, dt, b) || be->ops->download(be, h, src, bytes) ||
        (pair && be->ops->download(be, (char *)h + bytes, vecs, vbytes)) || be->ops->sync(be)) {
        free(h);
        return NULL;
    }
    *n = bytes + vbytes;
    return h;
}

/* n floats to dst on the device as dt (rounded to nearest on the host). */
static int sw_upload(backend_t *be, void *dst, float *h, size_t n, dtype_t dt) {
    if (dt == DT_F32) return be->ops->upload(be, dst, h, n * sizeof(float));
    uint16_t *q = malloc(n * sizeof(uint16_t));
    if (!q) return -1;
    for (size_t i = 0; i < n; i++) q[i] = dt == DT_BF16 ? f32_to_bf16(h[i]) : f32_to_f16(h[i]);
    int rc = be->ops->upload(be, dst, q, n * sizeof(uint16_t));
    free(q);
    return rc;
}

/* Deterministic test data on the host: x ~ a spread around a channel offset, dy small. */
static int sw_fill(backend_t *be, int64_t m, int c, dtype_t dt, const sw_bufs_t *b) {
    size_t n = (size_t)m * c;
    float *h = malloc((n > 8 * (size_t)c ? n : 8 * (size_t)c) * sizeof(float));
    if (!h) return -1;
    uint32_t s = 12345u;
    int rc = 0;
    for (int t = 0; t < 2 && !rc; t++) {
        for (size_t i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            float u = (float)(s >> 8) / 16777216.0f - 0.5f;
            h[i] = t == 0 ? 2.0f * u + 0.1f * (float)(i % (size_t)c % 7) : 0.01f * u;
        }
        rc = sw_upload(be, t == 0 ? b->x : b->dy, h, n, dt);
    }
    float *p = h;   /* reuse: the per-channel parameters */
    for (int k = 0; k < 8 * c; k++) p[k] = k < 2 * c ? 0.0f : k < 3 * c ? 1.0f + 0.01f * (float)(k % 5) : 0.0f;
    if (!rc) rc = be->ops->upload(be, b->p, p, 8 * (size_t)c * sizeof(float));
    free(h);
    return rc;
}
#endif

int fusion_bench_bn_sweep(const char *arch, int classes, int batch, const char *precision, int device,
                          unsigned fusion, int reps, dtype_t dt) {
#ifndef RUNNER_HAVE_CUDA
    (void)arch; (void)classes; (void)batch; (void)precision; (void)device; (void)fusion; (void)reps; (void)dt;
    fprintf(stderr, "gpu_bench: --bn-sweep needs a CUDA build\n");
    return 1;
#else
    char dev[256], fnames[BACKEND_FUSION_NAMES_MAX];
    backend_fusion_format(fusion, fnames, sizeof fnames);
    err_t e = {0};
    net_t *n = resnet_build(arch, 3, classes, false, &e);
    int nn = n ? net_num_nodes(n) : 0;
    int *h = n ? calloc(3 * (size_t)nn, sizeof(int)) : NULL;
    backend_t *be = h && !net_plan_shapes(n, 32, 32, h, h + nn, h + 2 * nn, &e) ? fusion_bench_backend(device, precision, fusion, false, dev, sizeof dev, &e)
                                                                               : NULL;
    if (!be) {
        fprintf(stderr, "gpu_bench: %s\n", e.msg[0] ? e.msg : "out of memory");
        free(h);
        net_free(n);
        return 1;
    }
    /* the distinct BN shapes (rows x channels) and how many layers have each; of them, the
     * ones bn_persist runs (sp: not bn_dual_add's pairs, where the backend has that) */
    int64_t sm[SW_SHAPES];
    int sc[SW_SHAPES], sl[SW_SHAPES], sp[SW_SHAPES], ns = 0;
    bool dual_ops = be->ops->bn_apply_dual != NULL;
    for (int i = 0; i < nn; i++) {
        node_kind_t k = net_node_kind(n, i);
        if (k != NODE_BN && k != NODE_BN_RELU && k != NODE_BN_ADD_RELU && k != NODE_BN_RELU6) continue;
        int64_t m = (int64_t)batch * h[i] * h[nn + i];
        int c = h[2 * nn + i], u = 0;
        while (u < ns && !(sm[u] == m && sc[u] == c)) u++;
        if (u == ns) {
            if (ns == SW_SHAPES) continue;
            sm[ns] = m, sc[ns] = c, sl[ns] = sp[ns] = 0;
            ns++;
        }
        sl[u]++;
        bool paired = false;
        for (int j = 0; j < nn && dual_ops; j++) paired |= j == i ? net_dual_bn(n, i) >= 0 : net_dual_bn(n, j) == i;
        sp[u] += !paired;
    }
    free(h);
    net_free(n);
    int64_t mmax = 0;
    int cmax = 0;
    for (int u = 0; u < ns; u++) {
        if (sm[u] * sc[u] > mmax) mmax = sm[u] * sc[u];
        if (sc[u] > cmax) cmax = sc[u];
    }
    size_t esz = backend_elem_size(be, dt);
    sw_bufs_t b = {0};
    int rc = !(b.x = be->ops->alloc(be, (size_t)mmax * esz)) || !(b.dy = be->ops->alloc(be, (size_t)mmax * esz)) ||
             !(b.y = be->ops->alloc(be, (size_t)mmax * esz)) || !(b.dx = be->ops->alloc(be, (size_t)mmax * esz)) ||
             !(b.p = be->ops->alloc(be, 8 * (size_t)cmax * sizeof(float)));
    /* per op: the default's total per step, the best geometry per shape, the best single one */
    double dflt[SW_OPS] = {0}, best[SW_OPS] = {0}, geo_total[SW_OPS][SW_NGEOMS] = {{0}};
    /* bn_persist: ms per step, separate / fused, forward / backward (default geometry), and
     * fused at each shape's best rows a thread; that best per shape (us) */
    double pers[4] = {0}, pers_best[2] = {0}, best_one[2] = {0}, sep_us = 0;
    for (int u = 0; u < ns && !rc; u++) {
        int64_t m = sm[u];
        int c = sc[u];
        if (sw_fill(be, m, c, dt, &b)) { rc = 1; break; }
        for (int op = 0; op < SW_OPS && !rc; op++) {
            cuda_backend_bn_geometry(be, NULL);   /* (restoring the default cannot fail) */
            size_t n0 = 0, n1 = 0;
            float *ref = sw_output(be, op, m, c, dt, &b, &n0);
            double us0 = -1, best_us = -1;
            for (int gi = 0; gi < SW_NGEOMS && !rc; gi++) {
                double us = cuda_backend_bn_geometry(be, &SW_GEOMS[gi]) ? -1.0 : sw_time(be, op, m, c, dt, &b, reps);
                float *out = ref ? sw_output(be, op, m, c, dt, &b, &n1) : NULL;
                if (us < 0 || !out) {
                    fprintf(stderr, "gpu_bench: --bn-sweep %s %lld x %d failed: %s\n", SW_NAMES[op], (long long)m, c,
                            be->err.msg);
                    rc = 1;
                    free(out);
                    break;
                }
                /* apply outputs: the same bits; reductions: the largest relative difference */
                bool same = n0 == n1 && !memcmp(ref, out, n0);
                double rel = 0;
                if (op == SW_STATS || op == SW_BWD_REDUCE)
                    for (size_t k = 0; k < n0 / sizeof(float); k++) {
                        double d = out[k] - ref[k], r = ref[k] < 0 ? -ref[k] : ref[k];
                        d = d < 0 ? -d : d;
                        if (r > 1e-6 && d / r > rel) rel = d / r;
                    }
                free(out);
                if (gi == 0) us0 = us;
                if (best_us < 0 || us < best_us) best_us = us;
                geo_total[op][gi] += us * sl[u] / 1e3;
                double gb = (double)SW_PASSES[op] * (double)m * c * esz / (us * 1e-6) / 1e9;
                printf("{\"bench\": \"bn_sweep\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, "
                       "\"arch\": \"%s\", \"fusion\": \"%s\", \"op\": \"%s\", \"rows\": %lld, \"channels\": %d, \"layers\": %d, "
                       "\"rows_min\": %d, \"blocks_per_sm\": %d, \"v_max\": %d, \"one_pass\": %d, \"us\": %.3f, "
                       "\"gb_s\": %.0f, "
                       "\"vs_default\": %.3f, \"same_bits\": %s, \"max_rel_diff\": %.3g}\n",
                       dev, precision, batch, arch, fnames, SW_NAMES[op], (long long)m, c, sl[u], SW_GEOMS[gi].rows_min,
                       SW_GEOMS[gi].blocks_per_sm, SW_GEOMS[gi].v_max, SW_GEOMS[gi].one_pass, us, gb, us / us0,
                       same ? "true" : "false", rel);
            }
            free(ref);
            if (!ref && !rc) {
                fprintf(stderr, "gpu_bench: --bn-sweep %s: no reference output: %s\n", SW_NAMES[op], be->err.msg);
                rc = 1;
            }
            dflt[op] += us0 * sl[u] / 1e3;
            best[op] += best_us * sl[u] / 1e3;
        }
        /* bn_persist: each direction separate and fused under the default geometry and
         * under 4 and 8 rows a thread (more row splits: more blocks on the small layers,
         * another order of the sums for both ways alike), the same bits per geometry; the
         * totals a step at the default geometry, and the fused ones at each shape's best */
        double sep_dir[2] = {0, 0};
        best_one[0] = best_one[1] = -1.0;
        for (int pg = 0; pg < SW_PGEOMS && !rc && be->ops->bn_fwd_fused; pg++) {
            for (int op = SW_FWD_SEP; op < SW_ALL_OPS && !rc; op++) {
                cuda_backend_bn_geometry(be, pg ? &SW_PG[pg] : NULL);
                size_t n0 = 0, n1 = 0;
                bool one = op == SW_FWD_ONE || op == SW_BWD_ONE;
                int k = op - SW_OPS;
                if (one && sw_call(be, op, m, c, dt, &b) == -2) {   /* refused for this shape */
                    printf("{\"bench\": \"bn_persist\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, "
                           "\"op\": \"%s\", \"rows\": %lld, \"channels\": %d, \"layers\": %d, \"rows_min\": %d, "
                           "\"refused\": true}\n",
                           dev, precision, batch, SW_PNAMES[k], (long long)m, c, sp[u], SW_PG[pg].rows_min);
                    if (pg == 0) pers[k] += sep_us * sp[u] / 1e3;
                    continue;
                }
                float *ref = one ? sw_output(be, op - 1, m, c, dt, &b, &n0) : NULL;
                double us = sw_time(be, op, m, c, dt, &b, reps);
                float *out = one ? sw_output(be, op, m, c, dt, &b, &n1) : NULL;
                if (us < 0 || (one && (!ref || !out))) {
                    fprintf(stderr, "gpu_bench: --bn-sweep %s %lld x %d failed: %s\n", SW_PNAMES[k], (long long)m, c,
                            be->err.msg);
                    rc = 1;
                } else {
                    bool same = !one || (n0 == n1 && !memcmp(ref, out, n0));
                    if (!one) sep_us = us;
                    if (!one && pg == 0) sep_dir[k / 2] = us;
                    if (pg == 0) pers[k] += us * sp[u] / 1e3;
                    if (one && (best_one[k / 2] < 0 || us < best_one[k / 2])) best_one[k / 2] = us;
                    printf("{\"bench\": \"bn_persist\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, "
                           "\"op\": \"%s\", \"rows\": %lld, \"channels\": %d, \"layers\": %d, \"rows_min\": %d, "
                           "\"us\": %.3f, \"vs_separate\": %.3f, \"same_bits\": %s}\n",
                           dev, precision, batch, SW_PNAMES[k], (long long)m, c, sp[u], SW_PG[pg].rows_min, us,
                           one ? us / sep_us : 1.0, same ? "true" : "false");
                }
                free(ref);
                free(out);
            }
        }
        if (be->ops->bn_fwd_fused)
            for (int d = 0; d < 2; d++) pers_best[d] += (best_one[d] >= 0 ? best_one[d] : sep_dir[d]) * sp[u] / 1e3;
    }
    if (!rc && be->ops->bn_fwd_fused) {
        fprintf(stderr, "bn_persist per step, ms: forward separate %.3f, fused %.3f (best rows a thread per shape "
                "%.3f); backward separate %.3f, fused %.3f (%.3f); refused shapes counted as separate\n", pers[0],
                pers[1], pers_best[0], pers[2], pers[3], pers_best[1]);
        printf("{\"bench\": \"bn_persist_total\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, "
               "\"fwd_separate_ms\": %.4f, \"fwd_fused_ms\": %.4f, \"fwd_fused_best_ms\": %.4f, \"bwd_separate_ms\": %.4f, "
               "\"bwd_fused_ms\": %.4f, \"bwd_fused_best_ms\": %.4f}\n",
               dev, precision, batch, pers[0], pers[1], pers_best[0], pers[2], pers[3], pers_best[1]);
    }
    cuda_backend_bn_geometry(be, NULL);
    if (!rc) {
        fprintf(stderr, "%-14s %10s %14s %24s\n", "op", "default ms", "best/shape ms", "best single geometry ms");
        for (int op = 0; op < SW_OPS; op++) {
            int bg = 0;
            for (int gi = 1; gi < SW_NGEOMS; gi++)
                if (geo_total[op][gi] < geo_total[op][bg]) bg = gi;
            fprintf(stderr, "%-14s %10.3f %14.3f %12.3f (%d,%d,%d,%d)\n", SW_NAMES[op], dflt[op], best[op],
                    geo_total[op][bg], SW_GEOMS[bg].rows_min, SW_GEOMS[bg].blocks_per_sm, SW_GEOMS[bg].v_max,
                    SW_GEOMS[bg].one_pass);
            printf("{\"bench\": \"bn_sweep_total\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, "
                   "\"arch\": \"%s\", \"fusion\": \"%s\", \"op\": \"%s\", \"default_ms\": %.4f, \"best_per_shape_ms\": %.4f, "
                   "\"best_single_ms\": %.4f, \"best_single\": [%d, %d, %d, %d]}\n",
                   dev, precision, batch, arch, fnames, SW_NAMES[op], dflt[op], best[op], geo_total[op][bg],
                   SW_GEOMS[bg].rows_min, SW_GEOMS[bg].blocks_per_sm, SW_GEOMS[bg].v_max, SW_GEOMS[bg].one_pass);
        }
    }
    be->ops->release(be, b.x);
    be->ops->release(be, b.dy);
    be->ops->release(be, b.y);
    be->ops->release(be, b.dx);
    be->ops->release(be, b.p);
    backend_free(be);
    return rc;
#endif
}
