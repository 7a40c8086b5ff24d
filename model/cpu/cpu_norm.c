/* cpu_norm.c: batch normalisation for the CPU backend, split in the phases of
 * model/backend.h (stats, apply, running-stat update, backward reduce, backward apply) so
 * SyncBN can reduce across ranks between them.
 *
 * Data is M rows of C channels (NHWC flattened). The activation fused into apply and
 * masked in the backward is relu or relu6 (act_kind_t). Reductions run over fixed blocks of rows,
 * each block summing runs of 16 rows in float and adding each run into double, and the
 * blocks are combined in block order: the result does not depend on thread count or
 * timing. Semantics follow torch BatchNorm2d:
 * biased variance to normalise, unbiased variance in the running estimate.
 * Not here: eval-mode folding, the cross-rank reduction itself (comm/).
 */
#include <math.h>
#include <string.h>

#include "model/cpu/cpu_impl.h"

#define BN_ROWS 256   /* rows per reduction block and per elementwise task */
#define SUB 16        /* rows a reduction sums in float before adding into double */
#define TILE 64       /* channels per stack tile in the reductions and aliasing-safe loops */

/* The block loops are compiled twice, for AVX2 and for the baseline, and the loader picks
 * by CPU. Results are the same bits either way: floating-point contraction is off (ISO
 * C11), and vectorisation here never reorders a sum (each lane is its own channel). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define BN_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define BN_CLONES
#endif

typedef struct bn_task {
    int64_t m;
    int c;
    dtype_t dt;
    const float *x, *y, *dy, *z;
    float *out, *out2;
    const float *scale, *shift, *mean, *coef;   /* per channel */
    double *part;         /* [nblocks][2c] */
    act_kind_t act;
    bool aliased;         /* bwd apply: an output overlaps an input */
} bn_task_t;

static void block_range(const bn_task_t *t, int chunk, int64_t *lo, int64_t *hi) {
    *lo = (int64_t)chunk * BN_ROWS;
    *hi = *lo + BN_ROWS < t->m ? *lo + BN_ROWS : t->m;
}

/* Eight float lanes (GCC vector extension; loads and stores go through memcpy, so any
 * alignment works). Each lane is its own channel: vector and scalar code give the same
 * bits, and so do the AVX2 and baseline clones. */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
#define VG 4   /* 8-channel groups one pass of a reduction keeps in registers */

/* A macro, not a function: a function returning v8f warns about the AVX ABI (-Wpsabi). */
#define V8_LOAD(v, p) memcpy(&(v), (p), sizeof(v8f))

/* Adds float run sums of channels [j0, j0 + 8*ng) into the block's double sums. */
static inline __attribute__((always_inline)) void add_run(const v8f *fs, const v8f *fq, int ng,
                                                          int j0, double *s, double *q) {
    for (int g = 0; g < ng; g++)
        for (int l = 0; l < 8; l++) {
            s[j0 + 8 * g + l] += (double)fs[g][l];
            q[j0 + 8 * g + l] += (double)fq[g][l];
        }
}

/* One run of rows [r0, r1) of stats_block on channels [j0, j0 + 8*ng), ng <= VG constant
 * after inlining, so the sums stay in registers. */
static inline __attribute__((always_inline)) void stats_run(const float *x, int c, int64_t r0,
                                                            int64_t r1, int j0, int ng,
                                                            const float *k, double *s,
                                                            double *q) {
    v8f ks[VG], fs[VG], fq[VG];
    for (int g = 0; g < ng; g++) {
        V8_LOAD(ks[g], k + j0 + 8 * g);
        fs[g] = fq[g] = (v8f){0};
    }
    for (int64_t i = r0; i < r1; i++)
        for (int g = 0; g < ng; g++) {
            v8f d;
            V8_LOAD(d, x + i * c + j0 + 8 * g);
            d -= ks[g];
            fs[g] += d;
            fq[g] += d * d;
        }
    add_run(fs, fq, ng, j0, s, q);
}

/* Sum and sum of squares of (x - shift) over one block, per channel. Runs of SUB rows
 * accumulate in float (a short sum: fp32 rounding stays ~1e-7 relative) in registers, each
 * run then adds into the block's double sums: float lanes are twice as many per vector as
 * double ones and the loop no longer converts every element. Shifting by a value of the
 * data (row 0) keeps E[d^2] - E[d]^2 free of cancellation for offset data. Channels past
 * the last multiple of 8 take the same sums through a scalar loop. */
