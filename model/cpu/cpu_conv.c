/* cpu_conv.c: 2-D convolution for the CPU backend (forward, backward data, backward
 * filter) on NHWC activations and KRSC weights.
 *
 * Two engines: oneDNN (cpu_dnnl.c, when built with it: direct convolution on NHWC or on
 * its blocked layout, Winograd on request) and im2col + OpenBLAS SGEMM, where a 1x1
 * stride-1 convolution is one plain GEMM on the activation matrix. The engine is chosen
 * once per shape and direction by asking oneDNN which of the preferred variants it
 * implements at this ISA, falling back Winograd -> direct -> GEMM (see
 * engine_candidates and choose). AMP (DT_F16/DT_BF16) is emulated here for both
 * engines: inputs and weights are rounded to half before use, the fp32 result is rounded
 * after. Backward data is a gather (col2im written per input pixel), so every output
 * element is summed in a fixed order by one thread: results are deterministic.
 * Grouped convolutions (conv_shape_t.groups) run on oneDNN's grouped kernels (depthwise
 * ones when groups == c) or, in the GEMM engine, as one im2col + GEMM per group.
 * Not here: bias (cpu_layers.c adds it), dilation.
 */
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "model/cpu/cpu_impl.h"

/* Channels per group of input (cg) and output (kg). */
static inline int group_c(const conv_shape_t *s) { return s->c / conv_groups(s); }
static inline int group_k(const conv_shape_t *s) { return s->k / conv_groups(s); }

/* Images per GEMM chunk so that the im2col matrix (one group's) stays around 16 MB. */
static int images_per_chunk(const conv_shape_t *s) {
    int64_t per = (int64_t)s->p * s->q * s->r * s->s * group_c(s);
    int64_t nb = per > 0 ? (4 << 20) / per : s->n;
    if (nb < 1) nb = 1;
    if (nb > s->n) nb = s->n;
    return (int)nb;
}

static bool is_pointwise(const conv_shape_t *s) {
    return s->r == 1 && s->s == 1 && s->stride == 1 && s->pad == 0;
}

typedef struct im2col_task {
    const conv_shape_t *s;
    const float *x;     /* first image of the chunk */
    float *col;         /* [nb*p*q, r*s*cg] */
    int nb;
    int c0;             /* the group's first input channel */
    dtype_t dt;
} im2col_task_t;

/* One output row (image b, output row p) of the im2col matrix of channels [c0, c0 + cg),
 * rounding to dt. */
static void im2col_row(void *argp, int chunk) {
    im2col_task_t *t = argp;
    const conv_shape_t *s = t->s;
    int b = chunk / s->p, op = chunk % s->p, cg = group_c(s);
    int64_t rsc = (int64_t)s->r * s->s * cg;
    const float *xb = t->x + (int64_t)b * s->h * s->w * s->c + t->c0;
    for (int oq = 0; oq < s->q; oq++) {
        float *dst = t->col + ((int64_t)chunk * s->q + oq) * rsc;
        for (int r = 0; r < s->r; r++) {
            int ih = op * s->stride - s->pad + r;
            for (int ss = 0; ss < s->s; ss++) {
                int iw = oq * s->stride - s->pad + ss;
                float *d = dst + ((int64_t)r * s->s + ss) * cg;
                if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) {
                    memset(d, 0, (size_t)cg * sizeof(float));
                    continue;
                }
                const float *src = xb + ((int64_t)ih * s->w + iw) * s->c;
                if (t->dt == DT_F32) memcpy(d, src, (size_t)cg * sizeof(float));
                else cpu_round_n(t->dt, d, src, cg);
            }
        }
    }
}

static void im2col(cpu_backend_t *c, const conv_shape_t *s, dtype_t dt, const float *x, int nb,
                   int c0, float *col) {
    im2col_task_t t = {s, x, col, nb, c0, dt};
    cpu_pool_run(&c->pool, nb * s->p, im2col_row, &t);
}

typedef struct col2im_task {
    const conv_shape_t *s;
    const float *col;   /* [nb*p*q, r*s*cg] gradient of one group's im2col matrix */
    float *dx;          /* first image of the chunk */
    int c0;             /* the group's first input channel */
    dtype_t dt;
} col2im_task_t;

