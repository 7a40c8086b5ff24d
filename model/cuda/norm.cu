/* norm.cu: batch norm over NHWC activations viewed as m rows of c channels.
 *
 * Layout of the work: a block is TX x TY = 256 threads; threadIdx.x picks V consecutive
 * channels (V = 8 (half), 4, 2 or 1 so that a warp reads one contiguous run), threadIdx.y
 * and blockIdx.y pick rows. By default TX = 32 (8 rows per block step), and V is the
 * widest that gives all 32 lanes channels (4- and 8-byte accesses on 64/128-channel half
 * layers); with the vec16 fusion option V is 16 bytes wide wherever 16 bytes divide a
 * row and TX = c / V below 32 lanes, so a warp covers several whole rows (the first GPU
 * run measured no gain from it). Reductions (statistics, backward sums) write one partial
 * per (row split, channel) into the backend's scratch and a second kernel adds the splits
 * in double, in a fixed order, so results are deterministic run to run. That second
 * kernel has a block of 32 channels x BN_TY threads, each thread adding every BN_TY-th
 * split: with up to 1024 splits (the layers of 128 x 32 x 32 rows) that is 128 dependent
 * loads per thread on c / 32 blocks. With the bn_wide_final fusion option it has 32 x
 * BN_TY_WIDE threads (32 adds per thread at most, loads unrolled), the same per-thread
 * shape otherwise; the sums go in another fixed order (still deterministic; in double,
 * so the float results differ from the default order's in the last bit at most).
 *
 * The fused activation (act_kind_t) is relu or relu6; the backward masks dy by its
 * derivative seen from the output y (act_keeps), as the CPU backend. With the bn_remask
 * fusion option, for a BN without a residual input (the op's beta given), the backward
 * kernels recompute that mask from x instead of reading y: bn_out is the one function
 * that computes the forward's output in bn_apply_k and in the recompute, with explicit
 * IEEE intrinsics (nothing left for the compiler to contract differently per kernel),
 * and the recompute rounds it to T as the forward stored it, so the mask and every
 * result are the same bits as with y (tests/gpu/test_gpu_fusion.c).
 * With the bn_mask_bits fusion option, a BN + add + ReLU (whose mask needs the residual,
 * so bn_remask cannot recompute it) keeps its mask as bits: bn_apply_mask writes, with y,
 * bit i = act_keeps(stored y[i]) (element i = row * c + channel, bit i & 7 of byte
 * i >> 3), each thread one byte (8 channels a thread, whatever the default geometry's
 * V), and the backward kernels read the bits in place of y with their usual geometry:
 * the same mask, so the same bits in every result.
 * Numerics: statistics in fp32 per thread over values shifted by the channel's first
 * row (no catastrophic cancellation of sum(x^2) - sum(x)^2 when |mean| >> std), combined
 * in double; biased variance. apply/backward compute in fp32 and round the outputs once.
 * Not here: cross-rank SyncBN reduction (the net calls its hooks between the phases).
 */
#include "model/cuda/norm.cuh"

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

/* Sums two per-thread arrays over threadIdx.y and writes them as split blockIdx.y of
 * part (layout [2][splits][c]). Must be reached by every thread of the block (TX x TY =
 * 256 at most; with TX = 32 the order of the sums is that of the 32 x 8 layout). */
template <int V>
__device__ __forceinline__ void block_partials(const float (&a)[V], const float (&b)[V],
                                               bool active, int ch0, int c, float *part) {
    __shared__ float sa[BN_TY * BN_TX * V], sb[BN_TY * BN_TX * V];
    int row = blockDim.x * V;   /* one threadIdx.y's values */
#pragma unroll
    for (int k = 0; k < V; k++) {
        sa[threadIdx.y * row + threadIdx.x * V + k] = a[k];
        sb[threadIdx.y * row + threadIdx.x * V + k] = b[k];
    }
    __syncthreads();
    if (threadIdx.y == 0 && active) {
        int64_t splits = gridDim.y;
#pragma unroll
        for (int k = 0; k < V; k++) {
            float u = 0.0f, w = 0.0f;
            for (int j = 0; j < (int)blockDim.y; j++) {
                u += sa[j * row + threadIdx.x * V + k];
                w += sb[j * row + threadIdx.x * V + k];
            }
            part[(int64_t)blockIdx.y * c + ch0 + k] = u;
            part[(splits + blockIdx.y) * c + ch0 + k] = w;
        }
    }
}

/* What a one-pass reduction's last block writes (cuda_backend_bn_geometry's one_pass):
 * the statistics' (mean, var, the running update) or the backward's sums; counters: one
 * ticket per channel block, zero between uses (the last block resets its own). */
typedef struct bn_final {
    unsigned *counters;
    int64_t m;
    float *mean, *var, unbias, momentum, *run_mean, *run_var;            /* statistics */
    const float *var_in;                                                 /* backward */
    float eps, *sum_dy, *sum_dy_xhat, *dgamma, *dbeta;
} bn_final_t;

/* The one-pass reduction's second half, after block_partials (every thread of the block):
 * the block whose ticket comes last for its channel block (blockIdx.x) adds every
 * split's partials of its channels in double, split j into group j mod G and the G groups
 * in order, a fixed order whichever block is last, so deterministic (not the two-pass
 * kernels' order: rounding, not the result), and resets the ticket. True in the threads
 * that hold a channel's two sums (*ch, *s, *s2). */
template <int V>
__device__ __forceinline__ bool block_final(int c, const float *part, unsigned *counters, int *ch, double *s,
                                            double *s2) {
    __shared__ unsigned ticket;
    __shared__ double fa[BN_TX * BN_TY], fb[BN_TX * BN_TY];
    __threadfence();   /* this block's partials before its ticket */
    __syncthreads();
    int t = threadIdx.y * blockDim.x + threadIdx.x;
    if (t == 0) ticket = atomicAdd(&counters[blockIdx.x], 1u);
    __syncthreads();
    if (ticket != gridDim.y - 1) return false;
    __threadfence();   /* the others' partials, fenced before their tickets */
    int splits = gridDim.y, nch = blockDim.x * V, base = blockIdx.x * nch;
    int groups = (int)(blockDim.x * blockDim.y) / nch, k = t % nch, gi = t / nch;
    double a = 0.0, b = 0.0;
    if (gi < groups && base + k < c) {
#pragma unroll 4
        for (int j = gi; j < splits; j += groups) {
            a += (double)__ldcg(part + (int64_t)j * c + base + k);
            b += (double)__ldcg(part + (int64_t)(splits + j) * c + base + k);
        }
    }
    fa[t] = a;
    fb[t] = b;
    __syncthreads();
    if (t == 0) counters[blockIdx.x] = 0u;
    if (gi != 0 || base + k >= c) return false;
    a = b = 0.0;
    for (int g = 0; g < groups; g++) {
        a += fa[g * nch + k];
        b += fb[g * nch + k];
    }
    *ch = base + k;
    *s = a;
    *s2 = b;
    return true;
}

