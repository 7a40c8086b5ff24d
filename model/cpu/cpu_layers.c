/* cpu_layers.c: the CPU backend's ops for the layers beyond ResNet's: relu6, the
 * per-channel bias of a convolution, dropout and adaptive average pooling.
 *
 * Every op splits its work in fixed chunks over the thread pool and every sum runs in a
 * fixed order, so results do not depend on the thread count or timing. Semantics follow
 * PyTorch: relu6 is hardtanh(0, 6) (backward on its output, as torch's in-place ReLU6),
 * dropout's masks and scale come from util/dropout.h (shared with the CUDA kernels, so
 * both keep the same elements), adaptive_avg_pool2d's windows are
 * [floor(i*h/p), ceil((i+1)*h/p)). Sums (bias gradient, pooling) are taken in double and
 * rounded once, at least as precise as torch's fp32 ones.
 * Not here: global average pooling and max pooling (cpu_ops.c), convolution (cpu_conv.c).
 */
#include <math.h>
#include <string.h>

#include "model/cpu/cpu_impl.h"
#include "util/dropout.h"

#define LAYER_GRAIN 32768   /* elements per elementwise task */
#define BIAS_ROWS 256       /* rows per bias-gradient block */

/* ---- relu6 -------------------------------------------------------------------------- */
typedef struct relu6_task {
    int64_t n;
    const float *x, *y, *dy;
    float *out;
} relu6_task_t;

/* min(max(x, 0), 6), written so that NaN passes through (as torch's hardtanh). */
static void relu6_fwd_chunk(void *argp, int chunk) {
    relu6_task_t *t = argp;
    int64_t lo = (int64_t)chunk * LAYER_GRAIN, hi = lo + LAYER_GRAIN < t->n ? lo + LAYER_GRAIN : t->n;
    for (int64_t i = lo; i < hi; i++) {
        float v = t->x[i] < 0.0f ? 0.0f : t->x[i];
        t->out[i] = v > 6.0f ? 6.0f : v;
    }
}

/* torch's hardtanh_backward: 0 where y <= 0 or y >= 6, else dy (NaN passes). */
static void relu6_bwd_chunk(void *argp, int chunk) {
    relu6_task_t *t = argp;
    int64_t lo = (int64_t)chunk * LAYER_GRAIN, hi = lo + LAYER_GRAIN < t->n ? lo + LAYER_GRAIN : t->n;
    for (int64_t i = lo; i < hi; i++) {
        float v = t->y[i];
        t->out[i] = v <= 0.0f || v >= 6.0f ? 0.0f : t->dy[i];
    }
}

int cpu_relu6_fwd(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y) {
    (void)dt;   /* clamping keeps a half value a half value */
    relu6_task_t t = {.n = n, .x = x, .out = y};
    cpu_pool_run(&cpu_of(be)->pool, cpu_nchunks(n, LAYER_GRAIN), relu6_fwd_chunk, &t);
    return 0;
}

int cpu_relu6_bwd(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx) {
    (void)dt;
    relu6_task_t t = {.n = n, .y = y, .dy = dy, .out = dx};
    cpu_pool_run(&cpu_of(be)->pool, cpu_nchunks(n, LAYER_GRAIN), relu6_bwd_chunk, &t);
    return 0;
}

/* ---- per-channel bias --------------------------------------------------------------- */
typedef struct bias_task {
    int64_t m;
    int c;
    dtype_t dt;
    const float *b, *dy;
    float *y;
    double *part;       /* bwd: [nblocks][c] */
} bias_task_t;

static void bias_fwd_chunk(void *argp, int chunk) {
    bias_task_t *t = argp;
    int c = t->c;
    int64_t lo = (int64_t)chunk * BIAS_ROWS, hi = lo + BIAS_ROWS < t->m ? lo + BIAS_ROWS : t->m;
    for (int64_t i = lo; i < hi; i++) {
        float *yr = t->y + i * c;
        for (int j = 0; j < c; j++) yr[j] = yr[j] + t->b[j];
        if (t->dt != DT_F32) cpu_round_n(t->dt, yr, yr, c);
    }
}

/* One block's column sums of dy in double, rows in order. */
static void bias_bwd_chunk(void *argp, int chunk) {
    bias_task_t *t = argp;
    int c = t->c;
    double *s = t->part + (int64_t)chunk * c;
    memset(s, 0, (size_t)c * sizeof(double));
    int64_t lo = (int64_t)chunk * BIAS_ROWS, hi = lo + BIAS_ROWS < t->m ? lo + BIAS_ROWS : t->m;
    for (int64_t i = lo; i < hi; i++) {
        const float *d = t->dy + i * c;
        for (int j = 0; j < c; j++) s[j] += (double)d[j];
    }
}

