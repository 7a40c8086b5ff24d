/* loss.cu: softmax cross-entropy with label smoothing (torch.nn.CrossEntropyLoss with
 * label_smoothing, reduction 'sum') and against soft targets (timm's
 * SoftTargetCrossEntropy, for mixup), with top-1/top-5 hit counts, one block per row.
 *
 * Per row i with label l, C classes, smoothing s, lse = log(sum_j exp(x_j)):
 *   loss_i = lse - (1 - s) * x_l - (s / C) * sum_j x_j
 *   dlogits_ij = grad_scale * [ctl->loss_scale] * (softmax_ij - (1 - s) * [j == l] - s / C)
 * Rank of the label: #{j : x_j > x_l} + #{j < l : x_j == x_l} (ties go to the lower
 * index, as argmax does); top-1 hit when rank < 1, top-5 when rank < 5. A label out of
 * [0, C) makes that row's loss NaN and its gradient zero (net_loss checks labels on the
 * host first). Per-row results go to scratch and one block adds them in row order, so
 * the sums are deterministic. Not here: averaging (the caller's grad_scale).
 */
#include "model/cuda/loss.cuh"

#include "model/cuda/cuda_impl.cuh"

/* Block-wide reduction of v with op (blockDim.x a multiple of 32, <= 1024). Every thread
 * gets the result. red must hold 32 values. */
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();   /* red may still be read from a previous call */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < nw; w++) v = op(v, red[w]);
    return v;
}

struct op_max { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct op_addf { __device__ float operator()(float a, float b) const { return a + b; } };
struct op_addi { __device__ int operator()(int a, int b) const { return a + b; } };

template <typename T>
__global__ void xent_row_k(int classes, const T *logits, const int32_t *labels, float smoothing,
                           float grad_scale, const step_ctl_t *ctl, T *dlogits, float *row_loss,
                           int32_t *row_hits) {
    pdl_enter();
    __shared__ float redf[32];
    __shared__ int redi[32];
    int row = blockIdx.x;
    const T *x = logits + (int64_t)row * classes;
    int l = labels[row];
    bool ok = l >= 0 && l < classes;

    float mx = -INFINITY;
    for (int j = threadIdx.x; j < classes; j += blockDim.x) mx = fmaxf(mx, to_f32(x[j]));
    mx = block_reduce(mx, op_max(), redf);

    float se = 0.0f, sx = 0.0f;
    for (int j = threadIdx.x; j < classes; j += blockDim.x) {
        float v = to_f32(x[j]);
        se += expf(v - mx);
        sx += v;
    }
    se = block_reduce(se, op_addf(), redf);
    sx = block_reduce(sx, op_addf(), redf);

    float xl = ok ? to_f32(x[l]) : 0.0f;
    int above = 0;
    for (int j = threadIdx.x; j < classes; j += blockDim.x) {
        float v = to_f32(x[j]);
        above += (v > xl) || (v == xl && j < l);
    }
    above = block_reduce(above, op_addi(), redi);

    float lse = mx + logf(se), inv_se = 1.0f / se, sc = smoothing / (float)classes;
    if (dlogits) {
        if (ctl) grad_scale *= ctl->loss_scale;
        T *d = dlogits + (int64_t)row * classes;
        for (int j = threadIdx.x; j < classes; j += blockDim.x) {
            float p = expf(to_f32(x[j]) - mx) * inv_se;
            float g = p - sc - (j == l ? 1.0f - smoothing : 0.0f);
            d[j] = from_f32<T>(ok ? grad_scale * g : 0.0f);
        }
    }
    if (threadIdx.x == 0) {
        row_loss[row] = ok ? lse - (1.0f - smoothing) * xl - sc * sx : NAN;
        row_hits[2 * row] = ok && above < 1;
        row_hits[2 * row + 1] = ok && above < 5;
    }
}

struct op_maxu64 {
    __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const { return a > b ? a : b; }
};

/* An order-preserving key of (value, index) for an argmax that prefers the lower index. */
__device__ __forceinline__ unsigned long long argmax_key(float v, int j) {
    unsigned int b = __float_as_uint(v);
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((unsigned long long)b << 32) | (unsigned int)(0x7fffffff - j);
}

/* Soft targets: loss_i = sum_j t_j (lse - x_j), dlogits = scale * (p_j * sum_k t_k - t_j);
 * the hits count the dominant label argmax_j t_j. */
template <typename T>
__global__ void xent_soft_row_k(int classes, const T *logits, const float *targets, float grad_scale,
                                const step_ctl_t *ctl, T *dlogits, float *row_loss, int32_t *row_hits) {
    pdl_enter();
    __shared__ float redf[32];
    __shared__ int redi[32];
    __shared__ unsigned long long redu[32];
    int row = blockIdx.x;
    const T *x = logits + (int64_t)row * classes;
    const float *t = targets + (int64_t)row * classes;

    float mx = -INFINITY;
    unsigned long long key = 0;
    for (int j = threadIdx.x; j < classes; j += blockDim.x) {
        mx = fmaxf(mx, to_f32(x[j]));
        unsigned long long k = argmax_key(t[j], j);
        key = k > key ? k : key;
    }
    mx = block_reduce(mx, op_max(), redf);
    key = block_reduce(key, op_maxu64(), redu);
    int y = 0x7fffffff - (int)(unsigned int)(key & 0xffffffffu);

    float se = 0.0f, ts = 0.0f;
    for (int j = threadIdx.x; j < classes; j += blockDim.x) {
        se += expf(to_f32(x[j]) - mx);
        ts += t[j];
    }
    se = block_reduce(se, op_addf(), redf);
    ts = block_reduce(ts, op_addf(), redf);
    float lse = mx + logf(se), inv_se = 1.0f / se, xl = to_f32(x[y]);

    float loss = 0.0f;
    int above = 0;
    for (int j = threadIdx.x; j < classes; j += blockDim.x) {
        float v = to_f32(x[j]);
        loss += t[j] * (lse - v);
        above += (v > xl) || (v == xl && j < y);
    }
    loss = block_reduce(loss, op_addf(), redf);
    above = block_reduce(above, op_addi(), redi);
    if (dlogits) {
        if (ctl) grad_scale *= ctl->loss_scale;
        T *d = dlogits + (int64_t)row * classes;
        for (int j = threadIdx.x; j < classes; j += blockDim.x) {
            float p = expf(to_f32(x[j]) - mx) * inv_se;
            d[j] = from_f32<T>(grad_scale * (p * ts - t[j]));
        }
    }
    if (threadIdx.x == 0) {
        row_loss[row] = loss;
        row_hits[2 * row] = above < 1;
        row_hits[2 * row + 1] = above < 5;
    }
}

/* Adds the n per-row values in a fixed order (thread-strided partials in double, then
 * the block reduction in warp order). */
__global__ void xent_sum_k(int n, const float *row_loss, const int32_t *row_hits, float *loss_sum,
                           int32_t *correct) {
    pdl_enter();
    __shared__ double red[1024];
    __shared__ int r1[1024], r5[1024];
    double s = 0.0;
    int h1 = 0, h5 = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        s += (double)row_loss[i];
        h1 += row_hits[2 * i];
        h5 += row_hits[2 * i + 1];
    }
    red[threadIdx.x] = s;
    r1[threadIdx.x] = h1;
    r5[threadIdx.x] = h5;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        int a = 0, b = 0;
        for (int i = 0; i < (int)blockDim.x; i++) {
            t += red[i];
            a += r1[i];
            b += r5[i];
        }
        loss_sum[0] = (float)t;
        correct[0] = a;
        correct[1] = b;
    }
}

