/* test_cpu_conv.c: the CPU backend's convolutions (forward, backward data, backward
 * filter), dense, grouped and depthwise, on both engines (oneDNN, im2col/GEMM per group)
 * against a double-precision reference,
 * backward also against central finite differences of that reference; accumulation into
 * dw, determinism, and AMP emulation (fp16/bf16 equals the fp32 op on pre-rounded inputs,
 * rounded after).
 *
 * Tolerances: values are in [-1, 1], so a dot product of K terms has fp32 error below
 * about K * 2^-24 * K; we allow atol 1e-6 * K + rtol 1e-5. Finite differences use h = 1e-3
 * on the double reference of a function linear in the perturbed tensor, so they are exact
 * to ~1e-10 and compared with the same tolerance as the analytic gradient.
 */
#include "tests/cpu/cpu_test_util.h"

#ifdef RUNNER_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

static backend_t *g_be;

/* Whether oneDNN has Winograd kernels at the ISA it runs at (oneDNN 2.x: AVX-512 and up on
 * x86; ONEDNN_MAX_CPU_ISA lowers it): the backend must use them where asked only then. */
static bool winograd_available(void) {
#ifdef RUNNER_HAVE_DNNL
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    return (isa & (unsigned)dnnl_cpu_isa_avx512_core) == (unsigned)dnnl_cpu_isa_avx512_core;
#else
    return false;
#endif
}

static const conv_shape_t shapes[] = {
    /* n  h  w  c   k  r  s  stride pad  p q (finish)  groups */
    {2, 5, 5, 3, 4, 3, 3, 1, 1, 0, 0, 1},     /* 3x3 pad 1 */
    {2, 7, 7, 3, 5, 3, 3, 2, 1, 0, 0, 1},     /* stride 2, odd size */
    {2, 6, 6, 4, 6, 1, 1, 1, 0, 0, 0, 1},     /* 1x1 */
    {2, 7, 7, 4, 6, 1, 1, 2, 0, 0, 0, 1},     /* 1x1 stride 2 (downsample) */
    {1, 5, 6, 2, 3, 3, 3, 1, 0, 0, 0, 1},     /* no padding, not square */
    {3, 8, 8, 16, 16, 3, 3, 1, 1, 0, 0, 1},   /* channels a multiple of the SIMD width */
    {2, 9, 9, 8, 16, 3, 3, 2, 1, 0, 0, 1},    /* stride 2 with more channels */
    {2, 8, 8, 3, 16, 3, 3, 1, 1, 0, 0, 1},    /* stem-like: 3 input channels */
    {2, 6, 6, 8, 8, 3, 3, 1, 1, 0, 0, 8},     /* depthwise */
    {2, 7, 7, 16, 16, 3, 3, 2, 1, 0, 0, 16},  /* depthwise stride 2 (MobileNetV2) */
    {2, 5, 5, 32, 32, 3, 3, 1, 1, 0, 0, 32},  /* depthwise, channels a multiple of the SIMD width */
    {2, 5, 5, 4, 8, 3, 3, 1, 1, 0, 0, 4},     /* depthwise with multiplier 2 */
    {2, 6, 6, 8, 16, 3, 3, 1, 1, 0, 0, 4},    /* grouped: 2 in, 4 out per group */
    {2, 8, 8, 64, 64, 3, 3, 1, 1, 0, 0, 8},   /* ResNeXt-like: 8 groups of 8 */
    {2, 6, 6, 12, 6, 1, 1, 1, 0, 0, 0, 3},    /* grouped 1x1 (the GEMM engine's plain path) */
    {2, 7, 7, 16, 32, 1, 1, 2, 0, 0, 0, 2},   /* grouped 1x1 stride 2 */
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static conv_shape_t finish(conv_shape_t s) {
    s.p = (s.h + 2 * s.pad - s.r) / s.stride + 1;
    s.q = (s.w + 2 * s.pad - s.s) / s.stride + 1;
    return s;
}

static int64_t nx_of(const conv_shape_t *s) { return (int64_t)s->n * s->h * s->w * s->c; }
static int64_t nw_of(const conv_shape_t *s) { return (int64_t)s->k * s->r * s->s * s->c / conv_groups(s); }

/* Channels per group (input cg, output kg). */
static int cg_of(const conv_shape_t *s) { return s->c / conv_groups(s); }
static int kg_of(const conv_shape_t *s) { return s->k / conv_groups(s); }
static int64_t ny_of(const conv_shape_t *s) { return (int64_t)s->n * s->p * s->q * s->k; }

/* y = conv(x, w) in double; x, w given as double. Output channel k sees the input
 * channels of its group, (k / kg) * cg + c for c < cg. */
static void ref_fwd(const conv_shape_t *s, const double *x, const double *w, double *y) {
    int cg = cg_of(s), kg = kg_of(s);
    for (int b = 0; b < s->n; b++)
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++)
                for (int k = 0; k < s->k; k++) {
                    double acc = 0;
                    for (int r = 0; r < s->r; r++)
                        for (int t = 0; t < s->s; t++) {
                            int ih = p * s->stride - s->pad + r, iw = q * s->stride - s->pad + t;
                            if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) continue;
                            for (int c = 0; c < cg; c++)
                                acc += x[(((int64_t)b * s->h + ih) * s->w + iw) * s->c + (k / kg) * cg + c] *
                                       w[(((int64_t)k * s->r + r) * s->s + t) * cg + c];
                        }
                    y[(((int64_t)b * s->p + p) * s->q + q) * s->k + k] = acc;
                }
}

