/* test_cpu_ops.c: the CPU backend's memory ops, elementwise ops, pooling, linear,
 * softmax cross-entropy (label smoothing, top-1/top-5), SGD and AdamW, cast and
 * unscale_check_finite, plus backend.c's dispatch (cuda without CUDA, element sizes).
 *
 * References: double-precision formulas in this file, central finite differences for
 * the gradients (tolerance 1e-5 absolute + 1e-4 relative), and optimizer trajectories
 * printed by PyTorch 1.13 (torch.optim.SGD / AdamW, 3 steps) to 9 significant digits,
 * compared at 1e-6 relative; max pool against PyTorch's outputs and gradients, exactly.
 */
#include "tests/cpu/cpu_test_util.h"

static backend_t *g_be;

static void test_memory(void) {
    const backend_ops_t *ops = g_be->ops;
    size_t base = ops->peak_memory(g_be);
    void *a = ops->alloc(g_be, 1000), *b = ops->alloc(g_be, 3000);
    CHECK(a && b);
    CHECK_INT((uintptr_t)a % 256, 0);
    CHECK_INT((uintptr_t)b % 256, 0);
    CHECK_INT(ops->peak_memory(g_be), base + 4000);
    ops->release(g_be, a);
    void *c = ops->alloc(g_be, 500);
    CHECK_INT(ops->peak_memory(g_be), base + 4000);   /* 3500 live: no new peak */
    float host[4] = {1, 2, 3, 4}, back[4] = {0};
    CHECK_INT(ops->upload(g_be, c, host, sizeof host), 0);
    CHECK_INT(ops->copy(g_be, b, c, sizeof host), 0);
    CHECK_INT(ops->download(g_be, back, b, sizeof back), 0);
    CHECK(memcmp(back, host, sizeof host) == 0);
    CHECK_INT(ops->zero(g_be, b, sizeof host), 0);
    CHECK_INT(ops->download(g_be, back, b, sizeof back), 0);
    CHECK(back[0] == 0 && back[3] == 0);
    CHECK_INT(ops->sync(g_be), 0);
    ops->release(g_be, b);
    ops->release(g_be, c);
    CHECK_INT(ops->peak_memory(g_be), base + 4000);
    /* large buffers take the parallel path: 5 MB + 12 bytes, not a multiple of a chunk */
    size_t n = (5u << 20) / 4 + 3;
    float *big = ops->alloc(g_be, n * 4), *big2 = ops->alloc(g_be, n * 4);
    CHECK(big && big2);
    for (size_t i = 0; i < n; i++) big[i] = (float)i;
    CHECK_INT(ops->copy(g_be, big2, big, n * 4), 0);
    CHECK(memcmp(big, big2, n * 4) == 0);
    CHECK_INT(ops->zero(g_be, big, n * 4), 0);
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += big[i] != 0.0f;
    CHECK_INT(nonzero, 0);
    CHECK(big2[n - 1] == (float)(n - 1));
    CHECK_INT(ops->peak_memory(g_be), base + 8 * n > base + 4000 ? base + 8 * n : base + 4000);
    ops->release(g_be, big);
    ops->release(g_be, big2);
}

