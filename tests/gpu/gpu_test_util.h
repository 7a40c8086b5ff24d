/* gpu_test_util.h: helpers for the GPU tests: skip without a GPU, a CPU + CUDA backend
 * pair, "twin" tensors holding the same values on both (2-byte half on the GPU, rounded
 * fp32 on the CPU), and a comparison that prints the worst element.
 *
 * Not a library: static functions, included by each test in tests/gpu/. Tolerance
 * policy: |gpu - cpu| <= tol * (|cpu| + rms(cpu)), with tol 1e-3 for fp32, 1e-2 for
 * fp16, 3e-2 for bf16 (rms keeps cancellation near zero from failing correct code, while
 * a wrong layout or index is off by O(rms) and still fails). TF32 products carry ~5e-4
 * relative error each, so TF32 results are held to 1e-3 in relative L2 norm and 4e-3 per
 * element.
 *
 * Dry runs (no GPU needed): RUNNER_GPU_TEST_DRYRUN=cpu makes the "gpu" side of every pair
 * a second CPU backend whose convolutions run on im2col + OpenBLAS GEMM instead of
 * oneDNN (another summation order, as the GPU's is), and gpu_or_skip no longer skips; run
 * it with RUNNER_TEST_ONLY naming the cases that use pairs alone. The "gpu" twin then
 * holds rounded fp32 values like the CPU side. RUNNER_GPU_TEST_PLANT plants a defect in
 * one side's ops (gpu_plant.h), to show that a test's checks catch it.
 */
#ifndef RUNNER_TESTS_GPU_TEST_UTIL_H
#define RUNNER_TESTS_GPU_TEST_UTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "model/cpu/cpu_backend.h"
#include "model/cuda/cuda_backend.h"
#include "util/half.h"
#include "util/rng.h"
#include "tests/test.h"
#include "tests/gpu/gpu_plant.h"

/* RUNNER_GPU_TEST_DRYRUN=cpu: the "gpu" side is a CPU backend (see the top). */
static inline bool gpu_dryrun(void) {
    const char *v = getenv("RUNNER_GPU_TEST_DRYRUN");
    return v && !strcmp(v, "cpu");
}

/* Exits 77 (skipped) when no CUDA GPU is visible (and this is no dry run). */
static inline void gpu_or_skip(void) {
    if (!gpu_dryrun() && cuda_device_count() == 0) test_skip("no CUDA GPU");
}

static inline double dt_tol(dtype_t dt) { return dt == DT_F32 ? 1e-3 : (dt == DT_F16 ? 1e-2 : 3e-2); }

typedef struct pair {
    backend_t *cpu, *gpu;
} pair_t;

/* A CPU backend and a CUDA backend with the issue-25 fusion options `fusion`
 * (BACKEND_FUSE_*; the CPU ignores them). */
static inline pair_t pair_make_fused(bool deterministic, bool tf32, unsigned fusion) {
    pair_t p;
    err_t e = {0};
    backend_opts_t o = {0};
    o.kind = BACKEND_CPU;
    o.threads = 2;
    p.cpu = cpu_backend_create(&o, &e);
    if (!p.cpu) { fprintf(stderr, "cpu_backend_create: %s\n", e.msg); exit(1); }
    if (gpu_dryrun()) {
        p.gpu = cpu_backend_create(&o, &e);
        if (!p.gpu) { fprintf(stderr, "cpu_backend_create: %s\n", e.msg); exit(1); }
        cpu_backend_set_conv_engine(p.gpu, 1);   /* im2col + GEMM */
    } else {
        o.kind = BACKEND_CUDA;
        o.device = 0;
        o.deterministic = deterministic;
        o.allow_tf32 = tf32;
        o.cuda_fusion = fusion;
        p.gpu = cuda_backend_create(&o, &e);
        if (!p.gpu) { fprintf(stderr, "cuda_backend_create: %s\n", e.msg); exit(1); }
    }
    gpu_plant(p.cpu, p.gpu);
    return p;
}

static inline pair_t pair_make(bool deterministic, bool tf32) { return pair_make_fused(deterministic, tf32, 0); }

static inline void pair_free(pair_t *p) {
    backend_free(p->cpu);
    backend_free(p->gpu);
}