/* The statistics of channel ch from its two sums (of x - x[0][ch] and its square over m
 * rows): mean, biased var, and with run_mean the running update; the one function of the
 * two-pass final kernel and the one-pass last block. */
template <typename T>
__device__ __forceinline__ void stats_out(int ch, double s, double ss, int64_t m, const T *x, float *mean,
                                          float *var, float unbias, float momentum, float *run_mean,
                                          float *run_var);

/* Partial sums of (x - shift) and (x - shift)^2, shift = the channel's value in row 0.
 * ONE: then the statistics themselves in the last block (block_final; fin). */
template <typename T, int V, bool ONE = false>
__global__ void __launch_bounds__(256) bn_stats_partial_k(int64_t m, int c, const T *x,
                                                          float *part, bn_final_t fin) {
    pdl_enter();
    int ch0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    bool active = ch0 < c;
    float s[V], ss[V], shift[V];
#pragma unroll
    for (int k = 0; k < V; k++) s[k] = ss[k] = shift[k] = 0.0f;
    if (active) {
        load_v<T, V>(x + ch0, shift);
#pragma unroll 4
        for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < m;
             r += (int64_t)gridDim.y * blockDim.y) {
            float v[V];
            load_v<T, V>(x + r * c + ch0, v);
#pragma unroll
            for (int k = 0; k < V; k++) {
                float d = v[k] - shift[k];
                s[k] += d;
                ss[k] += d * d;
            }
        }
    }
    block_partials<V>(s, ss, active, ch0, c, part);
    if constexpr (ONE) {
        int ch;
        double a, b;
        if (block_final<V>(c, part, fin.counters, &ch, &a, &b))
            stats_out<T>(ch, a, b, m, x, fin.mean, fin.var, fin.unbias, fin.momentum, fin.run_mean, fin.run_var);
    }
}

/* Adds the row splits of part ([2][splits][c]) per channel in double: a 32 x TY block
 * takes 32 channels, threadIdx.y takes every TY-th split, and the TY partial sums are
 * added in a fixed order, so the result does not depend on timing. s, s2 get the two
 * sums. TY = BN_TY is the default; BN_TY_WIDE (bn_wide_final) has each thread's loads
 * unrolled as well (independent loads; the adds keep their order). */