/* One input row (image b, input row ih) of dx, channels [c0, c0 + cg): each pixel
 * gathers the columns that read it, in (r, s) order, and rounds the sum to dt. */
static void col2im_row(void *argp, int chunk) {
    col2im_task_t *t = argp;
    const conv_shape_t *s = t->s;
    int b = chunk / s->h, ih = chunk % s->h, cg = group_c(s);
    int64_t rsc = (int64_t)s->r * s->s * cg;
    const float *colb = t->col + (int64_t)b * s->p * s->q * rsc;
    for (int iw = 0; iw < s->w; iw++) {
        float *d = t->dx + (((int64_t)b * s->h + ih) * s->w + iw) * s->c + t->c0;
        memset(d, 0, (size_t)cg * sizeof(float));
        for (int r = 0; r < s->r; r++) {
            int np = ih + s->pad - r;
            if (np < 0 || np % s->stride) continue;
            int op = np / s->stride;
            if (op >= s->p) continue;
            for (int ss = 0; ss < s->s; ss++) {
                int nq = iw + s->pad - ss;
                if (nq < 0 || nq % s->stride) continue;
                int oq = nq / s->stride;
                if (oq >= s->q) continue;
                const float *src = colb + ((int64_t)op * s->q + oq) * rsc +
                                   ((int64_t)r * s->s + ss) * cg;
                for (int ci = 0; ci < cg; ci++) d[ci] += src[ci];
            }
        }
        if (t->dt != DT_F32)
            cpu_round_n(t->dt, d, d, cg);
    }
}

/* Forward through im2col + SGEMM, per group g: y[rows, g's k] = col_g[rows, rscg] *
 * w_g[kg, rscg]^T (a dense convolution is one group). */
static int gemm_fwd(cpu_backend_t *c, const conv_shape_t *s, dtype_t dt, const float *x,
                    const float *w, float *y) {
    int G = conv_groups(s), cg = group_c(s), kg = group_k(s);
    int rsc = s->r * s->s * cg;
    int64_t wn = (int64_t)s->k * rsc, xin = (int64_t)s->h * s->w * s->c;
    int64_t yout = (int64_t)s->p * s->q * s->k;
    if (dt == DT_F32 && is_pointwise(s)) {
        for (int g = 0; g < G; g++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->n * s->h * s->w, kg, cg,
                        1.0f, x + g * cg, s->c, w + (int64_t)g * kg * cg, cg, 0.0f, y + g * kg, s->k);
        return 0;
    }
    int nb = images_per_chunk(s);
    int64_t colsz = (int64_t)nb * s->p * s->q * rsc;
    float *ws = cpu_scratch(c, (size_t)(colsz + (dt != DT_F32 ? wn : 0)));
    if (!ws) return -1;
    float *col = ws, *wr = (float *)w;
    if (dt != DT_F32) {
        wr = ws + colsz;
        cpu_round_copy(c, dt, wr, w, wn);
    }
    for (int b0 = 0; b0 < s->n; b0 += nb) {
        int cnt = s->n - b0 < nb ? s->n - b0 : nb;
        for (int g = 0; g < G; g++) {
            im2col(c, s, dt, x + b0 * xin, cnt, g * cg, col);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, cnt * s->p * s->q, kg, rsc,
                        1.0f, col, rsc, wr + (int64_t)g * kg * rsc, rsc, 0.0f, y + b0 * yout + g * kg, s->k);
        }
    }
    return 0;
}

/* Backward data, per group: dcol = dy[rows, g's k] * w_g[kg, rscg], then gathered into
 * the group's channels of dx. */