BN_CLONES static void stats_block(void *argp, int chunk) {
    bn_task_t *t = argp;
    int c = t->c;
    const float *k = t->mean;
    double *s = t->part + (int64_t)chunk * 2 * c, *q = s + c;
    memset(s, 0, 2 * (size_t)c * sizeof(double));
    int64_t lo, hi;
    block_range(t, chunk, &lo, &hi);
    for (int64_t r0 = lo; r0 < hi; r0 += SUB) {
        int64_t r1 = r0 + SUB < hi ? r0 + SUB : hi;
        int j0 = 0;
        for (; c - j0 >= 8 * VG; j0 += 8 * VG) stats_run(t->x, c, r0, r1, j0, VG, k, s, q);
        switch ((c - j0) / 8) {
        case 3: stats_run(t->x, c, r0, r1, j0, 3, k, s, q); j0 += 24; break;
        case 2: stats_run(t->x, c, r0, r1, j0, 2, k, s, q); j0 += 16; break;
        case 1: stats_run(t->x, c, r0, r1, j0, 1, k, s, q); j0 += 8; break;
        default: break;
        }
        for (; j0 < c; j0++) {
            float fs = 0.0f, fq = 0.0f;
            for (int64_t i = r0; i < r1; i++) {
                float d = t->x[i * c + j0] - k[j0];
                fs += d;
                fq += d * d;
            }
            s[j0] += (double)fs;
            q[j0] += (double)fq;
        }
    }
}

/* Adds the per-block partials [nb][2c] in block order into out (2c doubles). */
static void combine(const double *part, int nb, int c, double *out) {
    memset(out, 0, 2 * (size_t)c * sizeof(double));
    for (int b = 0; b < nb; b++)
        for (int j = 0; j < 2 * c; j++) out[j] += part[(int64_t)b * 2 * c + j];
}

/* Workspace for nb blocks of partials plus the combined row, as doubles. */
static double *partials(cpu_backend_t *cb, int nb, int c) {
    return (double *)cpu_scratch(cb, ((size_t)nb + 1) * 2 * (size_t)c * 2);
}

int cpu_bn_stats(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean,
                 float *var) {
    cpu_backend_t *cb = cpu_of(be);
    if (m < 1) return err_set(&be->err, ERR_RUNTIME, "cpu bn_stats: no rows");
    int nb = cpu_nchunks(m, BN_ROWS);
    double *part = partials(cb, nb, c);
    if (!part) return -1;
    const float *shift = x;   /* row 0 */
    bn_task_t t = {.m = m, .c = c, .dt = dt, .x = x, .mean = shift, .part = part};
    cpu_pool_run(&cb->pool, nb, stats_block, &t);
    double *tot = part + (int64_t)nb * 2 * c;
    combine(part, nb, c, tot);
    for (int j = 0; j < c; j++) {
        double md = tot[j] / (double)m;
        double v = tot[c + j] / (double)m - md * md;
        mean[j] = (float)((double)shift[j] + md);
        var[j] = (float)(v > 0 ? v : 0);
    }
    return 0;
}

/* The fused activation on one row, in place: relu as `v < 0 ? 0 : v` and relu6 as that
 * then `v > 6 ? 6 : v`, so that NaN passes through as in torch. Branch-free loops the
 * compiler vectorises. */
static inline __attribute__((always_inline)) void act_row(float *restrict yr, int c, act_kind_t act) {
    if (act == ACT_RELU)
        for (int j = 0; j < c; j++) yr[j] = yr[j] < 0.0f ? 0.0f : yr[j];
    else if (act == ACT_RELU6)
        for (int j = 0; j < c; j++) {
            float v = yr[j] < 0.0f ? 0.0f : yr[j];
            yr[j] = v > 6.0f ? 6.0f : v;
        }
}

/* y = act(x * scale + shift [+ z]) on one block of rows, rounded once to dt. The
 * variants are separate branch-free loops so the compiler vectorises them; relu is
 * written `v < 0 ? 0 : v` so that NaN passes through as in torch. */
