/* fusion.cu: the CUDA backend's fused convolution ops (backend.h, issue 25), each an
 * option of the backend (BACKEND_FUSE_*), installed into the backend's own op table only
 * when turned on, so that without options the net runs the ops it always ran.
 *
 *   conv2d_bwd_data_accum (dgrad_accum): dx += dgrad(dy, w) in the convolution (beta = 1):
 *     on the graph API with graph_conv (a single-operation graph; runtime fusion engines
 *     need beta = 0, the pre-compiled ones blend), else the legacy API's beta. cuDNN adds
 *     in fp32 and rounds once; the unfused path rounds the gradient, then the sum.
 *   conv2d_fwd_bn_stats (conv_stats): the conv with cuDNN's genStats in its epilogue
 *     (per-channel sum and sum of squares of y, fp32), then one small kernel: mean =
 *     sum / m, var = sumsq / m - mean^2 (in double, clamped at 0). Without a graph engine
 *     for it (none on the device; deterministic mode: never built), the conv
 *     and then bn_stats, as unfused (the conv as conv2d_fwd runs it).
 *   conv2d_bwd_data_bn (dgrad_dbn): dgrad [with dReLU against relu_y] and the two sums of
 *     BN's backward reduction, sum(g) and sum(g * (bn_x - mean)), as reductions in the
 *     dgrad's epilogue; a small kernel turns them into sum_dy, sum_dy_xhat (times 1 /
 *     sqrt(var + eps) in double, as bn_bwd_reduce) and adds them into dbeta, dgamma.
 *     Without a graph engine, or for an activation other than ReLU (the graph builds
 *     ReLU's mask only): dgrad, then bn_bwd_reduce with the op's act, as unfused.
 *   bn_stats_running (bn_fold_running; norm.cu): bn_stats with the running update in its
 *     final kernel (not a convolution, installed here with the others).
 *   bn_apply_mask, bn_bwd_reduce_mask, bn_bwd_apply_mask (bn_mask_bits; norm.cu): the
 *     mask of a BN + add + ReLU kept as bits (not convolutions either).
 *   bn_apply_dual, bn_bwd_reduce_dual, bn_bwd_apply_dual (bn_dual_add; norm.cu): a
 *     shortcut's BN inside the kernels of the add-relu BN that adds it.
 *   bn_fwd_fused, bn_bwd_fused (bn_persist; norm_persist.cu): a BN's passes in one
 *     cooperative kernel each way.
 * The sums live at the start of the backend's scratch buffer (2 x channels floats), read
 * by the next kernel on the stream before any BN kernel uses the buffer.
 * Measured per layer (conv_stats, dgrad_dbn; not in deterministic mode, where their
 * graphs are never built): the first call of a fused plan times the fused way against
 * the unfused ops on its buffers (a few calls each, events) and keeps the plan only where
 * it is faster; elsewhere the unfused ops run from then on and the notice says so. The
 * first GPU run (H100) measured conv_stats 1.5 ms per ResNet-50 step slower: its
 * runtime-compiled engine is taken untimed (a compilation per candidate) and runs the
 * convolution slower than the tuned kernel it replaces, which costs more than the BN
 * statistics pass it saves (0.9 GB, ~0.25 ms).
 * Statistics from sums of squares lose precision when |mean| >> std (the unfused
 * bn_stats shifts by the first row); convolution outputs have |mean| of the order of
 * their std, and gpu tests hold the fused path to stated tolerances against the CPU.
 */
#include "model/cuda/fusion.cuh"

#include "model/cuda/conv.cuh"
#include "model/cuda/conv_graph.cuh"
#include "model/cuda/cuda_backend.h"
#include "model/cuda/cuda_impl.cuh"
#include "model/cuda/norm.cuh"

/* conv_engine: the graph plan that ran the shape, else the legacy API's report. */
static int graph_first_engine(backend_t *be, const conv_shape_t *s, int which, char *buf, size_t len) {
    if (cu_conv_graph_engine(cb_of(be), s, which, buf, len) == 0) return 0;
    const backend_ops_t *shared = cu_shared_ops();
    return shared->conv_engine ? shared->conv_engine(be, s, which, buf, len) : -1;
}

