/* layers.cu: relu6, the per-channel bias of a convolution, dropout and adaptive average
 * pooling on the GPU, the twins of model/cpu/cpu_layers.c.
 *
 * Bit-for-bit agreement with the CPU backend where the arithmetic allows it: relu6 and
 * the bias add are one fp32 operation per element; dropout's mask comes from the same
 * host/device function (util/dropout.h, Philox on the key read from device memory, so a
 * recorded graph uses each step's key) and the same fp32 product; adaptive pooling sums
 * each window (forward) or each input's windows (backward, a gather in output order, no
 * atomics) in double in the CPU's order and rounds once. The bias gradient sums rows in
 * double per (row split, channel) and adds the splits in a fixed order: deterministic,
 * equal to the CPU's up to the order of double additions.
 * Not here: convolution (conv.cu), global average pooling (elementwise.cu).
 */
#include "model/cuda/layers.cuh"

#include "model/cuda/cuda_impl.cuh"
#include "util/dropout.h"

/* ---- relu6 -------------------------------------------------------------------------- */
template <typename T>
__global__ void relu6_fwd_k(int64_t n, const T *x, T *y) {
    pdl_enter();
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = to_f32(x[i]);
        v = v < 0.0f ? 0.0f : v;   /* NaN passes, as in torch */
        v = v > 6.0f ? 6.0f : v;
        y[i] = from_f32<T>(v);
    }
}

/* torch's hardtanh_backward on the output: 0 where y <= 0 or y >= 6 (NaN passes). */
template <typename T>
__global__ void relu6_bwd_k(int64_t n, const T *y, const T *dy, T *dx) {
    pdl_enter();
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = to_f32(y[i]);
        dx[i] = v <= 0.0f || v >= 6.0f ? from_f32<T>(0.0f) : dy[i];
    }
}

int cu_relu6_fwd(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    CB_ENTER(cb);
    DISPATCH_DT(cb, dt, T, cb_launch(cb, (relu6_fwd_k<T>), cb_blocks(cb, n, 256), 256, 0,
                               n, (const T *)x, (T *)y));
    KERNEL_CHECK(cb, "relu6_fwd_k");
    return 0;
}

int cu_relu6_bwd(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    CB_ENTER(cb);
    DISPATCH_DT(cb, dt, T, cb_launch(cb, (relu6_bwd_k<T>), cb_blocks(cb, n, 256), 256, 0,
                               n, (const T *)y, (const T *)dy, (T *)dx));
    KERNEL_CHECK(cb, "relu6_bwd_k");
    return 0;
}

/* ---- per-channel bias --------------------------------------------------------------- */
enum { BIAS_TX = 32, BIAS_TY = 8 };

template <typename T>
__global__ void bias_fwd_k(int64_t m, int c, const float *b, T *y) {
    pdl_enter();
    int64_t total = m * c, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
        y[i] = from_f32<T>(__fadd_rn(to_f32(y[i]), b[i % c]));
}

/* Per (row split blockIdx.y, channel): the double sum of dy over the split's rows, the
 * 8 row-threads of a block added in a fixed order; part is [splits][c]. */
template <typename T>
__global__ void bias_bwd_partial_k(int64_t m, int c, const T *dy, double *part) {
    pdl_enter();
    __shared__ double sh[BIAS_TY][BIAS_TX];
    int ch = blockIdx.x * BIAS_TX + threadIdx.x;
    double a = 0.0;
    if (ch < c)
        for (int64_t r = (int64_t)blockIdx.y * BIAS_TY + threadIdx.y; r < m; r += (int64_t)gridDim.y * BIAS_TY)
            a += (double)to_f32(dy[r * c + ch]);
    sh[threadIdx.y][threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.y != 0 || ch >= c) return;
    a = 0.0;
    for (int j = 0; j < BIAS_TY; j++) a += sh[j][threadIdx.x];
    part[(int64_t)blockIdx.y * c + ch] = a;
}

__global__ void bias_bwd_final_k(int c, int splits, const double *part, float *db) {
    pdl_enter();
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double s = 0.0;
    for (int j = 0; j < splits; j++) s += part[(int64_t)j * c + ch];
    db[ch] += (float)s;
}