/* Per-row scratch for n rows: the losses, then (256-aligned) two hit flags per row. */
static int xent_scratch(cuda_be_t *cb, int n, float **row_loss, int32_t **row_hits) {
    size_t need = (size_t)n * sizeof(float) + (size_t)2 * n * sizeof(int32_t) + 256;
    if (cb_grow(cb, &cb->scratch, need, "loss scratch")) return -1;
    *row_loss = (float *)cb->scratch.p;
    *row_hits = (int32_t *)((char *)cb->scratch.p + (((size_t)n * sizeof(float) + 255) & ~(size_t)255));
    return 0;
}

int cu_softmax_xent_soft(backend_t *be, int n, int classes, dtype_t dt, const void *logits,
                         const float *targets, float grad_scale, const step_ctl_t *ctl,
                         void *dlogits, float *loss_sum, int32_t *correct) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0 || classes <= 0)
        return cb_fail(cb, "softmax_xent_soft: empty batch (n %d, classes %d)", n, classes);
    CB_ENTER(cb);
    float *row_loss;
    int32_t *row_hits;
    if (xent_scratch(cb, n, &row_loss, &row_hits)) return -1;
    int threads = classes <= 128 ? 128 : (classes <= 512 ? 256 : 512);
    DISPATCH_DT(cb, dt, T, cb_launch(cb, (xent_soft_row_k<T>), n, threads, 0,
        classes, (const T *)logits, targets, grad_scale, ctl, (T *)dlogits, row_loss, row_hits));
    KERNEL_CHECK(cb, "xent_soft_row_k");
    cb_launch(cb, xent_sum_k, 1, 256, 0, n, row_loss, row_hits, loss_sum, correct);
    KERNEL_CHECK(cb, "xent_sum_k");
    return 0;
}

int cu_softmax_xent(backend_t *be, int n, int classes, dtype_t dt, const void *logits,
                    const int32_t *labels, float smoothing, float grad_scale,
                    const step_ctl_t *ctl, void *dlogits, float *loss_sum, int32_t *correct) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0 || classes <= 0)
        return cb_fail(cb, "softmax_xent: empty batch (n %d, classes %d)", n, classes);
    CB_ENTER(cb);
    float *row_loss;
    int32_t *row_hits;
    if (xent_scratch(cb, n, &row_loss, &row_hits)) return -1;
    int threads = classes <= 128 ? 128 : (classes <= 512 ? 256 : 512);
    DISPATCH_DT(cb, dt, T, cb_launch(cb, (xent_row_k<T>), n, threads, 0,
        classes, (const T *)logits, labels, smoothing, grad_scale, ctl, (T *)dlogits, row_loss, row_hits));
    KERNEL_CHECK(cb, "xent_row_k");
    cb_launch(cb, xent_sum_k, 1, 256, 0, n, row_loss, row_hits, loss_sum, correct);
    KERNEL_CHECK(cb, "xent_sum_k");
    return 0;
}
