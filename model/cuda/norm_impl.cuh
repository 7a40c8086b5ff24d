/* norm_impl.cuh: what the BN kernels of norm.cu and norm_dual.cu (bn_dual_add) share,
 * private to those two files: the vector loads and stores, the per-block partial sums
 * and the second pass that adds the row splits (bn_bwd_final_k), the one expressions of
 * the forward's output (bn_out), the channel scale, the activation mask (from y, from
 * bits, as a byte) and the backward's dx (bn_dx), the launch geometry of the row kernels
 * (bn_geom, with cuda_backend_bn_geometry's overrides) and bn_apply_tune's timed launch
 * (tuned_launch). The layout of the work and the numerics are described at the top of
 * norm.cu.
 */
#ifndef RUNNER_MODEL_CUDA_NORM_IMPL_CUH
#define RUNNER_MODEL_CUDA_NORM_IMPL_CUH

#include "model/cuda/bn_persist_plan.h"
#include "model/cuda/cuda_impl.cuh"

enum { BN_TX = 32, BN_TY = 8, BN_TY_WIDE = 32, BN_ONE_PASS_SPLITS = 64 };

/* Loads V consecutive elements (V-aligned) as floats. */
template <typename T, int V>
__device__ __forceinline__ void load_v(const T *p, float (&f)[V]) {
    if constexpr (V == 1) {
        f[0] = to_f32(*p);
    } else {
        pack_t<T, V> a = *reinterpret_cast<const pack_t<T, V> *>(p);
#pragma unroll
        for (int k = 0; k < V; k++) f[k] = to_f32(a.v[k]);
    }
}

template <typename T, int V>
__device__ __forceinline__ void store_v(T *p, const float (&f)[V]) {
    if constexpr (V == 1) {
        *p = from_f32<T>(f[0]);
    } else {
        pack_t<T, V> a;
#pragma unroll
        for (int k = 0; k < V; k++) a.v[k] = from_f32<T>(f[k]);
        *reinterpret_cast<pack_t<T, V> *>(p) = a;
    }
}

/* Sums two per-thread arrays over threadIdx.y and writes them as split `split` of `splits`
 * of part (layout [2][splits][c]). Must be reached by every thread of the block (TX x TY =
 * 256 at most; with TX = 32 the order of the sums is that of the 32 x 8 layout). The row
 * kernels' split is blockIdx.y of gridDim.y (block_partials); bn_persist's blocks each
 * take several of the same splits one after another. */
template <int V>
__device__ __forceinline__ void block_partials_at(const float (&a)[V], const float (&b)[V], bool active, int ch0,
                                                  int c, float *part, int64_t split, int64_t splits) {
    __shared__ float sa[BN_TY * BN_TX * V], sb[BN_TY * BN_TX * V];
    int row = blockDim.x * V;   /* one threadIdx.y's values */
#pragma unroll
    for (int k = 0; k < V; k++) {
        sa[threadIdx.y * row + threadIdx.x * V + k] = a[k];
        sb[threadIdx.y * row + threadIdx.x * V + k] = b[k];
    }
    __syncthreads();
    if (threadIdx.y == 0 && active) {
#pragma unroll
        for (int k = 0; k < V; k++) {
            float u = 0.0f, w = 0.0f;
            for (int j = 0; j < (int)blockDim.y; j++) {
                u += sa[j * row + threadIdx.x * V + k];
                w += sb[j * row + threadIdx.x * V + k];
            }
            part[split * c + ch0 + k] = u;
            part[(splits + split) * c + ch0 + k] = w;
        }
    }
}

template <int V>
__device__ __forceinline__ void block_partials(const float (&a)[V], const float (&b)[V],
                                               bool active, int ch0, int c, float *part) {
    block_partials_at<V>(a, b, active, ch0, c, part, (int64_t)blockIdx.y, (int64_t)gridDim.y);
}

/* One row's contribution to the statistics' two per-thread sums, of d = v - shift and
 * d^2: the one expression of bn_stats_partial_k and bn_persist's forward. */
template <int V>
__device__ __forceinline__ void stats_acc(float (&s)[V], float (&ss)[V], const float (&v)[V],
                                          const float (&shift)[V]) {
#pragma unroll
    for (int k = 0; k < V; k++) {
        float d = v[k] - shift[k];
        s[k] += d;
        ss[k] += d * d;
    }
}

