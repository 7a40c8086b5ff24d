/* cpu_ops.c: the CPU backend's elementwise ops, global average and max pooling, the classifier
 * GEMM, softmax cross-entropy, the optimizers and the AMP helpers (cast, unscale).
 *
 * Elementwise work is split in fixed-size chunks over the thread pool; every sum is taken
 * in a fixed order (per-chunk partials combined in chunk order), so results are
 * deterministic. Semantics follow PyTorch: torch.nn.CrossEntropyLoss(label_smoothing),
 * torch.optim.SGD and torch.optim.AdamW (see each function). Not here: convolution
 * (cpu_conv.c), batch norm (cpu_norm.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "model/cpu/cpu_impl.h"
#include "model/bn_combine.h"
#include "model/step_ctl.h"

#define EW_GRAIN 32768   /* elements per elementwise task */

/* One elementwise job; op selects the loop, the fields its operands. */
typedef enum { EW_RELU, EW_RELU_BWD, EW_ADD, EW_SCALE, EW_UNSCALE, EW_SGD, EW_ADAMW, EW_SUMSQ, EW_LERP } ew_op_t;

typedef struct ew_task {
    ew_op_t op;
    int64_t n;
    dtype_t dt;
    const float *a, *b;
    float *y, *buf, *m, *v;
    float alpha, lr, momentum, wd;
    float one_minus_damp;                          /* SGD: 1 - dampening */
    float decay, beta1, beta2, one_minus_b1, one_minus_b2, eps, step_size, bc2_sqrt; /* AdamW */
    bool nesterov, first;
    int32_t *flags;      /* per chunk: non-finite seen (EW_UNSCALE) */
    double *partial;     /* per chunk: sum of squares (EW_SUMSQ) */
} ew_task_t;

static void ew_chunk(void *argp, int chunk) {
    ew_task_t *t = argp;
    int64_t lo = (int64_t)chunk * EW_GRAIN, hi = lo + EW_GRAIN < t->n ? lo + EW_GRAIN : t->n;
    dtype_t dt = t->dt;
    switch (t->op) {
    case EW_RELU:
        for (int64_t i = lo; i < hi; i++) {
            float v = t->a[i];
            t->y[i] = v < 0.0f ? 0.0f : v;   /* NaN passes through, as torch.relu */
        }
        break;
    case EW_RELU_BWD:
        for (int64_t i = lo; i < hi; i++) t->y[i] = t->a[i] > 0.0f ? t->b[i] : 0.0f;
        break;
    case EW_ADD:
        for (int64_t i = lo; i < hi; i++) t->y[i] = t->a[i] + t->b[i];
        if (dt != DT_F32) cpu_round_n(dt, t->y + lo, t->y + lo, hi - lo);
        break;
    case EW_SCALE:
        for (int64_t i = lo; i < hi; i++) t->y[i] *= t->alpha;
        break;
    case EW_UNSCALE: {
        int bad = 0;
        for (int64_t i = lo; i < hi; i++) {
            float g = t->y[i];
            bad |= !isfinite(g);
            t->y[i] = g * t->alpha;
        }
        t->flags[chunk] = bad;
        break;
    }
    case EW_SGD:
        /* torch.optim.SGD: d = g + wd*p; buf = d (first step) or momentum*buf + (1-damp)*d;
         * d = nesterov ? d + momentum*buf : buf; p -= lr*d */
        for (int64_t i = lo; i < hi; i++) {
            float d = t->a[i];
            if (t->wd != 0.0f) d = d + t->wd * t->y[i];
            if (t->momentum != 0.0f) {
                float bv = t->first ? d : t->momentum * t->buf[i] + t->one_minus_damp * d;
                t->buf[i] = bv;
                d = t->nesterov ? d + t->momentum * bv : bv;
            }
            t->y[i] = t->y[i] - t->lr * d;
        }
        break;
    case EW_SUMSQ: {
        double acc = 0;
        for (int64_t i = lo; i < hi; i++) acc += (double)t->a[i] * (double)t->a[i];
        t->partial[chunk] = acc;
        break;
    }
    case EW_LERP: {
        /* torch.lerp(self=ema, end=x, weight=alpha), each operation rounded to fp32 (this
         * file is built for baseline x86-64, which has no FMA to fuse them into; the CUDA
         * kernel uses __fmul_rn/__fadd_rn for the same bits) */
        float w = t->alpha, omw = 1.0f - w;
        bool small = fabsf(w) < 0.5f;
        for (int64_t i = lo; i < hi; i++) {
            float e = t->y[i], x = t->a[i];
            float d = x - e;
            t->y[i] = small ? e + w * d : x - d * omw;
        }
        break;
    }
    case EW_ADAMW:
        /* torch.optim.AdamW (single-tensor path): p *= 1 - lr*wd; m = b1*m + (1-b1)*g;
         * v = b2*v + (1-b2)*g*g; denom = sqrt(v)/sqrt(bc2) + eps; p -= (lr/bc1) * m/denom */
        for (int64_t i = lo; i < hi; i++) {
            float g = t->a[i], p = t->y[i];
            p = p * t->decay;
            float m = t->m[i] * t->beta1 + t->one_minus_b1 * g;
            float v = t->v[i] * t->beta2 + t->one_minus_b2 * g * g;
            float denom = sqrtf(v) / t->bc2_sqrt + t->eps;
            t->m[i] = m;
            t->v[i] = v;
            t->y[i] = p - t->step_size * (m / denom);
        }
        break;
    }
}