template <int TY>
__device__ __forceinline__ bool sum_splits(int c, int splits, const float *part, double *s, double *s2) {
    __shared__ double sh[2][TY][BN_TX];
    int ch = blockIdx.x * BN_TX + threadIdx.x;
    double a = 0.0, b = 0.0;
    if (ch < c) {
        if constexpr (TY == BN_TY) {
            for (int j = threadIdx.y; j < splits; j += TY) {
                a += part[(int64_t)j * c + ch];
                b += part[(int64_t)(splits + j) * c + ch];
            }
        } else {
#pragma unroll 8
            for (int j = threadIdx.y; j < splits; j += TY) {
                a += part[(int64_t)j * c + ch];
                b += part[(int64_t)(splits + j) * c + ch];
            }
        }
    }
    sh[0][threadIdx.y][threadIdx.x] = a;
    sh[1][threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y != 0 || ch >= c) return false;
    a = b = 0.0;
    for (int j = 0; j < TY; j++) {
        a += sh[0][j][threadIdx.x];
        b += sh[1][j][threadIdx.x];
    }
    *s = a;
    *s2 = b;
    return true;
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

template <typename T>
__device__ __forceinline__ void stats_out(int ch, double s, double ss, int64_t m, const T *x, float *mean,
                                          float *var, float unbias, float momentum, float *run_mean,
                                          float *run_var) {
    double ms = s / (double)m, v = ss / (double)m - ms * ms;
    float mu = (float)((double)to_f32(x[ch]) + ms), vf = (float)(v > 0.0 ? v : 0.0);
    mean[ch] = mu;
    var[ch] = vf;
    if (run_mean) bn_running_one(ch, mu, vf, unbias, momentum, run_mean, run_var);
}

/* mean, var from the splits' sums; with run_mean given (bn_fold_running), then the
 * running statistics from them, as bn_running_k would. */
template <typename T, int TY>
__global__ void __launch_bounds__(BN_TX * TY) bn_stats_final_k(int64_t m, int c, int splits, const T *x,
                                                               const float *part, float *mean, float *var,
                                                               float unbias, float momentum, float *run_mean,
                                                               float *run_var) {
    pdl_enter();
    double s, ss;
    if (!sum_splits<TY>(c, splits, part, &s, &ss)) return;
    stats_out<T>(blockIdx.x * BN_TX + threadIdx.x, s, ss, m, x, mean, var, unbias, momentum, run_mean, run_var);
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

/* act_keeps of the y that bn_apply_k (no residual) stored for input v: bn_out rounded to
 * T and back, so a tiny positive output that rounds to 0 in fp16 is masked as stored. */
template <typename T>
__device__ __forceinline__ bool remask_keeps(int act, float v, float mu, float sc, float bt) {
    return act_keeps(act, to_f32(from_f32<T>(bn_out(act, v, mu, sc, bt, false, 0.0f))));
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

/* The mask byte of a thread's 8 outputs v (bit k: act_keeps of v[k] as stored in T). */
template <typename T, int V>
__device__ __forceinline__ uint8_t mask_byte(int act, const float (&v)[V]) {
    unsigned b = 0;
#pragma unroll
    for (int k = 0; k < V; k++) b |= (act_keeps(act, to_f32(from_f32<T>(v[k]))) ? 1u : 0u) << k;
    return (uint8_t)b;
}

/* y = act((x - mean) * gamma / sqrt(var + eps) + beta [+ z]). MASK (V = 8 only): also
 * the mask byte of the thread's 8 elements, act_keeps of each as stored in y. */
template <typename T, int V, bool MASK = false>
__global__ void __launch_bounds__(256) bn_apply_k(int64_t m, int c, const T *x, const float *mean,
                                                  const float *var, const float *gamma,
                                                  const float *beta, float eps, const T *z,
                                                  int act, T *y, uint8_t *mask) {
    static_assert(!MASK || V == 8, "a mask byte is 8 elements of one thread");
    pdl_enter();
    int ch0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (ch0 >= c) return;
    float mu[V], sc[V], bt[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        mu[k] = mean[ch0 + k];
        sc[k] = bn_scale(gamma[ch0 + k], var[ch0 + k], eps);
        bt[k] = beta[ch0 + k];
    }
    for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < m; r += (int64_t)gridDim.y * blockDim.y) {
        float v[V], w[V];
        load_v<T, V>(x + r * c + ch0, v);
        if (z) load_v<T, V>(z + r * c + ch0, w);
#pragma unroll
        for (int k = 0; k < V; k++) v[k] = bn_out(act, v[k], mu[k], sc[k], bt[k], z != NULL, z ? w[k] : 0.0f);
        store_v<T, V>(y + r * c + ch0, v);
        if constexpr (MASK) mask[(r * c + ch0) >> 3] = mask_byte<T, V>(act, v);
    }
}

__global__ void bn_running_k(int c, const float *mean, const float *var, float unbias,
                             float momentum, float *run_mean, float *run_var) {
    pdl_enter();
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    bn_running_one(ch, mean[ch], var[ch], unbias, momentum, run_mean, run_var);
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
 * one function of the two-pass final kernel and the one-pass last block. */
__device__ __forceinline__ void bwd_out(int ch, double s, double sx, const float *var, float eps, float *sum_dy,
                                        float *sum_dy_xhat, float *dgamma, float *dbeta) {
    double invstd = 1.0 / sqrt((double)var[ch] + (double)eps);   /* as the cpu backend */
    float sdy = (float)s, sdyx = (float)(sx * invstd);
    sum_dy[ch] = sdy;
    sum_dy_xhat[ch] = sdyx;
    if (dbeta) dbeta[ch] += sdy;
    if (dgamma) dgamma[ch] += sdyx;
}

/* Partial sums of g and g * (x - mean), g = dy masked by the activation: recomputed from
 * x when beta is given (bn_remask; y is not read), read from the mask bits with MASK
 * (bn_mask_bits; y is not read), else seen from y when y is given. ONE: then the sums
 * themselves in the last block (block_final; fin). */
template <typename T, int V, bool MASK = false, bool ONE = false>
__global__ void __launch_bounds__(256) bn_bwd_partial_k(int64_t m, int c, const T *x, const T *y,
                                                        int act, const T *dy, const float *mean,
                                                        const float *var, const float *gamma,
                                                        const float *beta, float eps, float *part,
                                                        const uint8_t *mask, bn_final_t fin) {
    pdl_enter();
    int ch0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    bool active = ch0 < c;
    float s[V], sx[V], mu[V], sc[V], bt[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        s[k] = sx[k] = 0.0f;
        mu[k] = active ? mean[ch0 + k] : 0.0f;
    }
    if (active) {
        remask_params<V>(ch0, var, gamma, beta, eps, sc, bt);
#pragma unroll 2
        for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < m;
             r += (int64_t)gridDim.y * blockDim.y) {
            float xv[V], g[V];
            load_v<T, V>(x + r * c + ch0, xv);
            load_v<T, V>(dy + r * c + ch0, g);
            if constexpr (MASK) {
                drop_by_bits<V>(g, mask, r * c + ch0);
            } else if (beta) {
#pragma unroll
                for (int k = 0; k < V; k++)
                    if (!remask_keeps<T>(act, xv[k], mu[k], sc[k], bt[k])) g[k] = 0.0f;
            } else if (y) {
                drop_by_y<T, V>(g, y + r * c + ch0, act);
            }
#pragma unroll
            for (int k = 0; k < V; k++) {
                s[k] += g[k];
                sx[k] += g[k] * (xv[k] - mu[k]);
            }
        }
    }
    block_partials<V>(s, sx, active, ch0, c, part);
    if constexpr (ONE) {
        int ch;
        double a, b;
        if (block_final<V>(c, part, fin.counters, &ch, &a, &b))
            bwd_out(ch, a, b, fin.var_in, fin.eps, fin.sum_dy, fin.sum_dy_xhat, fin.dgamma, fin.dbeta);
    }
}

template <int TY>
__global__ void __launch_bounds__(BN_TX * TY) bn_bwd_final_k(int c, int splits, const float *part, const float *var,
                                                             float eps, float *sum_dy, float *sum_dy_xhat,
                                                             float *dgamma, float *dbeta) {
    pdl_enter();
    double s, sx;
    if (!sum_splits<TY>(c, splits, part, &s, &sx)) return;
    bwd_out(blockIdx.x * BN_TX + threadIdx.x, s, sx, var, eps, sum_dy, sum_dy_xhat, dgamma, dbeta);
}

/* One element of a BN's dx: a (gamma * invstd) * (g - mean(dy) - xhat * mean(dy * xhat)),
 * the one expression bn_bwd_apply_k and bn_bwd_apply_dual_k compile (the same bits). */
__device__ __forceinline__ float bn_dx(float g, float x, float mu, float is, float a, float mdy, float mdyx) {
    float xhat = (x - mu) * is;
    return a * (g - mdy - xhat * mdyx);
}

/* dx = gamma * invstd * (g - sum_dy / count - xhat * sum_dy_xhat / count); dz = g. The
 * mask of g as in bn_bwd_partial_k (beta given: recomputed from x; MASK: the bits). */
template <typename T, int V, bool MASK = false>
__global__ void __launch_bounds__(256) bn_bwd_apply_k(int64_t m, int c, const T *x, const T *y,
                                                      int act, const T *dy, const float *mean,
                                                      const float *var, const float *gamma,
                                                      const float *beta, float eps, const float *sum_dy,
                                                      const float *sum_dy_xhat, float inv_count,
                                                      T *dx, T *dz, const uint8_t *mask) {
    pdl_enter();
    int ch0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (ch0 >= c) return;
    float mu[V], is[V], a[V], mdy[V], mdyx[V], sc[V], bt[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        mu[k] = mean[ch0 + k];
        is[k] = 1.0f / sqrtf(var[ch0 + k] + eps);
        a[k] = gamma[ch0 + k] * is[k];
        mdy[k] = sum_dy[ch0 + k] * inv_count;
        mdyx[k] = sum_dy_xhat[ch0 + k] * inv_count;
    }
    remask_params<V>(ch0, var, gamma, beta, eps, sc, bt);
    for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < m; r += (int64_t)gridDim.y * blockDim.y) {
        float xv[V], g[V];
        int64_t off = r * c + ch0;
        load_v<T, V>(x + off, xv);
        load_v<T, V>(dy + off, g);
        if constexpr (MASK) {
            drop_by_bits<V>(g, mask, off);
        } else if (beta) {
#pragma unroll
            for (int k = 0; k < V; k++)
                if (!remask_keeps<T>(act, xv[k], mu[k], sc[k], bt[k])) g[k] = 0.0f;
        } else if (y) {
            drop_by_y<T, V>(g, y + off, act);
        }
        if (dz) store_v<T, V>(dz + off, g);
#pragma unroll
        for (int k = 0; k < V; k++) xv[k] = bn_dx(g[k], xv[k], mu[k], is[k], a[k], mdy[k], mdyx[k]);
        store_v<T, V>(dx + off, xv);
    }
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

/* The geometry for V = v channels a thread; narrow: TX = c / v where that is below 32. */
static bn_geom_t bn_geom_v(const cuda_be_t *cb, int64_t m, int c, int v, bool narrow) {
    int tx = BN_TX;
    if (narrow && c / v < BN_TX) tx = c / v > 0 ? c / v : 1;
    int ty = BN_TX * BN_TY / tx;
    /* enough row splits for ~8 blocks per SM, at least 16 rows per thread (4 with
     * bn_more_splits), at most 1024; cuda_backend_bn_geometry's overrides first */
    int rows = cb->bn_rows_min ? cb->bn_rows_min : (cb->fusion & BACKEND_FUSE_BN_MORE_SPLITS) ? 4 : 16;
    int per_sm = cb->bn_blocks_per_sm ? cb->bn_blocks_per_sm : 8;
    int gx = (c + tx * v - 1) / (tx * v);
    int64_t want = ((int64_t)cb->sm_count * per_sm + gx - 1) / gx;
    int64_t most = (m + (int64_t)ty * rows - 1) / ((int64_t)ty * rows);
    int64_t gy = want < most ? want : most;
    if (gy > 1024) gy = 1024;
    if (gy < 1) gy = 1;
    bn_geom_t g;
    g.v = v;
    g.grid = dim3((unsigned)gx, (unsigned)gy, 1);
    g.block = dim3((unsigned)tx, (unsigned)ty, 1);
    return g;
}

static bn_geom_t bn_geom(const cuda_be_t *cb, int64_t m, int c, size_t esz, const void *a,
                         const void *b, const void *d, const void *e, const void *f) {
    bool wide = cb->fusion & BACKEND_FUSE_VEC16;
    int v = 1;
    if (wide && c % (int)(16 / esz) == 0 && all_aligned(a, b, d, e, f, 16)) v = (int)(16 / esz);
    if (cb->bn_v_max && v > cb->bn_v_max) v = 1;   /* (vec16's width above the override) */
    for (int k = cb->bn_v_max ? cb->bn_v_max : 8; v == 1 && k > 1; k /= 2) {
        size_t al = esz * (size_t)k;
        if (al <= 16 && c % k == 0 && c >= BN_TX * k && all_aligned(a, b, d, e, f, al)) v = k;
    }
    return bn_geom_v(cb, m, c, v, wide);
}

int cu_bn_counters(cuda_be_t *cb) {
    if (cb->bn_counters) return 0;
    if (cb->capturing) return cb_fail(cb, "bn one pass: the tickets cannot be made while capturing");
    void *p = cb_malloc(cb, CB_BN_COUNTERS * sizeof(unsigned), "bn one-pass tickets");
    if (!p) return -1;
    CUDA_CHECK(cb, cudaMemset(p, 0, CB_BN_COUNTERS * sizeof(unsigned)));
    cb->bn_counters = p;
    return 0;
}

/* Whether a reduction of geometry g runs in one pass: cuda_backend_bn_geometry's
 * one_pass, or the bn_one_pass option where the row splits are at most
 * BN_ONE_PASS_SPLITS (the last block adds splits x its channels' partials: cheap on the
 * small layers, slower than the second kernel's c / 32 blocks on the 1024-split ones);
 * its tickets allocated, one for each channel block. */
static bool one_pass(const cuda_be_t *cb, const bn_geom_t &g) {
    bool on = cb->bn_one_pass || ((cb->fusion & BACKEND_FUSE_BN_ONE_PASS) && g.grid.y <= BN_ONE_PASS_SPLITS);
    return on && cb->bn_counters && g.grid.x <= (unsigned)CB_BN_COUNTERS;
}

#define BN_VEC_SWITCH(v, V, ...) do { switch (v) { \
    case 8: { constexpr int V = 8; __VA_ARGS__; } break; \
    case 4: { constexpr int V = 4; __VA_ARGS__; } break; \
    case 2: { constexpr int V = 2; __VA_ARGS__; } break; \
    default: { constexpr int V = 1; __VA_ARGS__; } break; } } while (0)

