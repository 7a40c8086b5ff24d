/* test_gpu_conv.c: cuDNN convolutions of the CUDA backend against the CPU backend on the
 * same inputs: forward, backward data and backward filter (which must accumulate), for
 * ResNet-like shapes (3x3 s1, 1x1 s2, 3x3 s2 odd size, the 3-channel stem) in fp32
 * (FMA and TF32), fp16 and bf16; that deterministic mode repeats bit for bit; and that a
 * graph recorded before cuda_backend_clear_caches is stale after it (it would replay
 * into the freed workspace); and that conv_engine reports the chosen algorithms.
 * Skipped (77) without a GPU.
 */
#include "tests/gpu/gpu_test_util.h"

static conv_shape_t shape(int n, int h, int w, int c, int k, int r, int stride, int pad) {
    conv_shape_t s = {n, h, w, c, k, r, r, stride, pad, 0, 0, 1};
    s.p = (h + 2 * pad - r) / stride + 1;
    s.q = (w + 2 * pad - r) / stride + 1;
    return s;
}

/* Runs all three directions for one shape and dtype on both backends and compares. */
static int check_conv(pair_t *p, const conv_shape_t *s, dtype_t dt, double tol, const char *label) {
    int64_t nx = (int64_t)s->n * s->h * s->w * s->c, nw = (int64_t)s->k * s->r * s->s * s->c;
    int64_t ny = (int64_t)s->n * s->p * s->q * s->k;
    float *hx = hrand(nx, 1, -1.0f, 1.0f), *hw = hrand(nw, 2, -0.5f, 0.5f);
    float *hdy = hrand(ny, 3, -1.0f, 1.0f), *hdw = hrand(nw, 4, -0.25f, 0.25f);
    twin_t x = twin_new(p, nx, dt, hx), w = twin_new(p, nw, dt, hw), dy = twin_new(p, ny, dt, hdy);
    twin_t y = twin_new(p, ny, dt, NULL), dx = twin_new(p, nx, dt, NULL);
    twin_t dw = twin_new(p, nw, DT_F32, hdw);
    backend_t *bes[2] = {p->cpu, p->gpu};
    for (int i = 0; i < 2; i++) {
        backend_t *be = bes[i];
        void *X = i ? x.g : x.c, *W = i ? w.g : w.c, *DY = i ? dy.g : dy.c;
        OK(be, be->ops->conv2d_fwd(be, s, dt, X, W, i ? y.g : y.c));
        OK(be, be->ops->conv2d_bwd_data(be, s, dt, DY, W, i ? dx.g : dx.c));
        OK(be, be->ops->conv2d_bwd_filter(be, s, dt, X, DY, (float *)(i ? dw.g : dw.c)));
    }
    char what[160];
    int bad = 0;
    snprintf(what, sizeof what, "%s fwd", label);
    bad += twin_cmp(what, p, &y, tol);
    snprintf(what, sizeof what, "%s bwd_data", label);
    bad += twin_cmp(what, p, &dx, tol);
    snprintf(what, sizeof what, "%s bwd_filter (accumulated onto a random dw)", label);
    bad += twin_cmp(what, p, &dw, tol);
    double l2[3] = {twin_rel_l2(p, &y), twin_rel_l2(p, &dx), twin_rel_l2(p, &dw)};
    double l2_lim = dt == DT_F32 ? 1e-3 : dt_tol(dt);
    for (int i = 0; i < 3; i++)
        if (!(l2[i] <= l2_lim)) {
            fprintf(stderr, "  %s: relative L2 error %g of output %d above %g\n", label, l2[i], i, l2_lim);
            bad++;
        }
    twin_t *all[] = {&x, &w, &dy, &y, &dx, &dw};
    for (int i = 0; i < 6; i++) twin_free(p, all[i]);
    free(hx); free(hw); free(hdy); free(hdw);
    return bad;
}

static const char *dt_label(dtype_t dt, bool tf32) {
    return dt == DT_F16 ? "fp16" : dt == DT_BF16 ? "bf16" : tf32 ? "fp32/tf32" : "fp32";
}

static void run_shapes(bool tf32, dtype_t dt) {
    pair_t p = pair_make(false, tf32);
    conv_shape_t shapes[] = {
        shape(2, 8, 8, 16, 32, 3, 1, 1),
        shape(2, 8, 8, 32, 16, 1, 2, 0),
        shape(2, 9, 9, 8, 8, 3, 2, 1),
        shape(2, 8, 8, 3, 16, 3, 1, 1),
    };
    for (int i = 0; i < 4; i++) {
        char label[96];
        const conv_shape_t *s = &shapes[i];
        snprintf(label, sizeof label, "%s c%d k%d r%d stride%d", dt_label(dt, tf32), s->c, s->k, s->r, s->stride);
        CHECK_INT(check_conv(&p, s, dt, tf32 ? 4e-3 : dt_tol(dt), label), 0);
    }
    pair_free(&p);
}