/* L = sum(g * conv(x, w)) in double. */
static double ref_loss(const conv_shape_t *s, const double *x, const double *w, const double *g,
                       double *ytmp) {
    ref_fwd(s, x, w, ytmp);
    double l = 0;
    for (int64_t i = 0; i < ny_of(s); i++) l += g[i] * ytmp[i];
    return l;
}

/* Exact dL/dx and dL/dw in double (the adjoint of ref_fwd). */
static void ref_bwd(const conv_shape_t *s, const double *x, const double *w, const double *g,
                    double *dx, double *dw) {
    memset(dx, 0, (size_t)nx_of(s) * sizeof *dx);
    memset(dw, 0, (size_t)nw_of(s) * sizeof *dw);
    int cg = cg_of(s), kg = kg_of(s);
    for (int b = 0; b < s->n; b++)
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++)
                for (int k = 0; k < s->k; k++) {
                    double gy = g[(((int64_t)b * s->p + p) * s->q + q) * s->k + k];
                    for (int r = 0; r < s->r; r++)
                        for (int t = 0; t < s->s; t++) {
                            int ih = p * s->stride - s->pad + r, iw = q * s->stride - s->pad + t;
                            if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) continue;
                            int64_t xo = (((int64_t)b * s->h + ih) * s->w + iw) * s->c + (k / kg) * cg;
                            int64_t wo = (((int64_t)k * s->r + r) * s->s + t) * cg;
                            for (int c = 0; c < cg; c++) {
                                dx[xo + c] += gy * w[wo + c];
                                dw[wo + c] += gy * x[xo + c];
                            }
                        }
                }
}

static double *to_double(const float *a, int64_t n) {
    double *d = dalloc(n);
    for (int64_t i = 0; i < n; i++) d[i] = a[i];
    return d;
}

/* Central differences of ref_loss with respect to up to 24 sampled elements of v. */
static int check_fd(const char *what, const conv_shape_t *s, double *x, double *w,
                    const double *g, double *v, int64_t nv, const float *analytic, double atol) {
    double *ytmp = dalloc(ny_of(s));
    int bad = 0;
    int64_t step = nv / 24 + 1;
    for (int64_t i = 0; i < nv; i += step) {
        double keep = v[i], h = 1e-3;
        v[i] = keep + h;
        double lp = ref_loss(s, x, w, g, ytmp);
        v[i] = keep - h;
        double lm = ref_loss(s, x, w, g, ytmp);
        v[i] = keep;
        double fd = (lp - lm) / (2 * h);
        if (!(fabs(analytic[i] - fd) <= atol + 1e-5 * fabs(fd))) {
            if (!bad)
                fprintf(stderr, "  %s finite difference [%lld]: analytic %.9g, numeric %.9g\n",
                        what, (long long)i, (double)analytic[i], fd);
            bad++;
        }
    }
    free(ytmp);
    return bad;
}