/* One row's contribution to the backward's two per-thread sums, of g and g * (x - mean):
 * the one expression of bn_bwd_partial_k and bn_persist's backward. */
template <int V>
__device__ __forceinline__ void bwd_acc(float (&s)[V], float (&sx)[V], const float (&g)[V], const float (&xv)[V],
                                        const float (&mu)[V]) {
#pragma unroll
    for (int k = 0; k < V; k++) {
        s[k] += g[k];
        sx[k] += g[k] * (xv[k] - mu[k]);
    }
}

/* Whether the gradient passes the fused activation at output v: v > 0 for relu (NaN
 * masks), not (v <= 0 or v >= 6) for relu6 (torch's hardtanh backward: NaN passes). */
__device__ __forceinline__ bool act_keeps(int act, float v) {
    return act == ACT_RELU6 ? !(v <= 0.0f || v >= 6.0f) : v > 0.0f;
}

/* A channel's scale gamma / sqrt(var + eps), each step rounded to nearest: what nvcc
 * makes of `gamma / sqrtf(var + eps)` without fast math (IEEE division and square root),
 * spelled out so that bn_apply_k and the backward's mask recompute cannot differ. */
__device__ __forceinline__ float bn_scale(float gamma, float var, float eps) {
    return __fdiv_rn(gamma, __fsqrt_rn(__fadd_rn(var, eps)));
}

/* The per-channel values an apply kernel computes a thread's V channels (ch0 on) with:
 * mean, scale (bn_scale) and shift. */
template <int V>
__device__ __forceinline__ void apply_params(int ch0, const float *mean, const float *var, const float *gamma,
                                             const float *beta, float eps, float (&mu)[V], float (&sc)[V],
                                             float (&bt)[V]) {
#pragma unroll
    for (int k = 0; k < V; k++) {
        mu[k] = mean[ch0 + k];
        sc[k] = bn_scale(gamma[ch0 + k], var[ch0 + k], eps);
        bt[k] = beta[ch0 + k];
    }
}

/* The forward's fp32 output before rounding to T: act((v - mu) * sc + bt [+ w]), the
 * multiply-add fused (as nvcc contracts it by default) and the residual added after;
 * relu / relu6 let NaN pass, as torch and the cpu backend. */
__device__ __forceinline__ float bn_out(int act, float v, float mu, float sc, float bt, bool add, float w) {
    float o = __fmaf_rn(__fsub_rn(v, mu), sc, bt);
    if (add) o = __fadd_rn(o, w);
    if (act != ACT_NONE) o = o < 0.0f ? 0.0f : o;
    if (act == ACT_RELU6) o = o > 6.0f ? 6.0f : o;
    return o;
}

/* The running-statistics update of channel ch from the batch's mean mu and biased
 * variance v (unbias = count / (count - 1)): run = momentum * batch + (1 - momentum) *
 * run, the expression bn_running_k always had; one function for it and the statistics'
 * final kernel (bn_fold_running), so the two compile the same arithmetic (test_gpu_norm
 * holds them to the same bits). */
__device__ __forceinline__ void bn_running_one(int ch, float mu, float v, float unbias, float momentum,
                                               float *run_mean, float *run_var) {
    run_mean[ch] = momentum * mu + (1.0f - momentum) * run_mean[ch];
    run_var[ch] = momentum * (v * unbias) + (1.0f - momentum) * run_var[ch];
}

/* A channel's mean and biased variance from its two sums (of x - x0 and its square over
 * m rows; x0 = x[0][ch], the shift): the one arithmetic of stats_out and bn_persist. */
__device__ __forceinline__ void stats_of(double s, double ss, int64_t m, float x0, float *mu, float *vf) {
    double ms = s / (double)m, v = ss / (double)m - ms * ms;
    *mu = (float)((double)x0 + ms);
    *vf = (float)(v > 0.0 ? v : 0.0);
}

/* The statistics of channel ch from its two sums (of x - x[0][ch] and its square over m
 * rows): mean, biased var, and with run_mean the running update; the one function of the
 * two-pass final kernel and the one-pass last block. */
