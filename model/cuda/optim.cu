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
 * double and cast once, as torch does.
 *
 * Gradient clipping (torch.nn.utils.clip_grad_norm_): per-block sums of squares in double
 * (fixed grid for a device, fixed tree inside a block), one block adds the partials in
 * order and forms the norm and the coefficient on the device, a third kernel scales; the
 * norm goes straight to the caller's device word (the step record), so nothing waits.
 * EMA (timm ModelEmaV3): torch.lerp's two-branch formula, every operation rounded (_rn)
 * as the CPU backend rounds it.
 * Graphs: the learning rate (lr NaN: ctl->lr) and the EMA decay (ema_update_dev) can be
 * read on the device, with the host's double arithmetic spelt out (_rn), so a recorded
 * step takes each step's values. SyncBN's statistics combine (bn_combine) runs
 * model/bn_combine.h per channel.
 */
#include "model/cuda/optim.cuh"

#include <math.h>

#include "model/cuda/cuda_impl.cuh"
#include "model/bn_combine.h"
#include "model/step_ctl.h"

__global__ void sgd_k(int64_t n, float *__restrict__ p, const float *__restrict__ g,
                      float *__restrict__ buf, float lr_arg, bool lr_from_ctl, float momentum,
                      float one_minus_damp, float wd, bool nesterov, const step_ctl_t *__restrict__ ctl) {
    pdl_enter();
    if (ctl->found_inf) return;
    bool first = ctl->optim_steps == 0;
    float lr = lr_from_ctl ? (float)ctl->lr : lr_arg;
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
                        float *__restrict__ m, float *__restrict__ v, double lr_arg, bool lr_from_ctl,
                        double wd, double b1d, double b2d, float b1, float b2, float one_minus_b1,
                        float one_minus_b2, float eps, const step_ctl_t *__restrict__ ctl) {
    pdl_enter();
    if (ctl->found_inf) return;
    double lr = lr_from_ctl ? ctl->lr : lr_arg;
    /* (float)(1 - lr * wd) as the host forms it: no fused multiply-add */
    float decay = (float)__dsub_rn(1.0, __dmul_rn(lr, wd));
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

__global__ void step_ctl_k(step_ctl_t *ctl) {
    pdl_enter(); step_ctl_advance(ctl); }

enum { CLIP_THREADS = 256 };

/* Adds the block's values of v (CLIP_THREADS of them) in a fixed tree; thread 0 gets it. */
__device__ double block_sum(double v) {
    __shared__ double sh[CLIP_THREADS];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = CLIP_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    return sh[0];
}

__global__ void sumsq_k(int64_t n, const float *__restrict__ g, double *__restrict__ partial) {
    pdl_enter();
    double acc = 0;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double v = g[i];
        acc += v * v;
    }
    double s = block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* One block: the total, the norm (to norm_out) and the coefficient (to coef; 1 = leave the
 * gradients alone: found_inf, norm only, or within the bound). */
__global__ void clip_finish_k(int nb, const double *__restrict__ partial, float max_norm,
                              const step_ctl_t *__restrict__ ctl, float *norm_out, float *coef) {
    pdl_enter();
    double acc = 0;
    for (int i = threadIdx.x; i < nb; i += CLIP_THREADS) acc += partial[i];
    double total = block_sum(acc);
    if (threadIdx.x != 0) return;
    float norm = (float)sqrt(total);
    *norm_out = norm;
    float c = 1.0f;
    if (!(ctl && ctl->found_inf) && max_norm > 0.0f)
        c = __fmul_rn(__fdiv_rn(1.0f, __fadd_rn(norm, 1e-6f)), max_norm);
    *coef = c < 1.0f ? c : 1.0f;
}

__global__ void clip_scale_k(int64_t n, float *__restrict__ g, const float *__restrict__ coef) {
    pdl_enter();
    float c = *coef;
    if (!(c < 1.0f)) return;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        g[i] = __fmul_rn(g[i], c);
}

__global__ void ema_k(int64_t n, float *__restrict__ ema, const float *__restrict__ x, float w_arg,
                      const double *__restrict__ decay) {
    pdl_enter();
    float w = decay ? (float)__dsub_rn(1.0, *decay) : w_arg;
    float omw = __fsub_rn(1.0f, w);
    bool small = fabsf(w) < 0.5f;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float e = ema[i], xi = x[i];
        float d = __fsub_rn(xi, e);
        ema[i] = small ? __fadd_rn(e, __fmul_rn(w, d)) : __fsub_rn(xi, __fmul_rn(d, omw));
    }
}