static void ew_run(backend_t *be, ew_task_t *t) {
    cpu_pool_run(&cpu_of(be)->pool, cpu_nchunks(t->n, EW_GRAIN), ew_chunk, t);
}

int cpu_relu_fwd(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y) {
    ew_task_t t = {.op = EW_RELU, .n = n, .dt = dt, .a = x, .y = y};
    ew_run(be, &t);
    return 0;
}

int cpu_relu_bwd(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx) {
    ew_task_t t = {.op = EW_RELU_BWD, .n = n, .dt = dt, .a = y, .b = dy, .y = dx};
    ew_run(be, &t);
    return 0;
}

int cpu_add(backend_t *be, int64_t n, dtype_t dt, const void *a, const void *b, void *y) {
    ew_task_t t = {.op = EW_ADD, .n = n, .dt = dt, .a = a, .b = b, .y = y};
    ew_run(be, &t);
    return 0;
}

int cpu_scale(backend_t *be, int64_t n, float *x, float alpha) {
    ew_task_t t = {.op = EW_SCALE, .n = n, .y = x, .alpha = alpha};
    ew_run(be, &t);
    return 0;
}

int cpu_unscale_check_finite(backend_t *be, int64_t n, float *g, step_ctl_t *ctl) {
    int nc = cpu_nchunks(n, EW_GRAIN);
    int32_t *flags = (int32_t *)cpu_scratch(cpu_of(be), (size_t)nc + 1);
    if (!flags) return -1;
    /* inv_scale in fp32 as GradScaler computes it (scale.double().reciprocal().float()) */
    float inv = (float)(1.0 / (double)ctl->loss_scale);
    ew_task_t t = {.op = EW_UNSCALE, .n = n, .y = g, .alpha = inv, .flags = flags};
    ew_run(be, &t);
    for (int i = 0; i < nc; i++)
        if (flags[i]) ctl->found_inf = 1;
    return 0;
}

/* The hyperparameters arrive as the doubles torch holds (Python floats); torch forms
 * 1 - dampening, 1 - lr*wd, lr / bias_correction, ... in double and casts the result to
 * float when a tensor op applies it, and so does this. */
int cpu_sgd_step(backend_t *be, int64_t n, float *p, const float *g, float *buf, double lr,
                 double momentum, double dampening, double weight_decay, bool nesterov,
                 const step_ctl_t *ctl) {
    if (momentum != 0.0 && !buf)
        return err_set(&be->err, ERR_RUNTIME, "cpu sgd_step: momentum without a buffer");
    if (ctl->found_inf) return 0;
    if (isnan(lr)) lr = ctl->lr;
    ew_task_t t = {.op = EW_SGD, .n = n, .a = g, .y = p, .buf = buf, .lr = (float)lr,
                   .momentum = (float)momentum, .wd = (float)weight_decay,
                   .one_minus_damp = (float)(1.0 - dampening),
                   .nesterov = nesterov, .first = ctl->optim_steps == 0};
    ew_run(be, &t);
    return 0;
}

