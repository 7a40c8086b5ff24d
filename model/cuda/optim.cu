/* optim.cu: one optimizer step over a contiguous range of the flat fp32 arrays, with
 * torch.optim semantics (single-tensor, non-foreach arithmetic order), and the step
 * control update (model/step_ctl.h) that follows the optimizer ops of a step.
 *
 * SGD:   g' = g + wd * p;  with momentum: buf = first ? g' : momentum * buf + (1 - dampening) * g';
 *        g' = nesterov ? g' + momentum * buf : buf;  p -= lr * g'.
 * AdamW: p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *        p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
 * Whether to write at all (ctl->found_inf), the first-step flag and t come from the step
 * control on the device, so an fp16 step that overflowed is skipped without the host
 * knowing; the bias corrections are formed from t in double on the device, like the CPU
 * backend does on the host. Scalars that do not depend on t are formed on the host in
 * double and cast once, as torch does. Not here: gradient clipping.
 */
#include "model/cuda/optim.cuh"

#include <math.h>

#include "model/cuda/cuda_impl.cuh"
#include "model/step_ctl.h"

__global__ void sgd_k(int64_t n, float *__restrict__ p, const float *__restrict__ g,
                      float *__restrict__ buf, float lr, float momentum, float one_minus_damp,
                      float wd, bool nesterov, const step_ctl_t *__restrict__ ctl) {
    if (ctl->found_inf) return;
    bool first = ctl->optim_steps == 0;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float d = g[i];
        if (wd != 0.0f) d = __fadd_rn(d, __fmul_rn(wd, p[i]));
        if (momentum != 0.0f) {
            float b = first ? d : __fadd_rn(__fmul_rn(momentum, buf[i]), __fmul_rn(one_minus_damp, d));
            buf[i] = b;
            d = nesterov ? __fadd_rn(d, __fmul_rn(momentum, b)) : b;
        }
        p[i] = __fsub_rn(p[i], __fmul_rn(lr, d));
    }
}

__global__ void adamw_k(int64_t n, float *__restrict__ p, const float *__restrict__ g,
                        float *__restrict__ m, float *__restrict__ v, double lr, float decay,
                        double b1d, double b2d, float b1, float b2, float one_minus_b1,
                        float one_minus_b2, float eps, const step_ctl_t *__restrict__ ctl) {
    if (ctl->found_inf) return;
    double t = (double)(ctl->optim_steps + 1);
    float step_size = (float)(lr / (1.0 - pow(b1d, t)));
    float bc2_sqrt = (float)sqrt(1.0 - pow(b2d, t));
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float pi = __fmul_rn(p[i], decay), gi = g[i];
        float mi = __fadd_rn(__fmul_rn(m[i], b1), __fmul_rn(one_minus_b1, gi));
        float vi = __fadd_rn(__fmul_rn(v[i], b2), __fmul_rn(__fmul_rn(one_minus_b2, gi), gi));
        m[i] = mi;
        v[i] = vi;
        float denom = __fadd_rn(__fdiv_rn(sqrtf(vi), bc2_sqrt), eps);
        p[i] = __fsub_rn(pi, __fmul_rn(step_size, __fdiv_rn(mi, denom)));
    }
}

__global__ void step_ctl_k(step_ctl_t *ctl) { step_ctl_advance(ctl); }

int cu_sgd_step(backend_t *be, int64_t n, float *p, const float *g, float *buf, double lr,
                double momentum, double dampening, double weight_decay, bool nesterov,
                const step_ctl_t *ctl) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    if (momentum != 0.0 && !buf) return cb_fail(cb, "sgd_step: momentum %g needs a buffer", momentum);
    CB_ENTER(cb);
    sgd_k<<<cb_blocks(cb, n, 256), 256, 0, cb->stream>>>(n, p, g, buf, (float)lr, (float)momentum,
                                                          (float)(1.0 - dampening), (float)weight_decay,
                                                          nesterov, ctl);
    KERNEL_CHECK(cb, "sgd_k");
    return 0;
}

int cu_adamw_step(backend_t *be, int64_t n, float *p, const float *g, float *m, float *v,
                  double lr, double beta1, double beta2, double eps, double weight_decay,
                  const step_ctl_t *ctl) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    CB_ENTER(cb);
    adamw_k<<<cb_blocks(cb, n, 256), 256, 0, cb->stream>>>(
        n, p, g, m, v, lr, (float)(1.0 - lr * weight_decay), beta1, beta2, (float)beta1, (float)beta2,
        (float)(1.0 - beta1), (float)(1.0 - beta2), (float)eps, ctl);
    KERNEL_CHECK(cb, "adamw_k");
    return 0;
}

int cu_step_ctl_update(backend_t *be, step_ctl_t *ctl) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    step_ctl_k<<<1, 1, 0, cb->stream>>>(ctl);
    KERNEL_CHECK(cb, "step_ctl_k");
    return 0;
}
