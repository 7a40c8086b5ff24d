/* norm_persist.cu: the bn_persist fusion option (issue 25): each direction of a BN in one
 * cooperative kernel whose blocks stay resident, instead of three (statistics: row
 * partials, the splits' final, apply; backward: row partials, final, dx).
 *
 * Why: the row kernels read the activation twice (once for the sums, once to apply), and
 * the backward reads x and dy twice; between the two readings the sums of every row are
 * needed, which separate kernels get from the end of the first. Here the blocks keep the
 * rows they read in shared memory (as many as fit: ~228 KB an SM less the kernels' own
 * 4 KB and 1 KB reserved a block, ~27 MB on an H100 or H200), wait for each other twice at a grid barrier (cooperative launch: all blocks are
 * resident at once, cudaLaunchAttributeCooperative, recorded as a cooperative kernel
 * node when a step is captured), and apply from what they kept; only the rows that did
 * not fit are read again. ResNet-50 (CIFAR stem, batch 128, bf16), by the launch plan
 * (bn_persist_plan.h) and the byte model (net_traffic): -0.52 GB of forward and -0.83 GB
 * of backward reads a step (8.36 -> 7.01 GB of non-conv traffic), and 4 launches a BN
 * layer fewer (two barriers instead).
 *
 * The same bits as the separate ops (the two-pass order: bn_one_pass's last-block sums
 * are another order): the kernel runs the row kernels' blocks as virtual blocks, the
 * geometry bn_geom gives them (gx x gy blocks of TX x TY threads), block b of the grid
 * taking virtual blocks b, b + G, ... one after another, each thread adding its rows in
 * the order the row kernel's thread adds them (stats_acc, bwd_acc) and each virtual
 * block's partials written as that block's split in block_partials_at's order
 * (block_partials_lean: the same sums through 2 KB of shared memory, not 16). The final pass
 * adds the splits as sum_splits<TY> (bn_wide_final: TY = 32, else 8) does: the inner sum
 * of splits j = y, y + TY, ... for each (channel, y), in double, spread over the grid,
 * then, after the second barrier, the TY inner sums in order, by the block that applies
 * the channel (stats_of, bwd_of); the virtual block of row split 0 writes the results
 * (mean, var and the running update; sum_dy, sum_dy_xhat, dgamma and dbeta added once).
 * The apply computes each element with bn_out / bn_dx from the same per-channel values,
 * so any grid gives its bits. Cached rows are the values as loaded (the backward keeps g,
 * dy already masked: a masked element is 0, the rest dy's value, exact in T).
 *
 * Where it does not run (1: the net runs the separate ops): no cooperative launch on the
 * device, an output overlapping an input, pointers not aligned for the reduction's V,
 * the mask bits without an activation or with c not a multiple of 8, bn_one_pass' layers,
 * no resident block, or a graph being recorded before the kernel's shared-memory limit
 * was raised (the first eager step raises it).
 */
#include <cooperative_groups.h>

#include "model/cuda/bn_persist_plan.h"
#include "model/cuda/norm.cuh"
#include "model/cuda/norm_impl.cuh"

namespace cgrp = cooperative_groups;

enum { PERSIST_NT = BN_TX * BN_TY, PERSIST_MAX_SPLITS = 1024 };

/* The arguments of both kernels (by value); the forward's and the backward's fields. */
typedef struct persist_args {
    int64_t m;
    int c, gx, gy, slots;   /* the row kernels' grid (virtual blocks), rows a thread keeps */
    float eps;
    int act;
    float *part;            /* [2][gy][c]: the virtual blocks' partials */
    double *fin;            /* [2][TY][c]: the final pass's inner sums */
    const void *x, *z, *y, *dy;
    void *out, *dz;         /* y (forward) or dx (backward); dz: the masked dy (may be NULL) */
    uint8_t *mask;          /* forward: the mask bits written; backward: read */
    const float *gamma, *beta, *mean_in, *var_in;   /* backward: the forward's statistics */
    float *mean, *var, *run_mean, *run_var, unbias, momentum;
    float *sum_dy, *sum_dy_xhat, *dgamma, *dbeta, inv_count;
} persist_args_t;