int cpu_adamw_step(backend_t *be, int64_t n, float *p, const float *g, float *m, float *v,
                   double lr, double beta1, double beta2, double eps, double weight_decay,
                   const step_ctl_t *ctl) {
    if (ctl->found_inf) return 0;
    if (isnan(lr)) lr = ctl->lr;
    double step = (double)(ctl->optim_steps + 1);
    double bc1 = 1.0 - pow(beta1, step);
    double bc2 = 1.0 - pow(beta2, step);
    ew_task_t t = {.op = EW_ADAMW, .n = n, .a = g, .y = p, .m = m, .v = v,
                   .decay = (float)(1.0 - lr * weight_decay),
                   .beta1 = (float)beta1, .beta2 = (float)beta2, .eps = (float)eps,
                   .one_minus_b1 = (float)(1.0 - beta1), .one_minus_b2 = (float)(1.0 - beta2),
                   .step_size = (float)(lr / bc1), .bc2_sqrt = (float)sqrt(bc2)};
    ew_run(be, &t);
    return 0;
}

int cpu_clip_grad_norm(backend_t *be, int64_t n, float *g, double max_norm, const step_ctl_t *ctl,
                       float *norm) {
    int nc = cpu_nchunks(n, EW_GRAIN);
    /* per-chunk partials in double, then added in chunk order: the same sum for any
     * thread count */
    double *partial = (double *)cpu_scratch(cpu_of(be), 2 * (size_t)(nc > 0 ? nc : 1));
    if (!partial) return -1;
    ew_task_t t = {.op = EW_SUMSQ, .n = n, .a = g, .partial = partial};
    ew_run(be, &t);
    double sum = 0;
    for (int i = 0; i < nc; i++) sum += partial[i];
    float total = (float)sqrt(sum);
    *norm = total;
    if ((ctl && ctl->found_inf) || max_norm <= 0) return 0;
    float coef = (1.0f / (total + 1e-6f)) * (float)max_norm;
    if (!(coef < 1.0f)) return 0;
    return cpu_scale(be, n, g, coef);
}

int cpu_ema_update(backend_t *be, int64_t n, float *ema, const float *x, double decay) {
    ew_task_t t = {.op = EW_LERP, .n = n, .a = x, .y = ema, .alpha = (float)(1.0 - decay)};
    ew_run(be, &t);
    return 0;
}

int cpu_ema_update_dev(backend_t *be, int64_t n, float *ema, const float *x, const double *decay) {
    return cpu_ema_update(be, n, ema, x, *decay);
}

int cpu_bn_combine(backend_t *be, int world, int c, const float *gathered, int64_t count, float *mean,
                   float *var) {
    (void)be;
    for (int ch = 0; ch < c; ch++)
        bn_combine_channel(world, NULL, count, gathered + ch, gathered + c + ch, 2 * (size_t)c, &mean[ch], &var[ch]);
    return 0;
}

int cpu_step_ctl_update(backend_t *be, step_ctl_t *ctl) {
    (void)be;
    step_ctl_advance(ctl);
    return 0;
}

int cpu_cast(backend_t *be, int64_t n, const void *src, dtype_t src_dt, void *dst,
             dtype_t dst_dt) {
    (void)src_dt;   /* every dtype is stored as float here; only the target rounding matters */
    cpu_round_copy(cpu_of(be), dst_dt, dst, src, n);
    return 0;
}

/* ---- pooling ------------------------------------------------------------------------ */
int cpu_avgpool_fwd(backend_t *be, int n, int hw, int c, dtype_t dt, const void *xv, void *yv) {
    (void)be;
    const float *x = xv;
    float *y = yv;
    double *acc = malloc((size_t)c * sizeof *acc);
    if (!acc) return err_set(&be->err, ERR_RUNTIME, "cpu avgpool_fwd: out of memory");
    for (int b = 0; b < n; b++) {
        memset(acc, 0, (size_t)c * sizeof *acc);
        for (int i = 0; i < hw; i++) {
            const float *xr = x + ((int64_t)b * hw + i) * c;
            for (int j = 0; j < c; j++) acc[j] += xr[j];
        }
        for (int j = 0; j < c; j++) y[(int64_t)b * c + j] = cpu_round(dt, (float)(acc[j] / hw));
    }
    free(acc);
    return 0;
}

int cpu_avgpool_bwd(backend_t *be, int n, int hw, int c, dtype_t dt, const void *dyv, void *dxv) {
    (void)be;
    const float *dy = dyv;
    float *dx = dxv;
    for (int b = 0; b < n; b++)
        for (int i = 0; i < hw; i++) {
            float *d = dx + ((int64_t)b * hw + i) * c;
            for (int j = 0; j < c; j++) d[j] = cpu_round(dt, dy[(int64_t)b * c + j] / (float)hw);
        }
    return 0;
}