static void test_dispatch(void) {
    backend_opts_t o = {0};
    o.kind = BACKEND_CUDA;
    err_t e = {0};
#ifndef RUNNER_HAVE_CUDA
    CHECK(backend_create(&o, &e) == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_STR(e.msg, "device: cuda requested but this runner was built without CUDA "
              "(rebuild with nvcc installed, or set device: cpu)");
    CHECK_INT(backend_cuda_device_count(), 0);
    char v[64] = "x";
    backend_cuda_versions(v, sizeof v);
    CHECK_STR(v, "");
#endif
    CHECK_STR(g_be->ops->name, "cpu");
    CHECK_INT(g_be->kind, BACKEND_CPU);
    CHECK_INT(g_be->threads, 2);
    for (int d = 0; d < DT_COUNT; d++) CHECK_INT(backend_elem_size(g_be, (dtype_t)d), 4);
    CHECK_STR(dtype_names[DT_F32], "fp32");
    CHECK_STR(dtype_names[DT_F16], "fp16");
    CHECK_STR(dtype_names[DT_BF16], "bf16");
    o.kind = BACKEND_CPU;
    o.threads = -1;
    CHECK(backend_create(&o, &e) == NULL);
    CHECK_INT(e.code, ERR_INPUT);
}

static void test_elementwise(void) {
    const backend_ops_t *ops = g_be->ops;
    enum { N = 70000 };   /* more than two parallel chunks */
    float *x = falloc(N), *b = falloc(N), *y = falloc(N), *dx = falloc(N);
    fill_uniform(x, N, 1, -1, 1);
    fill_uniform(b, N, 2, -1, 1);
    CHECK_INT(ops->relu_fwd(g_be, N, DT_F32, x, y), 0);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += y[i] != (x[i] > 0 ? x[i] : 0.0f);
    CHECK_INT(bad, 0);
    CHECK_INT(ops->relu_bwd(g_be, N, DT_F32, y, b, dx), 0);
    bad = 0;
    for (int i = 0; i < N; i++) bad += dx[i] != (x[i] > 0 ? b[i] : 0.0f);
    CHECK_INT(bad, 0);
    CHECK_INT(ops->add(g_be, N, DT_F32, x, b, y), 0);
    bad = 0;
    for (int i = 0; i < N; i++) bad += y[i] != x[i] + b[i];
    CHECK_INT(bad, 0);
    CHECK_INT(ops->add(g_be, N, DT_BF16, x, b, y), 0);
    bad = 0;
    for (int i = 0; i < N; i++) bad += y[i] != round_bf16(x[i] + b[i]);
    CHECK_INT(bad, 0);
    float s[3] = {1, -2, 4};
    CHECK_INT(ops->scale(g_be, 3, s, 0.5f), 0);
    CHECK(s[0] == 0.5f && s[1] == -1.0f && s[2] == 2.0f);
    free(x); free(b); free(y); free(dx);
}

static void test_avgpool(void) {
    const backend_ops_t *ops = g_be->ops;
    enum { NB = 2, HW = 9, CH = 3 };
    float x[NB * HW * CH], y[NB * CH], dy[NB * CH], dx[NB * HW * CH];
    fill_uniform(x, NB * HW * CH, 3, -1, 1);
    fill_uniform(dy, NB * CH, 4, -1, 1);
    CHECK_INT(ops->avgpool_fwd(g_be, NB, HW, CH, DT_F32, x, y), 0);
    for (int b = 0; b < NB; b++)
        for (int c = 0; c < CH; c++) {
            double s = 0;
            for (int i = 0; i < HW; i++) s += x[(b * HW + i) * CH + c];
            CHECK_NEAR(y[b * CH + c], s / HW, 1e-7, 1e-6);
        }
    /* backward: the adjoint, dL/dx = dy / hw, exact for a linear op */
    CHECK_INT(ops->avgpool_bwd(g_be, NB, HW, CH, DT_F32, dy, dx), 0);
    for (int b = 0; b < NB; b++)
        for (int i = 0; i < HW; i++)
            for (int c = 0; c < CH; c++)
                CHECK_NEAR(dx[(b * HW + i) * CH + c], dy[b * CH + c] / 9.0, 1e-8, 1e-6);
}

/* max pool 3x3 / 2, pad 1 (the ImageNet stem's) against PyTorch 1.13
 * (torch.nn.functional.max_pool2d and its backward, float64, printed): n 2, 5x6 input, 3
 * channels, x = ((7h + 3w + 5c + 11n) mod 5) - 2 (integers: many ties, so the first-max
 * rule is what is tested), x[0,2,2,1] = NaN (its window's output is NaN and takes the
 * gradient), x[1, 0..1, 0..1, :] = -inf (window (0,0) is all -inf: the gradient goes to
 * its first element), dy = (pq + 1)(c + 1) / 4 + 10n (sums exact in bf16 too). */
static void test_maxpool(void) {
    const backend_ops_t *ops = g_be->ops;
    enum { NB = 2, H = 5, W = 6, CH = 3, P = 3, Q = 3 };
    static const float want_y[NB * P * Q * CH] = {
        1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, NAN, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1,
        -INFINITY, -INFINITY, -INFINITY, 2, 2, 2, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1,
        1, 2, 2, 2};
    static const float want_dx[NB * H * W * CH] = {
        0, 0, 0, 0.25, 0.5, 0.75, 0, 0, 0, 1.25, 2.5, 3.75, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 1.5, 3, 4.5, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 2.5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 5, 7.5, 15, 0, 0, 0, 0, 0, 0, 2.25, 4.5, 6.75, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 10.25, 10.5, 10.75, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10.75, 11.5,
        12.25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 21.75, 23.5, 25.25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        11, 12, 13, 0, 0, 0, 11.5, 13, 14.5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 14, 16, 0, 0,
        0, 12.25, 14.5, 16.75, 0, 0, 0, 11.75, 13.5, 15.25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0};
    float x[NB * H * W * CH], dy[NB * P * Q * CH], y[NB * P * Q * CH], dx[NB * H * W * CH];
    for (int n = 0; n < NB; n++)
        for (int h = 0; h < H; h++)
            for (int w = 0; w < W; w++)
                for (int c = 0; c < CH; c++)
                    x[((n * H + h) * W + w) * CH + c] = (float)((h * 7 + w * 3 + c * 5 + n * 11) % 5 - 2);
    x[((0 * H + 2) * W + 2) * CH + 1] = NAN;
    for (int h = 0; h < 2; h++)
        for (int w = 0; w < 2; w++)
            for (int c = 0; c < CH; c++) x[((1 * H + h) * W + w) * CH + c] = -INFINITY;
    for (int n = 0; n < NB; n++)
        for (int p = 0; p < P * Q; p++)
            for (int c = 0; c < CH; c++) dy[(n * P * Q + p) * CH + c] = (float)((p + 1) * (c + 1)) * 0.25f + 10.0f * n;
    pool_shape_t s = {.n = NB, .h = H, .w = W, .c = CH, .kernel = 3, .stride = 2, .pad = 1, .p = P, .q = Q};
    for (int d = 0; d < 2; d++) {   /* fp32, and bf16 storage (exact selection, exact sums) */
        dtype_t dt = d ? DT_BF16 : DT_F32;
        memset(y, 0, sizeof y);
        for (size_t i = 0; i < sizeof dx / sizeof dx[0]; i++) dx[i] = 99.0f;   /* overwritten */
        CHECK_INT(ops->maxpool_fwd(g_be, &s, dt, x, y), 0);
        CHECK_INT(ops->maxpool_bwd(g_be, &s, dt, x, dy, dx), 0);
        int bad = 0;
        for (int i = 0; i < NB * P * Q * CH; i++)
            bad += !(isnan(want_y[i]) ? isnan(y[i]) : y[i] == want_y[i]);
        CHECK_INT(bad, 0);
        bad = 0;
        for (int i = 0; i < NB * H * W * CH; i++) bad += dx[i] != want_dx[i];
        CHECK_INT(bad, 0);
    }
}

/* linear forward against double; backward against finite differences of sum(g * y). */
static void test_linear(void) {
    const backend_ops_t *ops = g_be->ops;
    enum { NB = 5, IN = 7, OUT = 4 };
    float x[NB * IN], w[OUT * IN], b[OUT], g[NB * OUT], y[NB * OUT], dx[NB * IN], dw[OUT * IN],
        db[OUT];
    fill_uniform(x, NB * IN, 5, -1, 1);
    fill_uniform(w, OUT * IN, 6, -1, 1);
    fill_uniform(b, OUT, 7, -1, 1);
    fill_uniform(g, NB * OUT, 8, -1, 1);
    CHECK_INT(ops->linear_fwd(g_be, NB, IN, OUT, DT_F32, x, w, b, y), 0);
    double yd[NB * OUT];
    for (int i = 0; i < NB; i++)
        for (int o = 0; o < OUT; o++) {
            double s = b[o];
            for (int k = 0; k < IN; k++) s += (double)x[i * IN + k] * w[o * IN + k];
            yd[i * OUT + o] = s;
        }
    CHECK_INT(compare_arrays("linear y", y, yd, NB * OUT, 1e-6, 1e-5), 0);
    for (int i = 0; i < OUT * IN; i++) dw[i] = 1.0f;
    for (int i = 0; i < OUT; i++) db[i] = -1.0f;
    CHECK_INT(ops->linear_bwd(g_be, NB, IN, OUT, DT_F32, x, w, g, dx, dw, db), 0);
    /* L = sum g*(x w^T + b): dL/dx, dL/dw, dL/db by central differences in double */
    double h = 1e-3;
    for (int i = 0; i < NB; i++)
        for (int k = 0; k < IN; k++) {
            double lp = 0, lm = 0;
            for (int o = 0; o < OUT; o++) {
                lp += g[i * OUT + o] * ((x[i * IN + k] + h) * (double)w[o * IN + k]);
                lm += g[i * OUT + o] * ((x[i * IN + k] - h) * (double)w[o * IN + k]);
            }
            CHECK_NEAR(dx[i * IN + k], (lp - lm) / (2 * h), 1e-5, 1e-4);
        }
    for (int o = 0; o < OUT; o++) {
        for (int k = 0; k < IN; k++) {
            double lp = 0, lm = 0;
            for (int i = 0; i < NB; i++) {
                lp += g[i * OUT + o] * (x[i * IN + k] * ((double)w[o * IN + k] + h));
                lm += g[i * OUT + o] * (x[i * IN + k] * ((double)w[o * IN + k] - h));
            }
            CHECK_NEAR(dw[o * IN + k] - 1.0, (lp - lm) / (2 * h), 1e-5, 1e-4);
        }
        double sb = 0;
        for (int i = 0; i < NB; i++) sb += g[i * OUT + o];
        CHECK_NEAR(db[o] + 1.0, sb, 1e-6, 1e-5);
    }
    /* dx may be NULL */
    CHECK_INT(ops->linear_bwd(g_be, NB, IN, OUT, DT_F32, x, w, g, NULL, dw, db), 0);
    /* AMP: equals the fp32 op on rounded inputs, rounded */
    float xr[NB * IN], wr[OUT * IN], yh[NB * OUT], yr[NB * OUT];
    memcpy(xr, x, sizeof x); round_all(xr, NB * IN, DT_F16);
    memcpy(wr, w, sizeof w); round_all(wr, OUT * IN, DT_F16);
    CHECK_INT(ops->linear_fwd(g_be, NB, IN, OUT, DT_F16, x, w, b, yh), 0);
    CHECK_INT(ops->linear_fwd(g_be, NB, IN, OUT, DT_F32, xr, wr, b, yr), 0);
    round_all(yr, NB * OUT, DT_F16);
    CHECK(memcmp(yh, yr, sizeof yh) == 0);
}

/* torch CrossEntropyLoss(label_smoothing=s), summed over samples, in double. */
static double ref_xent(const double *z, const int32_t *lab, int n, int C, double s) {
    double tot = 0;
    for (int i = 0; i < n; i++) {
        double mx = z[i * C];
        for (int j = 1; j < C; j++) mx = fmax(mx, z[i * C + j]);
        double se = 0;
        for (int j = 0; j < C; j++) se += exp(z[i * C + j] - mx);
        double lse = mx + log(se), smooth = 0;
        for (int j = 0; j < C; j++) smooth += (lse - z[i * C + j]) / C;
        tot += (1 - s) * (lse - z[i * C + lab[i]]) + s * smooth;
    }
    return tot;
}

static void xent_case(float smoothing) {
    enum { NB = 6, CL = 10 };
    float z[NB * CL], d[NB * CL], loss;
    int32_t lab[NB] = {0, 3, 9, 4, 4, 7}, correct[2];
    fill_uniform(z, NB * CL, 9, -3, 3);
    double zd[NB * CL];
    for (int i = 0; i < NB * CL; i++) zd[i] = z[i];
    float gs = 0.25f;
    CHECK_INT(g_be->ops->softmax_xent(g_be, NB, CL, DT_F32, z, lab, smoothing, gs, NULL, d, &loss,
                                      correct), 0);
    CHECK_NEAR(loss, ref_xent(zd, lab, NB, CL, smoothing), 1e-6, 1e-6);
    for (int i = 0; i < NB * CL; i++) {
        double keep = zd[i], h = 1e-4;
        zd[i] = keep + h;
        double lp = ref_xent(zd, lab, NB, CL, smoothing);
        zd[i] = keep - h;
        double lm = ref_xent(zd, lab, NB, CL, smoothing);
        zd[i] = keep;
        CHECK_NEAR(d[i], gs * (lp - lm) / (2 * h), 1e-6, 1e-4);
    }
    /* with a step control the factor is grad_scale * loss_scale: 1024 * the above */
    step_ctl_t ctl = {.loss_scale = 1024.0f};
    float d2[NB * CL], loss3;
    CHECK_INT(g_be->ops->softmax_xent(g_be, NB, CL, DT_F32, z, lab, smoothing, gs, &ctl, d2, &loss3,
                                      correct), 0);
    CHECK(loss3 == loss);
    for (int i = 0; i < NB * CL; i++) CHECK(d2[i] == d[i] * 1024.0f);
    /* evaluation: no gradient */
    float loss2;
    CHECK_INT(g_be->ops->softmax_xent(g_be, NB, CL, DT_F32, z, lab, smoothing, 1.0f, NULL, NULL,
                                      &loss2, correct), 0);
    CHECK(loss2 == loss);
}

static void test_xent(void) { xent_case(0.0f); }
static void test_xent_smoothing(void) { xent_case(0.1f); }

static void test_topk(void) {
    /* 4 samples, 7 classes */
    float z[4 * 7] = {
        5, 1, 2, 3, 0, -1, 4,    /* label 0 is the largest: top-1 and top-5 */
        5, 1, 2, 3, 0, -1, 4,    /* label 2 is 4th: top-5 only */
        5, 1, 2, 3, 0, -1, 4,    /* label 5 is last: neither */
        5, 1, 2, 5, 0, -1, 4,    /* label 3 ties the max of class 0: argmax is 0, top-5 */
    };
    int32_t lab[4] = {0, 2, 5, 3}, correct[2] = {-1, -1};
    float loss;
    CHECK_INT(g_be->ops->softmax_xent(g_be, 4, 7, DT_F32, z, lab, 0, 1, NULL, NULL, &loss, correct), 0);
    CHECK_INT(correct[0], 1);
    CHECK_INT(correct[1], 3);
    /* fewer than 5 classes: every sample is a top-5 hit */
    float z3[2 * 3] = {0, 1, 2, 2, 1, 0};
    int32_t lab3[2] = {0, 0};
    CHECK_INT(g_be->ops->softmax_xent(g_be, 2, 3, DT_F32, z3, lab3, 0, 1, NULL, NULL, &loss, correct), 0);
    CHECK_INT(correct[0], 1);
    CHECK_INT(correct[1], 2);
    /* a label outside [0, classes) is bad input */
    int32_t badlab[2] = {0, 3};
    CHECK_INT(g_be->ops->softmax_xent(g_be, 2, 3, DT_F32, z3, badlab, 0, 1, NULL, NULL, &loss,
                                      correct), -1);
    CHECK_INT(g_be->err.code, ERR_INPUT);
    CHECK_CONTAINS(g_be->err.msg, "label 3 of sample 1");
}

/* Soft targets (mixup): the smoothed one-hot target gives the label-smoothing loss and
 * gradient; a two-label mix is the weighted sum of the two hard losses (the loss is linear
 * in t); the hits follow the dominant label; a step control scales only the gradient. */
static void test_xent_soft(void) {
    enum { NB = 5, CL = 7 };
    float z[NB * CL], t[NB * CL], d[NB * CL], dh[NB * CL], loss, lh;
    int32_t lab[NB] = {0, 6, 2, 2, 5}, correct[2], ch[2];
    fill_uniform(z, NB * CL, 21, -2, 2);
    float s = 0.1f, off = s / CL, on = 1.0f - s + off;
    for (int i = 0; i < NB; i++)
        for (int j = 0; j < CL; j++) t[i * CL + j] = j == lab[i] ? on : off;
    CHECK_INT(g_be->ops->softmax_xent_soft(g_be, NB, CL, DT_F32, z, t, 0.5f, NULL, d, &loss, correct), 0);
    CHECK_INT(g_be->ops->softmax_xent(g_be, NB, CL, DT_F32, z, lab, s, 0.5f, NULL, dh, &lh, ch), 0);
    CHECK_NEAR(loss, lh, 0, 1e-6);
    for (int i = 0; i < NB * CL; i++) CHECK_NEAR(d[i], dh[i], 1e-7, 1e-5);
    CHECK(correct[0] == ch[0] && correct[1] == ch[1]);
    /* 0.7 of label a + 0.3 of label b */
    int32_t la[NB] = {1, 2, 3, 4, 5}, lb[NB] = {6, 0, 3, 1, 2};
    for (int i = 0; i < NB; i++)
        for (int j = 0; j < CL; j++) t[i * CL + j] = (j == la[i] ? 0.7f : 0.0f) + (j == lb[i] ? 0.3f : 0.0f);
    float l1, l2;
    CHECK_INT(g_be->ops->softmax_xent(g_be, NB, CL, DT_F32, z, la, 0, 1, NULL, NULL, &l1, ch), 0);
    int dominant_hits = ch[0];
    CHECK_INT(g_be->ops->softmax_xent(g_be, NB, CL, DT_F32, z, lb, 0, 1, NULL, NULL, &l2, ch), 0);
    CHECK_INT(g_be->ops->softmax_xent_soft(g_be, NB, CL, DT_F32, z, t, 1.0f, NULL, d, &loss, correct), 0);
    CHECK_NEAR(loss, 0.7 * l1 + 0.3 * l2, 0, 1e-6);
    CHECK_INT(correct[0], dominant_hits);
    float d2[NB * CL], loss2;
    step_ctl_t ctl = {.loss_scale = 256.0f};
    CHECK_INT(g_be->ops->softmax_xent_soft(g_be, NB, CL, DT_F32, z, t, 1.0f, &ctl, d2, &loss2, correct), 0);
    CHECK(loss2 == loss);
    for (int i = 0; i < NB * CL; i++) CHECK(d2[i] == d[i] * 256.0f);
    /* a tie in the target goes to the lower class index */
    float zt[CL] = {0, 0, 0, 5, 0, 0, 0}, tt[CL] = {0, 0, 0, 0.5f, 0, 0.5f, 0};
    CHECK_INT(g_be->ops->softmax_xent_soft(g_be, 1, CL, DT_F32, zt, tt, 1.0f, NULL, NULL, &loss, correct), 0);
    CHECK_INT(correct[0], 1);
    /* fp16 activations: the gradient is rounded to half */
    CHECK_INT(g_be->ops->softmax_xent_soft(g_be, NB, CL, DT_F16, z, t, 1.0f, NULL, d2, &loss2, correct), 0);
    for (int i = 0; i < NB * CL; i++) CHECK(d2[i] == round_f16(d[i]));
}

static const float grads[3][4] = {{0.1f, -0.2f, 0.3f, 0.0f}, {0.5f, 0.25f, -1.0f, 2.0f},
                                  {-0.3f, 0.7f, 0.05f, -1.5f}};

/* Three steps through the step control, as optim.c drives them. */
static void sgd_case(double lr, double mom, double damp, double wd, bool nesterov,
                     const double *want_p, const double *want_buf) {
    float p[4] = {1.0f, -2.0f, 0.5f, 3.0f}, buf[4] = {0};
    step_ctl_t ctl = {.loss_scale = 1.0f};
    for (int s = 0; s < 3; s++) {
        CHECK_INT(g_be->ops->sgd_step(g_be, 4, p, grads[s], buf, lr, mom, damp, wd, nesterov, &ctl), 0);
        CHECK_INT(g_be->ops->step_ctl_update(g_be, &ctl), 0);
    }
    CHECK_INT(ctl.optim_steps, 3);
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(p[i], want_p[i], 1e-7, 1e-6);
        if (want_buf) CHECK_NEAR(buf[i], want_buf[i], 1e-7, 1e-6);
    }
}