int cu_channel_bias_fwd(backend_t *be, int64_t m, int c, dtype_t dt, const float *b, void *y) {
    cuda_be_t *cb = cb_of(be);
    if (m <= 0 || c <= 0) return 0;
    CB_ENTER(cb);
    DISPATCH_DT(cb, dt, T, cb_launch(cb, (bias_fwd_k<T>), cb_blocks(cb, m * c, 256), 256, 0,
                               m, c, b, (T *)y));
    KERNEL_CHECK(cb, "bias_fwd_k");
    return 0;
}

int cu_channel_bias_bwd(backend_t *be, int64_t m, int c, dtype_t dt, const void *dy, float *db) {
    cuda_be_t *cb = cb_of(be);
    if (m <= 0 || c <= 0) return 0;
    CB_ENTER(cb);
    int gx = (c + BIAS_TX - 1) / BIAS_TX;
    int64_t want = ((int64_t)cb->sm_count * 8 + gx - 1) / gx, most = (m + BIAS_TY * 16 - 1) / (BIAS_TY * 16);
    int64_t gy = want < most ? want : most;
    if (gy > 1024) gy = 1024;
    if (gy < 1) gy = 1;
    if (cb_grow(cb, &cb->scratch, (size_t)gy * c * sizeof(double), "bias gradient scratch")) return -1;
    double *part = (double *)cb->scratch.p;
    dim3 grid((unsigned)gx, (unsigned)gy), block(BIAS_TX, BIAS_TY);
    DISPATCH_DT(cb, dt, T, cb_launch(cb, (bias_bwd_partial_k<T>), grid, block, 0, m, c, (const T *)dy, part));
    KERNEL_CHECK(cb, "bias_bwd_partial_k");
    cb_launch(cb, bias_bwd_final_k, (c + 255) / 256, 256, 0, c, (int)gy, part, db);
    KERNEL_CHECK(cb, "bias_bwd_final_k");
    return 0;
}

/* ---- dropout ------------------------------------------------------------------------ */
/* One thread per Philox block (4 consecutive elements of one sample): y = x * (kept ?
 * scale : 0), the key read from device memory. */
template <typename T>
__global__ void dropout_k(int n, int64_t per, const dropout_key_t *key, uint32_t node, uint64_t thresh,
                          float scale, const T *x, T *y) {
    pdl_enter();
    int64_t bps = (per + 3) / 4, total = (int64_t)n * bps, stride = (int64_t)gridDim.x * blockDim.x;
    dropout_key_t k = *key;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int64_t row = i / bps, blk = i % bps;
        uint32_t u[4];
        dropout_block(k.seed, k.epoch, (uint64_t)(k.first_sample + row * k.sample_stride), node, (uint32_t)blk, u);
        int64_t base = row * per + 4 * blk;
        for (int l = 0; l < 4 && 4 * blk + l < per; l++) {
            float m = (uint64_t)u[l] >= thresh ? scale : 0.0f;
            y[base + l] = from_f32<T>(__fmul_rn(to_f32(x[base + l]), m));
        }
    }
}

static int dropout_run(backend_t *be, int n, int64_t per, dtype_t dt, double p, uint32_t node,
                       const dropout_key_t *key, const void *x, void *y) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0 || per <= 0) return 0;
    CB_ENTER(cb);
    uint64_t thresh = dropout_threshold(p);
    float scale = dropout_scale(p);
    int64_t blocks = (int64_t)n * ((per + 3) / 4);
    DISPATCH_DT(cb, dt, T, cb_launch(cb, (dropout_k<T>), cb_blocks(cb, blocks, 256), 256, 0,
                               n, per, key, node, thresh, scale, (const T *)x, (T *)y));
    KERNEL_CHECK(cb, "dropout_k");
    return 0;
}

int cu_dropout_fwd(backend_t *be, int n, int64_t per_sample, dtype_t dt, double p, uint32_t node,
                   const dropout_key_t *key, const void *x, void *y) {
    return dropout_run(be, n, per_sample, dt, p, node, key, x, y);
}

int cu_dropout_bwd(backend_t *be, int n, int64_t per_sample, dtype_t dt, double p, uint32_t node,
                   const dropout_key_t *key, const void *dy, void *dx) {
    return dropout_run(be, n, per_sample, dt, p, node, key, dy, dx);
}