template <typename T, int V>
__device__ __forceinline__ void unpack_v(const pack_t<T, V> &a, float (&f)[V]) {
#pragma unroll
    for (int k = 0; k < V; k++) f[k] = to_f32(a.v[k]);
}

template <typename T, int V>
__device__ __forceinline__ pack_t<T, V> pack_v(const float (&f)[V]) {
    pack_t<T, V> a;
#pragma unroll
    for (int k = 0; k < V; k++) a.v[k] = from_f32<T>(f[k]);
    return a;
}

/* block_partials_at's sums in its order (channel k of thread x: the TY rows' values added
 * j = 0, 1, ... by the thread of row 0), one channel of the V at a time through 2 x 256
 * floats of shared memory instead of 2 x 256 x V: the 14 KB a block it saves at V = 8 go
 * to the rows kept. Every thread of the block; ends with a barrier. */
template <int V>
__device__ __forceinline__ void block_partials_lean(const float (&a)[V], const float (&b)[V], bool active, int ch0,
                                                    int c, float *part, int64_t split, int64_t splits) {
    __shared__ float la[PERSIST_NT], lb[PERSIST_NT];
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
    for (int k = 0; k < V; k++) {
        la[t] = a[k];
        lb[t] = b[k];
        __syncthreads();
        if (threadIdx.y == 0 && active) {
            float u = 0.0f, w = 0.0f;
            for (int j = 0; j < (int)blockDim.y; j++) {
                u += la[j * blockDim.x + threadIdx.x];
                w += lb[j * blockDim.x + threadIdx.x];
            }
            part[split * c + ch0 + k] = u;
            part[(splits + split) * c + ch0 + k] = w;
        }
        __syncthreads();
    }
}

/* The final pass's inner sums: for each (y, channel), y < TY, the splits y, y + TY, ...
 * of both partials added in double in split order (sum_splits<TY>'s thread (ch, y)). */
template <int TY>
__device__ __forceinline__ void inner_sums(const persist_args_t &a) {
    const int64_t items = (int64_t)TY * a.c, nt = (int64_t)blockDim.x * blockDim.y;
    for (int64_t it = blockIdx.x * nt + threadIdx.y * blockDim.x + threadIdx.x; it < items; it += gridDim.x * nt) {
        int y = (int)(it / a.c), ch = (int)(it % a.c);
        double u = 0.0, w = 0.0;
        for (int j = y; j < a.gy; j += TY) {
            u += __ldcg(a.part + (int64_t)j * a.c + ch);
            w += __ldcg(a.part + (int64_t)(a.gy + j) * a.c + ch);
        }
        a.fin[(int64_t)y * a.c + ch] = u;
        a.fin[(int64_t)(TY + y) * a.c + ch] = w;
    }
}

/* The two sums of channel ch: the TY inner sums added in order (sum_splits' last loop). */
template <int TY>
__device__ __forceinline__ void outer_sums(const persist_args_t &a, int ch, double *s, double *s2) {
    double u = 0.0, w = 0.0;
    for (int j = 0; j < TY; j++) {
        u += __ldcg(a.fin + (int64_t)j * a.c + ch);
        w += __ldcg(a.fin + (int64_t)(TY + j) * a.c + ch);
    }
    *s = u;
    *s2 = w;
}

/* The mask byte of the 8 elements from element off (off a multiple of 8; bn_mask_bits'
 * layout) where a thread has V of them: with V = 8 its own (mask_byte); else the G = 8 / V
 * threads of consecutive threadIdx.x that hold them (the same row: c and so the block's
 * row width are multiples of 8, and the group is all active or all not) put their bits
 * together over warp shuffles, and the group's first writes the byte. Reached by every
 * thread of a group the same number of times. */