/* Trajectories printed by torch.optim.SGD (PyTorch 1.13), p0 = [1, -2, 0.5, 3]. */
static void test_sgd(void) {
    sgd_case(0.1, 0.9, 0, 0, false, (double[]){0.907899976, -2.06329989, 0.603699982, 2.76999998},
             (double[]){0.230999947, 0.763000011, -0.606999993, 0.299999952});
    sgd_case(0.1, 0.9, 0, 0.01, true,
             (double[]){0.879358292, -2.1160152, 0.654260159, 2.71961665},
             (double[]){0.256645173, 0.709334552, -0.592906475, 0.377310395});
    sgd_case(0.1, 0.9, 0.5, 0.05, false,
             (double[]){0.91981113, -1.96321607, 0.500986695, 2.82301092},
             (double[]){0.242263407, 0.126410604, -0.139054209, 0.410263419});
    sgd_case(0.1, 0, 0, 0.1, false,
             (double[]){0.940998018, -2.01574588, 0.549746513, 2.86289692}, NULL);
    /* first step by hand: buf = g + wd*p, p -= lr*buf (dampening ignored on step 1) */
    float p[1] = {2.0f}, g[1] = {0.5f}, buf[1] = {123.0f};
    step_ctl_t ctl = {.loss_scale = 1.0f};
    CHECK_INT(g_be->ops->sgd_step(g_be, 1, p, g, buf, 0.1, 0.9, 0.5, 0.25, false, &ctl), 0);
    CHECK_NEAR(buf[0], 1.0, 1e-7, 0);
    CHECK_NEAR(p[0], 1.9, 1e-7, 0);
    /* an overflowed step writes nothing and is not counted; the next one is still the
     * first (momentum buffer = gradient) */
    float p2[1] = {2.0f}, buf2[1] = {123.0f};
    step_ctl_t skip = {.loss_scale = 1.0f, .found_inf = 1};
    CHECK_INT(g_be->ops->sgd_step(g_be, 1, p2, g, buf2, 0.1, 0.9, 0.5, 0.25, false, &skip), 0);
    CHECK(p2[0] == 2.0f && buf2[0] == 123.0f);
    CHECK_INT(g_be->ops->step_ctl_update(g_be, &skip), 0);
    CHECK_INT(skip.optim_steps, 0);
    skip.found_inf = 0;
    CHECK_INT(g_be->ops->sgd_step(g_be, 1, p2, g, buf2, 0.1, 0.9, 0.5, 0.25, false, &skip), 0);
    CHECK(p2[0] == p[0] && buf2[0] == buf[0]);
}