/* ---- adaptive average pooling ------------------------------------------------------- */
/* torch's window of output i of p over size n: [floor(i*n/p), ceil((i+1)*n/p)). */
__device__ __forceinline__ void adaptive_span(int i, int p, int n, int *lo, int *hi) {
    *lo = (int)(((int64_t)i * n) / p);
    *hi = (int)(((int64_t)(i + 1) * n + p - 1) / p);
}

/* One thread per output element (channels fastest): the window's double sum in (row,
 * column) order divided once, as the CPU backend. */
template <typename T>
__global__ void apool_fwd_k(pool_shape_t s, const T *__restrict__ x, T *__restrict__ y) {
    pdl_enter();
    int64_t total = (int64_t)s.n * s.p * s.q * s.c, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int ch = (int)(i % s.c);
        int64_t r = i / s.c;
        int ow = (int)(r % s.q);
        r /= s.q;
        int oh = (int)(r % s.p);
        int64_t b = r / s.p;
        int h0, h1, w0, w1;
        adaptive_span(oh, s.p, s.h, &h0, &h1);
        adaptive_span(ow, s.q, s.w, &w0, &w1);
        double acc = 0.0;
        for (int ih = h0; ih < h1; ih++)
            for (int iw = w0; iw < w1; iw++)
                acc += (double)to_f32(x[((b * s.h + ih) * s.w + iw) * s.c + ch]);
        y[i] = from_f32<T>((float)(acc / ((double)(h1 - h0) * (double)(w1 - w0))));
    }
}

/* One thread per input element: dy / window size of every window containing it, in
 * output order, summed in double and rounded once (the CPU backend's order). */
template <typename T>
__global__ void apool_bwd_k(pool_shape_t s, const T *__restrict__ dy, T *__restrict__ dx) {
    pdl_enter();
    int64_t total = (int64_t)s.n * s.h * s.w * s.c, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int ch = (int)(i % s.c);
        int64_t r = i / s.c;
        int iw = (int)(r % s.w);
        r /= s.w;
        int ih = (int)(r % s.h);
        int64_t b = r / s.h;
        double acc = 0.0;
        for (int oh = 0; oh < s.p; oh++) {
            int a, z;
            adaptive_span(oh, s.p, s.h, &a, &z);
            if (ih < a || ih >= z) continue;
            for (int ow = 0; ow < s.q; ow++) {
                int l, rr;
                adaptive_span(ow, s.q, s.w, &l, &rr);
                if (iw < l || iw >= rr) continue;
                double cnt = (double)(z - a) * (double)(rr - l);
                acc += (double)to_f32(dy[((b * s.p + oh) * s.q + ow) * s.c + ch]) / cnt;
            }
        }
        dx[i] = from_f32<T>((float)acc);
    }
}

static int apool_check(cuda_be_t *cb, const pool_shape_t *s, const char *what) {
    if (s->n < 1 || s->h < 1 || s->w < 1 || s->c < 1 || s->p < 1 || s->q < 1)
        return cb_fail(cb, "%s: bad geometry n%d h%d w%d c%d -> %dx%d", what, s->n, s->h, s->w, s->c, s->p, s->q);
    return 0;
}

int cu_adaptive_avgpool_fwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y) {
    cuda_be_t *cb = cb_of(be);
    if (apool_check(cb, s, "adaptive_avgpool_fwd")) return -1;
    CB_ENTER(cb);
    int64_t total = (int64_t)s->n * s->p * s->q * s->c;
    DISPATCH_DT(cb, dt, T, cb_launch(cb, (apool_fwd_k<T>), cb_blocks(cb, total, 256), 256, 0,
                               *s, (const T *)x, (T *)y));
    KERNEL_CHECK(cb, "apool_fwd_k");
    return 0;
}

int cu_adaptive_avgpool_bwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *dy, void *dx) {
    cuda_be_t *cb = cb_of(be);
    if (apool_check(cb, s, "adaptive_avgpool_bwd")) return -1;
    CB_ENTER(cb);
    int64_t total = (int64_t)s->n * s->h * s->w * s->c;
    DISPATCH_DT(cb, dt, T, cb_launch(cb, (apool_bwd_k<T>), cb_blocks(cb, total, 256), 256, 0,
                               *s, (const T *)dy, (T *)dx));
    KERNEL_CHECK(cb, "apool_bwd_k");
    return 0;
}
