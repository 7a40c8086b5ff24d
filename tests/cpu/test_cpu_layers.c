/* test_cpu_layers.c: the CPU backend's ops for the new families' layers (cpu_layers.c):
 * relu6, the per-channel conv bias, dropout and adaptive average pooling, and VGG's 2x2
 * stride-2 max pool (cpu_ops.c), against
 * double-precision references and values PyTorch 1.13 gives (quoted where used).
 *
 * Tolerances: the bias gradient and the pools sum in double and round once, so they agree
 * with the double reference to 1 ulp of fp32 (rtol 2^-23 = 1.2e-7, with an absolute floor
 * for sums that cancel); relu6 and dropout are one fp32 operation per element, checked
 * bit for bit.
 */
#include "tests/cpu/cpu_test_util.h"
#include "util/dropout.h"

static backend_t *g_be;

/* torch.nn.functional.relu6 on [-1, 0, 1e-7, 3, 6, 6.0001, 7, nan] and its backward with
 * dy = 1 (torch 1.13: [0, 0, 1e-7, 3, 6, 6, 6, nan] and [0, 0, 1, 1, 0, 0, 0, 1]: the
 * gradient passes strictly inside (0, 6), and for NaN). */
static void test_relu6(void) {
    const float x[8] = {-1.0f, 0.0f, 1e-7f, 3.0f, 6.0f, 6.0001f, 7.0f, NAN};
    const float want_y[8] = {0.0f, 0.0f, 1e-7f, 3.0f, 6.0f, 6.0f, 6.0f, NAN};
    const float want_dx[8] = {0, 0, 1, 1, 0, 0, 0, 1};
    float y[8], dy[8], dx[8];
    for (int i = 0; i < 8; i++) dy[i] = 1.0f;
    CHECK_INT(g_be->ops->relu6_fwd(g_be, 8, DT_F32, x, y), 0);
    for (int i = 0; i < 7; i++) CHECK(y[i] == want_y[i]);
    CHECK(isnan(y[7]));
    CHECK_INT(g_be->ops->relu6_bwd(g_be, 8, DT_F32, y, dy, dx), 0);
    for (int i = 0; i < 8; i++) CHECK(dx[i] == want_dx[i]);
    /* a large array (several pool chunks), in place */
    int64_t n = 100003;
    float *a = falloc(n), *b = falloc(n);
    fill_uniform(a, n, 5, -3, 9);
    memcpy(b, a, (size_t)n * 4);
    CHECK_INT(g_be->ops->relu6_fwd(g_be, n, DT_F32, a, a), 0);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += a[i] != fminf(fmaxf(b[i], 0.0f), 6.0f);
    CHECK_INT(bad, 0);
    free(a);
    free(b);
}

/* y += b per channel (rounded once to dt); db += column sums of dy, deterministic. */
static void test_channel_bias(void) {
    const int64_t m = 1000;
    const int c = 37;
    float *y = falloc(m * c), *y0 = falloc(m * c), *b = falloc(c), *dy = falloc(m * c);
    float db[37], db1[37];
    fill_uniform(y0, m * c, 1, -2, 2);
    fill_uniform(b, c, 2, -1, 1);
    fill_uniform(dy, m * c, 3, -1, 1);
    for (int dt = DT_F32; dt <= DT_BF16; dt++) {
        memcpy(y, y0, (size_t)(m * c) * 4);
        round_all(y, m * c, (dtype_t)dt);
        float *want = falloc(m * c);
        for (int64_t i = 0; i < m * c; i++) want[i] = y[i] + b[i % c];
        round_all(want, m * c, (dtype_t)dt);
        CHECK_INT(g_be->ops->channel_bias_fwd(g_be, m, c, (dtype_t)dt, b, y), 0);
        CHECK(memcmp(y, want, (size_t)(m * c) * 4) == 0);
        free(want);
    }
    double ref[37];
    for (int j = 0; j < c; j++) {
        ref[j] = 0.5;
        for (int64_t i = 0; i < m; i++) ref[j] += dy[i * c + j];
        db[j] = 0.5f;
        db1[j] = 0.5f;
    }
    CHECK_INT(g_be->ops->channel_bias_bwd(g_be, m, c, DT_F32, dy, db), 0);
    CHECK_INT(compare_arrays("db", db, ref, c, 1e-6, 1.2e-7), 0);
    backend_t *one = make_cpu(1);
    CHECK_INT(one->ops->channel_bias_bwd(one, m, c, DT_F32, dy, db1), 0);
    CHECK(memcmp(db, db1, sizeof db) == 0);   /* the thread count does not matter */
    backend_free(one);
    free(y); free(y0); free(b); free(dy);
}