BN_CLONES static void apply_block(void *argp, int chunk) {
    bn_task_t *t = argp;
    int c = t->c;
    const float *sc = t->scale, *sh = t->shift;
    int64_t lo, hi;
    block_range(t, chunk, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        const float *xr = t->x + i * c;
        float *yr = t->out + i * c;
        if (t->z) {
            const float *zr = t->z + i * c;
            if (t->act == ACT_RELU)
                for (int j = 0; j < c; j++) {
                    float v = xr[j] * sc[j] + sh[j] + zr[j];
                    yr[j] = v < 0.0f ? 0.0f : v;
                }
            else {
                for (int j = 0; j < c; j++) yr[j] = xr[j] * sc[j] + sh[j] + zr[j];
                act_row(yr, c, t->act);
            }
        } else if (t->act == ACT_RELU) {
            for (int j = 0; j < c; j++) {
                float v = xr[j] * sc[j] + sh[j];
                yr[j] = v < 0.0f ? 0.0f : v;
            }
        } else {
            for (int j = 0; j < c; j++) yr[j] = xr[j] * sc[j] + sh[j];
            act_row(yr, c, t->act);
        }
        if (t->dt != DT_F32)
            cpu_round_n(t->dt, yr, yr, c);
    }
}

int cpu_bn_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                 const float *var, const float *gamma, const float *beta, float eps,
                 const void *z, act_kind_t act, void *y) {
    cpu_backend_t *cb = cpu_of(be);
    float *ss = cpu_scratch(cb, 2 * (size_t)c);
    if (!ss) return -1;
    for (int j = 0; j < c; j++) {
        double invstd = 1.0 / sqrt((double)var[j] + (double)eps);
        ss[j] = (float)((double)gamma[j] * invstd);
        ss[c + j] = (float)((double)beta[j] - (double)mean[j] * (double)gamma[j] * invstd);
    }
    bn_task_t t = {.m = m, .c = c, .dt = dt, .x = x, .z = z, .out = y, .scale = ss,
                   .shift = ss + c, .act = act};
    cpu_pool_run(&cb->pool, cpu_nchunks(m, BN_ROWS), apply_block, &t);
    return 0;
}

int cpu_bn_update_running(backend_t *be, int c, const float *mean, const float *var,
                          int64_t count, float momentum, float *run_mean, float *run_var) {
    (void)be;
    float unbias = count > 1 ? (float)((double)count / (double)(count - 1)) : 1.0f;
    for (int j = 0; j < c; j++) {
        run_mean[j] = momentum * mean[j] + (1.0f - momentum) * run_mean[j];
        run_var[j] = momentum * (var[j] * unbias) + (1.0f - momentum) * run_var[j];
    }
    return 0;
}

/* Whether the gradient passes the fused activation at output v: v > 0 for relu (NaN
 * masks), not (v <= 0 or v >= 6) for relu6 (torch's hardtanh backward: NaN passes). */
static inline bool act_keeps(act_kind_t act, float v) {
    return act == ACT_RELU6 ? !(v <= 0.0f || v >= 6.0f) : v > 0.0f;
}

/* One run of rows [r0, r1) of reduce_block on channels [j0, j0 + 8*ng) (as stats_run). */
static inline __attribute__((always_inline)) void reduce_run(const bn_task_t *t, int64_t r0,
                                                             int64_t r1, int j0, int ng,
                                                             double *s, double *q) {
    int c = t->c;
    const v8f six = {6, 6, 6, 6, 6, 6, 6, 6};
    v8f mu[VG], fs[VG], fq[VG];
    for (int g = 0; g < ng; g++) {
        V8_LOAD(mu[g], t->mean + j0 + 8 * g);
        fs[g] = fq[g] = (v8f){0};
    }
    for (int64_t i = r0; i < r1; i++)
        for (int g = 0; g < ng; g++) {
            int64_t o = i * c + j0 + 8 * g;
            v8f d, xv;
            V8_LOAD(d, t->dy + o);
            V8_LOAD(xv, t->x + o);
            if (t->y) {
                v8f yv;
                V8_LOAD(yv, t->y + o);
                v8i keep = t->act == ACT_RELU6 ? ~((yv <= (v8f){0}) | (yv >= six))
                                                : yv > (v8f){0};
                d = (v8f)((v8i)d & keep);
            }
            fs[g] += d;
            fq[g] += d * (xv - mu[g]);
        }
    add_run(fs, fq, ng, j0, s, q);
}

/* Sum of masked dy and of masked dy * (x - mean) over one block, per channel: runs of SUB
 * rows accumulate in float registers, each run then adds into the block's double sums (as
 * in stats_block). dy is masked by act_keeps(y) when y is given. */
