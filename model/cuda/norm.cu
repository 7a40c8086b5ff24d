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
 * Not here: cross-rank SyncBN reduction (the net calls its hooks between the phases);
 * bn_dual_add's kernels (norm_dual.cu); what the two files share (norm_impl.cuh).
 */
#include "model/cuda/norm.cuh"

#include "model/cuda/norm_impl.cuh"

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
            stats_acc<V>(s, ss, v, shift);
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
    apply_params<V>(ch0, mean, var, gamma, beta, eps, mu, sc, bt);
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
            bwd_mask<T, V, MASK>(g, xv, r * c + ch0, mask, beta, mu, sc, bt, y, act);
            bwd_acc<V>(s, sx, g, xv, mu);
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

int cu_bn_bwd_final(cuda_be_t *cb, int c, int splits, const float *part, const float *var, float eps,
                    float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta) {
    if (cb->fusion & BACKEND_FUSE_BN_WIDE_FINAL)
        cb_launch(cb, (bn_bwd_final_k<BN_TY_WIDE>), (c + BN_TX - 1) / BN_TX, dim3(BN_TX, BN_TY_WIDE), 0, c, splits,
                  part, var, eps, sum_dy, sum_dy_xhat, dgamma, dbeta);
    else
        cb_launch(cb, (bn_bwd_final_k<BN_TY>), (c + BN_TX - 1) / BN_TX, dim3(BN_TX, BN_TY), 0, c, splits, part, var,
                  eps, sum_dy, sum_dy_xhat, dgamma, dbeta);
    KERNEL_CHECK(cb, "bn_bwd_final_k");
    return 0;
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
    dx_params<V>(ch0, mean, var, gamma, eps, sum_dy, sum_dy_xhat, inv_count, mu, is, a, mdy, mdyx);
    remask_params<V>(ch0, var, gamma, beta, eps, sc, bt);
    for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < m; r += (int64_t)gridDim.y * blockDim.y) {
        float xv[V], g[V];
        int64_t off = r * c + ch0;
        load_v<T, V>(x + off, xv);
        load_v<T, V>(dy + off, g);
        bwd_mask<T, V, MASK>(g, xv, off, mask, beta, mu, sc, bt, y, act);
        if (dz) store_v<T, V>(dz + off, g);
#pragma unroll
        for (int k = 0; k < V; k++) xv[k] = bn_dx(g[k], xv[k], mu[k], is[k], a[k], mdy[k], mdyx[k]);
        store_v<T, V>(dx + off, xv);
    }
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
    return one ? 0 : cu_bn_bwd_final(cb, c, (int)g.grid.y, part, var, eps, sum_dy, sum_dy_xhat, dgamma, dbeta);
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