template <typename T, int V>
__device__ __forceinline__ void mask_write(uint8_t *mask, int64_t off, int act, const float (&v)[V]) {
    if constexpr (V == 8) {
        mask[off >> 3] = mask_byte<T, V>(act, v);
    } else {
        constexpr int G = 8 / V;
        unsigned b = 0;
#pragma unroll
        for (int k = 0; k < V; k++) b |= (act_keeps(act, to_f32(from_f32<T>(v[k]))) ? 1u : 0u) << k;
        int pos = (int)(threadIdx.x % G), lane = (int)((threadIdx.y * blockDim.x + threadIdx.x) & 31);
        unsigned gm = ((1u << G) - 1u) << (lane - pos);
        b <<= pos * V;
#pragma unroll
        for (int o = 1; o < G; o <<= 1) b |= __shfl_xor_sync(gm, b, o);
        if (pos == 0) mask[off >> 3] = (uint8_t)b;
    }
}

/* Between the two phases, every thread of the grid: a barrier (every virtual block's
 * partials written), the final pass's inner sums, a barrier (all of them written). */
template <int TY>
__device__ __forceinline__ void persist_middle(const persist_args_t &a) {
    cgrp::this_grid().sync();
    inner_sums<TY>(a);
    cgrp::this_grid().sync();
}

/* Virtual block vb's channel block (vx) and row split (vy), and for the block's thread
 * tid the channel it finishes (one of the block's blockDim.x * V) with its two sums
 * (outer_sums): false where tid has none. */
template <int TY, int V>
__device__ __forceinline__ bool vb_channel(const persist_args_t &a, int64_t vb, int tid, int *vx, int64_t *vy,
                                           int *ch, double *s, double *s2) {
    *vx = (int)(vb % a.gx);
    *vy = vb / a.gx;
    int nch = blockDim.x * V;
    *ch = *vx * nch + tid;
    if (tid >= nch || *ch >= a.c) return false;
    outer_sums<TY>(a, *ch, s, s2);
    return true;
}

/* Forward: statistics (and the running update), then y = act(bn(x) [+ z]) [and the mask
 * bits with MASK], the same bits as bn_stats[_running] + bn_apply[_mask]. */