/* count / (count - 1), the unbiased variance's factor, as the running update takes it */
static float bn_unbias(int64_t count) {
    return count > 1 ? (float)((double)count / (double)(count - 1)) : 1.0f;
}

/* bn_stats, and with run_mean given (bn_fold_running) the running update in its final
 * kernel; cu_bn_stats is this without it */
int cu_bn_stats_running(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean, float *var,
                        int64_t count, float momentum, float *run_mean, float *run_var) {
    cuda_be_t *cb = cb_of(be);
    if (m <= 0 || c <= 0) return cb_fail(cb, "bn_stats: empty input (m %lld, c %d)", (long long)m, c);
    CB_ENTER(cb);
    float unbias = bn_unbias(count);
    bn_geom_t g = bn_geom(cb, m, c, dt_size(dt), x, x, x, x, x);
    dim3 block(BN_TX, BN_TY);
    if (cb_grow(cb, &cb->scratch, (size_t)2 * g.grid.y * c * sizeof(float), "bn scratch")) return -1;
    float *part = (float *)cb->scratch.p;
    bn_final_t fin = {};
    if (one_pass(cb, g)) {   /* the statistics in the partial kernel's last block */
        fin.counters = (unsigned *)cb->bn_counters;
        fin.m = m, fin.mean = mean, fin.var = var, fin.unbias = unbias, fin.momentum = momentum;
        fin.run_mean = run_mean, fin.run_var = run_var;
        DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(g.v, V,
            cb_launch(cb, (bn_stats_partial_k<T, V, true>), g.grid, g.block, 0, m, c, (const T *)x, part, fin)));
        KERNEL_CHECK(cb, "bn_stats_partial_k (one pass)");
        return 0;
    }
    DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(g.v, V,
        cb_launch(cb, (bn_stats_partial_k<T, V>), g.grid, g.block, 0, m, c, (const T *)x, part, fin)));
    KERNEL_CHECK(cb, "bn_stats_partial_k");
    dim3 fgrid((c + BN_TX - 1) / BN_TX);
    if (cb->fusion & BACKEND_FUSE_BN_WIDE_FINAL) {
        DISPATCH_DT(cb, dt, T, cb_launch(cb, (bn_stats_final_k<T, BN_TY_WIDE>), fgrid, dim3(BN_TX, BN_TY_WIDE), 0,
            m, c, (int)g.grid.y, (const T *)x, part, mean, var, unbias, momentum, run_mean, run_var));
    } else {
        DISPATCH_DT(cb, dt, T, cb_launch(cb, (bn_stats_final_k<T, BN_TY>), fgrid, block, 0,
            m, c, (int)g.grid.y, (const T *)x, part, mean, var, unbias, momentum, run_mean, run_var));
    }
    KERNEL_CHECK(cb, "bn_stats_final_k");
    return 0;
}