/* Forward, backward data and backward filter of every shape on one engine. */
static void run_engine(int engine) {
    cpu_backend_set_conv_engine(g_be, engine);
    const backend_ops_t *ops = g_be->ops;
    for (int si = 0; si < NSHAPES; si++) {
        conv_shape_t s = finish(shapes[si]);
        int64_t nx = nx_of(&s), nw = nw_of(&s), ny = ny_of(&s);
        float *x = falloc(nx), *w = falloc(nw), *g = falloc(ny), *y = falloc(ny);
        float *dx = falloc(nx), *dw = falloc(nw);
        fill_uniform(x, nx, 100 + si, -1, 1);
        fill_uniform(w, nw, 200 + si, -1, 1);
        fill_uniform(g, ny, 300 + si, -1, 1);
        double *xd = to_double(x, nx), *wd = to_double(w, nw), *gd = to_double(g, ny);
        double *yd = dalloc(ny), *dxd = dalloc(nx), *dwd = dalloc(nw);
        ref_fwd(&s, xd, wd, yd);
        ref_bwd(&s, xd, wd, gd, dxd, dwd);
        int K = s.r * s.s * cg_of(&s), KB = kg_of(&s) * s.r * s.s;
#ifdef RUNNER_HAVE_DNNL
        /* the forced engine, or where oneDNN lacks it at this ISA the next one; grouped
         * shapes fall back where oneDNN has no kernel of the forced variant, but a
         * depthwise one always has a oneDNN kernel (jit_dw at every ISA level) */
        bool wino = engine == 4 && s.r == 3 && s.stride == 1 && s.pad == 1 && winograd_available() &&
                    conv_groups(&s) == 1;
        for (int which = 0; which < 3; which++) {
            const char *got = cpu_backend_conv_engine_for(g_be, &s, which);
            if (conv_groups(&s) == 1)
                CHECK_STR(got, wino ? "dnnl_wino" : engine >= 3 ? "dnnl_blk" : engine == 2 ? "dnnl" : "gemm");
            else if (engine >= 2 && conv_groups(&s) == s.c)
                CHECK(strcmp(got, "gemm") != 0);
        }
#endif
        CHECK_INT(ops->conv2d_fwd(g_be, &s, DT_F32, x, w, y), 0);
        CHECK_INT(compare_arrays("fwd y", y, yd, ny, 1e-6 * K, 1e-5), 0);
        CHECK_INT(ops->conv2d_bwd_data(g_be, &s, DT_F32, g, w, dx), 0);
        CHECK_INT(compare_arrays("bwd dx", dx, dxd, nx, 1e-6 * KB, 1e-5), 0);
        CHECK_INT(check_fd("dx", &s, xd, wd, gd, xd, nx, dx, 1e-6 * KB), 0);
        /* dw accumulates: start from 0.5 everywhere */
        for (int64_t i = 0; i < nw; i++) dw[i] = 0.5f;
        CHECK_INT(ops->conv2d_bwd_filter(g_be, &s, DT_F32, x, g, dw), 0);
        int64_t rows = (int64_t)s.n * s.p * s.q;
        for (int64_t i = 0; i < nw; i++) dwd[i] += 0.5;
        CHECK_INT(compare_arrays("bwd dw", dw, dwd, nw, 1e-6 * rows, 1e-5), 0);
        for (int64_t i = 0; i < nw; i++) dw[i] -= 0.5f;
        CHECK_INT(check_fd("dw", &s, xd, wd, gd, wd, nw, dw, 1e-6 * rows), 0);
        if (test_failures_)
            fprintf(stderr, "  (engine %s, shape %d: n%d h%d w%d c%d k%d r%d stride %d pad %d groups %d)\n",
                    cpu_backend_conv_engine(g_be, &s), si, s.n, s.h, s.w, s.c, s.k, s.r,
                    s.stride, s.pad, s.groups);
        free(x); free(w); free(g); free(y); free(dx); free(dw);
        free(xd); free(wd); free(gd); free(yd); free(dxd); free(dwd);
    }
    cpu_backend_set_conv_engine(g_be, 0);
}