BN_CLONES static void reduce_block(void *argp, int chunk) {
    bn_task_t *t = argp;
    int c = t->c;
    double *s = t->part + (int64_t)chunk * 2 * c, *q = s + c;
    memset(s, 0, 2 * (size_t)c * sizeof(double));
    int64_t lo, hi;
    block_range(t, chunk, &lo, &hi);
    for (int64_t r0 = lo; r0 < hi; r0 += SUB) {
        int64_t r1 = r0 + SUB < hi ? r0 + SUB : hi;
        int j0 = 0;
        for (; c - j0 >= 8 * VG; j0 += 8 * VG) reduce_run(t, r0, r1, j0, VG, s, q);
        switch ((c - j0) / 8) {
        case 3: reduce_run(t, r0, r1, j0, 3, s, q); j0 += 24; break;
        case 2: reduce_run(t, r0, r1, j0, 2, s, q); j0 += 16; break;
        case 1: reduce_run(t, r0, r1, j0, 1, s, q); j0 += 8; break;
        default: break;
        }
        for (; j0 < c; j0++) {
            float fs = 0.0f, fq = 0.0f;
            for (int64_t i = r0; i < r1; i++) {
                float d = t->dy[i * c + j0];
                if (t->y && !act_keeps(t->act, t->y[i * c + j0])) d = 0.0f;
                fs += d;
                fq += d * (t->x[i * c + j0] - t->mean[j0]);
            }
            s[j0] += (double)fs;
            q[j0] += (double)fq;
        }
    }
}

int cpu_bn_bwd_reduce(backend_t *be, int64_t m, int c, dtype_t dt, const void *x,
                      const void *y, act_kind_t act, const void *dy, const float *mean,
                      const float *var, const float *gamma, const float *beta, float eps,
                      float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta) {
    cpu_backend_t *cb = cpu_of(be);
    (void)gamma, (void)beta;   /* the mask always comes from y here */
    if (m < 1) return err_set(&be->err, ERR_RUNTIME, "cpu bn_bwd_reduce: no rows");
    int nb = cpu_nchunks(m, BN_ROWS);
    double *part = partials(cb, nb, c);
    if (!part) return -1;
    bn_task_t t = {.m = m, .c = c, .dt = dt, .x = x, .y = y, .dy = dy, .mean = mean,
                   .part = part, .act = act};
    cpu_pool_run(&cb->pool, nb, reduce_block, &t);
    double *tot = part + (int64_t)nb * 2 * c;
    combine(part, nb, c, tot);
    for (int j = 0; j < c; j++) {
        double invstd = 1.0 / sqrt((double)var[j] + (double)eps);
        float sd = (float)tot[j], sdx = (float)(tot[c + j] * invstd);
        sum_dy[j] = sd;
        sum_dy_xhat[j] = sdx;
        dbeta[j] += sd;
        dgamma[j] += sdx;
    }
    return 0;
}

/* One row of the backward apply when no output aliases an input: dz = masked dy,
 * dx = scale * (dz - mean_dy - (x - mean) * coef). */
static inline void bwd_row(int c, const float *restrict x, const float *restrict y,
                           act_kind_t act, const float *restrict dy, const float *restrict sc,
                           const float *restrict mdy, const float *restrict coef,
                           const float *restrict mean, float *restrict dx,
                           float *restrict dz) {
    if (y && act == ACT_RELU6) {
        for (int j = 0; j < c; j++) {
            float dv = dy[j], yv = y[j];
            float d = yv <= 0.0f || yv >= 6.0f ? 0.0f : dv;
            if (dz) dz[j] = d;
            dx[j] = sc[j] * (d - mdy[j] - (x[j] - mean[j]) * coef[j]);
        }
    } else if (y && dz) {
        for (int j = 0; j < c; j++) {
            float dv = dy[j], yv = y[j];
            float d = yv > 0.0f ? dv : 0.0f;
            dz[j] = d;
            dx[j] = sc[j] * (d - mdy[j] - (x[j] - mean[j]) * coef[j]);
        }
    } else if (y) {
        for (int j = 0; j < c; j++) {
            float dv = dy[j], yv = y[j];
            float d = yv > 0.0f ? dv : 0.0f;
            dx[j] = sc[j] * (d - mdy[j] - (x[j] - mean[j]) * coef[j]);
        }
    } else {
        for (int j = 0; j < c; j++) {
            float d = dy[j];
            if (dz) dz[j] = d;
            dx[j] = sc[j] * (d - mdy[j] - (x[j] - mean[j]) * coef[j]);
        }
    }
}