int cu_bn_stats(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean,
                float *var) {
    return cu_bn_stats_running(be, m, c, dt, x, mean, var, 1, 0.0f, NULL, NULL);
}

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

int cu_bn_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                const float *var, const float *gamma, const float *beta, float eps,
                const void *z, act_kind_t act, void *y) {
    cuda_be_t *cb = cb_of(be);
    if (m <= 0 || c <= 0) return 0;
    CB_ENTER(cb);
    bn_geom_t g = bn_geom(cb, m, c, dt_size(dt), x, z ? z : x, y, y, y);
    const void *outs[1] = {y}, *ins[2] = {x, z};
    if (tuned_launch(cb, TUNE_APPLY + (z != NULL), m, c, dt, g, no_overlap(outs, 1, ins, 2, (size_t)m * c * dt_size(dt)),
                     [&](const bn_geom_t &t) -> int {
                         DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(t.v, V,
                             cb_launch(cb, (bn_apply_k<T, V>), t.grid, t.block, 0, m, c, (const T *)x, mean, var,
                                       gamma, beta, eps, (const T *)z, (int)act, (T *)y, (uint8_t *)NULL)));
                         return 0;
                     }))
        return -1;
    KERNEL_CHECK(cb, "bn_apply_k");
    return 0;
}

/* bn_apply with the mask bits (bn_mask_bits): 8 channels a thread, so each thread writes
 * whole bytes; 1 (nothing run) without a relu / relu6, where 8 does not divide c or a
 * pointer is not aligned to 8 elements. */
int cu_bn_apply_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                     const float *var, const float *gamma, const float *beta, float eps, const void *z,
                     act_kind_t act, void *y, uint8_t *mask) {
    cuda_be_t *cb = cb_of(be);
    if (m <= 0 || c <= 0) return 0;
    size_t al = 8 * dt_size(dt);
    if (act == ACT_NONE || !mask || c % 8 != 0 || !all_aligned(x, z ? z : x, y, y, y, al)) return 1;
    CB_ENTER(cb);
    bn_geom_t g = bn_geom_v(cb, m, c, 8, true);
    const void *outs[2] = {y, mask}, *ins[2] = {x, z};
    if (tuned_launch(cb, TUNE_APPLY + 2 + (z != NULL), m, c, dt, g,
                     no_overlap(outs, 2, ins, 2, (size_t)m * c * dt_size(dt)), [&](const bn_geom_t &t) -> int {
                         DISPATCH_DT(cb, dt, T,
                             cb_launch(cb, (bn_apply_k<T, 8, true>), t.grid, t.block, 0, m, c, (const T *)x, mean,
                                       var, gamma, beta, eps, (const T *)z, (int)act, (T *)y, mask));
                         return 0;
                     }))
        return -1;
    KERNEL_CHECK(cb, "bn_apply_k (mask)");
    return 0;
}

int cu_bn_update_running(backend_t *be, int c, const float *mean, const float *var,
                         int64_t count, float momentum, float *run_mean, float *run_var) {
    cuda_be_t *cb = cb_of(be);
    if (c <= 0) return 0;
    CB_ENTER(cb);
    float unbias = bn_unbias(count);
    cb_launch(cb, bn_running_k, (c + 255) / 256, 256, 0, c, mean, var, unbias, momentum,
                                                           run_mean, run_var);
    KERNEL_CHECK(cb, "bn_running_k");
    return 0;
}

/* The beta the backward kernels get: the op's when bn_remask is on and the mask can be
 * recomputed (a relu / relu6 mask, no residual gradient dz), else NULL (read y). */
static const float *remask_beta(const cuda_be_t *cb, const void *y, act_kind_t act, const float *gamma,
                                const float *beta, const void *dz) {
    bool on = (cb->fusion & BACKEND_FUSE_BN_REMASK) && y && act != ACT_NONE && gamma && !dz;
    return on ? beta : NULL;
}

/* bn_bwd_reduce; mask given (bn_mask_bits): the mask from its bits, y not read */
static int bwd_reduce(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                      const void *dy, const float *mean, const float *var, const float *gamma, const float *beta,
                      float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta,
                      const uint8_t *mask) {
    cuda_be_t *cb = cb_of(be);
    if (m <= 0 || c <= 0) return cb_fail(cb, "bn_bwd_reduce: empty input (m %lld, c %d)", (long long)m, c);
    CB_ENTER(cb);
    /* the geometry (and with it the order of the sums) is the same with bn_remask: y's
     * alignment counts even where y is not read */
    bn_geom_t g = bn_geom(cb, m, c, dt_size(dt), x, y ? y : x, dy, dy, dy);
    dim3 block(BN_TX, BN_TY);
    if (cb_grow(cb, &cb->scratch, (size_t)2 * g.grid.y * c * sizeof(float), "bn scratch")) return -1;
    float *part = (float *)cb->scratch.p;
    const float *rb = mask ? NULL : remask_beta(cb, y, act, gamma, beta, NULL);
    cb->last_fused = rb != NULL || mask != NULL;
    bn_final_t fin = {};
    bool one = one_pass(cb, g);
    if (one) {   /* the sums in the partial kernel's last block */
        fin.counters = (unsigned *)cb->bn_counters;
        fin.var_in = var, fin.eps = eps, fin.sum_dy = sum_dy, fin.sum_dy_xhat = sum_dy_xhat;
        fin.dgamma = dgamma, fin.dbeta = dbeta;
    }
    const float *b2 = mask ? (const float *)NULL : rb;
#define BWD_PARTIAL(MASK_, ONE_)                                                                                     \
    DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(g.v, V,                                                                     \
        cb_launch(cb, (bn_bwd_partial_k<T, V, MASK_, ONE_>), g.grid, g.block, 0, m, c, (const T *)x, (const T *)y, \
                  (int)act, (const T *)dy, mean, var, gamma, b2, eps, part, mask, fin)))
    if (mask && one) BWD_PARTIAL(true, true);
    else if (mask) BWD_PARTIAL(true, false);
    else if (one) BWD_PARTIAL(false, true);
    else BWD_PARTIAL(false, false);