/* ---- max pool ----------------------------------------------------------------------- */
typedef struct maxpool_task {
    const pool_shape_t *s;
    dtype_t dt;
    const float *x, *dy;
    float *y, *dx;
    int32_t *idx;        /* backward: per chunk, c argmax positions (h * w + col) */
} maxpool_task_t;

/* The valid input rows [*lo, *hi) of window row o (padding excluded). */
static inline void pool_span(int o, int stride, int pad, int kernel, int size, int *lo, int *hi) {
    int a = o * stride - pad, b = a + kernel;
    *lo = a < 0 ? 0 : a;
    *hi = b > size ? size : b;
}

/* Window (oh, ow) of sample b: the running maximum per channel into m and, when idx is
 * given, its position. torch's rule: start at -inf with the first valid position, take a
 * value when it is greater or NaN. */
static void maxpool_window(const maxpool_task_t *t, int b, int oh, int ow, float *m, int32_t *idx) {
    const pool_shape_t *s = t->s;
    int C = s->c, h0, h1, w0, w1;
    pool_span(oh, s->stride, s->pad, s->kernel, s->h, &h0, &h1);
    pool_span(ow, s->stride, s->pad, s->kernel, s->w, &w0, &w1);
    for (int c = 0; c < C; c++) m[c] = -INFINITY;
    if (idx)
        for (int c = 0; c < C; c++) idx[c] = h0 * s->w + w0;
    /* the channel loops are selects without branches (v != v: NaN), so the compiler
     * vectorises them: the branchy form ran VGG's pools at ~2.4 ns an element */
    for (int ih = h0; ih < h1; ih++)
        for (int iw = w0; iw < w1; iw++) {
            const float *restrict xr = t->x + (((int64_t)b * s->h + ih) * s->w + iw) * C;
            int32_t pos = ih * s->w + iw;
            if (idx)
                for (int c = 0; c < C; c++) {
                    float v = xr[c];
                    bool take = (v > m[c]) | (v != v);
                    m[c] = take ? v : m[c];
                    idx[c] = take ? pos : idx[c];
                }
            else
                for (int c = 0; c < C; c++) {
                    float v = xr[c];
                    bool take = (v > m[c]) | (v != v);
                    m[c] = take ? v : m[c];
                }
        }
}

/* Forward: one chunk per (sample, output row). */
static void maxpool_fwd_chunk(void *argp, int chunk) {
    maxpool_task_t *t = argp;
    const pool_shape_t *s = t->s;
    int b = chunk / s->p, oh = chunk % s->p;
    for (int ow = 0; ow < s->q; ow++)
        maxpool_window(t, b, oh, ow, t->y + (((int64_t)b * s->p + oh) * s->q + ow) * s->c, NULL);
}

/* Backward: one chunk per sample (windows overlap, so a sample's dx is one task's): dx is
 * zeroed, then every window adds its dy at its argmax in output order. */
static void maxpool_bwd_chunk(void *argp, int chunk) {
    maxpool_task_t *t = argp;
    const pool_shape_t *s = t->s;
    int C = s->c;
    int64_t plane = (int64_t)s->h * s->w * C;
    float *dx = t->dx + chunk * plane, *m = (float *)(t->idx + (int64_t)chunk * 2 * C);
    int32_t *idx = t->idx + (int64_t)chunk * 2 * C + C;
    memset(dx, 0, (size_t)plane * sizeof(float));
    for (int oh = 0; oh < s->p; oh++)
        for (int ow = 0; ow < s->q; ow++) {
            maxpool_window(t, chunk, oh, ow, m, idx);
            const float *g = t->dy + (((int64_t)chunk * s->p + oh) * s->q + ow) * C;
            for (int c = 0; c < C; c++) dx[(int64_t)idx[c] * C + c] += g[c];
        }
    if (t->dt != DT_F32) cpu_round_n(t->dt, dx, dx, plane);
}

int cpu_maxpool_fwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y) {
    maxpool_task_t t = {.s = s, .dt = dt, .x = x, .y = y};
    cpu_pool_run(&cpu_of(be)->pool, s->n * s->p, maxpool_fwd_chunk, &t);
    return 0;
}

int cpu_maxpool_bwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, const void *dy,
                    void *dx) {
    int32_t *ws = (int32_t *)cpu_scratch(cpu_of(be), (size_t)s->n * 2 * (size_t)s->c);
    if (!ws) return -1;
    maxpool_task_t t = {.s = s, .dt = dt, .x = x, .dy = dy, .dx = dx, .idx = ws};
    cpu_pool_run(&cpu_of(be)->pool, s->n, maxpool_bwd_chunk, &t);
    return 0;
}