static int gemm_bwd_data(cpu_backend_t *c, const conv_shape_t *s, dtype_t dt, const float *dy,
                         const float *w, float *dx) {
    int G = conv_groups(s), cg = group_c(s), kg = group_k(s);
    int rsc = s->r * s->s * cg;
    int64_t wn = (int64_t)s->k * rsc, xin = (int64_t)s->h * s->w * s->c;
    int64_t yout = (int64_t)s->p * s->q * s->k;
    if (dt == DT_F32 && is_pointwise(s)) {
        for (int g = 0; g < G; g++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->n * s->h * s->w, cg, kg,
                        1.0f, dy + g * kg, s->k, w + (int64_t)g * kg * cg, cg, 0.0f, dx + g * cg, s->c);
        return 0;
    }
    int nb = images_per_chunk(s);
    int64_t colsz = (int64_t)nb * s->p * s->q * rsc;
    int64_t dysz = dt != DT_F32 ? (int64_t)nb * yout : 0;
    float *ws = cpu_scratch(c, (size_t)(colsz + dysz + (dt != DT_F32 ? wn : 0)));
    if (!ws) return -1;
    float *col = ws, *dyr = ws + colsz, *wr = (float *)w;
    if (dt != DT_F32) {
        wr = ws + colsz + dysz;
        cpu_round_copy(c, dt, wr, w, wn);
    }
    for (int b0 = 0; b0 < s->n; b0 += nb) {
        int cnt = s->n - b0 < nb ? s->n - b0 : nb;
        const float *a = dy + b0 * yout;
        if (dt != DT_F32) {
            cpu_round_copy(c, dt, dyr, a, cnt * yout);
            a = dyr;
        }
        for (int g = 0; g < G; g++) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, cnt * s->p * s->q, rsc, kg,
                        1.0f, a + g * kg, s->k, wr + (int64_t)g * kg * rsc, rsc, 0.0f, col, rsc);
            col2im_task_t t = {s, col, dx + b0 * xin, g * cg, dt};
            cpu_pool_run(&c->pool, cnt * s->h, col2im_row, &t);
        }
    }
    return 0;
}

/* Backward filter, per group: dw_g[kg, rscg] += dy_g^T[kg, rows] * col_g[rows, rscg],
 * chunk by chunk. */
static int gemm_bwd_filter(cpu_backend_t *c, const conv_shape_t *s, dtype_t dt, const float *x,
                           const float *dy, float *dw) {
    int G = conv_groups(s), cg = group_c(s), kg = group_k(s);
    int rsc = s->r * s->s * cg;
    int64_t xin = (int64_t)s->h * s->w * s->c, yout = (int64_t)s->p * s->q * s->k;
    if (dt == DT_F32 && is_pointwise(s)) {
        for (int g = 0; g < G; g++)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kg, cg, s->n * s->h * s->w,
                        1.0f, dy + g * kg, s->k, x + g * cg, s->c, 1.0f, dw + (int64_t)g * kg * cg, cg);
        return 0;
    }
    int nb = images_per_chunk(s);
    int64_t colsz = (int64_t)nb * s->p * s->q * rsc;
    int64_t dysz = dt != DT_F32 ? (int64_t)nb * yout : 0;
    float *ws = cpu_scratch(c, (size_t)(colsz + dysz));
    if (!ws) return -1;
    float *col = ws, *dyr = ws + colsz;
    for (int b0 = 0; b0 < s->n; b0 += nb) {
        int cnt = s->n - b0 < nb ? s->n - b0 : nb;
        const float *a = dy + b0 * yout;
        if (dt != DT_F32) {
            cpu_round_copy(c, dt, dyr, a, cnt * yout);
            a = dyr;
        }
        for (int g = 0; g < G; g++) {
            im2col(c, s, dt, x + b0 * xin, cnt, g * cg, col);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kg, rsc, cnt * s->p * s->q,
                        1.0f, a + g * kg, s->k, col, rsc, 1.0f, dw + (int64_t)g * kg * rsc, rsc);
        }
    }
    return 0;
}

/* Checks the geometry; a bad shape is the caller's bug, reported as a runtime error. */
static int check_shape(backend_t *be, const conv_shape_t *s, const char *op) {
    if (s->n < 1 || s->h < 1 || s->w < 1 || s->c < 1 || s->k < 1 || s->r < 1 || s->s < 1 ||
        s->stride < 1 || s->pad < 0 || s->p != (s->h + 2 * s->pad - s->r) / s->stride + 1 ||
        s->q != (s->w + 2 * s->pad - s->s) / s->stride + 1 || s->p < 1 || s->q < 1 ||
        s->groups < 0 || s->c % conv_groups(s) || s->k % conv_groups(s))
        return err_set(&be->err, ERR_RUNTIME, "cpu %s: inconsistent conv shape n%d h%d w%d c%d "
                       "k%d r%d s%d stride%d pad%d p%d q%d groups %d", op, s->n, s->h, s->w, s->c,
                       s->k, s->r, s->s, s->stride, s->pad, s->p, s->q, s->groups);
    return 0;
}