static void adamw_case(double lr, double b1, double b2, double eps, double wd, const double *want_p,
                       const double *want_m, const double *want_v) {
    float p[4] = {1.0f, -2.0f, 0.5f, 3.0f}, m[4] = {0}, v[4] = {0};
    step_ctl_t ctl = {.loss_scale = 1.0f};
    for (int s = 0; s < 3; s++) {
        CHECK_INT(g_be->ops->adamw_step(g_be, 4, p, grads[s], m, v, lr, b1, b2, eps, wd, &ctl), 0);
        CHECK_INT(g_be->ops->step_ctl_update(g_be, &ctl), 0);
    }
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(p[i], want_p[i], 1e-7, 1e-6);
        CHECK_NEAR(m[i], want_m[i], 1e-9, 1e-6);
        CHECK_NEAR(v[i], want_v[i], 1e-10, 1e-6);
    }
}

/* Trajectories printed by torch.optim.AdamW (PyTorch 1.13). */
static void test_adamw(void) {
    adamw_case(0.01, 0.9, 0.999, 1e-8, 0.1,
               (double[]){0.975925922, -1.99198484, 0.497431427, 2.98280859},
               (double[]){0.0230999961, 0.0763000026, -0.0606999956, 0.02999999},
               (double[]){0.000349730049, 0.000592357537, 0.00109132018, 0.00624600006});
    adamw_case(0.1, 0.8, 0.99, 1e-3, 0.0,
               (double[]){0.792475998, -1.99323952, 0.495177716, 2.91885209},
               (double[]){0.0328000039, 0.154400006, -0.111599997, 0.0200000182},
               (double[]){0.00347301015, 0.00591078959, 0.0108070904, 0.0621000007});
    /* step 1 by hand: m = 0.1 g, v = 0.001 g^2, m_hat = g, v_hat = g^2: p -= lr*g/(|g|+eps) */
    float p[1] = {1.0f}, g[1] = {0.5f}, m[1] = {0}, v[1] = {0};
    step_ctl_t ctl = {.loss_scale = 1.0f};
    CHECK_INT(g_be->ops->adamw_step(g_be, 1, p, g, m, v, 0.1, 0.9, 0.999, 1e-8, 0.0, &ctl), 0);
    CHECK_NEAR(p[0], 1.0 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-7, 0);
    /* skipped on found_inf: nothing written */
    ctl.found_inf = 1;
    CHECK_INT(g_be->ops->adamw_step(g_be, 1, p, g, m, v, 0.1, 0.9, 0.999, 1e-8, 0.0, &ctl), 0);
    CHECK_NEAR(p[0], 1.0 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-7, 0);
    CHECK(m[0] == 0.05f);
}