/* torch's fp32 scale: torch.ones(1).div_(1 - p) in torch 1.13 gives 1.1111111640930176,
 * 1.25, 1.4285714626312256, 2.0 for p = 0.1, 0.2, 0.3, 0.5 (1.0f / (float)(1 - p)). */
static void test_dropout_scale_is_torchs(void) {
    CHECK(dropout_scale(0.1) == 1.1111111640930176f);
    CHECK(dropout_scale(0.2) == 1.25f);
    CHECK(dropout_scale(0.3) == 1.4285714626312256f);
    CHECK(dropout_scale(0.5) == 2.0f);
    CHECK(dropout_scale(1.0) == 0.0f);
    CHECK(dropout_threshold(0.0) == 0);
    CHECK(dropout_threshold(0.5) == (uint64_t)1 << 31);
    CHECK(dropout_threshold(1.0) == (uint64_t)1 << 32);
}

/* The first draws of a fixed key, pinned: a change of the mask function would silently
 * change every resumed run's masks (and break resuming a checkpoint of an older version
 * bit for bit), so it must show up here. */
static void test_dropout_draws_pinned(void) {
    uint32_t u[4];
    dropout_block(0x123456789ABCull, 3, 5, 4, 0, u);
    uint32_t v[4];
    dropout_block(0x123456789ABCull, 3, 5, 4, 0, v);
    CHECK(memcmp(u, v, sizeof u) == 0);
    /* the same four words from families_ref.py's numpy Philox */
    static const uint32_t want[4] = {0x93936b33u, 0xedc11597u, 0x7e9b6523u, 0xc9730ef0u};
    for (int i = 0; i < 4; i++) {
        if (u[i] != want[i]) fprintf(stderr, "  draw %d: 0x%08x\n", i, u[i]);
        CHECK(u[i] == want[i]);
    }
    /* every key component changes the draws */
    uint32_t w[4];
    const uint64_t alt[5][5] = {{1, 3, 5, 4, 0}, {0x123456789ABCull, 4, 5, 4, 0}, {0x123456789ABCull, 3, 6, 4, 0},
                                {0x123456789ABCull, 3, 5, 5, 0}, {0x123456789ABCull, 3, 5, 4, 1}};
    for (int k = 0; k < 5; k++) {
        dropout_block(alt[k][0], alt[k][1], alt[k][2], (uint32_t)alt[k][3], (uint32_t)alt[k][4], w);
        CHECK(memcmp(u, w, sizeof u) != 0);
    }
}

/* Forward keeps ~1 - p of the elements, as x * scale exactly, zeroes the rest; backward
 * uses the same mask; half outputs are round(x * scale); p = 1 zeroes all; a second
 * backend with another thread count draws the same. */