static void test_conv_gemm(void) { run_engine(1); }
static void test_conv_dnnl(void) { run_engine(2); }
static void test_conv_dnnl_blocked(void) { run_engine(3); }
static void test_conv_dnnl_winograd(void) { run_engine(4); }

/* The default engine choice gives bit-identical results on repeated calls (one shape on
 * oneDNN's NHWC kernels, one whose filter gradient runs on its Winograd kernels). */
static void deterministic_case(conv_shape_t s) {
    int64_t nx = nx_of(&s), nw = nw_of(&s), ny = ny_of(&s);
    float *x = falloc(nx), *w = falloc(nw), *y1 = falloc(ny), *y2 = falloc(ny);
    float *dx1 = falloc(nx), *dx2 = falloc(nx), *dw1 = falloc(nw), *dw2 = falloc(nw);
    fill_uniform(x, nx, 1, -1, 1);
    fill_uniform(w, nw, 2, -1, 1);
    const backend_ops_t *ops = g_be->ops;
    for (int rep = 0; rep < 2; rep++) {
        CHECK_INT(ops->conv2d_fwd(g_be, &s, DT_F32, x, w, rep ? y2 : y1), 0);
        CHECK_INT(ops->conv2d_bwd_data(g_be, &s, DT_F32, rep ? y2 : y1, w, rep ? dx2 : dx1), 0);
        CHECK_INT(ops->conv2d_bwd_filter(g_be, &s, DT_F32, x, rep ? y2 : y1, rep ? dw2 : dw1), 0);
    }
    CHECK(memcmp(y1, y2, (size_t)ny * 4) == 0);
    CHECK(memcmp(dx1, dx2, (size_t)nx * 4) == 0);
    CHECK(memcmp(dw1, dw2, (size_t)nw * 4) == 0);
    free(x); free(w); free(y1); free(y2); free(dx1); free(dx2); free(dw1); free(dw2);
}

static void test_conv_deterministic(void) {
    deterministic_case(finish((conv_shape_t){4, 16, 16, 16, 32, 3, 3, 2, 1, 0, 0, 1}));
    deterministic_case(finish((conv_shape_t){4, 8, 8, 64, 64, 3, 3, 1, 1, 0, 0, 1}));
    deterministic_case(finish((conv_shape_t){4, 16, 16, 96, 96, 3, 3, 1, 1, 0, 0, 96}));
    deterministic_case(finish((conv_shape_t){4, 8, 8, 64, 64, 3, 3, 1, 1, 0, 0, 8}));
}

/* Winograd at a realistic width (forced here; with train.cpu_winograd the auto choice
 * uses it for the filter gradient of 3x3 stride-1 layers with >= 64 channels) against the
 * double reference: K = 576 products per output; Winograd's transforms add rounding,
 * allowed here as 1e-6 * K absolute + 1e-4 relative (measured: worst error 4.4e-6 on
 * outputs of magnitude ~1). Below AVX-512 the same checks run on the fallback. */