/* The bulk rounding (vectorised) gives exactly util/half.h's bits on random values of
 * every magnitude and on the special cases: subnormals, ties, overflow, inf, NaN. */
static void test_cast_bits(void) {
    enum { N = 200003 };
    float *src = falloc(N), *dst = falloc(N);
    rng_t r = rng_make(5, RNG_STREAM_MISC, 1, 2);
    for (int i = 0; i < N; i++) {
        uint32_t u = rng_u32(&r);
        memcpy(&src[i], &u, 4);          /* any bit pattern: all exponents, NaNs, infs */
    }
    const float specials[] = {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, -65520.0f,
                              5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, 1.00048828125f,
                              1.00146484375f, 1.00390625f, 1.01171875f, INFINITY, -INFINITY,
                              NAN, 3.4e38f, 1e-40f};
    for (int i = 0; i < (int)(sizeof specials / sizeof specials[0]); i++) src[i] = specials[i];
    for (int d = 1; d <= 2; d++) {
        dtype_t dt = (dtype_t)d;
        CHECK_INT(g_be->ops->cast(g_be, N, src, DT_F32, dst, dt), 0);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float want = dt == DT_F16 ? round_f16(src[i]) : round_bf16(src[i]);
            bool ok = isnan(want) ? isnan(dst[i]) : memcmp(&want, &dst[i], 4) == 0;
            if (!ok && bad++ < 3)
                fprintf(stderr, "  %s [%d] %a -> %a, expected %a\n", dtype_names[dt], i,
                        (double)src[i], (double)dst[i], (double)want);
        }
        CHECK_INT(bad, 0);
    }
    free(src);
    free(dst);
}