void cu_fusion_install(backend_ops_t *o, unsigned fusion) {
    if (fusion & BACKEND_FUSE_DGRAD_ACCUM) o->conv2d_bwd_data_accum = cu_conv2d_bwd_data_accum;
    if (fusion & BACKEND_FUSE_CONV_STATS) o->conv2d_fwd_bn_stats = cu_conv2d_fwd_bn_stats;
    if (fusion & BACKEND_FUSE_DGRAD_DBN) o->conv2d_bwd_data_bn = cu_conv2d_bwd_data_bn;
    if (fusion & BACKEND_FUSE_BN_FOLD_RUNNING) o->bn_stats_running = cu_bn_stats_running;
    if (fusion & BACKEND_FUSE_BN_MASK_BITS) {
        o->bn_apply_mask = cu_bn_apply_mask;
        o->bn_bwd_reduce_mask = cu_bn_bwd_reduce_mask;
        o->bn_bwd_apply_mask = cu_bn_bwd_apply_mask;
    }
    if (fusion & BACKEND_FUSE_BN_DUAL_ADD) {
        o->bn_apply_dual = cu_bn_apply_dual;
        o->bn_bwd_reduce_dual = cu_bn_bwd_reduce_dual;
        o->bn_bwd_apply_dual = cu_bn_bwd_apply_dual;
    }
    if (fusion & BACKEND_FUSE_BN_PERSIST) {
        o->bn_fwd_fused = cu_bn_fwd_fused;
        o->bn_bwd_fused = cu_bn_bwd_fused;
    }
    if (fusion & (BACKEND_FUSE_GRAPH_CONV | BACKEND_FUSE_CONV_STATS | BACKEND_FUSE_DGRAD_DBN | BACKEND_FUSE_DGRAD_ACCUM))
        o->conv_engine = graph_first_engine;
}

__global__ void stats_from_sums_k(int c, double inv_m, const float *sum, const float *sq, float *mean,
                                  float *var) {
    pdl_enter();
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double ms = (double)sum[ch] * inv_m, v = (double)sq[ch] * inv_m - ms * ms;
    mean[ch] = (float)ms;
    var[ch] = (float)(v > 0.0 ? v : 0.0);
}

__global__ void dbn_from_sums_k(int c, const float *s1, const float *s2, const float *var, float eps,
                                float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta) {
    pdl_enter();
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double invstd = 1.0 / sqrt((double)var[ch] + (double)eps);   /* as bn_bwd_final_k */
    float sdy = s1[ch], sdyx = (float)((double)s2[ch] * invstd);
    sum_dy[ch] = sdy;
    sum_dy_xhat[ch] = sdyx;
    if (dbeta) dbeta[ch] += sdy;
    if (dgamma) dgamma[ch] += sdyx;
}

/* Two per-channel fp32 vectors of c at the start of the scratch buffer (16-byte aligned). */
static float *sums(cuda_be_t *cb, int c) {
    size_t stride = ((size_t)c + 3) / 4 * 4;
    if (cb_grow(cb, &cb->scratch, 2 * stride * sizeof(float), "bn scratch")) return NULL;
    return (float *)cb->scratch.p;
}

int cuda_backend_last_fused(backend_t *be) { return cb_of(be)->last_fused ? 1 : 0; }

int cuda_backend_bn_geometry(backend_t *be, const cuda_bn_geom_t *g) {
    cuda_be_t *cb = cb_of(be);
    cb->bn_rows_min = g && g->rows_min > 0 ? g->rows_min : 0;
    cb->bn_blocks_per_sm = g && g->blocks_per_sm > 0 ? g->blocks_per_sm : 0;
    cb->bn_v_max = g && g->v_max > 0 ? g->v_max : 0;
    cb->bn_persist_blocks = g && g->persist_blocks > 0 ? g->persist_blocks : 0;
    cb->bn_persist_slots = g ? g->persist_slots : 0;
    cb->bn_one_pass = false;
    if (!g || !g->one_pass) return 0;
    if (cu_bn_counters(cb)) return -1;
    cb->bn_one_pass = true;
    return 0;
}

int cu_conv2d_bwd_data_accum(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                             const void *w, void *dx) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    cb->last_fused = true;   /* both paths add in the convolution */
    if (cb->fusion & BACKEND_FUSE_GRAPH_CONV) {
        void *t[3] = {(void *)dy, (void *)w, dx};
        int r = cu_conv_graph_run(cb, CG_DGRAD_ACCUM, s, dt, t);
        if (r <= 0) return r;
    }
    return cu_conv_legacy_bwd_data(be, s, dt, dy, w, dx, 1.0f);
}

/* ---- conv_stats and dgrad_dbn: the fused path, the unfused ops, and the race ---- */

enum { RACE_REPS = 3 };