int cpu_channel_bias_fwd(backend_t *be, int64_t m, int c, dtype_t dt, const float *b, void *y) {
    bias_task_t t = {.m = m, .c = c, .dt = dt, .b = b, .y = y};
    cpu_pool_run(&cpu_of(be)->pool, cpu_nchunks(m, BIAS_ROWS), bias_fwd_chunk, &t);
    return 0;
}

int cpu_channel_bias_bwd(backend_t *be, int64_t m, int c, dtype_t dt, const void *dy, float *db) {
    (void)dt;   /* half gradients are stored as rounded floats: summed as they are */
    if (m < 1 || c < 1) return 0;
    int nb = cpu_nchunks(m, BIAS_ROWS);
    double *part = (double *)cpu_scratch(cpu_of(be), ((size_t)nb + 1) * (size_t)c * 2);
    if (!part) return -1;
    bias_task_t t = {.m = m, .c = c, .dy = dy, .part = part};
    cpu_pool_run(&cpu_of(be)->pool, nb, bias_bwd_chunk, &t);
    for (int j = 0; j < c; j++) {
        double s = 0;
        for (int b = 0; b < nb; b++) s += part[(int64_t)b * c + j];
        db[j] += (float)s;
    }
    return 0;
}

/* ---- dropout ------------------------------------------------------------------------ */
typedef struct dropout_task {
    int64_t per;        /* elements per sample */
    int chunks_per;     /* chunks per sample */
    dtype_t dt;
    dropout_key_t key;
    uint32_t node;
    uint64_t thresh;
    float scale;
    const float *x;
    float *y;
} dropout_task_t;

/* One chunk of one sample: y = x * (kept ? scale : 0), x * 0 for dropped elements as
 * torch's x * noise gives (a NaN stays NaN). */
static void dropout_chunk(void *argp, int chunk) {
    dropout_task_t *t = argp;
    int64_t row = chunk / t->chunks_per, part = chunk % t->chunks_per;
    int64_t lo = part * LAYER_GRAIN, hi = lo + LAYER_GRAIN < t->per ? lo + LAYER_GRAIN : t->per;
    uint64_t sample = (uint64_t)(t->key.first_sample + row * t->key.sample_stride);
    const float *x = t->x + row * t->per;
    float *y = t->y + row * t->per;
    uint32_t u[4];
    for (int64_t e = lo; e < hi; e++) {   /* lo is a multiple of 4 */
        if ((e & 3) == 0)
            dropout_block(t->key.seed, t->key.epoch, sample, t->node, (uint32_t)(e >> 2), u);
        float m = (uint64_t)u[e & 3] >= t->thresh ? t->scale : 0.0f;
        y[e] = x[e] * m;
    }
    if (t->dt != DT_F32) cpu_round_n(t->dt, y + lo, y + lo, hi - lo);
}

static int dropout_run(backend_t *be, int n, int64_t per, dtype_t dt, double p, uint32_t node,
                       const dropout_key_t *key, const void *x, void *y) {
    if (n < 1 || per < 1) return 0;
    int64_t cps = (per + LAYER_GRAIN - 1) / LAYER_GRAIN;
    if ((int64_t)n * cps > (1 << 30))
        return err_set(&be->err, ERR_RUNTIME, "cpu dropout: %d x %lld elements is too large", n, (long long)per);
    dropout_task_t t = {.per = per, .chunks_per = (int)cps, .dt = dt, .key = *key, .node = node,
                        .thresh = dropout_threshold(p), .scale = dropout_scale(p), .x = x, .y = y};
    cpu_pool_run(&cpu_of(be)->pool, (int)(n * cps), dropout_chunk, &t);
    return 0;
}

int cpu_dropout_fwd(backend_t *be, int n, int64_t per_sample, dtype_t dt, double p, uint32_t node,
                    const dropout_key_t *key, const void *x, void *y) {
    return dropout_run(be, n, per_sample, dt, p, node, key, x, y);
}

/* The backward is the same product with dy: dx = dy * mask * scale. */
int cpu_dropout_bwd(backend_t *be, int n, int64_t per_sample, dtype_t dt, double p, uint32_t node,
                    const dropout_key_t *key, const void *dy, void *dx) {
    return dropout_run(be, n, per_sample, dt, p, node, key, dy, dx);
}

/* ---- adaptive average pooling ------------------------------------------------------- */
/* torch's window of output i of p over size n: [floor(i*n/p), ceil((i+1)*n/p)). */
static inline void adaptive_span(int i, int p, int n, int *lo, int *hi) {
    *lo = (int)(((int64_t)i * n) / p);
    *hi = (int)(((int64_t)(i + 1) * n + p - 1) / p);
}

