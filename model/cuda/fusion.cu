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
 *     for it (none on the device, or deterministic mode and only atomic ones), the conv
 *     and then bn_stats, as unfused.
 *   conv2d_bwd_data_bn (dgrad_dbn): dgrad [with dReLU against relu_y] and the two sums of
 *     BN's backward reduction, sum(g) and sum(g * (bn_x - mean)), as reductions in the
 *     dgrad's epilogue; a small kernel turns them into sum_dy, sum_dy_xhat (times 1 /
 *     sqrt(var + eps) in double, as bn_bwd_reduce) and adds them into dbeta, dgamma.
 *     Without a graph engine: dgrad, then bn_bwd_reduce, as unfused.
 * The sums live at the start of the backend's scratch buffer (2 x channels floats), read
 * by the next kernel on the stream before any BN kernel uses the buffer.
 * Statistics from sums of squares lose precision when |mean| >> std (the unfused
 * bn_stats shifts by the first row); convolution outputs have |mean| of the order of
 * their std, and gpu tests hold the fused path to stated tolerances against the CPU.
 */
#include "model/cuda/fusion.cuh"

#include "model/cuda/conv.cuh"
#include "model/cuda/conv_graph.cuh"
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
    if (fusion & (BACKEND_FUSE_GRAPH_CONV | BACKEND_FUSE_CONV_STATS | BACKEND_FUSE_DGRAD_DBN | BACKEND_FUSE_DGRAD_ACCUM))
        o->conv_engine = graph_first_engine;
}

__global__ void stats_from_sums_k(int c, double inv_m, const float *sum, const float *sq, float *mean,
                                  float *var) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double ms = (double)sum[ch] * inv_m, v = (double)sq[ch] * inv_m - ms * ms;
    mean[ch] = (float)ms;
    var[ch] = (float)(v > 0.0 ? v : 0.0);
}

__global__ void dbn_from_sums_k(int c, const float *s1, const float *s2, const float *var, float eps,
                                float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta) {
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

int cu_conv2d_bwd_data_accum(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                             const void *w, void *dx) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    if (cb->fusion & BACKEND_FUSE_GRAPH_CONV) {
        void *t[3] = {(void *)dy, (void *)w, dx};
        int r = cu_conv_graph_run(cb, CG_DGRAD_ACCUM, s, dt, t);
        if (r <= 0) return r;
    }
    return cu_conv_legacy_bwd_data(be, s, dt, dy, w, dx, 1.0f);
}

int cu_conv2d_fwd_bn_stats(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x,
                           const void *w, void *y, float *mean, float *var) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    float *sum = sums(cb, s->k);
    if (!sum) return -1;
    float *sq = sum + ((size_t)s->k + 3) / 4 * 4;
    void *t[5] = {(void *)x, (void *)w, y, sum, sq};
    int r = cu_conv_graph_run(cb, CG_FPROP_STATS, s, dt, t);
    if (r < 0) return -1;
    if (r == 1) {   /* no engine: unfused */
        int64_t m = (int64_t)s->n * s->p * s->q;
        if (cu_conv2d_fwd(be, s, dt, x, w, y)) return -1;
        return cu_bn_stats(be, m, s->k, dt, y, mean, var);
    }
    double inv_m = 1.0 / ((double)s->n * s->p * s->q);
    stats_from_sums_k<<<(s->k + 127) / 128, 128, 0, cb->stream>>>(s->k, inv_m, sum, sq, mean, var);
    KERNEL_CHECK(cb, "stats_from_sums_k");
    return 0;
}

int cu_conv2d_bwd_data_bn(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                          const void *w, void *dx, const void *bn_x, const void *relu_y,
                          const float *mean, const float *var, float eps, float *sum_dy,
                          float *sum_dy_xhat, float *dgamma, float *dbeta) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    float *s1 = sums(cb, s->c);
    if (!s1) return -1;
    float *s2 = s1 + ((size_t)s->c + 3) / 4 * 4;
    int r;
    if (relu_y) {
        void *t[8] = {(void *)dy, (void *)w, dx, (void *)relu_y, (void *)bn_x, (void *)mean, s1, s2};
        r = cu_conv_graph_run(cb, CG_DGRAD_DRELU_DBN, s, dt, t);
    } else {
        void *t[7] = {(void *)dy, (void *)w, dx, (void *)bn_x, (void *)mean, s1, s2};
        r = cu_conv_graph_run(cb, CG_DGRAD_DBN, s, dt, t);
    }
    if (r < 0) return -1;
    if (r == 1) {   /* no engine: unfused */
        int64_t m = (int64_t)s->n * s->h * s->w;
        if (cu_conv2d_bwd_data(be, s, dt, dy, w, dx)) return -1;
        return cu_bn_bwd_reduce(be, m, s->c, dt, bn_x, relu_y, dx, mean, var, eps, sum_dy, sum_dy_xhat, dgamma,
                                dbeta);
    }
    dbn_from_sums_k<<<(s->c + 127) / 128, 128, 0, cb->stream>>>(s->c, s1, s2, var, eps, sum_dy, sum_dy_xhat,
                                                                dgamma, dbeta);
    KERNEL_CHECK(cb, "dbn_from_sums_k");
    return 0;
}