static void test_conv_winograd_wide(void) {
    conv_shape_t s = finish((conv_shape_t){2, 8, 8, 64, 64, 3, 3, 1, 1, 0, 0, 1});
    cpu_backend_set_conv_engine(g_be, 4);
#ifdef RUNNER_HAVE_DNNL
    CHECK_STR(cpu_backend_conv_engine(g_be, &s), winograd_available() ? "dnnl_wino" : "dnnl_blk");
#endif
    int64_t nx = nx_of(&s), nw = nw_of(&s), ny = ny_of(&s);
    float *x = falloc(nx), *w = falloc(nw), *g = falloc(ny), *y = falloc(ny);
    float *dx = falloc(nx), *dw = falloc(nw);
    fill_uniform(x, nx, 71, 0, 2);            /* post-ReLU-like activations */
    fill_uniform(w, nw, 72, -0.1f, 0.1f);
    fill_uniform(g, ny, 73, -1, 1);
    double *xd = to_double(x, nx), *wd = to_double(w, nw), *gd = to_double(g, ny);
    double *yd = dalloc(ny), *dxd = dalloc(nx), *dwd = dalloc(nw);
    ref_fwd(&s, xd, wd, yd);
    ref_bwd(&s, xd, wd, gd, dxd, dwd);
    const backend_ops_t *ops = g_be->ops;
    CHECK_INT(ops->conv2d_fwd(g_be, &s, DT_F32, x, w, y), 0);
    CHECK_INT(compare_arrays("wino y", y, yd, ny, 1e-6 * 576, 1e-4), 0);
    CHECK_INT(ops->conv2d_bwd_data(g_be, &s, DT_F32, g, w, dx), 0);
    CHECK_INT(compare_arrays("wino dx", dx, dxd, nx, 1e-6 * 576, 1e-4), 0);
    CHECK_INT(ops->conv2d_bwd_filter(g_be, &s, DT_F32, x, g, dw), 0);
    CHECK_INT(compare_arrays("wino dw", dw, dwd, nw, 1e-6 * 128, 1e-4), 0);
    double worst = 0;
    for (int64_t i = 0; i < ny; i++) worst = fmax(worst, fabs(y[i] - yd[i]));
    fprintf(stderr, "  winograd worst |y - ref| = %.3g\n", worst);
    cpu_backend_set_conv_engine(g_be, 0);
    free(x); free(w); free(g); free(y); free(dx); free(dw);
    free(xd); free(wd); free(gd); free(yd); free(dxd); free(dwd);
}

/* The automatic choice on every resnet20/resnet18 conv shape: never Winograd by default
 * (it is ~10x less precise than PyTorch's fp32); with backend_opts_t.cpu_winograd
 * (train.cpu_winograd) the filter gradient of 3x3 stride-1 layers with >= 64 channels,
 * exactly where oneDNN has it at this ISA; every other direction and shape the same
 * engine either way; the same decisions from a second backend (a fixed function of shape
 * and ISA); and a description naming oneDNN's kernel ("dnnl jit:avx2") or gemm. */
