/* test_gpu_families.c: the CUDA backend's ops for the new model families (issue #24)
 * against the CPU backend on the same inputs, in fp32, fp16 and bf16:
 *   - grouped and depthwise convolutions (cuDNN with a group count) in all three
 *     directions, within test_gpu_conv's tolerances, and bit-for-bit repeats in
 *     deterministic mode;
 *   - relu6, the conv bias forward, adaptive average pooling (both directions) and
 *     dropout (both directions): equal bit for bit (the same arithmetic on both,
 *     model/cuda/layers.cu); the bias gradient within 1e-6 (double sums in another order);
 *   - dropout reads its key from device memory when it runs: a graph recorded with one
 *     key and replayed after the key changed draws the new key's masks, equal to the CPU's;
 *   - batch norm with fused relu6 (apply, backward reduce and apply) within
 *     test_gpu_norm's tolerances, on the CPU's y so both mask the same elements.
 * Skipped (77) without a GPU.
 */
#include "tests/gpu/gpu_test_util.h"
#include "util/dropout.h"

static const dtype_t g_dts[3] = {DT_F32, DT_F16, DT_BF16};

static conv_shape_t gshape(int n, int hw, int c, int k, int r, int stride, int groups) {
    conv_shape_t s = {n, hw, hw, c, k, r, r, stride, r / 2, 0, 0, groups};
    s.p = (hw + 2 * s.pad - r) / stride + 1;
    s.q = s.p;
    return s;
}

/* Counts elements of the twin whose two sides differ in any bit (as floats). */
static int twin_exact(const char *what, pair_t *p, const twin_t *t) {
    float *cv, *gv;
    twin_get(p, t, &cv, &gv);
    int bad = 0;
    int64_t first = -1;
    for (int64_t i = 0; i < t->n; i++)
        if (memcmp(&cv[i], &gv[i], 4) != 0) {
            if (first < 0) first = i;
            bad++;
        }
    if (bad)
        fprintf(stderr, "  %s: %d of %lld elements differ; first [%lld] gpu %.9g cpu %.9g\n", what, bad,
                (long long)t->n, (long long)first, (double)gv[first], (double)cv[first]);
    free(cv);
    free(gv);
    return bad;
}

static void test_grouped_conv(void) {
    pair_t p = pair_make(true, false);
    const conv_shape_t shapes[] = {
        gshape(4, 16, 32, 32, 3, 1, 32),   /* depthwise (MobileNetV2) */
        gshape(4, 15, 48, 48, 3, 2, 48),   /* depthwise stride 2, odd size */
        gshape(2, 8, 16, 32, 3, 1, 16),    /* depthwise with multiplier 2 */
        gshape(2, 8, 64, 64, 3, 1, 8),     /* ResNeXt: 8 groups of 8 */
        gshape(2, 8, 64, 128, 1, 1, 4),    /* grouped 1x1 */
    };
    for (int di = 0; di < 3; di++) {
        dtype_t dt = g_dts[di];
        for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
            const conv_shape_t *s = &shapes[si];
            conv_twins_t t = conv_twins_run(&p, s, dt);
            int64_t nw = t.nw, ny = t.ny;
            char what[128];
            snprintf(what, sizeof what, "%s %dx%d %d->%d groups %d stride %d", dtype_names[dt], s->h, s->w, s->c, s->k,
                     s->groups, s->stride);
            CHECK_INT(conv_twins_cmp(&p, &t, what, dt_tol(dt)), 0);
            /* deterministic: the same calls again give the same bits */
            twin_t y2 = twin_new(&p, ny, dt, NULL), dw2 = twin_new(&p, nw, DT_F32, t.hdw);
            OK(p.gpu, p.gpu->ops->conv2d_fwd(p.gpu, s, dt, t.x.g, t.w.g, y2.g));
            OK(p.gpu, p.gpu->ops->conv2d_bwd_filter(p.gpu, s, dt, t.x.g, t.dy.g, (float *)dw2.g));
            size_t esz = dt == DT_F32 ? 4 : 2;
            void *a = malloc((size_t)ny * esz), *b = malloc((size_t)ny * esz);
            OK(p.gpu, p.gpu->ops->download(p.gpu, a, t.y.g, (size_t)ny * esz));
            OK(p.gpu, p.gpu->ops->download(p.gpu, b, y2.g, (size_t)ny * esz));
            CHECK(memcmp(a, b, (size_t)ny * esz) == 0);
            free(a);
            free(b);
            a = malloc((size_t)nw * 4);
            b = malloc((size_t)nw * 4);
            OK(p.gpu, p.gpu->ops->download(p.gpu, a, t.dw.g, (size_t)nw * 4));
            OK(p.gpu, p.gpu->ops->download(p.gpu, b, dw2.g, (size_t)nw * 4));
            CHECK(memcmp(a, b, (size_t)nw * 4) == 0);
            free(a);
            free(b);
            if (di == 0 && p.gpu->ops->conv_engine) {
                char eng[128];
                if (p.gpu->ops->conv_engine(p.gpu, s, 0, eng, sizeof eng) == 0) fprintf(stderr, "  %s: %s\n", what, eng);
            }
            twin_free(&p, &y2);
            twin_free(&p, &dw2);
            conv_twins_free(&p, &t);
        }
    }
    pair_free(&p);
}