template <typename T, int V, int TY, bool MASK>
__global__ void __launch_bounds__(PERSIST_NT, 3) bn_fwd_persist_k(persist_args_t a) {
    typedef pack_t<T, V> P;
    extern __shared__ __align__(16) unsigned char persist_smem[];
    P *cache = reinterpret_cast<P *>(persist_smem);
    __shared__ float s_mu[PERSIST_NT], s_var[PERSIST_NT];
    const T *x = (const T *)a.x, *z = (const T *)a.z;
    T *y = (T *)a.out;
    const int nt = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int64_t nvb = (int64_t)a.gx * a.gy, step = (int64_t)a.gy * blockDim.y;
    int slot = 0;
    for (int64_t vb = blockIdx.x; vb < nvb; vb += gridDim.x) {
        int vx = (int)(vb % a.gx);
        int64_t vy = vb / a.gx;
        int ch0 = (vx * blockDim.x + threadIdx.x) * V;
        bool active = ch0 < a.c;
        float s[V], ss[V], shift[V];
#pragma unroll
        for (int k = 0; k < V; k++) s[k] = ss[k] = shift[k] = 0.0f;
        if (active) {
            load_v<T, V>(x + ch0, shift);
#pragma unroll 4
            for (int64_t r = vy * blockDim.y + threadIdx.y; r < a.m; r += step) {
                P p = *reinterpret_cast<const P *>(x + r * a.c + ch0);
                if (slot < a.slots) cache[(int64_t)slot * nt + tid] = p;
                slot++;
                float v[V];
                unpack_v<T, V>(p, v);
                stats_acc<V>(s, ss, v, shift);
            }
        }
        block_partials_lean<V>(s, ss, active, ch0, a.c, a.part, vy, a.gy);
    }
    persist_middle<TY>(a);
    slot = 0;
    for (int64_t vb = blockIdx.x; vb < nvb; vb += gridDim.x) {
        int vx, ch;
        int64_t vy;
        double su, sq;
        if (vb_channel<TY, V>(a, vb, tid, &vx, &vy, &ch, &su, &sq)) {
            float mu, vf;
            stats_of(su, sq, a.m, to_f32(x[ch]), &mu, &vf);
            s_mu[tid] = mu;
            s_var[tid] = vf;
            if (vy == 0) {   /* one virtual block a channel writes the statistics */
                a.mean[ch] = mu;
                a.var[ch] = vf;
                if (a.run_mean) bn_running_one(ch, mu, vf, a.unbias, a.momentum, a.run_mean, a.run_var);
            }
        }
        __syncthreads();
        int ch0 = (vx * blockDim.x + threadIdx.x) * V;
        if (ch0 < a.c) {
            float mu[V], sc[V], bt[V];
#pragma unroll
            for (int k = 0; k < V; k++) {
                mu[k] = s_mu[threadIdx.x * V + k];
                sc[k] = bn_scale(a.gamma[ch0 + k], s_var[threadIdx.x * V + k], a.eps);
                bt[k] = a.beta[ch0 + k];
            }
            for (int64_t r = vy * blockDim.y + threadIdx.y; r < a.m; r += step) {
                int64_t off = r * a.c + ch0;
                P p = slot < a.slots ? cache[(int64_t)slot * nt + tid] : *reinterpret_cast<const P *>(x + off);
                slot++;
                float v[V], w[V];
                unpack_v<T, V>(p, v);
                if (z) load_v<T, V>(z + off, w);
#pragma unroll
                for (int k = 0; k < V; k++) v[k] = bn_out(a.act, v[k], mu[k], sc[k], bt[k], z != NULL, z ? w[k] : 0.0f);
                store_v<T, V>(y + off, v);
                if constexpr (MASK) mask_write<T, V>(a.mask, off, a.act, v);
            }
        }
        __syncthreads();   /* s_mu, s_var: the next virtual block's */
    }
}

/* Backward: the sums (into sum_dy, sum_dy_xhat; added into dgamma, dbeta), then dx [and
 * dz = the masked dy], the same bits as bn_bwd_reduce[_mask] + bn_bwd_apply[_mask]. The
 * mask as there: the bits with MASK, recomputed from x when beta is given, else from y. */