/* Aborts the test program with the backend's message when an op fails. */
#define OK(be, call) do { if ((call) != 0) { fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, \
    __LINE__, #call, (be)->err.msg); exit(1); } } while (0)

static inline float *hbuf(int64_t n) {
    float *p = (float *)calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    return p;
}

/* Uniform values in [lo, hi) from (tag). */
static inline float *hrand(int64_t n, uint64_t tag, float lo, float hi) {
    float *x = hbuf(n);
    rng_t r = rng_make(1234, RNG_STREAM_MISC, tag, 0);
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(&r);
    return x;
}

static inline float round_dt(float v, dtype_t dt) {
    return dt == DT_F16 ? round_f16(v) : (dt == DT_BF16 ? round_bf16(v) : v);
}

/* One logical tensor of n elements of dt on both backends. */
typedef struct twin {
    void *c, *g;
    int64_t n;
    dtype_t dt;
} twin_t;

/* Allocates the twin and fills both sides from host (rounded to dt); host NULL = zeros. */
static inline twin_t twin_new(pair_t *p, int64_t n, dtype_t dt, const float *host) {
    twin_t t = {NULL, NULL, n, dt};
    bool half = dt != DT_F32 && p->gpu->kind == BACKEND_CUDA;   /* 2-byte values on the gpu side */
    size_t gsz = half ? 2 : 4;
    t.c = p->cpu->ops->alloc(p->cpu, (size_t)n * 4);
    t.g = p->gpu->ops->alloc(p->gpu, (size_t)n * gsz);
    if (!t.c || !t.g) { fprintf(stderr, "twin alloc failed\n"); exit(1); }
    float *r = hbuf(n);
    uint16_t *h = (uint16_t *)calloc((size_t)(n > 0 ? n : 1), 2);
    for (int64_t i = 0; i < n; i++) {
        float v = host ? host[i] : 0.0f;
        r[i] = round_dt(v, dt);
        if (dt == DT_F16) h[i] = f32_to_f16(v);
        if (dt == DT_BF16) h[i] = f32_to_bf16(v);
    }
    OK(p->cpu, p->cpu->ops->upload(p->cpu, t.c, r, (size_t)n * 4));
    OK(p->gpu, p->gpu->ops->upload(p->gpu, t.g, half ? (const void *)h : (const void *)r, (size_t)n * gsz));
    free(r);
    free(h);
    return t;
}

/* Downloads both sides as floats (caller frees *cv and *gv). */
static inline void twin_get(pair_t *p, const twin_t *t, float **cv, float **gv) {
    *cv = hbuf(t->n);
    *gv = hbuf(t->n);
    OK(p->cpu, p->cpu->ops->download(p->cpu, *cv, t->c, (size_t)t->n * 4));
    if (t->dt == DT_F32 || p->gpu->kind != BACKEND_CUDA) {
        OK(p->gpu, p->gpu->ops->download(p->gpu, *gv, t->g, (size_t)t->n * 4));
    } else {
        uint16_t *h = (uint16_t *)calloc((size_t)(t->n > 0 ? t->n : 1), 2);
        OK(p->gpu, p->gpu->ops->download(p->gpu, h, t->g, (size_t)t->n * 2));
        for (int64_t i = 0; i < t->n; i++) (*gv)[i] = t->dt == DT_F16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
        free(h);
    }
}

static inline void twin_free(pair_t *p, twin_t *t) {
    p->cpu->ops->release(p->cpu, t->c);
    p->gpu->ops->release(p->gpu, t->g);
}

/* Counts elements with |g - c| > tol * (|c| + rms(c)); prints the worst. Returns the count. */
static inline int cmp_vals(const char *what, const float *g, const float *c, int64_t n, double tol) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)c[i] * c[i];
    double rms = n ? sqrt(ss / (double)n) : 0.0;
    int bad = 0;
    int64_t worst = -1;
    double worst_ratio = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)g[i] - c[i]), lim = tol * (fabs(c[i]) + rms);
        if (!(err <= lim)) {
            bad++;
            double ratio = lim > 0 ? err / lim : INFINITY;
            if (worst < 0 || ratio > worst_ratio) { worst = i; worst_ratio = ratio; }
        }
    }
    if (bad)
        fprintf(stderr, "  %s: %d of %lld elements off (tol %g, rms %g); worst [%lld] gpu %.9g cpu %.9g\n",
                what, bad, (long long)n, tol, rms, (long long)worst, (double)g[worst], (double)c[worst]);
    return bad;
}