/* ---- linear ------------------------------------------------------------------------- */
/* Returns a (copy of) x rounded to dt: x itself for fp32, else a slice of ws. */
static const float *rounded(cpu_backend_t *c, dtype_t dt, const float *x, int64_t n, float *ws) {
    if (dt == DT_F32 || !x) return x;
    cpu_round_copy(c, dt, ws, x, n);
    return ws;
}

int cpu_linear_fwd(backend_t *be, int n, int in, int out, dtype_t dt, const void *x,
                   const void *w, const float *b, void *yv) {
    cpu_backend_t *c = cpu_of(be);
    int64_t nx = (int64_t)n * in, nw = (int64_t)out * in;
    float *ws = dt != DT_F32 ? cpu_scratch(c, (size_t)(nx + nw)) : NULL;
    if (dt != DT_F32 && !ws) return -1;
    const float *xr = rounded(c, dt, x, nx, ws), *wr = rounded(c, dt, w, nw, ws ? ws + nx : NULL);
    float *y = yv;
    for (int i = 0; i < n; i++) {
        if (b) memcpy(y + (int64_t)i * out, b, (size_t)out * sizeof(float));
        else memset(y + (int64_t)i * out, 0, (size_t)out * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, xr, in, wr, in, 1.0f,
                y, out);
    cpu_round_array(c, dt, y, (int64_t)n * out);
    return 0;
}

int cpu_linear_bwd(backend_t *be, int n, int in, int out, dtype_t dt, const void *x,
                   const void *w, const void *dy, void *dx, float *dw, float *db) {
    cpu_backend_t *c = cpu_of(be);
    int64_t nx = (int64_t)n * in, nw = (int64_t)out * in, ny = (int64_t)n * out;
    float *ws = dt != DT_F32 ? cpu_scratch(c, (size_t)(nx + nw + ny)) : NULL;
    if (dt != DT_F32 && !ws) return -1;
    const float *xr = rounded(c, dt, x, nx, ws);
    const float *wr = rounded(c, dt, w, nw, ws ? ws + nx : NULL);
    const float *dyr = rounded(c, dt, dy, ny, ws ? ws + nx + nw : NULL);
    if (dx) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dyr, out, wr,
                    in, 0.0f, dx, in);
        cpu_round_array(c, dt, dx, nx);
    }
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dyr, out, xr, in,
                    1.0f, dw, in);
    if (db) {
        for (int j = 0; j < out; j++) {
            double s = 0;
            for (int i = 0; i < n; i++) s += dyr[(int64_t)i * out + j];
            db[j] += (float)s;
        }
    }
    return 0;
}

/* ---- loss --------------------------------------------------------------------------- */
typedef struct xent_task {
    int n, classes;
    dtype_t dt;
    const float *logits;
    const int32_t *labels;
    float smoothing, grad_scale;
    float *dlogits;
    double *loss;        /* per sample */
    int32_t *hits;       /* per sample: 1 top-1, 2 top-5 (bits) */
    const float *targets;/* soft targets (n x classes) or NULL */
} xent_task_t;

#define XENT_ROWS 8

/* Top-1 (bit 0) and top-5 (bit 1) hit of label y: its rank counts the logits above it,
 * ties broken by the lower index (as argmax). */
static int32_t label_hits(const float *z, int C, int y) {
    int rank = 0;
    for (int j = 0; j < C; j++) rank += z[j] > z[y] || (z[j] == z[y] && j < y);
    return (rank < 1 ? 1 : 0) | (rank < 5 ? 2 : 0);
}

/* Loss, gradient and top-k hits of XENT_ROWS samples. */
static void xent_chunk(void *argp, int chunk) {
    xent_task_t *t = argp;
    int C = t->classes;
    int lo = chunk * XENT_ROWS, hi = lo + XENT_ROWS < t->n ? lo + XENT_ROWS : t->n;
    for (int i = lo; i < hi; i++) {
        const float *z = t->logits + (int64_t)i * C;
        int y = t->labels[i];
        float mx = z[0];
        for (int j = 1; j < C; j++) mx = z[j] > mx ? z[j] : mx;
        double se = 0, sz = 0;
        for (int j = 0; j < C; j++) {
            se += exp((double)z[j] - mx);
            sz += z[j];
        }
        double lse = mx + log(se);
        double nll = lse - z[y];
        double smooth = lse - sz / C;      /* mean_j(-log p_j) */
        t->loss[i] = (1.0 - t->smoothing) * nll + t->smoothing * smooth;
        t->hits[i] = label_hits(z, C, y);
        if (t->dlogits) {
            float *d = t->dlogits + (int64_t)i * C;
            for (int j = 0; j < C; j++) {
                double p = exp((double)z[j] - lse);
                double g = p - t->smoothing / C - (j == y ? 1.0 - t->smoothing : 0.0);
                d[j] = cpu_round(t->dt, (float)(t->grad_scale * g));
            }
        }
    }
}