/* The same on one tile of a row through stack buffers, for when dx or dz aliases an input
 * (dx == dy is allowed): every input element is read before its output is written. */
static void bwd_row_aliased(int c, const float *x, const float *y, act_kind_t act,
                            const float *dy, const float *sc, const float *mdy,
                            const float *coef, const float *mean, float *dx, float *dz) {
    for (int j0 = 0; j0 < c; j0 += TILE) {
        int nj = c - j0 < TILE ? c - j0 : TILE;
        float dzt[TILE], dxt[TILE];
        for (int j = 0; j < nj; j++) {
            float dv = dy[j0 + j];
            dzt[j] = y && !act_keeps(act, y[j0 + j]) ? 0.0f : dv;
        }
        for (int j = 0; j < nj; j++)
            dxt[j] = sc[j0 + j] * (dzt[j] - mdy[j0 + j] -
                                   (x[j0 + j] - mean[j0 + j]) * coef[j0 + j]);
        if (dz) memcpy(dz + j0, dzt, (size_t)nj * sizeof(float));
        memcpy(dx + j0, dxt, (size_t)nj * sizeof(float));
    }
}

/* Backward apply on one block of rows, then rounding of dx to dt. */
BN_CLONES static void bwd_apply_block(void *argp, int chunk) {
    bn_task_t *t = argp;
    int c = t->c;
    int64_t lo, hi;
    block_range(t, chunk, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        const float *x = t->x + i * c, *y = t->y ? t->y + i * c : NULL, *dy = t->dy + i * c;
        float *dx = t->out + i * c, *dz = t->out2 ? t->out2 + i * c : NULL;
        if (t->aliased)
            bwd_row_aliased(c, x, y, t->act, dy, t->scale, t->shift, t->coef, t->mean, dx, dz);
        else
            bwd_row(c, x, y, t->act, dy, t->scale, t->shift, t->coef, t->mean, dx, dz);
        if (t->dt != DT_F32)
            cpu_round_n(t->dt, dx, dx, c);
    }
}

/* Whether [a, a+n) and [b, b+n) overlap (b may be NULL). */
static bool overlaps(const void *a, const void *b, size_t n) {
    const char *pa = a, *pb = b;
    return pb && pa < pb + n && pb < pa + n;
}

int cpu_bn_bwd_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x,
                     const void *y, act_kind_t act, const void *dy, const float *mean,
                     const float *var, const float *gamma, const float *beta, float eps,
                     const float *sum_dy, const float *sum_dy_xhat, int64_t count, void *dx,
                     void *dz) {
    cpu_backend_t *cb = cpu_of(be);
    (void)beta;   /* the mask always comes from y here */
    if (count < 1) return err_set(&be->err, ERR_RUNTIME, "cpu bn_bwd_apply: count < 1");
    float *ws = cpu_scratch(cb, 3 * (size_t)c);
    if (!ws) return -1;
    for (int j = 0; j < c; j++) {
        double invstd = 1.0 / sqrt((double)var[j] + (double)eps);
        ws[j] = (float)((double)gamma[j] * invstd);
        ws[c + j] = (float)((double)sum_dy[j] / (double)count);
        ws[2 * c + j] = (float)((double)sum_dy_xhat[j] * invstd / (double)count);
    }
    size_t bytes = (size_t)m * (size_t)c * sizeof(float);
    bool aliased = overlaps(dx, x, bytes) || overlaps(dx, y, bytes) || overlaps(dx, dy, bytes) ||
                   overlaps(dx, dz, bytes) ||
                   (dz && (overlaps(dz, x, bytes) || overlaps(dz, y, bytes) ||
                           overlaps(dz, dy, bytes)));
    bn_task_t t = {.m = m, .c = c, .dt = dt, .x = x, .y = y, .dy = dy, .out = dx, .out2 = dz,
                   .mean = mean, .scale = ws, .shift = ws + c, .coef = ws + 2 * c,
                   .aliased = aliased, .act = act};
    cpu_pool_run(&cb->pool, cpu_nchunks(m, BN_ROWS), bwd_apply_block, &t);
    return 0;
}