template <typename T>
__device__ __forceinline__ void stats_out(int ch, double s, double ss, int64_t m, const T *x, float *mean,
                                          float *var, float unbias, float momentum, float *run_mean,
                                          float *run_var) {
    float mu, vf;
    stats_of(s, ss, m, to_f32(x[ch]), &mu, &vf);
    mean[ch] = mu;
    var[ch] = vf;
    if (run_mean) bn_running_one(ch, mu, vf, unbias, momentum, run_mean, run_var);
}

/* act_keeps of the y that bn_apply_k (no residual) stored for input v: bn_out rounded to
 * T and back, so a tiny positive output that rounds to 0 in fp16 is masked as stored. */
template <typename T>
__device__ __forceinline__ bool remask_keeps(int act, float v, float mu, float sc, float bt) {
    return act_keeps(act, to_f32(from_f32<T>(bn_out(act, v, mu, sc, bt, false, 0.0f))));
}

/* The per-channel scale and shift of the mask recompute (bn_remask): sc, bt of
 * bn_apply_k when beta is given, else zeros (unused). */
template <int V>
__device__ __forceinline__ void remask_params(int ch0, const float *var, const float *gamma, const float *beta,
                                              float eps, float (&sc)[V], float (&bt)[V]) {
#pragma unroll
    for (int k = 0; k < V; k++) {
        sc[k] = beta ? bn_scale(gamma[ch0 + k], var[ch0 + k], eps) : 0.0f;
        bt[k] = beta ? beta[ch0 + k] : 0.0f;
    }
}

/* The backward's per-channel results from the two sums (of g and g * (x - mean)): the
 * one function of the two-pass final kernel and the one-pass last block (bwd_of: the
 * arithmetic, bn_persist's too). */
__device__ __forceinline__ void bwd_of(double s, double sx, float var, float eps, float *sdy, float *sdyx) {
    double invstd = 1.0 / sqrt((double)var + (double)eps);   /* as the cpu backend */
    *sdy = (float)s;
    *sdyx = (float)(sx * invstd);
}

__device__ __forceinline__ void bwd_out(int ch, double s, double sx, const float *var, float eps, float *sum_dy,
                                        float *sum_dy_xhat, float *dgamma, float *dbeta) {
    float sdy, sdyx;
    bwd_of(s, sx, var[ch], eps, &sdy, &sdyx);
    sum_dy[ch] = sdy;
    sum_dy_xhat[ch] = sdyx;
    if (dbeta) dbeta[ch] += sdy;
    if (dgamma) dgamma[ch] += sdyx;
}

/* The mask bits of elements i .. i + V - 1 (bn_mask_bits) as bit k of the result: one
 * byte load for V = 8 (i is then a multiple of 8: V divides c and the channel offset). */
template <int V>
__device__ __forceinline__ unsigned mask_bits(const uint8_t *mask, int64_t i) {
    if constexpr (V == 8) {
        return mask[i >> 3];
    } else {
        unsigned b = 0;
#pragma unroll
        for (int k = 0; k < V; k++) b |= ((unsigned)(mask[(i + k) >> 3] >> ((i + k) & 7)) & 1u) << k;
        return b;
    }
}

/* Zeroes g[k] whose mask bit (element i + k; bn_mask_bits) is clear. */
template <int V>
__device__ __forceinline__ void drop_by_bits(float (&g)[V], const uint8_t *mask, int64_t i) {
    unsigned b = mask_bits<V>(mask, i);
#pragma unroll
    for (int k = 0; k < V; k++)
        if (!((b >> k) & 1u)) g[k] = 0.0f;
}

/* Zeroes g[k] where the gradient does not pass act at the stored y[k]. */
template <typename T, int V>
__device__ __forceinline__ void drop_by_y(float (&g)[V], const T *y, int act) {
    float yv[V];
    load_v<T, V>(y, yv);
#pragma unroll
    for (int k = 0; k < V; k++)
        if (!act_keeps(act, yv[k])) g[k] = 0.0f;
}

/* g (dy as loaded) masked by the activation as the backward kernels see it: from the
 * bits with MASK (bn_mask_bits), recomputed from x when beta is given (bn_remask; mu,
 * sc, bt: remask_params'), else from y when y is given (none: nothing masked). off: the
 * element offset of the thread's V channels. */