static void test_dropout_op(void) {
    const int n = 6;
    const int64_t per = 1001;   /* not a multiple of 4: the last block is partial */
    dropout_key_t key = {.seed = 77, .epoch = 2, .first_sample = 40, .sample_stride = 3};
    float *x = falloc(n * per), *y = falloc(n * per), *ones = falloc(n * per), *dx = falloc(n * per);
    fill_uniform(x, n * per, 9, 0.5f, 1.5f);
    for (int64_t i = 0; i < n * per; i++) ones[i] = 1.0f;
    const double p = 0.3;
    float s = dropout_scale(p);
    CHECK_INT(g_be->ops->dropout_fwd(g_be, n, per, DT_F32, p, 7, &key, x, y), 0);
    CHECK_INT(g_be->ops->dropout_bwd(g_be, n, per, DT_F32, p, 7, &key, ones, dx), 0);
    int64_t kept = 0, bad = 0;
    for (int i = 0; i < n; i++)
        for (int64_t el = 0; el < per; el++) {
            int64_t k = i * per + el;
            uint32_t u[4];
            dropout_block(key.seed, key.epoch, (uint64_t)(key.first_sample + i * key.sample_stride), 7,
                          (uint32_t)(el / 4), u);
            bool keep = (uint64_t)u[el % 4] >= dropout_threshold(p);
            kept += keep;
            bad += y[k] != (keep ? x[k] * s : 0.0f) || dx[k] != (keep ? s : 0.0f);
        }
    CHECK_INT(bad, 0);
    double frac = (double)kept / (double)(n * per);
    fprintf(stderr, "  kept %.4f of %lld at p 0.3\n", frac, (long long)(n * per));
    CHECK(fabs(frac - 0.7) < 0.03);   /* 6006 Bernoulli(0.7) draws: sd 0.006 */
    backend_t *one = make_cpu(1);
    float *y1 = falloc(n * per);
    CHECK_INT(one->ops->dropout_fwd(one, n, per, DT_F32, p, 7, &key, x, y1), 0);
    CHECK(memcmp(y, y1, (size_t)(n * per) * 4) == 0);
    backend_free(one);
    /* half: round(x * scale) on half inputs */
    float *xh = falloc(n * per);
    memcpy(xh, x, (size_t)(n * per) * 4);
    round_all(xh, n * per, DT_BF16);
    CHECK_INT(g_be->ops->dropout_fwd(g_be, n, per, DT_BF16, p, 7, &key, xh, y1), 0);
    bad = 0;
    for (int64_t k = 0; k < n * per; k++) bad += y1[k] != (y[k] == 0.0f ? 0.0f : round_bf16(xh[k] * s));
    CHECK_INT(bad, 0);
    CHECK_INT(g_be->ops->dropout_fwd(g_be, n, per, DT_F32, 1.0, 7, &key, x, y1), 0);
    bad = 0;
    for (int64_t k = 0; k < n * per; k++) bad += y1[k] != 0.0f;
    CHECK_INT(bad, 0);
    free(x); free(y); free(y1); free(ones); free(dx); free(xh);
}

/* Double reference of adaptive_avg_pool2d (NHWC) and its adjoint. */
static void ref_apool(const pool_shape_t *s, const double *x, double *y) {
    for (int b = 0; b < s->n; b++)
        for (int i = 0; i < s->p; i++)
            for (int j = 0; j < s->q; j++) {
                int h0 = i * s->h / s->p, h1 = ((i + 1) * s->h + s->p - 1) / s->p;
                int w0 = j * s->w / s->q, w1 = ((j + 1) * s->w + s->q - 1) / s->q;
                for (int c = 0; c < s->c; c++) {
                    double acc = 0;
                    for (int h = h0; h < h1; h++)
                        for (int w = w0; w < w1; w++) acc += x[(((int64_t)b * s->h + h) * s->w + w) * s->c + c];
                    y[(((int64_t)b * s->p + i) * s->q + j) * s->c + c] = acc / ((h1 - h0) * (w1 - w0));
                }
            }
}