/* relu6, the bias forward, adaptive pooling: bit for bit; the bias gradient within 1e-6. */
static void test_elementwise_and_pooling(void) {
    pair_t p = pair_make(true, false);
    const int64_t m = 2000;
    const int c = 24;
    pool_shape_t ps = {.n = 3, .h = 5, .w = 7, .c = 24, .p = 3, .q = 2};
    pool_shape_t up = {.n = 3, .h = 1, .w = 1, .c = 24, .p = 7, .q = 7};
    float *hx = hrand(m * c, 5, -2, 8), *hb = hrand(c, 6, -1, 1), *hdy = hrand(m * c, 7, -1, 1);
    for (int di = 0; di < 3; di++) {
        dtype_t dt = g_dts[di];
        char what[96];
        twin_t x = twin_new(&p, m * c, dt, hx), y = twin_new(&p, m * c, dt, NULL), dy = twin_new(&p, m * c, dt, hdy);
        twin_t dx = twin_new(&p, m * c, dt, NULL), b = twin_new(&p, c, DT_F32, hb), db = twin_new(&p, c, DT_F32, hb);
        twin_t py = twin_new(&p, 3 * 3 * 2 * 24, dt, NULL), pdx = twin_new(&p, 3 * 5 * 7 * 24, dt, NULL);
        twin_t uy = twin_new(&p, 3 * 49 * 24, dt, NULL), udx = twin_new(&p, 3 * 24, dt, NULL);
        backend_t *bes[2] = {p.cpu, p.gpu};
        for (int i = 0; i < 2; i++) {
            backend_t *be = bes[i];
#define S(t) (i ? (t).g : (t).c)
            OK(be, be->ops->relu6_fwd(be, m * c, dt, S(x), S(y)));
            OK(be, be->ops->relu6_bwd(be, m * c, dt, S(y), S(dy), S(dx)));
            OK(be, be->ops->channel_bias_fwd(be, m, c, dt, (float *)S(b), S(y)));   /* y += b, in place */
            OK(be, be->ops->channel_bias_bwd(be, m, c, dt, S(dy), (float *)S(db)));
            OK(be, be->ops->adaptive_avgpool_fwd(be, &ps, dt, S(x), S(py)));
            OK(be, be->ops->adaptive_avgpool_bwd(be, &ps, dt, S(dy), S(pdx)));
            OK(be, be->ops->adaptive_avgpool_fwd(be, &up, dt, S(x), S(uy)));
            OK(be, be->ops->adaptive_avgpool_bwd(be, &up, dt, S(uy), S(udx)));
#undef S
        }
        snprintf(what, sizeof what, "%s relu6 + bias", dtype_names[dt]);
        CHECK_INT(twin_exact(what, &p, &y), 0);
        snprintf(what, sizeof what, "%s relu6 backward", dtype_names[dt]);
        CHECK_INT(twin_exact(what, &p, &dx), 0);
        snprintf(what, sizeof what, "%s bias gradient", dtype_names[dt]);
        CHECK_INT(twin_cmp(what, &p, &db, 1e-6), 0);
        snprintf(what, sizeof what, "%s adaptive avgpool 5x7 -> 3x2", dtype_names[dt]);
        CHECK_INT(twin_exact(what, &p, &py), 0);
        CHECK_INT(twin_exact(what, &p, &pdx), 0);
        snprintf(what, sizeof what, "%s adaptive avgpool 1x1 -> 7x7", dtype_names[dt]);
        CHECK_INT(twin_exact(what, &p, &uy), 0);
        CHECK_INT(twin_exact(what, &p, &udx), 0);
        twin_t *all[] = {&x, &y, &dy, &dx, &b, &db, &py, &pdx, &uy, &udx};
        for (int k = 0; k < 10; k++) twin_free(&p, all[k]);
    }
    free(hx); free(hb); free(hdy);
    pair_free(&p);
}