static void test_cast_unscale(void) {
    const backend_ops_t *ops = g_be->ops;
    float src[6] = {1.0001f, 65520.0f, -3.14159265f, 1e-8f, 70000.0f, 1.00390625f};
    float dst[6];
    CHECK_INT(ops->cast(g_be, 6, src, DT_F32, dst, DT_F16), 0);
    CHECK(dst[0] == 1.0f);                    /* fp16 spacing at 1 is 2^-10 */
    CHECK(isinf(dst[1]) && dst[1] > 0);       /* 65520 rounds up past the fp16 maximum */
    CHECK(dst[2] == -3.140625f);
    CHECK(dst[3] == 0.0f || fabsf(dst[3]) < 6e-8f);
    CHECK(isinf(dst[4]));
    CHECK(dst[5] == 1.00390625f);             /* exactly representable in fp16 */
    CHECK_INT(ops->cast(g_be, 6, src, DT_F32, dst, DT_BF16), 0);
    CHECK(dst[0] == 1.0f);
    CHECK(dst[1] == 65536.0f);                /* bf16 has 8 bits of mantissa */
    CHECK(dst[2] == -3.140625f);
    CHECK(dst[5] == 1.0f);                    /* 1 + 2^-8 is a tie: rounds to even (1.0) */
    CHECK_INT(ops->cast(g_be, 6, dst, DT_BF16, src, DT_F32), 0);
    CHECK(src[1] == 65536.0f);

    float g[4] = {2.0f, -4.0f, 8.0f, 1.0f};
    step_ctl_t ctl = {.loss_scale = 2.0f};
    CHECK_INT(ops->unscale_check_finite(g_be, 4, g, &ctl), 0);
    CHECK_INT(ctl.found_inf, 0);
    CHECK(g[0] == 1.0f && g[1] == -2.0f && g[2] == 4.0f && g[3] == 0.5f);
    enum { N = 100000 };
    float *big = falloc(N);
    big[N - 7] = INFINITY;
    CHECK_INT(ops->unscale_check_finite(g_be, N, big, &ctl), 0);
    CHECK_INT(ctl.found_inf, 1);
    ctl.found_inf = 0;
    big[N - 7] = 0;
    big[3] = NAN;
    CHECK_INT(ops->unscale_check_finite(g_be, N, big, &ctl), 0);
    CHECK_INT(ctl.found_inf, 1);
    /* found_inf is only ever set, never cleared */
    big[3] = 0;
    CHECK_INT(ops->unscale_check_finite(g_be, N, big, &ctl), 0);
    CHECK_INT(ctl.found_inf, 1);
    /* the check looks at each value before scaling, as torch's does: with scale 1/4 a
     * large finite gradient becomes inf when unscaled and is not reported */
    float huge[1] = {3.0e38f};
    step_ctl_t small = {.loss_scale = 0.25f};
    CHECK_INT(ops->unscale_check_finite(g_be, 1, huge, &small), 0);
    CHECK_INT(small.found_inf, 0);
    CHECK(isinf(huge[0]));
    free(big);
}

int main(void) {
    g_be = make_cpu(2);
    TEST_RUN(test_memory);
    TEST_RUN(test_dispatch);
    TEST_RUN(test_elementwise);
    TEST_RUN(test_avgpool);
    TEST_RUN(test_maxpool);
    TEST_RUN(test_linear);
    TEST_RUN(test_xent);
    TEST_RUN(test_xent_smoothing);
    TEST_RUN(test_topk);
    TEST_RUN(test_xent_soft);
    TEST_RUN(test_sgd);
    TEST_RUN(test_adamw);
    TEST_RUN(test_cast_bits);
    TEST_RUN(test_cast_unscale);
    backend_free(g_be);
    return test_main_end();
}