static void test_conv_fp32(void) { run_shapes(false, DT_F32); }
static void test_conv_tf32(void) { run_shapes(true, DT_F32); }
static void test_conv_fp16(void) { run_shapes(false, DT_F16); }
static void test_conv_bf16(void) { run_shapes(false, DT_BF16); }

/* bwd_filter called twice adds twice: dw = 2 * grad when dw starts at zero. */
static void test_bwd_filter_accumulates(void) {
    pair_t p = pair_make(true, false);
    conv_shape_t s = shape(2, 8, 8, 16, 16, 3, 1, 1);
    int64_t nx = 2 * 8 * 8 * 16, nw = 16 * 9 * 16, ny = nx;
    float *hx = hrand(nx, 5, -1, 1), *hdy = hrand(ny, 6, -1, 1);
    twin_t x = twin_new(&p, nx, DT_F32, hx), dy = twin_new(&p, ny, DT_F32, hdy);
    twin_t once = twin_new(&p, nw, DT_F32, NULL), twice = twin_new(&p, nw, DT_F32, NULL);
    OK(p.gpu, p.gpu->ops->conv2d_bwd_filter(p.gpu, &s, DT_F32, x.g, dy.g, (float *)once.g));
    OK(p.gpu, p.gpu->ops->conv2d_bwd_filter(p.gpu, &s, DT_F32, x.g, dy.g, (float *)twice.g));
    OK(p.gpu, p.gpu->ops->conv2d_bwd_filter(p.gpu, &s, DT_F32, x.g, dy.g, (float *)twice.g));
    float *a, *b, *ca, *cb;
    twin_get(&p, &once, &ca, &a);
    twin_get(&p, &twice, &cb, &b);
    for (int64_t i = 0; i < nw; i++) a[i] *= 2.0f;
    CHECK_INT(cmp_vals("2 x bwd_filter", b, a, nw, 1e-5), 0);
    double norm = 0;
    for (int64_t i = 0; i < nw; i++) norm += fabs(a[i]);
    CHECK(norm > 1.0);   /* the gradient is not trivially zero */
    free(a); free(b); free(ca); free(cb); free(hx); free(hdy);
    twin_free(&p, &x); twin_free(&p, &dy); twin_free(&p, &once); twin_free(&p, &twice);
    pair_free(&p);
}

/* With deterministic algorithms, two backward passes give identical bits. */
static void test_deterministic_repeat(void) {
    pair_t p = pair_make(true, true);
    conv_shape_t s = shape(4, 16, 16, 32, 32, 3, 1, 1);
    int64_t nx = 4 * 16 * 16 * 32, nw = 32 * 9 * 32;
    float *hx = hrand(nx, 7, -1, 1), *hdy = hrand(nx, 8, -1, 1);
    twin_t x = twin_new(&p, nx, DT_F16, hx), dy = twin_new(&p, nx, DT_F16, hdy);
    twin_t d1 = twin_new(&p, nw, DT_F32, NULL), d2 = twin_new(&p, nw, DT_F32, NULL);
    OK(p.gpu, p.gpu->ops->conv2d_bwd_filter(p.gpu, &s, DT_F16, x.g, dy.g, (float *)d1.g));
    OK(p.gpu, p.gpu->ops->conv2d_bwd_filter(p.gpu, &s, DT_F16, x.g, dy.g, (float *)d2.g));
    float *a, *b, *ca, *cb;
    twin_get(&p, &d1, &ca, &a);
    twin_get(&p, &d2, &cb, &b);
    CHECK(memcmp(a, b, (size_t)nw * sizeof(float)) == 0);
    free(a); free(b); free(ca); free(cb); free(hx); free(hdy);
    twin_free(&p, &x); twin_free(&p, &dy); twin_free(&p, &d1); twin_free(&p, &d2);
    pair_free(&p);
}

/* cuda_backend_clear_caches frees the shared workspace a recorded convolution uses: the
 * recording must then be reported stale (1) rather than replayed into freed memory, and
 * a new recording replays to the same bits as the direct call. */