template <typename T, int V, bool MASK>
__device__ __forceinline__ void bwd_mask(float (&g)[V], const float (&xv)[V], int64_t off, const uint8_t *mask,
                                         const float *beta, const float (&mu)[V], const float (&sc)[V],
                                         const float (&bt)[V], const T *y, int act) {
    if constexpr (MASK) {
        drop_by_bits<V>(g, mask, off);
    } else if (beta) {
#pragma unroll
        for (int k = 0; k < V; k++)
            if (!remask_keeps<T>(act, xv[k], mu[k], sc[k], bt[k])) g[k] = 0.0f;
    } else if (y) {
        drop_by_y<T, V>(g, y + off, act);
    }
}

/* The mask byte of a thread's 8 outputs v (bit k: act_keeps of v[k] as stored in T). */
template <typename T, int V>
__device__ __forceinline__ uint8_t mask_byte(int act, const float (&v)[V]) {
    unsigned b = 0;
#pragma unroll
    for (int k = 0; k < V; k++) b |= (act_keeps(act, to_f32(from_f32<T>(v[k]))) ? 1u : 0u) << k;
    return (uint8_t)b;
}

/* The backward sums' second pass (norm.cu's bn_bwd_final_k, 32 x 32 threads a block
 * with bn_wide_final): adds splits row splits of part ([2][splits][c]) per channel in
 * double, writes sum_dy and sum_dy_xhat and adds them into dbeta and dgamma (either may
 * be NULL). 0, or -1 with cb's error. */
int cu_bn_bwd_final(cuda_be_t *cb, int c, int splits, const float *part, const float *var, float eps,
                    float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta);

/* The per-channel values a dx kernel computes a thread's V channels (ch0 on) with: mean,
 * 1 / std, gamma / std, and the two sums over count (bn_dx's mdy, mdyx). */
/* One channel's values of dx_params (bn_persist takes the sums from shared memory). */
__device__ __forceinline__ void dx_param_one(float mean, float var, float gamma, float eps, float sdy, float sdyx,
                                             float inv_count, float *mu, float *is, float *a, float *mdy,
                                             float *mdyx) {
    *mu = mean;
    *is = 1.0f / sqrtf(var + eps);
    *a = gamma * *is;
    *mdy = sdy * inv_count;
    *mdyx = sdyx * inv_count;
}

template <int V>
__device__ __forceinline__ void dx_params(int ch0, const float *mean, const float *var, const float *gamma, float eps,
                                          const float *sum_dy, const float *sum_dy_xhat, float inv_count,
                                          float (&mu)[V], float (&is)[V], float (&a)[V], float (&mdy)[V],
                                          float (&mdyx)[V]) {
#pragma unroll
    for (int k = 0; k < V; k++)
        dx_param_one(mean[ch0 + k], var[ch0 + k], gamma[ch0 + k], eps, sum_dy[ch0 + k], sum_dy_xhat[ch0 + k],
                     inv_count, &mu[k], &is[k], &a[k], &mdy[k], &mdyx[k]);
}

/* One element of a BN's dx: a (gamma * invstd) * (g - mean(dy) - xhat * mean(dy * xhat)),
 * the one expression bn_bwd_apply_k and bn_bwd_apply_dual_k compile (the same bits). */
__device__ __forceinline__ float bn_dx(float g, float x, float mu, float is, float a, float mdy, float mdyx) {
    float xhat = (x - mu) * is;
    return a * (g - mdy - xhat * mdyx);
}

/* Launch geometry of the row kernels: V channels per thread, TX x TY threads a block,
 * the grid. Default: V = 8 (half only), 4 or 2 when V divides c, a warp's 32 lanes all
 * get channels, the access is at most 16 bytes and every pointer is aligned to it, else
 * 1; TX = 32, TY = 8; row splits (grid.y) for ~8 blocks an SM, at least 16 rows a thread
 * (bn_more_splits: 4, so the 8 x 8 and 4 x 4 layers fill the GPU), at most 1024. With vec16 (BACKEND_FUSE_VEC16): V = 16 bytes of channels wherever
 * that divides c and the pointers are 16-byte aligned, TX = c / V when that is below 32
 * (TY = 256 / TX rows per block step), so 64 half channels take 8 lanes of 16 bytes. */
typedef struct bn_geom {
    int v;
    dim3 grid, block;
} bn_geom_t;