static void test_conv_auto_choice(void) {
    err_t e = {0};
    backend_opts_t o = {.kind = BACKEND_CPU, .threads = 2, .cpu_winograd = true};
    backend_t *wb = cpu_backend_create(&o, &e), *b2 = make_cpu(2);
    CHECK(wb != NULL && b2 != NULL);
    if (!wb || !b2) return;
    static const conv_shape_t list[] = {
        {128, 32, 32, 3, 16, 3, 3, 1, 1, 0, 0, 1},   {128, 32, 32, 16, 16, 3, 3, 1, 1, 0, 0, 1},
        {128, 32, 32, 16, 32, 3, 3, 2, 1, 0, 0, 1},  {128, 32, 32, 16, 32, 1, 1, 2, 0, 0, 0, 1},
        {128, 8, 8, 64, 64, 3, 3, 1, 1, 0, 0, 1},    {64, 32, 32, 64, 64, 3, 3, 1, 1, 0, 0, 1},
        {64, 16, 16, 128, 128, 3, 3, 1, 1, 0, 0, 1}, {64, 8, 8, 256, 256, 3, 3, 1, 1, 0, 0, 1},
        {64, 4, 4, 512, 512, 3, 3, 1, 1, 0, 0, 1},   {64, 8, 8, 256, 512, 3, 3, 2, 1, 0, 0, 1},
    };
    int nwino = 0;
    for (int i = 0; i < (int)(sizeof list / sizeof list[0]); i++) {
        conv_shape_t s = finish(list[i]);
        bool wide3x3 = s.r == 3 && s.stride == 1 && s.c >= 64 && s.k >= 64;
        for (int which = 0; which < 3; which++) {
            const char *d = cpu_backend_conv_engine_for(g_be, &s, which);
            const char *w = cpu_backend_conv_engine_for(wb, &s, which);
            CHECK(strcmp(d, "dnnl_wino") != 0 && strcmp(d, "error") != 0);
            CHECK_STR(cpu_backend_conv_engine_for(b2, &s, which), d);
            if (which == 2 && wide3x3 && winograd_available()) {
                CHECK_STR(w, "dnnl_wino");
                nwino++;
            } else {
                CHECK_STR(w, d);
            }
#ifdef RUNNER_HAVE_DNNL
            CHECK(strcmp(d, "gemm") != 0);   /* oneDNN has a real kernel for each at every ISA */
#endif
            char desc[96];
            CHECK_INT(g_be->ops->conv_engine(g_be, &s, which, desc, sizeof desc), 0);
            CHECK(!strncmp(desc, d, strlen(d)));
        }
    }
    if (winograd_available()) CHECK_INT(nwino, 5);
    char libs[256];
    g_be->ops->libraries(g_be, libs, sizeof libs);
    CHECK_CONTAINS(libs, "OpenBLAS");
    fprintf(stderr, "  %s\n", libs);
    backend_free(wb);
    backend_free(b2);
}

/* The automatic choice on MobileNetV2-CIFAR's depthwise and ResNeXt's grouped shapes:
 * oneDNN's kernels, for depthwise its NHWC ones (a depthwise layer on the per-group GEMM
 * would be ~100x slower, on the blocked kernels 1.5-3x), the
 * same decisions from a second backend, never Winograd even with cpu_winograd (oneDNN
 * has none for groups), and the description names the kernel. */
static void test_conv_grouped_auto_choice(void) {
    err_t e = {0};
    backend_opts_t o = {.kind = BACKEND_CPU, .threads = 2, .cpu_winograd = true};
    backend_t *wb = cpu_backend_create(&o, &e), *b2 = make_cpu(2);
    CHECK(wb != NULL && b2 != NULL);
    if (!wb || !b2) return;
    static const conv_shape_t list[] = {
        {64, 32, 32, 32, 32, 3, 3, 1, 1, 0, 0, 32},    {64, 32, 32, 144, 144, 3, 3, 2, 1, 0, 0, 144},
        {64, 16, 16, 192, 192, 3, 3, 1, 1, 0, 0, 192}, {64, 8, 8, 384, 384, 3, 3, 1, 1, 0, 0, 384},
        {64, 4, 4, 960, 960, 3, 3, 1, 1, 0, 0, 960},   {64, 32, 32, 128, 128, 3, 3, 1, 1, 0, 0, 8},
        {64, 16, 16, 512, 512, 3, 3, 2, 1, 0, 0, 8},   {32, 56, 56, 128, 128, 3, 3, 1, 1, 0, 0, 32},
    };
    for (int i = 0; i < (int)(sizeof list / sizeof list[0]); i++) {
        conv_shape_t s = finish(list[i]);
        for (int which = 0; which < 3; which++) {
            const char *d = cpu_backend_conv_engine_for(g_be, &s, which);
            CHECK(strcmp(d, "dnnl_wino") != 0 && strcmp(d, "error") != 0);
            CHECK_STR(cpu_backend_conv_engine_for(b2, &s, which), d);
            CHECK_STR(cpu_backend_conv_engine_for(wb, &s, which), d);
#ifdef RUNNER_HAVE_DNNL
            if (s.groups == s.c) CHECK_STR(d, "dnnl");   /* oneDNN's NHWC depthwise kernels */
#endif
            char desc[96];
            CHECK_INT(g_be->ops->conv_engine(g_be, &s, which, desc, sizeof desc), 0);
            CHECK(!strncmp(desc, d, strlen(d)));
            if (which == 0) fprintf(stderr, "  %dx%d %d groups %d stride %d: %s\n", s.h, s.w, s.c, s.groups, s.stride, desc);
        }
    }
    backend_free(wb);
    backend_free(b2);
}