/* Dropout: the same masks and values on both backends, forward and backward, in every
 * dtype; and a recorded graph follows the key in device memory. */
static void test_dropout(void) {
    pair_t p = pair_make(true, false);
    const int n = 5;
    const int64_t per = 3001;
    dropout_key_t k1 = {.seed = 11, .epoch = 4, .first_sample = 100, .sample_stride = 2};
    dropout_key_t k2 = {.seed = 11, .epoch = 5, .first_sample = 101, .sample_stride = 2};
    float *hx = hrand(n * per, 8, -1, 1);
    dropout_key_t *kc = p.cpu->ops->alloc(p.cpu, sizeof k1), *kg = p.gpu->ops->alloc(p.gpu, sizeof k1);
    OK(p.cpu, p.cpu->ops->upload(p.cpu, kc, &k1, sizeof k1));
    OK(p.gpu, p.gpu->ops->upload(p.gpu, kg, &k1, sizeof k1));
    for (int di = 0; di < 3; di++) {
        dtype_t dt = g_dts[di];
        twin_t x = twin_new(&p, n * per, dt, hx), y = twin_new(&p, n * per, dt, NULL), dx = twin_new(&p, n * per, dt, NULL);
        OK(p.cpu, p.cpu->ops->dropout_fwd(p.cpu, n, per, dt, 0.3, 9, kc, x.c, y.c));
        OK(p.gpu, p.gpu->ops->dropout_fwd(p.gpu, n, per, dt, 0.3, 9, kg, x.g, y.g));
        OK(p.cpu, p.cpu->ops->dropout_bwd(p.cpu, n, per, dt, 0.3, 9, kc, x.c, dx.c));
        OK(p.gpu, p.gpu->ops->dropout_bwd(p.gpu, n, per, dt, 0.3, 9, kg, x.g, dx.g));
        char what[64];
        snprintf(what, sizeof what, "%s dropout forward", dtype_names[dt]);
        CHECK_INT(twin_exact(what, &p, &y), 0);
        snprintf(what, sizeof what, "%s dropout backward", dtype_names[dt]);
        CHECK_INT(twin_exact(what, &p, &dx), 0);
        twin_free(&p, &x); twin_free(&p, &y); twin_free(&p, &dx);
    }
    /* a graph recorded under k1 and replayed after the key became k2 */
    backend_t *g = p.gpu;
    if (g->ops->graph_capture_begin) {
        twin_t x = twin_new(&p, n * per, DT_F32, hx), y = twin_new(&p, n * per, DT_F32, NULL);
        OK(g, g->ops->dropout_fwd(g, n, per, DT_F32, 0.5, 3, kg, x.g, y.g));   /* ran once before recording */
        void *graph = NULL;
        OK(g, g->ops->graph_capture_begin(g));
        int rc = g->ops->dropout_fwd(g, n, per, DT_F32, 0.5, 3, kg, x.g, y.g);
        OK(g, g->ops->graph_capture_end(g, &graph));
        CHECK(rc == 0 && graph != NULL);
        OK(g, g->ops->upload(g, kg, &k2, sizeof k2));
        OK(p.cpu, p.cpu->ops->upload(p.cpu, kc, &k2, sizeof k2));
        if (graph) {
            CHECK_INT(g->ops->graph_launch(g, graph), 0);
            g->ops->graph_free(g, graph);
        }
        OK(p.cpu, p.cpu->ops->dropout_fwd(p.cpu, n, per, DT_F32, 0.5, 3, kc, x.c, y.c));
        CHECK_INT(twin_exact("dropout replayed with a new key", &p, &y), 0);
        twin_free(&p, &x); twin_free(&p, &y);
    }
    p.cpu->ops->release(p.cpu, kc);
    p.gpu->ops->release(p.gpu, kg);
    free(hx);
    pair_free(&p);
}