static bool all_aligned(const void *a, const void *b, const void *d, const void *e, const void *f,
                        size_t al) {
    return cb_aligned(a, al) && cb_aligned(b, al) && cb_aligned(d, al) && cb_aligned(e, al) && cb_aligned(f, al);
}

/* The largest power of two, at most 16, every pointer is aligned to (NULL: any). */
static size_t common_align(const void *a, const void *b, const void *d, const void *e, const void *f) {
    uintptr_t u = (uintptr_t)a | (uintptr_t)b | (uintptr_t)d | (uintptr_t)e | (uintptr_t)f | 16u;
    return (size_t)(u & (~u + 1));
}

/* The geometry for V = v channels a thread; narrow: TX = c / v where that is below 32
 * (bn_row_grid, with cuda_backend_bn_geometry's overrides: at least 16 rows a thread, 4
 * with bn_more_splits; 8 blocks an SM). */
static bn_geom_t bn_geom_v(const cuda_be_t *cb, int64_t m, int c, int v, bool narrow) {
    int rows = cb->bn_rows_min ? cb->bn_rows_min : (cb->fusion & BACKEND_FUSE_BN_MORE_SPLITS) ? 4 : 16;
    int per_sm = cb->bn_blocks_per_sm ? cb->bn_blocks_per_sm : 8;
    bn_row_geom_t r = bn_row_grid(m, c, v, narrow, rows, per_sm, cb->sm_count);
    bn_geom_t g;
    g.v = v;
    g.grid = dim3((unsigned)r.gx, (unsigned)r.gy, 1);
    g.block = dim3((unsigned)r.tx, (unsigned)r.ty, 1);
    return g;
}

static bn_geom_t bn_geom(const cuda_be_t *cb, int64_t m, int c, size_t esz, const void *a,
                         const void *b, const void *d, const void *e, const void *f) {
    bool wide = cb->fusion & BACKEND_FUSE_VEC16;
    int v = bn_row_v(c, esz, common_align(a, b, d, e, f), wide, cb->bn_v_max);
    return bn_geom_v(cb, m, c, v, wide);
}

/* The beta the backward kernels get: the op's when bn_remask is on and the mask can be
 * recomputed (a relu / relu6 mask, no residual gradient dz), else NULL (read y). */
static inline const float *remask_beta(const cuda_be_t *cb, const void *y, act_kind_t act, const float *gamma,
                                const float *beta, const void *dz) {
    bool on = (cb->fusion & BACKEND_FUSE_BN_REMASK) && y && act != ACT_NONE && gamma && !dz;
    return on ? beta : NULL;
}

/* Whether a reduction of geometry g runs in one pass: cuda_backend_bn_geometry's
 * one_pass, or the bn_one_pass option where the row splits are at most
 * BN_ONE_PASS_SPLITS (the last block adds splits x its channels' partials: cheap on the
 * small layers, slower than the second kernel's c / 32 blocks on the 1024-split ones);
 * its tickets allocated, one for each channel block. */
static inline bool one_pass(const cuda_be_t *cb, const bn_geom_t &g) {
    bool on = cb->bn_one_pass || ((cb->fusion & BACKEND_FUSE_BN_ONE_PASS) && g.grid.y <= BN_ONE_PASS_SPLITS);
    return on && cb->bn_counters && g.grid.x <= (unsigned)CB_BN_COUNTERS;
}

/* count / (count - 1), the unbiased variance's factor, as the running update takes it */
static inline float bn_unbias(int64_t count) {
    return count > 1 ? (float)((double)count / (double)(count - 1)) : 1.0f;
}

#define BN_VEC_SWITCH(v, V, ...) do { switch (v) { \
    case 8: { constexpr int V = 8; __VA_ARGS__; } break; \
    case 4: { constexpr int V = 4; __VA_ARGS__; } break; \
    case 2: { constexpr int V = 2; __VA_ARGS__; } break; \
    default: { constexpr int V = 1; __VA_ARGS__; } break; } } while (0)

/* ---- bn_apply_tune: the apply kernels' row splits timed at a shape's first call ---- */
typedef struct bn_tune {
    int op, dt, v;
    int64_t m;
    int c;
    unsigned gx, bx, by, gy;
} bn_tune_t;