/* Relative L2 error of a against the double reference b. */
static double rel_l2(const float *a, const double *b, int64_t n) {
    double d2 = 0, b2 = 0;
    for (int64_t i = 0; i < n; i++) {
        d2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        b2 += b[i] * b[i];
    }
    return sqrt(d2 / b2);
}

/* What train.cpu_winograd costs in precision, on a resnet20 layer3-like filter gradient
 * (n 32, 8x8, 64 -> 64, post-ReLU-like activations): the relative L2 error of dw against
 * the double reference with Winograd and with the default direct kernels, where oneDNN
 * has Winograd (measured on AVX-512: 3.1e-7 vs 2.6e-7; its forward outputs are ~10x less
 * precise per element, see test_conv_winograd_wide). Checked: within 30x of direct; a
 * broken transform would be off by far more. */
static void test_conv_winograd_precision(void) {
    if (!winograd_available()) {
        fprintf(stderr, "  (no Winograd at this ISA: nothing to measure)\n");
        return;
    }
    conv_shape_t s = finish((conv_shape_t){32, 8, 8, 64, 64, 3, 3, 1, 1, 0, 0, 1});
    int64_t nx = nx_of(&s), nw = nw_of(&s), ny = ny_of(&s);
    float *x = falloc(nx), *g = falloc(ny), *dw = falloc(nw);
    fill_uniform(x, nx, 81, 0, 2);
    fill_uniform(g, ny, 82, -1, 1);
    double *xd = to_double(x, nx), *gd = to_double(g, ny), *wd = dalloc(nw);
    double *dxd = dalloc(nx), *dwd = dalloc(nw);
    ref_bwd(&s, xd, wd, gd, dxd, dwd);
    double err[2];
    for (int k = 0; k < 2; k++) {
        cpu_backend_set_conv_engine(g_be, k ? 4 : 0);
        memset(dw, 0, (size_t)nw * sizeof(float));
        CHECK_INT(g_be->ops->conv2d_bwd_filter(g_be, &s, DT_F32, x, g, dw), 0);
        err[k] = rel_l2(dw, dwd, nw);
    }
    cpu_backend_set_conv_engine(g_be, 0);
    fprintf(stderr, "  filter gradient n32 8x8 64->64: relative L2 error direct %.3g, Winograd %.3g\n",
            err[0], err[1]);
    CHECK(err[0] < 1e-6);
    CHECK(err[1] < 30 * err[0]);
    free(x); free(g); free(dw); free(xd); free(gd); free(wd); free(dxd); free(dwd);
}