/* Soft targets (timm SoftTargetCrossEntropy): loss = sum_j t_j (lse - z_j), gradient
 * p_j sum_k t_k - t_j (what autograd gives for any t); hits count the dominant label. */
static void xent_soft_chunk(void *argp, int chunk) {
    xent_task_t *t = argp;
    int C = t->classes;
    int lo = chunk * XENT_ROWS, hi = lo + XENT_ROWS < t->n ? lo + XENT_ROWS : t->n;
    for (int i = lo; i < hi; i++) {
        const float *z = t->logits + (int64_t)i * C, *tg = t->targets + (int64_t)i * C;
        float mx = z[0];
        int y = 0;
        for (int j = 1; j < C; j++) {
            mx = z[j] > mx ? z[j] : mx;
            if (tg[j] > tg[y]) y = j;
        }
        double se = 0, tsum = 0;
        for (int j = 0; j < C; j++) {
            se += exp((double)z[j] - mx);
            tsum += tg[j];
        }
        double lse = mx + log(se), loss = 0;
        for (int j = 0; j < C; j++) loss += (double)tg[j] * (lse - z[j]);
        t->loss[i] = loss;
        t->hits[i] = label_hits(z, C, y);
        if (t->dlogits) {
            float *d = t->dlogits + (int64_t)i * C;
            for (int j = 0; j < C; j++) {
                double g = exp((double)z[j] - lse) * tsum - tg[j];
                d[j] = cpu_round(t->dt, (float)(t->grad_scale * g));
            }
        }
    }
}

/* Runs the loss chunks and sums the rows in order. */
static int xent_run(backend_t *be, xent_task_t *t, const step_ctl_t *ctl, cpu_task_fn fn, float *loss_sum,
                    int32_t *correct) {
    int n = t->n;
    double *ws = (double *)cpu_scratch(cpu_of(be), (size_t)n * 3);
    if (!ws) return -1;
    if (ctl) t->grad_scale *= ctl->loss_scale;
    t->loss = ws;
    t->hits = (int32_t *)(ws + n);
    cpu_pool_run(&cpu_of(be)->pool, cpu_nchunks(n, XENT_ROWS), fn, t);
    double s = 0;
    int32_t top1 = 0, top5 = 0;
    for (int i = 0; i < n; i++) {
        s += ws[i];
        top1 += t->hits[i] & 1;
        top5 += (t->hits[i] >> 1) & 1;
    }
    loss_sum[0] = (float)s;
    if (correct) {
        correct[0] = top1;
        correct[1] = top5;
    }
    return 0;
}

int cpu_softmax_xent_soft(backend_t *be, int n, int classes, dtype_t dt, const void *logits,
                          const float *targets, float grad_scale, const step_ctl_t *ctl,
                          void *dlogits, float *loss_sum, int32_t *correct) {
    if (n < 1 || classes < 1)
        return err_set(&be->err, ERR_RUNTIME, "cpu softmax_xent_soft: n=%d classes=%d", n, classes);
    xent_task_t t = {n, classes, dt, logits, NULL, 0.0f, grad_scale, dlogits, NULL, NULL, targets};
    return xent_run(be, &t, ctl, xent_soft_chunk, loss_sum, correct);
}

int cpu_softmax_xent(backend_t *be, int n, int classes, dtype_t dt, const void *logits,
                     const int32_t *labels, float smoothing, float grad_scale,
                     const step_ctl_t *ctl, void *dlogits, float *loss_sum, int32_t *correct) {
    if (n < 1 || classes < 1)
        return err_set(&be->err, ERR_RUNTIME, "cpu softmax_xent: n=%d classes=%d", n, classes);
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return err_set(&be->err, ERR_INPUT, "softmax_xent: label %d of sample %d is outside "
                           "[0, %d); check the dataset labels against model.num_classes",
                           labels[i], i, classes);
    xent_task_t t = {n, classes, dt, logits, labels, smoothing, grad_scale, dlogits, NULL, NULL, NULL};
    return xent_run(be, &t, ctl, xent_chunk, loss_sum, correct);
}