#undef BWD_PARTIAL
    KERNEL_CHECK(cb, "bn_bwd_partial_k");
    if (one) return 0;
    if (cb->fusion & BACKEND_FUSE_BN_WIDE_FINAL)
        cb_launch(cb, (bn_bwd_final_k<BN_TY_WIDE>), (c + BN_TX - 1) / BN_TX, dim3(BN_TX, BN_TY_WIDE), 0,
            c, (int)g.grid.y, part, var, eps, sum_dy, sum_dy_xhat, dgamma, dbeta);
    else
        cb_launch(cb, (bn_bwd_final_k<BN_TY>), (c + BN_TX - 1) / BN_TX, block, 0, c, (int)g.grid.y, part, var, eps,
                                                                                 sum_dy, sum_dy_xhat, dgamma, dbeta);
    KERNEL_CHECK(cb, "bn_bwd_final_k");
    return 0;
}

int cu_bn_bwd_reduce(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                     act_kind_t act, const void *dy, const float *mean, const float *var,
                     const float *gamma, const float *beta, float eps, float *sum_dy,
                     float *sum_dy_xhat, float *dgamma, float *dbeta) {
    return bwd_reduce(be, m, c, dt, x, y, act, dy, mean, var, gamma, beta, eps, sum_dy, sum_dy_xhat, dgamma, dbeta,
                      NULL);
}

int cu_bn_bwd_reduce_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                          act_kind_t act, const void *dy, const float *mean, const float *var,
                          const float *gamma, float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma,
                          float *dbeta, const uint8_t *mask) {
    if (!mask || !y || act == ACT_NONE)
        return cb_fail(cb_of(be), "bn_bwd_reduce_mask: needs the mask, y and a relu / relu6");
    return bwd_reduce(be, m, c, dt, x, y, act, dy, mean, var, gamma, NULL, eps, sum_dy, sum_dy_xhat, dgamma, dbeta,
                      mask);
}

/* bn_bwd_apply; mask given (bn_mask_bits): the mask from its bits, y not read */
static int bwd_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                     const void *dy, const float *mean, const float *var, const float *gamma, const float *beta,
                     float eps, const float *sum_dy, const float *sum_dy_xhat, int64_t count, void *dx, void *dz,
                     const uint8_t *mask) {
    cuda_be_t *cb = cb_of(be);
    if (m <= 0 || c <= 0) return 0;
    if (count <= 0) return cb_fail(cb, "bn_bwd_apply: count %lld must be positive", (long long)count);
    CB_ENTER(cb);
    bn_geom_t g = bn_geom(cb, m, c, dt_size(dt), x, y ? y : x, dy, dz ? dz : dx, dx);
    float inv_count = (float)(1.0 / (double)count);
    const float *rb = mask ? NULL : remask_beta(cb, y, act, gamma, beta, dz);
    cb->last_fused = rb != NULL || mask != NULL;
    const void *outs[2] = {dx, dz}, *ins[3] = {x, y, dy};
    bool again = no_overlap(outs, 2, ins, 3, (size_t)m * c * dt_size(dt));
    int flags = (mask != NULL) | (dz != NULL) << 1 | (rb != NULL) << 2;
    if (tuned_launch(cb, TUNE_BWD_APPLY + flags, m, c, dt, g, again, [&](const bn_geom_t &t) -> int {
            if (mask) {
                DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(t.v, V,
                    cb_launch(cb, (bn_bwd_apply_k<T, V, true>), t.grid, t.block, 0,
                        m, c, (const T *)x, (const T *)y, (int)act, (const T *)dy, mean, var, gamma,
                        (const float *)NULL, eps, sum_dy, sum_dy_xhat, inv_count, (T *)dx, (T *)dz, mask)));
            } else {
                DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(t.v, V,
                    cb_launch(cb, (bn_bwd_apply_k<T, V>), t.grid, t.block, 0,
                        m, c, (const T *)x, (const T *)y, (int)act, (const T *)dy, mean, var, gamma, rb, eps, sum_dy,
                        sum_dy_xhat, inv_count, (T *)dx, (T *)dz, (const uint8_t *)NULL)));
            }
            return 0;
        }))
        return -1;
    KERNEL_CHECK(cb, "bn_bwd_apply_k");
    return 0;
}

int cu_bn_bwd_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                    act_kind_t act, const void *dy, const float *mean, const float *var,
                    const float *gamma, const float *beta, float eps, const float *sum_dy,
                    const float *sum_dy_xhat, int64_t count, void *dx, void *dz) {
    return bwd_apply(be, m, c, dt, x, y, act, dy, mean, var, gamma, beta, eps, sum_dy, sum_dy_xhat, count, dx, dz,
                     NULL);
}

int cu_bn_bwd_apply_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                         act_kind_t act, const void *dy, const float *mean, const float *var,
                         const float *gamma, float eps, const float *sum_dy, const float *sum_dy_xhat,
                         int64_t count, void *dx, void *dz, const uint8_t *mask) {
    if (!mask || !y || act == ACT_NONE)
        return cb_fail(cb_of(be), "bn_bwd_apply_mask: needs the mask, y and a relu / relu6");
    return bwd_apply(be, m, c, dt, x, y, act, dy, mean, var, gamma, NULL, eps, sum_dy, sum_dy_xhat, count, dx, dz,
                     mask);
}

/* ---- bn_dual_add: the shortcut's BN inside the add-relu BN's kernels ---- */

/* y = act(bn(x) + round_T(bn2(x2))): the shortcut's output as bn_apply_k (no
 * activation) stored it, then the add-relu BN's as bn_apply_k with that residual: the
 * same bits as the two launches. MASK (V = 8): the mask byte too, as bn_apply_k's. */