/* Whether a shape is one Winograd F(m, 3) can compute (3x3, stride 1, pad 1); oneDNN
 * decides whether it has the kernel (AVX-512 and up in oneDNN 2.x). */
static bool winograd_ok(const conv_shape_t *s) {
    return s->r == 3 && s->s == 3 && s->stride == 1 && s->pad == 1;
}

/* The engines to try for a shape and direction (which: 0 fwd, 1 bwd data, 2 bwd filter),
 * best first; the first one oneDNN implements on this CPU is used, GEMM (OpenBLAS) always
 * works. Measured on the ResNet layers (bench/results/cpu_ops.md): oneDNN beats im2col +
 * OpenBLAS on every layer. For layers with small input maps (h*w <= 64) and many
 * channels, reordering the activations into oneDNN's blocked layout and back is cheaper
 * than the NHWC kernels' inefficiency there. At AVX2 the same holds for every 3x3 layer
 * with >= 64 channels on both sides and larger maps (resnet18's 32x32 64->64 and 16x16
 * 128->128 train 8-12% faster blocked, 2 threads; resnet20's 16-32-channel layers and its
 * 8x8 64->64 are 5-15% slower blocked; at AVX-512 NHWC is faster on all of them:
 * bench_conv_layers --engine, bench/results/cpu_ops.md). Everything else prefers oneDNN's
 * NHWC kernels on our tensors, and takes the blocked ones where the NHWC ones are missing
 * (at SSE4.1 oneDNN has few NHWC kernels). Depthwise layers (groups == c) always prefer
 * NHWC: oneDNN's NHWC depthwise kernels (brdgmm_dw at AVX-512, jit_dw below) were 1.5-3x
 * faster than its blocked ones on every MobileNetV2-CIFAR layer at AVX-512 and AVX2 (one
 * thread, process CPU time; bench_conv_layers, bench/results/cpu_ops.md), and as fast as
 * PyTorch's channels-last depthwise convolutions. Grouped layers with >= 8 channels per
 * group (ResNeXt) measured like dense ones and follow the dense rules.
 * Winograd: ~10x less precise than direct convolution (relative error ~1e-6 instead of
 * ~1e-7), outside the bound the CPU backend keeps by default (within 10x of PyTorch's own
 * fp32 error against fp64 on every tensor, tests/golden), so it is used only when the run
 * asks for it (train.cpu_winograd: backend_opts_t.cpu_winograd) and then for the filter
 * gradient of 3x3 stride-1 layers with >= 64 channels, where it is fastest and where an
 * error stays in that one gradient (in the forward or backward-data pass it would flow
 * through every later ReLU mask). Forced engines (tests, benchmarks) fall back the same
 * way. */
static int engine_candidates(const cpu_backend_t *c, const conv_shape_t *s, int which,
                             int out[4]) {
    int n = 0, forced = c->conv_engine;
    if (c->dnnl && forced != CPU_CONV_GEMM) {
        bool wino = forced == CPU_CONV_DNNL_WINOGRAD
            ? winograd_ok(s)
            : forced == CPU_CONV_AUTO && c->winograd && which == 2 && winograd_ok(s) &&
              s->c >= 64 && s->k >= 64;
        bool small_wide = s->h * s->w <= 64 && s->c >= 128 && s->k >= 128;
        bool avx2_wide = c->avx2_blocked && s->h * s->w > 64 && s->c >= 64 && s->k >= 64;
        bool depthwise = conv_groups(s) > 1 && conv_groups(s) == s->c;
        bool blocked_first = forced == CPU_CONV_DNNL_BLOCKED || forced == CPU_CONV_DNNL_WINOGRAD ||
            (forced == CPU_CONV_AUTO && s->r > 1 && !depthwise && (small_wide || avx2_wide));
        if (wino) out[n++] = CPU_CONV_DNNL_WINOGRAD;
        out[n++] = blocked_first ? CPU_CONV_DNNL_BLOCKED : CPU_CONV_DNNL;
        out[n++] = blocked_first ? CPU_CONV_DNNL : CPU_CONV_DNNL_BLOCKED;
    }
    out[n++] = CPU_CONV_GEMM;
    return n;
}