/* One way of running a fused op: fused (0 ran, 1 no engine, -1 error) or unfused (0, -1). */
typedef int (*path_fn)(cuda_be_t *cb, const void *args, bool fused);

/* Milliseconds per call of run(args, fused), RACE_REPS calls after a warm-up (the unfused
 * conv's first call may search algorithms), timed with events; -1 when it did not run. */
static float time_path(cuda_be_t *cb, path_fn run, const void *args, bool fused) {
    cudaEvent_t a = NULL, z = NULL;
    float ms = -1.0f;
    if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&z) != cudaSuccess || run(cb, args, fused)) goto done;
    cudaEventRecord(a, cb->stream);
    for (int i = 0; i < RACE_REPS; i++)
        if (run(cb, args, fused)) goto done;
    cudaEventRecord(z, cb->stream);
    if (cudaEventSynchronize(z) == cudaSuccess && cudaEventElapsedTime(&ms, a, z) == cudaSuccess) ms /= RACE_REPS;
    else ms = -1.0f;
done:
    if (a) cudaEventDestroy(a);
    if (z) cudaEventDestroy(z);
    cudaGetLastError();
    cb->base.err.code = ERR_OK;   /* a path that fails here is just not chosen */
    return ms;
}

/* The first call of a fused plan, in non-deterministic mode and not recording: both ways
 * timed on the call's buffers, and the plan kept only where the fused one was faster
 * (cu_conv_graph_set_verdict; the first GPU run measured conv_stats 1.5 ms per step
 * slower than the unfused ops: its runtime-compiled engine, taken untimed, is slower
 * than the tuned conv it replaces). ptrs: the graph's pointers (for the plan's key).
 * Both ways write the op's outputs; the caller then runs the chosen one. */
static int race(cuda_be_t *cb, int kind, const conv_shape_t *s, dtype_t dt, void *const *ptrs, path_fn run,
                const void *args) {
    float f = time_path(cb, run, args, true), u = time_path(cb, run, args, false);
    int v = f >= 0.0f && (u < 0.0f || f < u) ? 1 : -1;
    cu_conv_graph_set_verdict(cb, kind, s, dt, ptrs, v);
    return v;
}

/* Whether the first call of a fused plan is to be raced now (grouped shapes have no
 * graph plan to keep a verdict in: they always run unfused). */
static bool race_due(cuda_be_t *cb, int kind, const conv_shape_t *s, dtype_t dt, void *const *ptrs) {
    return !cb->deterministic && !cb->capturing && conv_groups(s) <= 1 &&
           cu_conv_graph_verdict(cb, kind, s, dt, ptrs) == 0;
}

typedef struct stats_args {
    const conv_shape_t *s;
    dtype_t dt;
    const void *x, *w;
    void *y;
    float *mean, *var;
} stats_args_t;

/* conv_stats' graph pointers: x, w, y, and the sums at the start of the scratch buffer. */
static int stats_ptrs(cuda_be_t *cb, const stats_args_t *a, void **t) {
    float *sum = sums(cb, a->s->k);
    if (!sum) return -1;
    t[0] = (void *)a->x;
    t[1] = (void *)a->w;
    t[2] = a->y;
    t[3] = sum;
    t[4] = sum + ((size_t)a->s->k + 3) / 4 * 4;
    return 0;
}

static int stats_path(cuda_be_t *cb, const void *args, bool fused) {
    const stats_args_t *a = (const stats_args_t *)args;
    const conv_shape_t *s = a->s;
    if (!fused) {
        if (cu_conv2d_fwd(&cb->base, s, a->dt, a->x, a->w, a->y)) return -1;
        return cu_bn_stats(&cb->base, (int64_t)s->n * s->p * s->q, s->k, a->dt, a->y, a->mean, a->var);
    }
    void *t[5];
    if (stats_ptrs(cb, a, t)) return -1;
    int r = cu_conv_graph_run(cb, CG_FPROP_STATS, s, a->dt, t);
    if (r) return r;
    double inv_m = 1.0 / ((double)s->n * s->p * s->q);
    cb_launch(cb, stats_from_sums_k, (s->k + 127) / 128, 128, 0, s->k, inv_m, (const float *)t[3],
                                                                  (const float *)t[4], a->mean, a->var);
    KERNEL_CHECK(cb, "stats_from_sums_k");
    return 0;
}