enum { TUNE_APPLY = 0, TUNE_APPLY_DUAL = 8, TUNE_BWD_APPLY = 16, TUNE_BWD_APPLY_DUAL = 24 };   /* + flags < 8 */

/* Whether an apply call may run again with the same results: no output (n bytes each)
 * overlaps an input. */
static bool no_overlap(const void *const *outs, int no, const void *const *ins, int ni, size_t n) {
    for (int i = 0; i < no; i++)
        for (int j = 0; j < ni; j++) {
            uintptr_t a = (uintptr_t)outs[i], b = (uintptr_t)ins[j];
            if (outs[i] && ins[j] && a < b + n && b < a + n) return false;
        }
    return true;
}

/* launch(g) for geometry g of apply kernel op (TUNE_* + flags), with bn_apply_tune the
 * grid's rows cached per (op, shape, dtype, block) and, at the first call, timed: the
 * default's, half, 2x, 4x and 8x (at most one row a thread, at most 65535), each launched
 * once and then 3 times between events, the fastest kept; repeatable false or a capture
 * running: the default, untimed and not cached. The last launch is the call's. */
template <typename L>
static int tuned_launch(cuda_be_t *cb, int op, int64_t m, int c, dtype_t dt, bn_geom_t g, bool repeatable,
                        L launch) {
    if (!(cb->fusion & BACKEND_FUSE_BN_APPLY_TUNE)) return launch(g);
    for (int i = 0; i < cb->n_bn_tunes; i++) {
        const bn_tune_t *t = &cb->bn_tunes[i];
        if (t->op == op && t->dt == (int)dt && t->v == g.v && t->m == m && t->c == c && t->gx == g.grid.x &&
            t->bx == g.block.x && t->by == g.block.y) {
            g.grid.y = t->gy;
            return launch(g);
        }
    }
    if (cb->capturing || !repeatable) return launch(g);
    int64_t rows = (m + g.block.y - 1) / g.block.y;
    unsigned most = rows < 65535 ? (unsigned)rows : 65535u, base = g.grid.y, best = base;
    unsigned cand[5] = {base, base / 2, base * 2, base * 4, base * 8};
    cudaEvent_t a = NULL, b = NULL;
    CUDA_CHECK(cb, cudaEventCreate(&a));
    if (cudaEventCreate(&b) != cudaSuccess) {
        cudaEventDestroy(a);
        return cb_fail(cb, "bn_apply_tune: cudaEventCreate failed");
    }
    float best_ms = -1.0f;
    int rc = 0;
    for (int k = 0; k < 5 && !rc; k++) {
        unsigned gy = cand[k] < 1 ? 1 : cand[k] > most ? most : cand[k];
        bool seen = false;
        for (int j = 0; j < k; j++) seen |= (cand[j] < 1 ? 1 : cand[j] > most ? most : cand[j]) == gy;
        if (seen) continue;
        bn_geom_t t = g;
        t.grid.y = gy;
        float ms = 0.0f;
        rc = launch(t) || cudaEventRecord(a, cb->stream) != cudaSuccess;
        for (int r = 0; r < 3 && !rc; r++) rc = launch(t);
        if (!rc) rc = cudaEventRecord(b, cb->stream) != cudaSuccess || cudaEventSynchronize(b) != cudaSuccess ||
                      cudaEventElapsedTime(&ms, a, b) != cudaSuccess;
        if (!rc && (best_ms < 0.0f || ms < best_ms)) best_ms = ms, best = gy;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (rc) return cb_fail(cb, "bn_apply_tune: timing the apply kernel failed: %s", cudaGetErrorString(cudaGetLastError()));
    if (cb->n_bn_tunes == cb->cap_bn_tunes) {
        int cap = cb->cap_bn_tunes ? 2 * cb->cap_bn_tunes : 32;
        bn_tune_t *q = (bn_tune_t *)realloc(cb->bn_tunes, (size_t)cap * sizeof *q);
        if (!q) return cb_fail(cb, "bn_apply_tune: out of host memory");
        cb->bn_tunes = q;
        cb->cap_bn_tunes = cap;
    }
    cb->bn_tunes[cb->n_bn_tunes++] = bn_tune_t{op, (int)dt, g.v, m, c, g.grid.x, g.block.x, g.block.y, best};
    g.grid.y = best;
    return launch(g);
}

#endif