/* The oneDNN variant of an engine. */
static int variant_of(int engine) {
    return engine == CPU_CONV_DNNL_WINOGRAD ? CPU_DNNL_WINOGRAD
         : engine == CPU_CONV_DNNL_BLOCKED ? CPU_DNNL_BLOCKED : CPU_DNNL_NHWC;
}

/* The engine decision for (s, which): looked up, or made once by asking oneDNN for each
 * candidate in turn. A fixed function of the shape, the direction, the forced engine and
 * what oneDNN implements at this ISA (never a timing), so the same shape always runs the
 * same code and gives the same bits. NULL with be->err set on failure. */
static const cpu_conv_choice_t *choose(cpu_backend_t *c, const conv_shape_t *s, int which) {
    for (int i = 0; i < c->nchoices; i++) {
        const cpu_conv_choice_t *ch = &c->choices[i];
        if (ch->which == which && !memcmp(&ch->s, s, sizeof *s)) return ch;
    }
    if (c->nchoices == c->choices_cap) {
        int cap = c->choices_cap ? 2 * c->choices_cap : 32;
        cpu_conv_choice_t *nc = realloc(c->choices, (size_t)cap * sizeof *nc);
        if (!nc) {
            err_set(&c->base.err, ERR_RUNTIME, "cpu backend: out of memory for engine choices");
            return NULL;
        }
        c->choices = nc;
        c->choices_cap = cap;
    }
    cpu_conv_choice_t ch = {.s = *s, .which = which, .engine = CPU_CONV_GEMM, .impl = ""};
    int cand[4], nc = engine_candidates(c, s, which, cand);
    for (int i = 0; i < nc; i++) {
        if (cand[i] == CPU_CONV_GEMM) break;
#ifdef RUNNER_HAVE_DNNL
        const char *impl = NULL;
        int r = cpu_dnnl_query(c->dnnl, s, which, variant_of(cand[i]), &impl, &c->base.err);
        if (r < 0) return NULL;
        if (r == 1) {
            ch.engine = cand[i];
            snprintf(ch.impl, sizeof ch.impl, "%s", impl);   /* the cache may move */
            break;
        }
#endif
    }
    c->choices[c->nchoices] = ch;
    return &c->choices[c->nchoices++];
}

static const char *engine_name(int engine) {
    switch (engine) {
    case CPU_CONV_DNNL: return "dnnl";
    case CPU_CONV_DNNL_BLOCKED: return "dnnl_blk";
    case CPU_CONV_DNNL_WINOGRAD: return "dnnl_wino";
    default: return "gemm";
    }
}

const char *cpu_backend_conv_engine_for(backend_t *be, const conv_shape_t *s, int which) {
    const cpu_conv_choice_t *ch = choose(cpu_of(be), s, which);
    return ch ? engine_name(ch->engine) : "error";
}

const char *cpu_backend_conv_engine(backend_t *be, const conv_shape_t *s) {
    return cpu_backend_conv_engine_for(be, s, 0);
}

int cpu_backend_conv_describe(backend_t *be, const conv_shape_t *s, int which, char *buf,
                              size_t len) {
    const cpu_conv_choice_t *ch = choose(cpu_of(be), s, which);
    if (!ch) return -1;
    if (ch->impl[0]) snprintf(buf, len, "%s %s", engine_name(ch->engine), ch->impl);
    else snprintf(buf, len, "%s", engine_name(ch->engine));
    return 0;
}

/* Runs one oneDNN convolution with AMP emulation: a and b are rounded copies when dt is
 * half, the output is rounded after (bwd filter output is fp32 and accumulated by dnnl). */