static void ref_apool_bwd(const pool_shape_t *s, const double *dy, double *dx) {
    memset(dx, 0, (size_t)s->n * s->h * s->w * s->c * sizeof(double));
    for (int b = 0; b < s->n; b++)
        for (int i = 0; i < s->p; i++)
            for (int j = 0; j < s->q; j++) {
                int h0 = i * s->h / s->p, h1 = ((i + 1) * s->h + s->p - 1) / s->p;
                int w0 = j * s->w / s->q, w1 = ((j + 1) * s->w + s->q - 1) / s->q;
                for (int c = 0; c < s->c; c++) {
                    double g = dy[(((int64_t)b * s->p + i) * s->q + j) * s->c + c] / ((h1 - h0) * (w1 - w0));
                    for (int h = h0; h < h1; h++)
                        for (int w = w0; w < w1; w++) dx[(((int64_t)b * s->h + h) * s->w + w) * s->c + c] += g;
                }
            }
}

static void test_adaptive_avgpool(void) {
    /* torch 1.13: adaptive_avg_pool2d(arange(5) as 5x1, (3, 1)) = [0.5, 2, 3.5] (windows
     * [0,2), [1,4), [3,5)); arange(7) as 1x7 to (1, 3) = [1, 3, 5] */
    float a5[5] = {0, 1, 2, 3, 4}, o3[3], a7[7] = {0, 1, 2, 3, 4, 5, 6};
    pool_shape_t s5 = {.n = 1, .h = 5, .w = 1, .c = 1, .p = 3, .q = 1};
    CHECK_INT(g_be->ops->adaptive_avgpool_fwd(g_be, &s5, DT_F32, a5, o3), 0);
    CHECK(o3[0] == 0.5f && o3[1] == 2.0f && o3[2] == 3.5f);
    pool_shape_t s7 = {.n = 1, .h = 1, .w = 7, .c = 1, .p = 1, .q = 3};
    CHECK_INT(g_be->ops->adaptive_avgpool_fwd(g_be, &s7, DT_F32, a7, o3), 0);
    CHECK(o3[0] == 1.0f && o3[1] == 3.0f && o3[2] == 5.0f);
    /* random shapes against the double reference, both directions */
    const pool_shape_t shapes[] = {
        {.n = 2, .h = 5, .w = 7, .c = 3, .p = 3, .q = 2},  {.n = 2, .h = 3, .w = 3, .c = 16, .p = 2, .q = 2},
        {.n = 3, .h = 1, .w = 1, .c = 5, .p = 7, .q = 7},  {.n = 2, .h = 7, .w = 7, .c = 9, .p = 7, .q = 7},
        {.n = 2, .h = 14, .w = 10, .c = 8, .p = 7, .q = 7}, {.n = 2, .h = 6, .w = 6, .c = 4, .p = 4, .q = 5}};
    for (int k = 0; k < (int)(sizeof shapes / sizeof shapes[0]); k++) {
        const pool_shape_t *s = &shapes[k];
        int64_t nx = (int64_t)s->n * s->h * s->w * s->c, ny = (int64_t)s->n * s->p * s->q * s->c;
        float *x = falloc(nx), *y = falloc(ny), *dy = falloc(ny), *dx = falloc(nx);
        double *xd = dalloc(nx), *yd = dalloc(ny), *dyd = dalloc(ny), *dxd = dalloc(nx);
        fill_uniform(x, nx, 20 + k, -1, 1);
        fill_uniform(dy, ny, 40 + k, -1, 1);
        for (int64_t i = 0; i < nx; i++) xd[i] = x[i];
        for (int64_t i = 0; i < ny; i++) dyd[i] = dy[i];
        ref_apool(s, xd, yd);
        ref_apool_bwd(s, dyd, dxd);
        for (int64_t i = 0; i < nx; i++) dx[i] = 99.0f;   /* overwritten */
        CHECK_INT(g_be->ops->adaptive_avgpool_fwd(g_be, s, DT_F32, x, y), 0);
        CHECK_INT(g_be->ops->adaptive_avgpool_bwd(g_be, s, DT_F32, dy, dx), 0);
        CHECK_INT(compare_arrays("apool y", y, yd, ny, 1e-7, 1.2e-7), 0);
        CHECK_INT(compare_arrays("apool dx", dx, dxd, nx, 1e-7, 1.2e-7), 0);
        free(x); free(y); free(dy); free(dx); free(xd); free(yd); free(dyd); free(dxd);
    }
    /* to 1x1 it is the global average pool, bit for bit */
    pool_shape_t g = {.n = 2, .h = 4, .w = 4, .c = 6, .p = 1, .q = 1};
    float x[2 * 16 * 6], y1[12], y2[12], d1[2 * 16 * 6], d2[2 * 16 * 6];
    fill_uniform(x, 2 * 16 * 6, 3, -1, 1);
    CHECK_INT(g_be->ops->adaptive_avgpool_fwd(g_be, &g, DT_F32, x, y1), 0);
    CHECK_INT(g_be->ops->avgpool_fwd(g_be, 2, 16, 6, DT_F32, x, y2), 0);
    CHECK(memcmp(y1, y2, sizeof y1) == 0);
    CHECK_INT(g_be->ops->adaptive_avgpool_bwd(g_be, &g, DT_F32, y1, d1), 0);
    CHECK_INT(g_be->ops->avgpool_bwd(g_be, 2, 16, 6, DT_F32, y1, d2), 0);
    for (int i = 0; i < 2 * 16 * 6; i++) CHECK_NEAR(d1[i], d2[i], 0, 1.2e-7);
}