int cu_conv2d_fwd_bn_stats(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x,
                           const void *w, void *y, float *mean, float *var) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    stats_args_t a = {s, dt, x, w, y, mean, var};
    void *t[5];
    if (stats_ptrs(cb, &a, t)) return -1;
    int r;
    if (race_due(cb, CG_FPROP_STATS, s, dt, t))   /* not measured yet (or no plan yet) */
        r = race(cb, CG_FPROP_STATS, s, dt, t, stats_path, &a) > 0 ? stats_path(cb, &a, true) : 1;
    else
        r = stats_path(cb, &a, true);
    if (r < 0) return -1;
    cb->last_fused = r == 0;
    return r == 0 ? 0 : stats_path(cb, &a, false);
}

typedef struct dbn_args {
    const conv_shape_t *s;
    dtype_t dt;
    const void *dy, *w;
    void *dx;
    const void *bn_x, *relu_y;
    const float *mean, *var;
    float eps;
    float *sum_dy, *sum_dy_xhat, *dgamma, *dbeta;
    act_kind_t act;
} dbn_args_t;

/* The graph kind for the mask (-1: none builds it, ReLU6), and its pointers in t. */
static int dbn_ptrs(cuda_be_t *cb, const dbn_args_t *a, void **t) {
    float *s1 = sums(cb, a->s->c);
    if (!s1) return -2;
    float *s2 = s1 + ((size_t)a->s->c + 3) / 4 * 4;
    int n = 0;
    t[n++] = (void *)a->dy;
    t[n++] = (void *)a->w;
    t[n++] = a->dx;
    if (a->relu_y) t[n++] = (void *)a->relu_y;
    t[n++] = (void *)a->bn_x;
    t[n++] = (void *)a->mean;
    t[n++] = s1;
    t[n++] = s2;
    if (!a->relu_y) return CG_DGRAD_DBN;
    return a->act == ACT_RELU ? CG_DGRAD_DRELU_DBN : -1;
}

static int dbn_path(cuda_be_t *cb, const void *args, bool fused) {
    const dbn_args_t *a = (const dbn_args_t *)args;
    const conv_shape_t *s = a->s;
    if (!fused) {
        if (cu_conv2d_bwd_data(&cb->base, s, a->dt, a->dy, a->w, a->dx)) return -1;
        return cu_bn_bwd_reduce(&cb->base, (int64_t)s->n * s->h * s->w, s->c, a->dt, a->bn_x, a->relu_y, a->act,
                                a->dx, a->mean, a->var, NULL, NULL, a->eps, a->sum_dy, a->sum_dy_xhat, a->dgamma,
                                a->dbeta);   /* the mask from relu_y (no gamma, beta here) */
    }
    void *t[8];
    int kind = dbn_ptrs(cb, a, t);
    if (kind == -2) return -1;
    if (kind < 0) return 1;   /* the graph builds the ReLU mask only: other activations run unfused */
    int r = cu_conv_graph_run(cb, kind, s, a->dt, t);
    if (r) return r;
    const float *s1 = (const float *)t[kind == CG_DGRAD_DBN ? 5 : 6], *s2 = s1 + ((size_t)s->c + 3) / 4 * 4;
    cb_launch(cb, dbn_from_sums_k, (s->c + 127) / 128, 128, 0, s->c, s1, s2, a->var, a->eps, a->sum_dy,
                                                                a->sum_dy_xhat, a->dgamma, a->dbeta);
    KERNEL_CHECK(cb, "dbn_from_sums_k");
    return 0;
}

int cu_conv2d_bwd_data_bn(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                          const void *w, void *dx, const void *bn_x, const void *relu_y, act_kind_t act,
                          const float *mean, const float *var, float eps, float *sum_dy,
                          float *sum_dy_xhat, float *dgamma, float *dbeta) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    dbn_args_t a = {s, dt, dy, w, dx, bn_x, relu_y, mean, var, eps, sum_dy, sum_dy_xhat, dgamma, dbeta, act};
    void *t[8];
    int kind = dbn_ptrs(cb, &a, t), r;
    if (kind == -2) return -1;
    if (kind >= 0 && race_due(cb, kind, s, dt, t)) {
        /* the race adds nothing into the parameter gradients: they get this call's once,
         * from the way chosen */
        dbn_args_t q = a;
        q.dgamma = q.dbeta = NULL;
        r = race(cb, kind, s, dt, t, dbn_path, &q) > 0 ? dbn_path(cb, &a, true) : 1;
    } else {
        r = dbn_path(cb, &a, true);
    }
    if (r < 0) return -1;
    cb->last_fused = r == 0;
    return r == 0 ? 0 : dbn_path(cb, &a, false);
}