template <typename T, int V, int TY, bool MASK>
__global__ void __launch_bounds__(PERSIST_NT, 2) bn_bwd_persist_k(persist_args_t a) {
    typedef pack_t<T, V> P;
    extern __shared__ __align__(16) unsigned char persist_smem[];
    const int nt = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
    P *cx = reinterpret_cast<P *>(persist_smem), *cgd = cx + (int64_t)a.slots * nt;
    __shared__ float s_sdy[PERSIST_NT], s_sdyx[PERSIST_NT];
    const T *x = (const T *)a.x, *y = (const T *)a.y, *dy = (const T *)a.dy;
    T *dx = (T *)a.out, *dz = (T *)a.dz;
    const int64_t nvb = (int64_t)a.gx * a.gy, step = (int64_t)a.gy * blockDim.y;
    int slot = 0;
    for (int64_t vb = blockIdx.x; vb < nvb; vb += gridDim.x) {
        int vx = (int)(vb % a.gx);
        int64_t vy = vb / a.gx;
        int ch0 = (vx * blockDim.x + threadIdx.x) * V;
        bool active = ch0 < a.c;
        float s[V], sx[V], mu[V], sc[V], bt[V];
#pragma unroll
        for (int k = 0; k < V; k++) {
            s[k] = sx[k] = 0.0f;
            mu[k] = active ? a.mean_in[ch0 + k] : 0.0f;
        }
        if (active) {
            remask_params<V>(ch0, a.var_in, a.gamma, a.beta, a.eps, sc, bt);
#pragma unroll 2
            for (int64_t r = vy * blockDim.y + threadIdx.y; r < a.m; r += step) {
                int64_t off = r * a.c + ch0;
                P px = *reinterpret_cast<const P *>(x + off);
                float xv[V], g[V];
                unpack_v<T, V>(px, xv);
                load_v<T, V>(dy + off, g);
                bwd_mask<T, V, MASK>(g, xv, off, a.mask, a.beta, mu, sc, bt, y, a.act);
                if (slot < a.slots) {
                    cx[(int64_t)slot * nt + tid] = px;
                    cgd[(int64_t)slot * nt + tid] = pack_v<T, V>(g);
                }
                slot++;
                bwd_acc<V>(s, sx, g, xv, mu);
            }
        }
        block_partials_lean<V>(s, sx, active, ch0, a.c, a.part, vy, a.gy);
    }
    persist_middle<TY>(a);
    slot = 0;
    for (int64_t vb = blockIdx.x; vb < nvb; vb += gridDim.x) {
        int vx, ch;
        int64_t vy;
        double su, sx;
        if (vb_channel<TY, V>(a, vb, tid, &vx, &vy, &ch, &su, &sx)) {
            float sdy, sdyx;
            bwd_of(su, sx, a.var_in[ch], a.eps, &sdy, &sdyx);
            s_sdy[tid] = sdy;
            s_sdyx[tid] = sdyx;
            if (vy == 0) {   /* one virtual block a channel writes the sums, adds the gradients */
                a.sum_dy[ch] = sdy;
                a.sum_dy_xhat[ch] = sdyx;
                if (a.dbeta) a.dbeta[ch] += sdy;
                if (a.dgamma) a.dgamma[ch] += sdyx;
            }
        }
        __syncthreads();
        int ch0 = (vx * blockDim.x + threadIdx.x) * V;
        if (ch0 < a.c) {
            float mu[V], is[V], al[V], mdy[V], mdyx[V], sc[V], bt[V];
#pragma unroll
            for (int k = 0; k < V; k++)
                dx_param_one(a.mean_in[ch0 + k], a.var_in[ch0 + k], a.gamma[ch0 + k], a.eps,
                             s_sdy[threadIdx.x * V + k], s_sdyx[threadIdx.x * V + k], a.inv_count, &mu[k], &is[k],
                             &al[k], &mdy[k], &mdyx[k]);
            remask_params<V>(ch0, a.var_in, a.gamma, a.beta, a.eps, sc, bt);
            for (int64_t r = vy * blockDim.y + threadIdx.y; r < a.m; r += step) {
                int64_t off = r * a.c + ch0;
                float xv[V], g[V];
                if (slot < a.slots) {
                    unpack_v<T, V>(cx[(int64_t)slot * nt + tid], xv);
                    unpack_v<T, V>(cgd[(int64_t)slot * nt + tid], g);
                } else {
                    load_v<T, V>(x + off, xv);
                    load_v<T, V>(dy + off, g);
                    bwd_mask<T, V, MASK>(g, xv, off, a.mask, a.beta, mu, sc, bt, y, a.act);
                }
                slot++;
                if (dz) store_v<T, V>(dz + off, g);
#pragma unroll
                for (int k = 0; k < V; k++) xv[k] = bn_dx(g[k], xv[k], mu[k], is[k], al[k], mdy[k], mdyx[k]);
                store_v<T, V>(dx + off, xv);
            }
        }
        __syncthreads();
    }
}

/* ---- host side ---- */

/* The device's shared memory an SM and a block (opt-in), its reservation a block, and
 * whether it launches cooperative kernels: queried once. 0, or -1 with cb's error. */