/* Compares the two sides of t; returns the number of elements off. */
static inline int twin_cmp(const char *what, pair_t *p, const twin_t *t, double tol) {
    float *cv, *gv;
    twin_get(p, t, &cv, &gv);
    int bad = cmp_vals(what, gv, cv, t->n, tol);
    free(cv);
    free(gv);
    return bad;
}

/* ||g - c|| / ||c|| (||g - c|| when c is zero). */
static inline double vec_rel_l2(const float *g, const float *c, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)g[i] - c[i];
        num += d * d;
        den += (double)c[i] * c[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ||g - c|| / ||c|| of the two sides of t. */
static inline double twin_rel_l2(pair_t *p, const twin_t *t) {
    float *cv, *gv;
    twin_get(p, t, &cv, &gv);
    double r = vec_rel_l2(gv, cv, (size_t)t->n);
    free(cv);
    free(gv);
    return r;
}

/* One convolution of shape s in dt on both sides of a pair: inputs x, w, dy from tags 1-3,
 * the fp32 weight gradient dw starting from tag 4's values (hdw keeps them), and the
 * outputs y, dx, dw of the three directions. */
typedef struct conv_twins {
    twin_t x, w, dy, y, dx, dw;
    int64_t nx, nw, ny;
    float *hx, *hw, *hdy, *hdw;
} conv_twins_t;

/* Allocates and fills the twins and runs fwd, bwd data and bwd filter (accumulating) on
 * both backends (exits on an op failure). */
static inline conv_twins_t conv_twins_run(pair_t *p, const conv_shape_t *s, dtype_t dt) {
    conv_twins_t t;
    int groups = s->groups > 1 ? s->groups : 1;
    t.nx = (int64_t)s->n * s->h * s->w * s->c;
    t.nw = (int64_t)s->k * s->r * s->s * (s->c / groups);
    t.ny = (int64_t)s->n * s->p * s->q * s->k;
    t.hx = hrand(t.nx, 1, -1, 1);
    t.hw = hrand(t.nw, 2, -0.5f, 0.5f);
    t.hdy = hrand(t.ny, 3, -1, 1);
    t.hdw = hrand(t.nw, 4, -0.25f, 0.25f);
    t.x = twin_new(p, t.nx, dt, t.hx);
    t.w = twin_new(p, t.nw, dt, t.hw);
    t.dy = twin_new(p, t.ny, dt, t.hdy);
    t.y = twin_new(p, t.ny, dt, NULL);
    t.dx = twin_new(p, t.nx, dt, NULL);
    t.dw = twin_new(p, t.nw, DT_F32, t.hdw);
    backend_t *bes[2] = {p->cpu, p->gpu};
    for (int i = 0; i < 2; i++) {
        backend_t *be = bes[i];
#define S_(tw) (i ? (tw).g : (tw).c)
        OK(be, be->ops->conv2d_fwd(be, s, dt, S_(t.x), S_(t.w), S_(t.y)));
        OK(be, be->ops->conv2d_bwd_data(be, s, dt, S_(t.dy), S_(t.w), S_(t.dx)));
        OK(be, be->ops->conv2d_bwd_filter(be, s, dt, S_(t.x), S_(t.dy), (float *)S_(t.dw)));
#undef S_
    }
    return t;
}

/* Compares y, dx and dw of the two sides (twin_cmp with tol); the number of tensors off. */
static inline int conv_twins_cmp(pair_t *p, const conv_twins_t *t, const char *what, double tol) {
    return (twin_cmp(what, p, &t->y, tol) != 0) + (twin_cmp(what, p, &t->dx, tol) != 0) +
           (twin_cmp(what, p, &t->dw, tol) != 0);
}

static inline void conv_twins_free(pair_t *p, conv_twins_t *t) {
    twin_t *all[] = {&t->x, &t->w, &t->dy, &t->y, &t->dx, &t->dw};
    for (int k = 0; k < 6; k++) twin_free(p, all[k]);
    free(t->hx);
    free(t->hw);
    free(t->hdy);
    free(t->hdw);
}

#endif