typedef struct apool_task {
    const pool_shape_t *s;
    dtype_t dt;
    const float *x;
    float *y;
    double *acc;        /* per chunk: c doubles */
} apool_task_t;

/* Forward, one chunk per (sample, output row): each output sums its window in double in
 * (row, column) order and divides by the window's size once. */
static void apool_fwd_chunk(void *argp, int chunk) {
    apool_task_t *t = argp;
    const pool_shape_t *s = t->s;
    int b = chunk / s->p, oh = chunk % s->p, C = s->c, h0, h1;
    double *acc = t->acc + (int64_t)chunk * C;
    adaptive_span(oh, s->p, s->h, &h0, &h1);
    for (int ow = 0; ow < s->q; ow++) {
        int w0, w1;
        adaptive_span(ow, s->q, s->w, &w0, &w1);
        memset(acc, 0, (size_t)C * sizeof(double));
        for (int ih = h0; ih < h1; ih++)
            for (int iw = w0; iw < w1; iw++) {
                const float *xr = t->x + (((int64_t)b * s->h + ih) * s->w + iw) * C;
                for (int c = 0; c < C; c++) acc[c] += (double)xr[c];
            }
        double cnt = (double)(h1 - h0) * (double)(w1 - w0);
        float *yr = t->y + (((int64_t)b * s->p + oh) * s->q + ow) * C;
        for (int c = 0; c < C; c++) yr[c] = cpu_round(t->dt, (float)(acc[c] / cnt));
    }
}

/* Backward, one chunk per (sample, input row): each input element gathers dy / size of
 * every window that contains it, in output order, in double, rounded once. */
static void apool_bwd_chunk(void *argp, int chunk) {
    apool_task_t *t = argp;
    const pool_shape_t *s = t->s;
    int b = chunk / s->h, ih = chunk % s->h, C = s->c;
    double *acc = t->acc + (int64_t)chunk * C;
    /* output rows whose window contains ih: oh with floor(oh*h/p) <= ih < ceil((oh+1)*h/p) */
    int oh0 = s->p, oh1 = -1;
    for (int oh = 0; oh < s->p; oh++) {
        int a, z;
        adaptive_span(oh, s->p, s->h, &a, &z);
        if (a <= ih && ih < z) {
            if (oh < oh0) oh0 = oh;
            oh1 = oh;
        }
    }
    for (int iw = 0; iw < s->w; iw++) {
        memset(acc, 0, (size_t)C * sizeof(double));
        for (int oh = oh0; oh <= oh1; oh++) {
            int a, z;
            adaptive_span(oh, s->p, s->h, &a, &z);
            for (int ow = 0; ow < s->q; ow++) {
                int l, r;
                adaptive_span(ow, s->q, s->w, &l, &r);
                if (iw < l || iw >= r) continue;
                double cnt = (double)(z - a) * (double)(r - l);
                const float *g = t->x + (((int64_t)b * s->p + oh) * s->q + ow) * C;
                for (int c = 0; c < C; c++) acc[c] += (double)g[c] / cnt;
            }
        }
        float *d = t->y + (((int64_t)b * s->h + ih) * s->w + iw) * C;
        for (int c = 0; c < C; c++) d[c] = cpu_round(t->dt, (float)acc[c]);
    }
}

static int apool_check(backend_t *be, const pool_shape_t *s, const char *what) {
    if (s->n < 1 || s->h < 1 || s->w < 1 || s->c < 1 || s->p < 1 || s->q < 1)
        return err_set(&be->err, ERR_RUNTIME, "cpu %s: bad geometry n%d h%d w%d c%d -> %dx%d", what, s->n,
                       s->h, s->w, s->c, s->p, s->q);
    return 0;
}

int cpu_adaptive_avgpool_fwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y) {
    if (apool_check(be, s, "adaptive_avgpool_fwd")) return -1;
    int nchunks = s->n * s->p;
    double *acc = (double *)cpu_scratch(cpu_of(be), (size_t)nchunks * (size_t)s->c * 2);
    if (!acc) return -1;
    apool_task_t t = {.s = s, .dt = dt, .x = x, .y = y, .acc = acc};
    cpu_pool_run(&cpu_of(be)->pool, nchunks, apool_fwd_chunk, &t);
    return 0;
}

int cpu_adaptive_avgpool_bwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *dy, void *dx) {
    if (apool_check(be, s, "adaptive_avgpool_bwd")) return -1;
    int nchunks = s->n * s->h;
    double *acc = (double *)cpu_scratch(cpu_of(be), (size_t)nchunks * (size_t)s->c * 2);
    if (!acc) return -1;
    apool_task_t t = {.s = s, .dt = dt, .x = dy, .y = dx, .acc = acc};
    cpu_pool_run(&cpu_of(be)->pool, nchunks, apool_bwd_chunk, &t);
    return 0;
}
