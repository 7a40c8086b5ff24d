/* optim.cu: one optimizer step over a contiguous range of the flat fp32 arrays, with
 * torch.optim semantics (single-tensor, non-foreach arithmetic order).
 *
 * SGD:   g' = g + wd * p;  with momentum: buf = first ? g' : momentum * buf + (1 - dampening) * g';
 *        g' = nesterov ? g' + momentum * buf : buf;  p -= lr * g'.
 * AdamW: p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *        p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
 * Bias corrections are computed on the host in double. Not here: gradient clipping,
 * skipping steps on overflow (the AMP scaler decides whether to call these).
 */
#include "model/cuda/optim.cuh"

#include <math.h>

#include "model/cuda/cuda_impl.cuh"

__global__ void sgd_k(int64_t n, float *__restrict__ p, const float *__restrict__ g,
                      float *__restrict__ buf, float lr, float momentum, float dampening,
                      float wd, bool nesterov, bool first) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float d = g[i];
        if (wd != 0.0f) d = d + wd * p[i];
        if (momentum != 0.0f) {
            float b = first ? d : momentum * buf[i] + (1.0f - dampening) * d;
            buf[i] = b;
            d = nesterov ? d + momentum * b : b;
        }
        p[i] = p[i] - lr * d;
    }
}

__global__ void adamw_k(int64_t n, float *__restrict__ p, const float *__restrict__ g,
                        float *__restrict__ m, float *__restrict__ v, float lr, float b1, float b2,
                        float eps, float wd, float step_size, float bc2_sqrt) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float pi = p[i] * (1.0f - lr * wd), gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi - step_size * (mi / denom);
    }
}

int cu_sgd_step(backend_t *be, int64_t n, float *p, const float *g, float *buf, float lr,
                float momentum, float dampening, float weight_decay, bool nesterov,
                bool first_step) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    if (momentum != 0.0f && !buf) return cb_fail(cb, "sgd_step: momentum %g needs a buffer", momentum);
    CB_ENTER(cb);
    sgd_k<<<cb_blocks(cb, n, 256), 256, 0, cb->stream>>>(n, p, g, buf, lr, momentum, dampening,
                                                          weight_decay, nesterov, first_step);
    KERNEL_CHECK(cb, "sgd_k");
    return 0;
}

int cu_adamw_step(backend_t *be, int64_t n, float *p, const float *g, float *m, float *v,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  int64_t step) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    if (step < 1) return cb_fail(cb, "adamw_step: step %lld must be >= 1", (long long)step);
    CB_ENTER(cb);
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    float step_size = (float)((double)lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    adamw_k<<<cb_blocks(cb, n, 256), 256, 0, cb->stream>>>(n, p, g, m, v, lr, beta1, beta2, eps,
                                                            weight_decay, step_size, bc2_sqrt);
    KERNEL_CHECK(cb, "adamw_k");
    return 0;
}