int cu_clip_grad_norm(backend_t *be, int64_t n, float *g, double max_norm, const step_ctl_t *ctl,
                      float *norm) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    unsigned nb = cb_blocks(cb, n > 0 ? n : 1, CLIP_THREADS);
    /* partials, then the coefficient, in the shared scratch (ops run in stream order) */
    size_t need = ((size_t)nb * sizeof(double) + 255) / 256 * 256 + 256;
    if (cb_grow(cb, &cb->scratch, need, "clip scratch")) return -1;
    double *partial = (double *)cb->scratch.p;
    float *coef = (float *)((char *)cb->scratch.p + need - 256);
    cb_launch(cb, sumsq_k, nb, CLIP_THREADS, 0, n, g, partial);
    KERNEL_CHECK(cb, "sumsq_k");
    cb_launch(cb, clip_finish_k, 1, CLIP_THREADS, 0, (int)nb, partial, (float)max_norm, ctl, norm, coef);
    KERNEL_CHECK(cb, "clip_finish_k");
    if (max_norm <= 0 || n <= 0) return 0;
    cb_launch(cb, clip_scale_k, cb_blocks(cb, n, 256), 256, 0, n, g, coef);
    KERNEL_CHECK(cb, "clip_scale_k");
    return 0;
}

int cu_ema_update(backend_t *be, int64_t n, float *ema, const float *x, double decay) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    CB_ENTER(cb);
    cb_launch(cb, ema_k, cb_blocks(cb, n, 256), 256, 0, n, ema, x, (float)(1.0 - decay), (const double *)NULL);
    KERNEL_CHECK(cb, "ema_k");
    return 0;
}

int cu_ema_update_dev(backend_t *be, int64_t n, float *ema, const float *x, const double *decay) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    CB_ENTER(cb);
    cb_launch(cb, ema_k, cb_blocks(cb, n, 256), 256, 0, n, ema, x, 0.0f, decay);
    KERNEL_CHECK(cb, "ema_k");
    return 0;
}

/* SyncBN: one thread per channel, model/bn_combine.h over the gathered records. */
__global__ void bn_combine_k(int world, int c, const float *__restrict__ gathered, int64_t count,
                             float *__restrict__ mean, float *__restrict__ var) {
    pdl_enter();
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    float m, v;
    bn_combine_channel(world, NULL, count, gathered + ch, gathered + c + ch, 2 * (size_t)c, &m, &v);
    mean[ch] = m;
    var[ch] = v;
}

int cu_bn_combine(backend_t *be, int world, int c, const float *gathered, int64_t count, float *mean,
                  float *var) {
    cuda_be_t *cb = cb_of(be);
    if (c <= 0) return 0;
    CB_ENTER(cb);
    cb_launch(cb, bn_combine_k, (c + 127) / 128, 128, 0, world, c, gathered, count, mean, var);
    KERNEL_CHECK(cb, "bn_combine_k");
    return 0;
}

int cu_sgd_step(backend_t *be, int64_t n, float *p, const float *g, float *buf, double lr,
                double momentum, double dampening, double weight_decay, bool nesterov,
                const step_ctl_t *ctl) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    if (momentum != 0.0 && !buf) return cb_fail(cb, "sgd_step: momentum %g needs a buffer", momentum);
    CB_ENTER(cb);
    bool from_ctl = isnan(lr);
    cb_launch(cb, sgd_k, cb_blocks(cb, n, 256), 256, 0, n, p, g, buf, from_ctl ? 0.0f : (float)lr, from_ctl,
                                                          (float)momentum, (float)(1.0 - dampening),
                                                          (float)weight_decay, nesterov, ctl);
    KERNEL_CHECK(cb, "sgd_k");
    return 0;
}

int cu_adamw_step(backend_t *be, int64_t n, float *p, const float *g, float *m, float *v,
                  double lr, double beta1, double beta2, double eps, double weight_decay,
                  const step_ctl_t *ctl) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    CB_ENTER(cb);
    bool from_ctl = isnan(lr);
    cb_launch(cb, adamw_k, cb_blocks(cb, n, 256), 256, 0,
        n, p, g, m, v, from_ctl ? 0.0 : lr, from_ctl, weight_decay, beta1, beta2, (float)beta1, (float)beta2,
        (float)(1.0 - beta1), (float)(1.0 - beta2), (float)eps, ctl);
    KERNEL_CHECK(cb, "adamw_k");
    return 0;
}

int cu_step_ctl_update(backend_t *be, step_ctl_t *ctl) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    cb_launch(cb, step_ctl_k, 1, 1, 0, ctl);
    KERNEL_CHECK(cb, "step_ctl_k");
    return 0;
}