template <typename T, int V, bool MASK>
__global__ void __launch_bounds__(256) bn_apply_dual_k(int64_t m, int c, const T *x, const float *mean,
                                                       const float *var, const float *gamma, const float *beta,
                                                       const T *x2, const float *mean2, const float *var2,
                                                       const float *gamma2, const float *beta2, float eps, int act,
                                                       T *y, uint8_t *mask) {
    static_assert(!MASK || V == 8, "a mask byte is 8 elements of one thread");
    pdl_enter();
    int ch0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (ch0 >= c) return;
    float mu[V], sc[V], bt[V], mu2[V], sc2[V], bt2[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        mu[k] = mean[ch0 + k];
        sc[k] = bn_scale(gamma[ch0 + k], var[ch0 + k], eps);
        bt[k] = beta[ch0 + k];
        mu2[k] = mean2[ch0 + k];
        sc2[k] = bn_scale(gamma2[ch0 + k], var2[ch0 + k], eps);
        bt2[k] = beta2[ch0 + k];
    }
    for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < m; r += (int64_t)gridDim.y * blockDim.y) {
        float v[V], w[V];
        load_v<T, V>(x + r * c + ch0, v);
        load_v<T, V>(x2 + r * c + ch0, w);
#pragma unroll
        for (int k = 0; k < V; k++) {
            float z = to_f32(from_f32<T>(bn_out(ACT_NONE, w[k], mu2[k], sc2[k], bt2[k], false, 0.0f)));
            v[k] = bn_out(act, v[k], mu[k], sc[k], bt[k], true, z);
        }
        store_v<T, V>(y + r * c + ch0, v);
        if constexpr (MASK) mask[(r * c + ch0) >> 3] = mask_byte<T, V>(act, v);
    }
}

/* The gradient g = dy masked by act at y (or by the mask bits with MASK) and three sums
 * per channel: g, g * (x - mean), g * (x2 - mean2), accumulated in bn_bwd_partial_k's
 * order; the first two as its partials into part, g and the third into part2. */
template <typename T, int V, bool MASK>
__global__ void __launch_bounds__(256) bn_bwd_partial_dual_k(int64_t m, int c, const T *x, const T *y, int act,
                                                             const T *dy, const float *mean, const T *x2,
                                                             const float *mean2, float *part, float *part2,
                                                             const uint8_t *mask) {
    pdl_enter();
    int ch0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    bool active = ch0 < c;
    float s[V], sx[V], sx2[V], mu[V], mu2[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        s[k] = sx[k] = sx2[k] = 0.0f;
        mu[k] = active ? mean[ch0 + k] : 0.0f;
        mu2[k] = active ? mean2[ch0 + k] : 0.0f;
    }
    if (active) {
#pragma unroll 2
        for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < m;
             r += (int64_t)gridDim.y * blockDim.y) {
            float xv[V], g[V], x2v[V];
            load_v<T, V>(x + r * c + ch0, xv);
            load_v<T, V>(dy + r * c + ch0, g);
            load_v<T, V>(x2 + r * c + ch0, x2v);
            if constexpr (MASK) drop_by_bits<V>(g, mask, r * c + ch0);
            else drop_by_y<T, V>(g, y + r * c + ch0, act);
#pragma unroll
            for (int k = 0; k < V; k++) {
                s[k] += g[k];
                sx[k] += g[k] * (xv[k] - mu[k]);
                sx2[k] += g[k] * (x2v[k] - mu2[k]);
            }
        }
    }
    block_partials<V>(s, sx, active, ch0, c, part);
    __syncthreads();   /* block_partials' shared arrays are written again below */
    block_partials<V>(s, sx2, active, ch0, c, part2);
}

/* dx and dx2 as bn_bwd_apply_k gives them for each BN from the same masked g. */
template <typename T, int V, bool MASK>
__global__ void __launch_bounds__(256) bn_bwd_apply_dual_k(int64_t m, int c, const T *x, const T *y, int act,
                                                           const T *dy, const float *mean, const float *var,
                                                           const float *gamma, const T *x2, const float *mean2,
                                                           const float *var2, const float *gamma2, float eps,
                                                           const float *sum_dy, const float *sum_dy_xhat,
                                                           float inv_count, const float *sum_dy2,
                                                           const float *sum_dy_xhat2, float inv_count2, T *dx,
                                                           T *dx2, const uint8_t *mask) {
    pdl_enter();
    int ch0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (ch0 >= c) return;
    float mu[V], is[V], a[V], mdy[V], mdyx[V], mu2[V], is2[V], a2[V], mdy2[V], mdyx2[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        mu[k] = mean[ch0 + k];
        is[k] = 1.0f / sqrtf(var[ch0 + k] + eps);
        a[k] = gamma[ch0 + k] * is[k];
        mdy[k] = sum_dy[ch0 + k] * inv_count;
        mdyx[k] = sum_dy_xhat[ch0 + k] * inv_count;
        mu2[k] = mean2[ch0 + k];
        is2[k] = 1.0f / sqrtf(var2[ch0 + k] + eps);
        a2[k] = gamma2[ch0 + k] * is2[k];
        mdy2[k] = sum_dy2[ch0 + k] * inv_count2;
        mdyx2[k] = sum_dy_xhat2[ch0 + k] * inv_count2;
    }
    for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < m; r += (int64_t)gridDim.y * blockDim.y) {
        float xv[V], g[V], x2v[V];
        int64_t off = r * c + ch0;
        load_v<T, V>(x + off, xv);
        load_v<T, V>(dy + off, g);
        load_v<T, V>(x2 + off, x2v);
        if constexpr (MASK) drop_by_bits<V>(g, mask, off);
        else drop_by_y<T, V>(g, y + off, act);
#pragma unroll
        for (int k = 0; k < V; k++) {
            xv[k] = bn_dx(g[k], xv[k], mu[k], is[k], a[k], mdy[k], mdyx[k]);
            x2v[k] = bn_dx(g[k], x2v[k], mu2[k], is2[k], a2[k], mdy2[k], mdyx2[k]);
        }
        store_v<T, V>(dx + off, xv);
        store_v<T, V>(dx2 + off, x2v);
    }
}

int cu_bn_apply_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean, const float *var,
                     const float *gamma, const float *beta, const void *x2, const float *mean2, const float *var2,
                     const float *gamma2, const float *beta2, float eps, act_kind_t act, void *y, uint8_t *mask) {
    cuda_be_t *cb = cb_of(be);
    if (m <= 0 || c <= 0) return 0;
    if (act == ACT_NONE) return 1;
    CB_ENTER(cb);
    const void *outs[2] = {y, mask}, *ins[2] = {x, x2};
    bool again = no_overlap(outs, 2, ins, 2, (size_t)m * c * dt_size(dt));
    int rc;
    if (mask) {   /* 8 channels a thread, as bn_apply_mask */
        if (c % 8 != 0 || !all_aligned(x, x2, y, y, y, 8 * dt_size(dt))) return 1;
        bn_geom_t g = bn_geom_v(cb, m, c, 8, true);
        rc = tuned_launch(cb, TUNE_APPLY_DUAL + 1, m, c, dt, g, again, [&](const bn_geom_t &t) -> int {
            DISPATCH_DT(cb, dt, T,
                cb_launch(cb, (bn_apply_dual_k<T, 8, true>), t.grid, t.block, 0, m, c, (const T *)x, mean, var,
                          gamma, beta, (const T *)x2, mean2, var2, gamma2, beta2, eps, (int)act, (T *)y, mask));
            return 0;
        });
    } else {
        bn_geom_t g = bn_geom(cb, m, c, dt_size(dt), x, x2, y, y, y);
        rc = tuned_launch(cb, TUNE_APPLY_DUAL, m, c, dt, g, again, [&](const bn_geom_t &t) -> int {
            DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(t.v, V,
                cb_launch(cb, (bn_apply_dual_k<T, V, false>), t.grid, t.block, 0, m, c, (const T *)x, mean, var,
                          gamma, beta, (const T *)x2, mean2, var2, gamma2, beta2, eps, (int)act, (T *)y,
                          (uint8_t *)NULL)));
            return 0;
        });
    }
    if (rc) return -1;
    KERNEL_CHECK(cb, "bn_apply_dual_k");
    return 0;
}