static void test_clear_caches_stales_graphs(void) {
    pair_t p = pair_make(true, false);
    backend_t *g = p.gpu;
    conv_shape_t s = shape(8, 16, 16, 64, 64, 3, 1, 1);
    int64_t nx = 8 * 16 * 16 * 64, nw = 64 * 9 * 64;
    float *hx = hrand(nx, 11, -1, 1), *hw = hrand(nw, 12, -0.5f, 0.5f);
    twin_t x = twin_new(&p, nx, DT_F16, hx), w = twin_new(&p, nw, DT_F16, hw);
    twin_t y1 = twin_new(&p, nx, DT_F16, NULL), y2 = twin_new(&p, nx, DT_F16, NULL);
    OK(g, g->ops->conv2d_fwd(g, &s, DT_F16, x.g, w.g, y1.g));   /* plans; the workspace fits */
    void *graph = NULL;
    OK(g, g->ops->graph_capture_begin(g));
    OK(g, g->ops->conv2d_fwd(g, &s, DT_F16, x.g, w.g, y2.g));
    OK(g, g->ops->graph_capture_end(g, &graph));
    CHECK(graph != NULL);
    CHECK_INT(g->ops->graph_launch(g, graph), 0);
    cuda_backend_clear_caches(g);
    CHECK_INT(g->ops->graph_launch(g, graph), 1);   /* stale: nothing launched */
    g->ops->graph_free(g, graph);
    OK(g, g->ops->conv2d_fwd(g, &s, DT_F16, x.g, w.g, y1.g));   /* plans again */
    OK(g, g->ops->zero(g, y2.g, (size_t)nx * 2));
    OK(g, g->ops->graph_capture_begin(g));
    OK(g, g->ops->conv2d_fwd(g, &s, DT_F16, x.g, w.g, y2.g));
    OK(g, g->ops->graph_capture_end(g, &graph));
    CHECK_INT(g->ops->graph_launch(g, graph), 0);
    g->ops->graph_free(g, graph);
    float *c1, *g1, *c2, *g2;
    twin_get(&p, &y1, &c1, &g1);
    twin_get(&p, &y2, &c2, &g2);
    CHECK(memcmp(g1, g2, (size_t)nx * sizeof(float)) == 0);
    free(c1); free(g1); free(c2); free(g2); free(hx); free(hw);
    twin_free(&p, &x); twin_free(&p, &w); twin_free(&p, &y1); twin_free(&p, &y2);
    pair_free(&p);
}

/* conv_engine names the algorithm of each direction once a call planned it: by the
 * heuristic's order with deterministic, by GPU + host cost (with the measured host time)
 * without; before any call it says so and returns -1. */
static void test_conv_engine_reported(void) {
    for (int det = 1; det >= 0; det--) {
        pair_t p = pair_make(det, false);
        backend_t *g = p.gpu;
        conv_shape_t s = shape(8, 16, 16, 32, 64, 3, 2, 1);
        int64_t nx = 8 * 16 * 16 * 32, nw = 64 * 9 * 32, ny = 8 * 8 * 8 * 64;
        float *hx = hrand(nx, 21, -1, 1), *hw = hrand(nw, 22, -0.5f, 0.5f), *hdy = hrand(ny, 23, -1, 1);
        twin_t x = twin_new(&p, nx, DT_BF16, hx), w = twin_new(&p, nw, DT_BF16, hw), dy = twin_new(&p, ny, DT_BF16, hdy);
        twin_t y = twin_new(&p, ny, DT_BF16, NULL), dx = twin_new(&p, nx, DT_BF16, NULL);
        twin_t dw = twin_new(&p, nw, DT_F32, NULL);
        char buf[512];
        CHECK_INT(g->ops->conv_engine(g, &s, 0, buf, sizeof buf), -1);
        CHECK_CONTAINS(buf, "not planned yet");
        OK(g, g->ops->conv2d_fwd(g, &s, DT_BF16, x.g, w.g, y.g));
        OK(g, g->ops->conv2d_bwd_data(g, &s, DT_BF16, dy.g, w.g, dx.g));
        OK(g, g->ops->conv2d_bwd_filter(g, &s, DT_BF16, x.g, dy.g, (float *)dw.g));
        static const char *const prefix[3] = {"cudnn fwd ", "cudnn bwd_data ", "cudnn bwd_filter "};
        for (int d = 0; d < 3; d++) {
            CHECK_INT(g->ops->conv_engine(g, &s, d, buf, sizeof buf), 0);
            fprintf(stderr, "  %s: %s\n", det ? "deterministic" : "by cost", buf);
            CHECK(!strncmp(buf, prefix[d], strlen(prefix[d])));
            CHECK_CONTAINS(buf, " ws ");
            CHECK_CONTAINS(buf, det ? "deterministic, heuristic order" : "by gpu+host cost");
            if (!det) CHECK_CONTAINS(buf, " us;");
        }
        twin_t *all[] = {&x, &w, &dy, &y, &dx, &dw};
        for (int i = 0; i < 6; i++) twin_free(&p, all[i]);
        free(hx); free(hw); free(hdy);
        pair_free(&p);
    }
}

int main(void) {
    gpu_or_skip();
    TEST_RUN(test_conv_fp32);
    TEST_RUN(test_conv_tf32);
    TEST_RUN(test_conv_fp16);
    TEST_RUN(test_conv_bf16);
    TEST_RUN(test_bwd_filter_accumulates);
    TEST_RUN(test_deterministic_repeat);
    TEST_RUN(test_clear_caches_stales_graphs);
    TEST_RUN(test_conv_engine_reported);
    return test_main_end();
}