static int dnnl_amp(cpu_backend_t *c, int which, const conv_shape_t *s, int variant,
                    dtype_t dt, const float *a, int64_t na, const float *b, int64_t nb,
                    float *out, int64_t nout) {
#ifndef RUNNER_HAVE_DNNL
    (void)which; (void)s; (void)variant; (void)dt; (void)a; (void)na; (void)b; (void)nb;
    (void)out; (void)nout;
    return err_set(&c->base.err, ERR_RUNTIME, "cpu backend: built without oneDNN");
#else
    if (dt == DT_F32) return cpu_dnnl_conv(c, which, s, variant, a, b, out);
    float *ws = cpu_scratch(c, (size_t)(na + nb));
    if (!ws) return -1;
    cpu_round_copy(c, dt, ws, a, na);
    cpu_round_copy(c, dt, ws + na, b, nb);
    if (cpu_dnnl_conv(c, which, s, variant, ws, ws + na, out) != 0) return -1;
    if (which != 2) cpu_round_array(c, dt, out, nout);
    return 0;
#endif
}

int cpu_conv2d_fwd(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x,
                   const void *w, void *y) {
    cpu_backend_t *c = cpu_of(be);
    if (check_shape(be, s, "conv2d_fwd") != 0) return -1;
    int64_t nx = (int64_t)s->n * s->h * s->w * s->c, nw = (int64_t)s->k * s->r * s->s * group_c(s);
    int64_t ny = (int64_t)s->n * s->p * s->q * s->k;
    const cpu_conv_choice_t *ch = choose(c, s, 0);
    if (!ch) return -1;
    if (ch->engine != CPU_CONV_GEMM)
        return dnnl_amp(c, 0, s, variant_of(ch->engine), dt, x, nx, w, nw, y, ny);
    if (gemm_fwd(c, s, dt, x, w, y) != 0) return -1;
    cpu_round_array(c, dt, y, ny);
    return 0;
}

int cpu_conv2d_bwd_data(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                        const void *w, void *dx) {
    cpu_backend_t *c = cpu_of(be);
    if (check_shape(be, s, "conv2d_bwd_data") != 0) return -1;
    int64_t nx = (int64_t)s->n * s->h * s->w * s->c, nw = (int64_t)s->k * s->r * s->s * group_c(s);
    int64_t ny = (int64_t)s->n * s->p * s->q * s->k;
    const cpu_conv_choice_t *ch = choose(c, s, 1);
    if (!ch) return -1;
    if (ch->engine != CPU_CONV_GEMM)
        return dnnl_amp(c, 1, s, variant_of(ch->engine), dt, dy, ny, w, nw, dx, nx);
    return gemm_bwd_data(c, s, dt, dy, w, dx);  /* col2im rounds */
}

int cpu_conv2d_bwd_filter(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x,
                          const void *dy, float *dw) {
    cpu_backend_t *c = cpu_of(be);
    if (check_shape(be, s, "conv2d_bwd_filter") != 0) return -1;
    int64_t nx = (int64_t)s->n * s->h * s->w * s->c;
    int64_t ny = (int64_t)s->n * s->p * s->q * s->k;
    const cpu_conv_choice_t *ch = choose(c, s, 2);
    if (!ch) return -1;
    if (ch->engine != CPU_CONV_GEMM)
        return dnnl_amp(c, 2, s, variant_of(ch->engine), dt, x, nx, dy, ny, dw, 0);
    return gemm_bwd_filter(c, s, dt, x, dy, dw);
}

/* dx += conv2d_bwd_data(dy, w): the data gradient goes to the backend's own buffer and
 * cpu_add sums it in, the ops and the order of the net's unfused residual sum (add(slot,
 * gradient)), so the bits are those of the unfused path. */
int cpu_conv2d_bwd_data_accum(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                              const void *w, void *dx) {
    cpu_backend_t *c = cpu_of(be);
    if (check_shape(be, s, "conv2d_bwd_data_accum") != 0) return -1;
    int64_t nx = (int64_t)s->n * s->h * s->w * s->c;
    float *t = cpu_accum_buf(c, (size_t)nx);
    if (!t || cpu_conv2d_bwd_data(be, s, dt, dy, w, t) != 0) return -1;
    return cpu_add(be, nx, dt, dx, t, dx);
}