/* The two BNs' sums in one pass over x, x2, dy and the mask (y or bits), then each one's
 * final kernel as bn_bwd_reduce's: the geometry is the add-relu BN's, which is the
 * shortcut BN's own wherever the pointers share their alignment (the net's always do). */
int cu_bn_bwd_reduce_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                          const void *dy, const float *mean, const float *var, const void *x2, const float *mean2,
                          const float *var2, float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta,
                          float *sum_dy2, float *sum_dy_xhat2, float *dgamma2, float *dbeta2, const uint8_t *mask) {
    cuda_be_t *cb = cb_of(be);
    if (m <= 0 || c <= 0) return cb_fail(cb, "bn_bwd_reduce_dual: empty input (m %lld, c %d)", (long long)m, c);
    if (!y || act == ACT_NONE) return cb_fail(cb, "bn_bwd_reduce_dual: needs y and a relu / relu6");
    CB_ENTER(cb);
    bn_geom_t g = bn_geom(cb, m, c, dt_size(dt), x, y, dy, dy, dy);
    size_t half = (size_t)2 * g.grid.y * c;
    if (cb_grow(cb, &cb->scratch, 2 * half * sizeof(float), "bn scratch")) return -1;
    float *part = (float *)cb->scratch.p, *part2 = part + half;
    cb->last_fused = true;
    if (mask) {
        DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(g.v, V,
            cb_launch(cb, (bn_bwd_partial_dual_k<T, V, true>), g.grid, g.block, 0, m, c, (const T *)x, (const T *)y,
                      (int)act, (const T *)dy, mean, (const T *)x2, mean2, part, part2, mask)));
    } else {
        DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(g.v, V,
            cb_launch(cb, (bn_bwd_partial_dual_k<T, V, false>), g.grid, g.block, 0, m, c, (const T *)x, (const T *)y,
                      (int)act, (const T *)dy, mean, (const T *)x2, mean2, part, part2, (const uint8_t *)NULL)));
    }
    KERNEL_CHECK(cb, "bn_bwd_partial_dual_k");
    for (int i = 0; i < 2; i++) {
        const float *p = i ? part2 : part, *v = i ? var2 : var;
        float *s1 = i ? sum_dy2 : sum_dy, *s2 = i ? sum_dy_xhat2 : sum_dy_xhat;
        float *dg = i ? dgamma2 : dgamma, *db = i ? dbeta2 : dbeta;
        if (cb->fusion & BACKEND_FUSE_BN_WIDE_FINAL)
            cb_launch(cb, (bn_bwd_final_k<BN_TY_WIDE>), (c + BN_TX - 1) / BN_TX, dim3(BN_TX, BN_TY_WIDE), 0,
                      c, (int)g.grid.y, p, v, eps, s1, s2, dg, db);
        else
            cb_launch(cb, (bn_bwd_final_k<BN_TY>), (c + BN_TX - 1) / BN_TX, dim3(BN_TX, BN_TY), 0, c, (int)g.grid.y,
                      p, v, eps, s1, s2, dg, db);
        KERNEL_CHECK(cb, "bn_bwd_final_k");
    }
    return 0;
}

int cu_bn_bwd_apply_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                         const void *dy, const float *mean, const float *var, const float *gamma, const void *x2,
                         const float *mean2, const float *var2, const float *gamma2, float eps, const float *sum_dy,
                         const float *sum_dy_xhat, int64_t count, const float *sum_dy2, const float *sum_dy_xhat2,
                         int64_t count2, void *dx, void *dx2, const uint8_t *mask) {
    cuda_be_t *cb = cb_of(be);
    if (m <= 0 || c <= 0) return 0;
    if (count <= 0 || count2 <= 0)
        return cb_fail(cb, "bn_bwd_apply_dual: counts %lld, %lld must be positive", (long long)count,
                       (long long)count2);
    if (!y || act == ACT_NONE) return cb_fail(cb, "bn_bwd_apply_dual: needs y and a relu / relu6");
    CB_ENTER(cb);
    bn_geom_t g = bn_geom(cb, m, c, dt_size(dt), x, y, dy, dx, dx2);
    float inv = (float)(1.0 / (double)count), inv2 = (float)(1.0 / (double)count2);
    cb->last_fused = true;
    const void *outs[2] = {dx, dx2}, *ins[4] = {x, y, dy, x2};
    bool again = no_overlap(outs, 2, ins, 4, (size_t)m * c * dt_size(dt));
    if (tuned_launch(cb, TUNE_BWD_APPLY_DUAL + (mask != NULL), m, c, dt, g, again, [&](const bn_geom_t &t) -> int {
            if (mask) {
                DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(t.v, V,
                    cb_launch(cb, (bn_bwd_apply_dual_k<T, V, true>), t.grid, t.block, 0, m, c, (const T *)x,
                              (const T *)y, (int)act, (const T *)dy, mean, var, gamma, (const T *)x2, mean2, var2,
                              gamma2, eps, sum_dy, sum_dy_xhat, inv, sum_dy2, sum_dy_xhat2, inv2, (T *)dx, (T *)dx2,
                              mask)));
            } else {
                DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(t.v, V,
                    cb_launch(cb, (bn_bwd_apply_dual_k<T, V, false>), t.grid, t.block, 0, m, c, (const T *)x,
                              (const T *)y, (int)act, (const T *)dy, mean, var, gamma, (const T *)x2, mean2, var2,
                              gamma2, eps, sum_dy, sum_dy_xhat, inv, sum_dy2, sum_dy_xhat2, inv2, (T *)dx, (T *)dx2,
                              (const uint8_t *)NULL)));
            }
            return 0;
        }))
        return -1;
    KERNEL_CHECK(cb, "bn_bwd_apply_dual_k");
    return 0;
}
