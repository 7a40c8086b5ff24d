/* norm_dual.cu: bn_dual_add's kernels (model/backend.h, BACKEND_FUSE_BN_DUAL_ADD): a
 * projection shortcut's BN applied inside the kernels of the add-relu BN that adds it,
 * forward (bn_apply_dual), backward sums (bn_bwd_reduce_dual) and dx (bn_bwd_apply_dual),
 * with the same bits as the separate ops: the shared pieces of norm.cu in norm_impl.cuh.
 */
#include "model/cuda/norm.cuh"

#include "model/cuda/norm_impl.cuh"

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
    apply_params<V>(ch0, mean, var, gamma, beta, eps, mu, sc, bt);
    apply_params<V>(ch0, mean2, var2, gamma2, beta2, eps, mu2, sc2, bt2);
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
            bwd_acc<V>(s, sx, g, xv, mu);   /* bn_bwd_partial_k's two sums, its expression */
#pragma unroll
            for (int k = 0; k < V; k++) sx2[k] += g[k] * (x2v[k] - mu2[k]);
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
    dx_params<V>(ch0, mean, var, gamma, eps, sum_dy, sum_dy_xhat, inv_count, mu, is, a, mdy, mdyx);
    dx_params<V>(ch0, mean2, var2, gamma2, eps, sum_dy2, sum_dy_xhat2, inv_count2, mu2, is2, a2, mdy2, mdyx2);
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
        if (cu_bn_bwd_final(cb, c, (int)g.grid.y, p, v, eps, s1, s2, dg, db)) return -1;
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