/* fp16/bf16: op(dt, raw inputs) == round(op(fp32, rounded inputs)), bit for bit. */
static void amp_case(int engine, dtype_t dt) {
    cpu_backend_set_conv_engine(g_be, engine);
    const backend_ops_t *ops = g_be->ops;
    conv_shape_t list[4] = {finish((conv_shape_t){2, 7, 7, 8, 16, 3, 3, 2, 1, 0, 0, 1}),
                            finish((conv_shape_t){2, 6, 6, 16, 8, 1, 1, 1, 0, 0, 0, 1}),
                            finish((conv_shape_t){2, 7, 7, 16, 16, 3, 3, 2, 1, 0, 0, 16}),
                            finish((conv_shape_t){2, 6, 6, 16, 16, 3, 3, 1, 1, 0, 0, 4})};
    for (int si = 0; si < 4; si++) {
        conv_shape_t s = list[si];
        int64_t nx = nx_of(&s), nw = nw_of(&s), ny = ny_of(&s);
        float *x = falloc(nx), *w = falloc(nw), *g = falloc(ny), *xr = falloc(nx);
        float *wr = falloc(nw), *gr = falloc(ny), *y = falloc(ny), *yref = falloc(ny);
        float *dx = falloc(nx), *dxref = falloc(nx), *dw = falloc(nw), *dwref = falloc(nw);
        fill_uniform(x, nx, 11, -2, 2);
        fill_uniform(w, nw, 12, -1, 1);
        fill_uniform(g, ny, 13, -1, 1);
        memcpy(xr, x, (size_t)nx * 4); round_all(xr, nx, dt);
        memcpy(wr, w, (size_t)nw * 4); round_all(wr, nw, dt);
        memcpy(gr, g, (size_t)ny * 4); round_all(gr, ny, dt);
        CHECK_INT(ops->conv2d_fwd(g_be, &s, dt, x, w, y), 0);
        CHECK_INT(ops->conv2d_fwd(g_be, &s, DT_F32, xr, wr, yref), 0);
        round_all(yref, ny, dt);
        CHECK(memcmp(y, yref, (size_t)ny * 4) == 0);
        CHECK_INT(ops->conv2d_bwd_data(g_be, &s, dt, g, w, dx), 0);
        CHECK_INT(ops->conv2d_bwd_data(g_be, &s, DT_F32, gr, wr, dxref), 0);
        round_all(dxref, nx, dt);
        CHECK(memcmp(dx, dxref, (size_t)nx * 4) == 0);
        CHECK_INT(ops->conv2d_bwd_filter(g_be, &s, dt, x, g, dw), 0);
        CHECK_INT(ops->conv2d_bwd_filter(g_be, &s, DT_F32, xr, gr, dwref), 0);
        CHECK(memcmp(dw, dwref, (size_t)nw * 4) == 0);   /* dw stays fp32 */
        /* the rounding did something: outputs are representable in dt */
        CHECK(y[0] == (dt == DT_F16 ? round_f16(y[0]) : round_bf16(y[0])));
        free(x); free(w); free(g); free(xr); free(wr); free(gr); free(y); free(yref);
        free(dx); free(dxref); free(dw); free(dwref);
    }
    cpu_backend_set_conv_engine(g_be, 0);
}

static void test_conv_amp(void) {
    for (int engine = 1; engine <= 3; engine++) {
        amp_case(engine, DT_F16);
        amp_case(engine, DT_BF16);
    }
}

/* A shape whose p does not match the geometry is refused with an error, not run. */
static void test_conv_bad_shape(void) {
    conv_shape_t s = finish((conv_shape_t){1, 5, 5, 2, 2, 3, 3, 1, 1, 0, 0, 1});
    s.p = 4;
    float buf[256] = {0};
    CHECK_INT(g_be->ops->conv2d_fwd(g_be, &s, DT_F32, buf, buf, buf), -1);
    CHECK_CONTAINS(g_be->err.msg, "inconsistent conv shape");
    s = finish((conv_shape_t){1, 5, 5, 6, 4, 3, 3, 1, 1, 0, 0, 4});   /* 4 groups do not divide 6 */
    CHECK_INT(g_be->ops->conv2d_fwd(g_be, &s, DT_F32, buf, buf, buf), -1);
    CHECK_CONTAINS(g_be->err.msg, "groups 4");
}

int main(void) {
    g_be = make_cpu(2);
    TEST_RUN(test_conv_gemm);
    TEST_RUN(test_conv_dnnl);
    TEST_RUN(test_conv_dnnl_blocked);
    TEST_RUN(test_conv_dnnl_winograd);
    TEST_RUN(test_conv_deterministic);
    TEST_RUN(test_conv_winograd_wide);
    TEST_RUN(test_conv_auto_choice);
    TEST_RUN(test_conv_grouped_auto_choice);
    TEST_RUN(test_conv_winograd_precision);
    TEST_RUN(test_conv_amp);
    TEST_RUN(test_conv_bad_shape);
    backend_free(g_be);
    return test_main_end();
}