/* bn with fused relu6 (gamma ~4.5 so both clamps happen), as test_gpu_norm checks relu. */
static void test_bn_relu6(void) {
    pair_t p = pair_make(true, false);
    const int64_t m = 4096;
    const int c = 64;
    float *hx = hrand(m * c, 11, -1, 3), *hg = hrand(c, 12, 4, 5), *hb = hrand(c, 13, -0.5f, 0.5f);
    float *hdy = hrand(m * c, 14, -1, 1), *zero = hbuf(c);
    for (int di = 0; di < 3; di++) {
        dtype_t dt = g_dts[di];
        double tol = dt_tol(dt);
        twin_t x = twin_new(&p, m * c, dt, hx), y = twin_new(&p, m * c, dt, NULL), dy = twin_new(&p, m * c, dt, hdy);
        twin_t dx = twin_new(&p, m * c, dt, NULL), ga = twin_new(&p, c, DT_F32, hg), be_ = twin_new(&p, c, DT_F32, hb);
        twin_t mean = twin_new(&p, c, DT_F32, NULL), var = twin_new(&p, c, DT_F32, NULL);
        twin_t sdy = twin_new(&p, c, DT_F32, NULL), sdx = twin_new(&p, c, DT_F32, NULL);
        twin_t dg = twin_new(&p, c, DT_F32, zero), db = twin_new(&p, c, DT_F32, zero);
        backend_t *bes[2] = {p.cpu, p.gpu};
        for (int i = 0; i < 2; i++) {
            backend_t *be = bes[i];
#define S(t) (i ? (t).g : (t).c)
            OK(be, be->ops->bn_stats(be, m, c, dt, S(x), (float *)S(mean), (float *)S(var)));
            OK(be, be->ops->bn_apply(be, m, c, dt, S(x), (float *)S(mean), (float *)S(var), (float *)S(ga),
                                     (float *)S(be_), 1e-5f, NULL, ACT_RELU6, S(y)));
#undef S
        }
        char what[64];
        snprintf(what, sizeof what, "%s bn_apply relu6", dtype_names[dt]);
        CHECK_INT(twin_cmp(what, &p, &y, tol), 0);
        float *cy, *gy;
        twin_get(&p, &y, &cy, &gy);
        int64_t at6 = 0;
        for (int64_t i = 0; i < m * c; i++) {
            at6 += cy[i] == 6.0f;
            CHECK(gy[i] >= 0.0f && gy[i] <= 6.0f);
        }
        CHECK(at6 > m * c / 50);
        /* backward on identical y, mean and var (the CPU's) */
        twin_t yc = twin_new(&p, m * c, dt, cy);
        float *cm, *gm, *cvv, *gvv;
        twin_get(&p, &mean, &cm, &gm);
        twin_get(&p, &var, &cvv, &gvv);
        twin_t mc = twin_new(&p, c, DT_F32, cm), vc = twin_new(&p, c, DT_F32, cvv);
        for (int i = 0; i < 2; i++) {
            backend_t *be = bes[i];
#define S(t) (i ? (t).g : (t).c)
            OK(be, be->ops->bn_bwd_reduce(be, m, c, dt, S(x), S(yc), ACT_RELU6, S(dy), (float *)S(mc), (float *)S(vc),
                                          NULL, NULL, 1e-5f, (float *)S(sdy), (float *)S(sdx), (float *)S(dg),
                                          (float *)S(db)));
            OK(be, be->ops->bn_bwd_apply(be, m, c, dt, S(x), S(yc), ACT_RELU6, S(dy), (float *)S(mc), (float *)S(vc),
                                         (float *)S(ga), NULL, 1e-5f, (float *)S(sdy), (float *)S(sdx), m, S(dx),
                                         NULL));
#undef S
        }
        snprintf(what, sizeof what, "%s bn relu6 sum_dy", dtype_names[dt]);
        CHECK_INT(twin_cmp(what, &p, &sdy, 1e-3), 0);
        snprintf(what, sizeof what, "%s bn relu6 sum_dy_xhat", dtype_names[dt]);
        CHECK_INT(twin_cmp(what, &p, &sdx, 1e-3), 0);
        snprintf(what, sizeof what, "%s bn relu6 dx", dtype_names[dt]);
        CHECK_INT(twin_cmp(what, &p, &dx, tol), 0);
        free(cy); free(gy); free(cm); free(gm); free(cvv); free(gvv);
        twin_t *all[] = {&x, &y, &dy, &dx, &ga, &be_, &mean, &var, &sdy, &sdx, &dg, &db, &yc, &mc, &vc};
        for (int k = 0; k < 15; k++) twin_free(&p, all[k]);
    }
    free(hx); free(hg); free(hb); free(hdy); free(zero);
    pair_free(&p);
}

int main(void) {
    gpu_or_skip();
    TEST_RUN(test_grouped_conv);
    TEST_RUN(test_elementwise_and_pooling);
    TEST_RUN(test_dropout);
    TEST_RUN(test_bn_relu6);
    return test_main_end();
}