/* VGG's max pool, 2x2 stride 2 pad 0, on an odd 7x5 map (the last row and column are
 * dropped) with ties (x = ((3h + 5w + 7c) mod 4) - 1, integers), against PyTorch 1.13
 * (max_pool2d and its backward, float64; dy = (pq + 1)(c + 1) / 2), fp32 and bf16. */
static void test_maxpool_vgg(void) {
    enum { H = 7, W = 5, CH = 2, P = 3, Q = 2 };
    static const float want_y[P * Q * CH] = {2, 2, 2, 1, 2, 1, 2, 2, 2, 2, 2, 1};
    static const float want_dx[H * W * CH] = {
        0, 1, 0, 0, 0, 0, 1, 2, 0, 0, 0.5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.5, 3, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 2,
        0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 3, 6, 0, 0, 2.5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    float x[H * W * CH], dy[P * Q * CH], y[P * Q * CH], dx[H * W * CH];
    for (int h = 0; h < H; h++)
        for (int w = 0; w < W; w++)
            for (int c = 0; c < CH; c++) x[(h * W + w) * CH + c] = (float)((3 * h + 5 * w + 7 * c) % 4 - 1);
    for (int p = 0; p < P * Q; p++)
        for (int c = 0; c < CH; c++) dy[p * CH + c] = (float)((p + 1) * (c + 1)) * 0.5f;
    pool_shape_t s = {.n = 1, .h = H, .w = W, .c = CH, .kernel = 2, .stride = 2, .pad = 0, .p = P, .q = Q};
    for (int d = 0; d < 2; d++) {
        dtype_t dt = d ? DT_BF16 : DT_F32;
        for (int i = 0; i < H * W * CH; i++) dx[i] = 99.0f;   /* overwritten */
        CHECK_INT(g_be->ops->maxpool_fwd(g_be, &s, dt, x, y), 0);
        CHECK_INT(g_be->ops->maxpool_bwd(g_be, &s, dt, x, dy, dx), 0);
        CHECK(memcmp(y, want_y, sizeof y) == 0);
        CHECK(memcmp(dx, want_dx, sizeof dx) == 0);
    }
}

int main(void) {
    g_be = make_cpu(2);
    TEST_RUN(test_relu6);
    TEST_RUN(test_channel_bias);
    TEST_RUN(test_dropout_scale_is_torchs);
    TEST_RUN(test_dropout_draws_pinned);
    TEST_RUN(test_dropout_op);
    TEST_RUN(test_adaptive_avgpool);
    TEST_RUN(test_maxpool_vgg);
    backend_free(g_be);
    return test_main_end();
}