static int persist_device(cuda_be_t *cb) {
    if (cb->persist_queried) return 0;
    int dev = cb->base.device, coop = 0;
    CUDA_CHECK(cb, cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    CUDA_CHECK(cb, cudaDeviceGetAttribute(&cb->persist_smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    CUDA_CHECK(cb, cudaDeviceGetAttribute(&cb->persist_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CUDA_CHECK(cb, cudaDeviceGetAttribute(&cb->persist_smem_reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    cb->persist_coop = coop != 0;
    cb->persist_queried = true;
    return 0;
}

/* Kernel k's entry of the backend's table (cuda_be_t.persist_kernels): its static shared
 * memory and blocks an SM without dynamic shared memory, queried once, its dynamic
 * shared-memory limit raised to what a block may opt into (per backend, so per device;
 * not while a graph is being recorded), and the blocks an SM at the last dynamic size
 * asked. 0 *out set, 1 not now, -1 error. */
static int persist_kernel(cuda_be_t *cb, const void *k, int nt, cb_persist_kernel_t **out) {
    for (int i = 0; i < cb->n_persist_kernels; i++)
        if (cb->persist_kernels[i].k == k && cb->persist_kernels[i].nt == nt) {
            *out = &cb->persist_kernels[i];
            return 0;
        }
    if (cb->capturing || cb->n_persist_kernels == CB_PERSIST_KERNELS) return 1;
    cudaFuncAttributes fa;
    CUDA_CHECK(cb, cudaFuncGetAttributes(&fa, k));
    int most = cb->persist_smem_optin - (int)fa.sharedSizeBytes, nb = 0;
    if (most > 0) CUDA_CHECK(cb, cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    CUDA_CHECK(cb, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k, nt, 0));
    cb_persist_kernel_t *e = &cb->persist_kernels[cb->n_persist_kernels++];
    e->k = k;
    e->nt = nt;
    e->static_smem = fa.sharedSizeBytes;
    e->nb0 = nb;
    e->dyn = (size_t)-1;
    e->nb_dyn = 0;
    *out = e;
    return 0;
}

/* Launches kernel k (bn_fwd_persist_k or bn_bwd_persist_k) over the virtual grid of g
 * with as many rows a thread kept as fit (row_bytes a row: one pack, two backward).
 * 0 ran, 1 cannot here (nothing run), -1 error. */
static int persist_launch(cuda_be_t *cb, void (*k)(persist_args_t), persist_args_t a, const bn_geom_t &g,
                          size_t row_bytes, const char *name) {
    int nt = (int)(g.block.x * g.block.y);
    cb_persist_kernel_t *pk = NULL;
    int r = persist_kernel(cb, (const void *)k, nt, &pk);
    if (r) return r;
    int nb = pk->nb0;
    size_t static_smem = pk->static_smem;
    if (nb < 1) return 1;
    bn_persist_dev_t dev = {cb->sm_count, cb->persist_smem_sm, cb->persist_smem_optin, cb->persist_smem_reserved};
    int64_t rows_vb = (a.m + (int64_t)g.block.y * g.grid.y - 1) / ((int64_t)g.block.y * g.grid.y);
    bn_persist_plan_t pl = bn_persist_plan(&dev, nb, static_smem, (int64_t)g.grid.x * g.grid.y, rows_vb, nt, row_bytes,
                                           cb->bn_persist_blocks, cb->bn_persist_slots);
    int64_t grid = pl.grid, slots = pl.slots;
    size_t dyn = pl.dyn;
    if (pk->dyn != dyn) {   /* (one query per kernel and size: a net's layers repeat few sizes) */
        CUDA_CHECK(cb, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&pk->nb_dyn, k, nt, dyn));
        pk->dyn = dyn;
    }
    int nb2 = pk->nb_dyn;
    if (nb2 < 1) {   /* (the arithmetic above keeps a block resident; should it not) */
        slots = 0, dyn = 0, nb2 = nb;
    }
    if (grid > (int64_t)nb2 * cb->sm_count) grid = (int64_t)nb2 * cb->sm_count;
    a.slots = (int)slots;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)grid, 1, 1);
    cfg.blockDim = g.block;
    cfg.dynamicSmemBytes = dyn;
    cfg.stream = cb->stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cudaError_t st = cudaLaunchKernelEx(&cfg, k, a);
    if (st == cudaErrorCooperativeLaunchTooLarge) {
        (void)cudaGetLastError();
        return 1;
    }
    if (st != cudaSuccess) return cb_fail_call(cb, name, cudaGetErrorString(st), __FILE__, __LINE__);
    cb->last_fused = true;
    cb->pdl_hold = true;
    return 0;
}

/* What both ops check first: the device, the splits' scratch (part, then fin). 0 go on,
 * 1 cannot, -1 error. */
static int persist_prepare(cuda_be_t *cb, const bn_geom_t &g, int c, int ty, persist_args_t *a) {
    if (persist_device(cb)) return -1;
    /* (bn_one_pass' last-block order is not the one emulated: its layers run as they do) */
    if (!cb->persist_coop || g.grid.y > PERSIST_MAX_SPLITS || one_pass(cb, g)) return 1;
    size_t part = ((size_t)2 * g.grid.y * c * sizeof(float) + 15) / 16 * 16;
    if (cb_grow(cb, &cb->scratch, part + (size_t)2 * ty * c * sizeof(double), "bn scratch")) return -1;
    a->part = (float *)cb->scratch.p;
    a->fin = (double *)((char *)cb->scratch.p + part);
    a->gx = (int)g.grid.x;
    a->gy = (int)g.grid.y;
    a->c = c;
    return 0;
}

/* The launch of one instantiation. */
template <typename T, int V, bool MASK>
static int fwd_go(cuda_be_t *cb, int ty, const persist_args_t &a, const bn_geom_t &g) {
    if constexpr (sizeof(T) * V > 16) {   /* (bn_geom never gives more than 16 bytes) */
        return 1;
    } else {
        if (ty == BN_TY_WIDE)
            return persist_launch(cb, bn_fwd_persist_k<T, V, BN_TY_WIDE, MASK>, a, g, sizeof(pack_t<T, V>),
                                  "bn_fwd_persist_k");
        return persist_launch(cb, bn_fwd_persist_k<T, V, BN_TY, MASK>, a, g, sizeof(pack_t<T, V>),
                              "bn_fwd_persist_k");
    }
}

template <typename T, int V, bool MASK>
static int bwd_go(cuda_be_t *cb, int ty, const persist_args_t &a, const bn_geom_t &g) {
    if constexpr (sizeof(T) * V > 16) {   /* (bn_geom never gives more than 16 bytes) */
        return 1;
    } else {
        if (ty == BN_TY_WIDE)
            return persist_launch(cb, bn_bwd_persist_k<T, V, BN_TY_WIDE, MASK>, a, g, 2 * sizeof(pack_t<T, V>),
                                  "bn_bwd_persist_k");
        return persist_launch(cb, bn_bwd_persist_k<T, V, BN_TY, MASK>, a, g, 2 * sizeof(pack_t<T, V>),
                              "bn_bwd_persist_k");
    }
}

int cu_bn_fwd_fused(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean, float *var,
                    int64_t count, float momentum, float *run_mean, float *run_var, const float *gamma,
                    const float *beta, float eps, const void *z, act_kind_t act, void *y, uint8_t *mask) {
    cuda_be_t *cb = cb_of(be);
    if (m <= 0 || c <= 0) return cb_fail(cb, "bn_fwd_fused: empty input (m %lld, c %d)", (long long)m, c);
    CB_ENTER(cb);
    size_t esz = dt_size(dt);
    bn_geom_t g = bn_geom(cb, m, c, esz, x, x, x, x, x);   /* bn_stats' geometry */
    if (!all_aligned(y, z ? z : y, y, y, y, (size_t)g.v * esz)) return 1;
    if (mask && (act == ACT_NONE || c % 8 != 0)) return 1;
    const void *outs[2] = {y, mask}, *ins[2] = {x, z};
    if (!no_overlap(outs, 2, ins, 2, (size_t)m * c * esz)) return 1;
    int ty = (cb->fusion & BACKEND_FUSE_BN_WIDE_FINAL) ? BN_TY_WIDE : BN_TY;
    persist_args_t a = {};
    int r = persist_prepare(cb, g, c, ty, &a);
    if (r) return r;
    a.m = m, a.eps = eps, a.act = (int)act;
    a.x = x, a.z = z, a.out = y, a.mask = mask, a.gamma = gamma, a.beta = beta;
    a.mean = mean, a.var = var, a.run_mean = run_mean, a.run_var = run_var;
    a.unbias = bn_unbias(count);
    a.momentum = momentum;
    r = 1;
    if (mask) DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(g.v, V, r = fwd_go<T, V, true>(cb, ty, a, g)));
    else DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(g.v, V, r = fwd_go<T, V, false>(cb, ty, a, g)));
    return r;
}

int cu_bn_bwd_fused(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                    const void *dy, const float *mean, const float *var, const float *gamma, const float *beta,
                    float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta, int64_t count,
                    void *dx, void *dz, const uint8_t *mask) {
    cuda_be_t *cb = cb_of(be);
    if (m <= 0 || c <= 0) return cb_fail(cb, "bn_bwd_fused: empty input (m %lld, c %d)", (long long)m, c);
    if (count <= 0) return cb_fail(cb, "bn_bwd_fused: count %lld must be positive", (long long)count);
    if (mask && (!y || act == ACT_NONE))
        return cb_fail(cb, "bn_bwd_fused: the mask bits need y and a relu / relu6");
    if (!dx) return cb_fail(cb, "bn_bwd_fused: dx is required");
    /* (the separate reduce would recompute the mask from x, the apply read y: the net
     * never gives both) */
    if (beta && dz && !mask) return 1;
    CB_ENTER(cb);
    size_t esz = dt_size(dt);
    bn_geom_t g = bn_geom(cb, m, c, esz, x, y ? y : x, dy, dy, dy);   /* bn_bwd_reduce's geometry */
    if (!all_aligned(dx, dz ? dz : dx, dx, dx, dx, (size_t)g.v * esz)) return 1;
    const void *outs[2] = {dx, dz}, *ins[3] = {x, y, dy};
    if (!no_overlap(outs, 2, ins, 3, (size_t)m * c * esz)) return 1;
    int ty = (cb->fusion & BACKEND_FUSE_BN_WIDE_FINAL) ? BN_TY_WIDE : BN_TY;
    persist_args_t a = {};
    int r = persist_prepare(cb, g, c, ty, &a);
    if (r) return r;
    a.m = m, a.eps = eps, a.act = (int)act;
    a.x = x, a.y = y, a.dy = dy, a.out = dx, a.dz = dz, a.mask = (uint8_t *)mask;
    a.gamma = gamma, a.beta = mask ? NULL : remask_beta(cb, y, act, gamma, beta, dz);
    a.mean_in = mean, a.var_in = var;
    a.sum_dy = sum_dy, a.sum_dy_xhat = sum_dy_xhat, a.dgamma = dgamma, a.dbeta = dbeta;
    a.inv_count = (float)(1.0 / (double)count);
    r = 1;
    if (mask) DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(g.v, V, r = bwd_go<T, V, true>(cb, ty, a, g)));
    else DISPATCH_DT(cb, dt, T, BN_VEC_SWITCH(g.v, V, r = bwd_go<T, V, false>(cb, ty, a, g)));
    return r;
}
