/* test_gpu_ops.c: the CUDA backend's elementwise, pooling (average and max), linear (cuBLASLt), loss,
 * optimizer (with gradient clipping and the EMA update) and AMP ops against the CPU
 * backend on the same inputs, plus AMP overflow
 * detection (found_inf set on the device by an inf or NaN, untouched otherwise), exact
 * casts, and memory accounting. Skipped (77) without a GPU.
 */
#include "tests/gpu/gpu_test_util.h"

#define S(t) (i ? (t).g : (t).c)

static void check_elementwise(dtype_t dt) {
    pair_t p = pair_make(true, false);
    const int64_t n = 10007;   /* odd: exercises the scalar tail of the vector kernels */
    float *ha = hrand(n, 21, -1, 1), *hb = hrand(n, 22, -1, 1);
    twin_t a = twin_new(&p, n, dt, ha), b = twin_new(&p, n, dt, hb);
    twin_t r = twin_new(&p, n, dt, NULL), rb = twin_new(&p, n, dt, NULL), s = twin_new(&p, n, dt, NULL);
    backend_t *bes[2] = {p.cpu, p.gpu};
    for (int i = 0; i < 2; i++) {
        backend_t *be = bes[i];
        OK(be, be->ops->relu_fwd(be, n, dt, S(a), S(r)));
        OK(be, be->ops->relu_bwd(be, n, dt, S(r), S(b), S(rb)));
        OK(be, be->ops->add(be, n, dt, S(a), S(b), S(s)));
    }
    CHECK_INT(twin_cmp("relu_fwd", &p, &r, 0.0), 0);
    CHECK_INT(twin_cmp("relu_bwd", &p, &rb, 0.0), 0);
    CHECK_INT(twin_cmp("add", &p, &s, dt == DT_F32 ? 0.0 : dt_tol(dt)), 0);
    /* unaligned views take the scalar path */
    size_t es = dt == DT_F32 ? 4 : 2;
    twin_t s2 = twin_new(&p, n - 1, dt, NULL);
    for (int i = 0; i < 2; i++) {
        backend_t *be = bes[i];
        size_t off = i ? es : 4;
        OK(be, be->ops->add(be, n - 1, dt, (char *)S(a) + off, (char *)S(b) + off, S(s2)));
    }
    CHECK_INT(twin_cmp("add (offset views)", &p, &s2, dt == DT_F32 ? 0.0 : dt_tol(dt)), 0);
    twin_t *all[] = {&a, &b, &r, &rb, &s, &s2};
    for (int i = 0; i < 6; i++) twin_free(&p, all[i]);
    free(ha); free(hb);
    pair_free(&p);
}
static void test_elementwise_fp32(void) { check_elementwise(DT_F32); }
static void test_elementwise_fp16(void) { check_elementwise(DT_F16); }
static void test_elementwise_bf16(void) { check_elementwise(DT_BF16); }

static void check_pool(dtype_t dt) {
    pair_t p = pair_make(true, false);
    int n = 4, hw = 16, c = 96;
    float *hx = hrand((int64_t)n * hw * c, 31, -1, 1), *hdy = hrand((int64_t)n * c, 32, -1, 1);
    twin_t x = twin_new(&p, (int64_t)n * hw * c, dt, hx), y = twin_new(&p, (int64_t)n * c, dt, NULL);
    twin_t dy = twin_new(&p, (int64_t)n * c, dt, hdy), dx = twin_new(&p, (int64_t)n * hw * c, dt, NULL);
    backend_t *bes[2] = {p.cpu, p.gpu};
    for (int i = 0; i < 2; i++) {
        backend_t *be = bes[i];
        OK(be, be->ops->avgpool_fwd(be, n, hw, c, dt, S(x), S(y)));
        OK(be, be->ops->avgpool_bwd(be, n, hw, c, dt, S(dy), S(dx)));
    }
    CHECK_INT(twin_cmp("avgpool_fwd", &p, &y, dt_tol(dt)), 0);
    CHECK_INT(twin_cmp("avgpool_bwd", &p, &dx, dt_tol(dt)), 0);
    twin_free(&p, &x); twin_free(&p, &y); twin_free(&p, &dy); twin_free(&p, &dx);
    free(hx); free(hdy);
    pair_free(&p);
}
static void test_pool(void) { check_pool(DT_F32); check_pool(DT_F16); check_pool(DT_BF16); }

/* Elements where the two sides differ (both NaN counts as equal; -inf == -inf). */
static int twin_diff_exact(const char *what, pair_t *p, const twin_t *t) {
    float *cv, *gv;
    twin_get(p, t, &cv, &gv);
    int bad = 0;
    for (int64_t i = 0; i < t->n; i++)
        if (!(gv[i] == cv[i] || (isnan(gv[i]) && isnan(cv[i])))) {
            if (!bad) fprintf(stderr, "  %s: [%lld] gpu %.9g cpu %.9g\n", what, (long long)i, gv[i], cv[i]);
            bad++;
        }
    free(cv);
    free(gv);
    return bad;
}

/* Max pool: exact selection forward and fixed-order fp32 sums backward on both sides, so
 * the GPU equals the CPU bit for bit in every dtype. Values take 7 levels (ties in most
 * windows, so the first-max rule is exercised), with a NaN and a block of -inf; three
 * geometries (the ImageNet stem's 3/2/1, 2/2/0, 3/1/1) on odd sizes. */
static void check_maxpool(dtype_t dt, int kernel, int stride, int pad) {
    pair_t p = pair_make(true, false);
    pool_shape_t s = {.n = 3, .h = 13, .w = 11, .c = 67, .kernel = kernel, .stride = stride, .pad = pad};
    s.p = (s.h + 2 * pad - kernel) / stride + 1;
    s.q = (s.w + 2 * pad - kernel) / stride + 1;
    int64_t nx = (int64_t)s.n * s.h * s.w * s.c, ny = (int64_t)s.n * s.p * s.q * s.c;
    float *hx = hrand(nx, 33, 0, 7), *hdy = hrand(ny, 34, -1, 1);
    for (int64_t i = 0; i < nx; i++) hx[i] = floorf(hx[i]) - 3.0f;
    hx[(int64_t)5 * s.c + 7] = NAN;
    for (int h = 0; h < 3; h++)
        for (int w = 0; w < 3; w++) hx[(((int64_t)2 * s.h + h) * s.w + w) * s.c + 1] = -INFINITY;
    twin_t x = twin_new(&p, nx, dt, hx), y = twin_new(&p, ny, dt, NULL);
    twin_t dy = twin_new(&p, ny, dt, hdy), dx = twin_new(&p, nx, dt, hx);   /* dx overwritten */
    backend_t *bes[2] = {p.cpu, p.gpu};
    for (int i = 0; i < 2; i++) {
        backend_t *be = bes[i];
        OK(be, be->ops->maxpool_fwd(be, &s, dt, S(x), S(y)));
        OK(be, be->ops->maxpool_bwd(be, &s, dt, S(x), S(dy), S(dx)));
    }
    CHECK_INT(twin_diff_exact("maxpool_fwd", &p, &y), 0);
    CHECK_INT(twin_diff_exact("maxpool_bwd", &p, &dx), 0);
    twin_free(&p, &x); twin_free(&p, &y); twin_free(&p, &dy); twin_free(&p, &dx);
    free(hx); free(hdy);
    pair_free(&p);
}
static void test_maxpool(void) {
    for (int d = 0; d < DT_COUNT; d++) {
        check_maxpool((dtype_t)d, 3, 2, 1);
        check_maxpool((dtype_t)d, 2, 2, 0);
        check_maxpool((dtype_t)d, 3, 1, 1);
    }
}

static void check_linear(dtype_t dt, bool tf32) {
    pair_t p = pair_make(true, tf32);
    int n = 24, in = 136, out = 100;
    float *hx = hrand((int64_t)n * in, 41, -1, 1), *hw = hrand((int64_t)out * in, 42, -0.1f, 0.1f);
    float *hb = hrand(out, 43, -0.5f, 0.5f), *hdy = hrand((int64_t)n * out, 44, -1, 1);
    float *hdw = hrand((int64_t)out * in, 45, -0.1f, 0.1f), *hdb = hrand(out, 46, -0.1f, 0.1f);
    twin_t x = twin_new(&p, (int64_t)n * in, dt, hx), w = twin_new(&p, (int64_t)out * in, dt, hw);
    twin_t b = twin_new(&p, out, DT_F32, hb), y = twin_new(&p, (int64_t)n * out, dt, NULL);
    twin_t dy = twin_new(&p, (int64_t)n * out, dt, hdy), dx = twin_new(&p, (int64_t)n * in, dt, NULL);
    twin_t dw = twin_new(&p, (int64_t)out * in, DT_F32, hdw), db = twin_new(&p, out, DT_F32, hdb);
    backend_t *bes[2] = {p.cpu, p.gpu};
    for (int i = 0; i < 2; i++) {
        backend_t *be = bes[i];
        OK(be, be->ops->linear_fwd(be, n, in, out, dt, S(x), S(w), (float *)S(b), S(y)));
        OK(be, be->ops->linear_bwd(be, n, in, out, dt, S(x), S(w), S(dy), S(dx), (float *)S(dw), (float *)S(db)));
    }
    double tol = tf32 ? 4e-3 : dt_tol(dt);
    CHECK_INT(twin_cmp("linear_fwd", &p, &y, tol), 0);
    CHECK(twin_rel_l2(&p, &y) <= (dt == DT_F32 ? 1e-3 : dt_tol(dt)));
    CHECK_INT(twin_cmp("linear_bwd dx", &p, &dx, tol), 0);
    CHECK_INT(twin_cmp("linear_bwd dw (accumulated)", &p, &dw, tol), 0);
    CHECK_INT(twin_cmp("linear_bwd db (accumulated)", &p, &db, tol), 0);
    twin_t *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
    for (int i = 0; i < 8; i++) twin_free(&p, all[i]);
    free(hx); free(hw); free(hb); free(hdy); free(hdw); free(hdb);
    pair_free(&p);
}
static void test_linear(void) {
    check_linear(DT_F32, false);
    check_linear(DT_F32, true);
    check_linear(DT_F16, false);
    check_linear(DT_BF16, false);
}

static void check_xent(dtype_t dt, int classes, float smoothing) {
    pair_t p = pair_make(true, false);
    int n = 37;
    float *hl = hrand((int64_t)n * classes, 51, -4, 4);
    int32_t labels[37];
    rng_t r = rng_make(9, RNG_STREAM_MISC, 3, 0);
    for (int i = 0; i < n; i++) labels[i] = (int32_t)rng_below(&r, (uint32_t)classes);
    /* make a few rows certain hits so top-1 > 0 */
    for (int i = 0; i < 5; i++) hl[(int64_t)i * classes + labels[i]] = 9.0f;
    twin_t lg = twin_new(&p, (int64_t)n * classes, dt, hl), dl = twin_new(&p, (int64_t)n * classes, dt, NULL);
    twin_t loss = twin_new(&p, 1, DT_F32, NULL);
    void *lab[2], *cor[2];
    backend_t *bes[2] = {p.cpu, p.gpu};
    int32_t got[2][2];
    float lsum[2];
    for (int i = 0; i < 2; i++) {
        backend_t *be = bes[i];
        lab[i] = be->ops->alloc(be, sizeof labels);
        cor[i] = be->ops->alloc(be, 2 * sizeof(int32_t));
        OK(be, be->ops->upload(be, lab[i], labels, sizeof labels));
        OK(be, be->ops->softmax_xent(be, n, classes, dt, S(lg), (int32_t *)lab[i], smoothing, 0.5f, NULL,
                                     S(dl), (float *)S(loss), (int32_t *)cor[i]));
        OK(be, be->ops->download(be, got[i], cor[i], sizeof got[i]));
        OK(be, be->ops->download(be, &lsum[i], S(loss), sizeof(float)));
    }
    CHECK_NEAR(lsum[1], lsum[0], 1e-4, 1e-4);
    CHECK_INT(got[1][0], got[0][0]);
    CHECK_INT(got[1][1], got[0][1]);
    CHECK(got[1][0] >= 5 && got[1][1] >= got[1][0]);
    CHECK_INT(twin_cmp("softmax_xent dlogits", &p, &dl, dt_tol(dt)), 0);
    /* evaluation: dlogits NULL still gives loss and hits */
    int32_t ev[2];
    float el;
    OK(p.gpu, p.gpu->ops->softmax_xent(p.gpu, n, classes, dt, lg.g, (int32_t *)lab[1], smoothing, 0.5f,
                                       NULL, NULL, (float *)loss.g, (int32_t *)cor[1]));
    OK(p.gpu, p.gpu->ops->download(p.gpu, ev, cor[1], sizeof ev));
    OK(p.gpu, p.gpu->ops->download(p.gpu, &el, loss.g, sizeof el));
    CHECK_INT(ev[0], got[0][0]);
    CHECK_NEAR(el, lsum[0], 1e-4, 1e-4);
    for (int i = 0; i < 2; i++) {
        bes[i]->ops->release(bes[i], lab[i]);
        bes[i]->ops->release(bes[i], cor[i]);
    }
    twin_free(&p, &lg); twin_free(&p, &dl); twin_free(&p, &loss);
    free(hl);
    pair_free(&p);
}
static void test_softmax_xent(void) {
    check_xent(DT_F32, 10, 0.0f);
    check_xent(DT_F32, 100, 0.1f);
    check_xent(DT_F16, 100, 0.1f);
    check_xent(DT_BF16, 1000, 0.0f);
}

/* Soft targets (mixup): mixed two-label rows with smoothing, one tie row; loss sum, hits
 * against the dominant label and dlogits (times the step control's loss scale) against the
 * CPU backend. */
static step_ctl_t *ctl_new(backend_t *be, int64_t steps, int32_t found_inf, float scale);
/* Top-1 and top-5 hits the contract (model/backend.h softmax_xent_soft) gives: each row's
 * dominant label argmax_j t_ij (ties: the lower index) ranked among the row's logits as
 * stored (rounded to dt; ties: the lower index), counted on the host. */
static void soft_hits_expected(const float *logits, const float *targets, int n, int classes, dtype_t dt,
                               int32_t hits[2]) {
    hits[0] = hits[1] = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (int64_t)i * classes, *t = targets + (int64_t)i * classes;
        int y = 0, rank = 0;
        for (int j = 1; j < classes; j++)
            if (t[j] > t[y]) y = j;
        float zy = round_dt(z[y], dt);
        for (int j = 0; j < classes; j++) {
            float zj = round_dt(z[j], dt);
            rank += zj > zy || (zj == zy && j < y);
        }
        hits[0] += rank < 1;
        hits[1] += rank < 5;
    }
}

/* Soft targets as mixup makes them (two smoothed one-hot labels a, b mixed by lam). The
 * expected hits come from the host (soft_hits_expected), not from either backend, so a
 * rule both got wrong still fails. Rows 0..3 and the last row get the logit 9 at their
 * dominant label and must hit; rows 4..7 get it at the other label and must not: row 0 is an exact tie
 * (lam 0.5, dominant = the lower of a and b), and the rows with lam < 0.5 have b
 * dominant, so counting against a, or ties to the higher index, changes the count. */
static void check_xent_soft(dtype_t dt, int classes) {
    pair_t p = pair_make(true, false);
    int n = 33;
    float *hl = hrand((int64_t)n * classes, 61, -4, 4), *ht = hbuf((int64_t)n * classes);
    rng_t r = rng_make(9, RNG_STREAM_MISC, 4, 0);
    float off = 0.1f / classes, on = 1.0f - 0.1f + off;
    int planted_hit = 0;
    for (int i = 0; i < n; i++) {
        int a = (int)rng_below(&r, (uint32_t)classes), b = (int)rng_below(&r, (uint32_t)classes);
        if (i < 8 && b == a) b = (a + 1) % classes;   /* the planted rows need two labels */
        float lam = i == 0 ? 0.5f : (i == 1 || i == 4) ? 0.3f : rng_uniform(&r);
        for (int j = 0; j < classes; j++)
            ht[(int64_t)i * classes + j] = (j == a ? on : off) * lam + (j == b ? on : off) * (1.0f - lam);
        int dom = ht[(int64_t)i * classes + b] > ht[(int64_t)i * classes + a] ||
                  (ht[(int64_t)i * classes + b] == ht[(int64_t)i * classes + a] && b < a) ? b : a;
        if (i < 4 || i == n - 1) hl[(int64_t)i * classes + dom] = 9.0f;
        else if (i < 8) hl[(int64_t)i * classes + (dom == a ? b : a)] = 9.0f;
        planted_hit += i < 4 || i == n - 1;
    }
    int32_t want[2];
    soft_hits_expected(hl, ht, n, classes, dt, want);
    twin_t lg = twin_new(&p, (int64_t)n * classes, dt, hl), tg = twin_new(&p, (int64_t)n * classes, DT_F32, ht);
    twin_t dl = twin_new(&p, (int64_t)n * classes, dt, NULL), loss = twin_new(&p, 1, DT_F32, NULL);
    backend_t *bes[2] = {p.cpu, p.gpu};
    int32_t got[2][2];
    float lsum[2];
    for (int i = 0; i < 2; i++) {
        backend_t *be = bes[i];
        void *cor = be->ops->alloc(be, 2 * sizeof(int32_t));
        step_ctl_t *ctl = ctl_new(be, 0, 0, 128.0f);
        OK(be, be->ops->softmax_xent_soft(be, n, classes, dt, S(lg), (const float *)S(tg), 0.25f, ctl, S(dl),
                                          (float *)S(loss), (int32_t *)cor));
        OK(be, be->ops->download(be, got[i], cor, sizeof got[i]));
        OK(be, be->ops->download(be, &lsum[i], S(loss), sizeof(float)));
        be->ops->release(be, cor);
        be->ops->release(be, ctl);
    }
    fprintf(stderr, "  %s %d classes: top-1 hits cpu %d gpu %d expected %d, top-5 cpu %d gpu %d expected %d\n",
            dtype_names[dt], classes, got[0][0], got[1][0], want[0], got[0][1], got[1][1], want[1]);
    CHECK(want[0] >= planted_hit);   /* the fixture exercises hits */
    CHECK_NEAR(lsum[1], lsum[0], 1e-4, 1e-4);
    CHECK_INT(got[1][0], want[0]);
    CHECK_INT(got[1][1], want[1]);
    CHECK_INT(got[0][0], want[0]);
    CHECK_INT(got[0][1], want[1]);
    CHECK_INT(twin_cmp("softmax_xent_soft dlogits", &p, &dl, dt_tol(dt)), 0);
    twin_free(&p, &lg); twin_free(&p, &tg); twin_free(&p, &dl); twin_free(&p, &loss);
    free(hl);
    free(ht);
    pair_free(&p);
}
static void test_softmax_xent_soft(void) {
    check_xent_soft(DT_F32, 10);
    check_xent_soft(DT_F16, 100);
    check_xent_soft(DT_BF16, 1000);
}

/* A step control in backend memory with the given count and verdict. */
static step_ctl_t *ctl_new(backend_t *be, int64_t steps, int32_t found_inf, float scale) {
    step_ctl_t h = {.loss_scale = scale, .found_inf = found_inf, .growth_interval = 0,
                    .growth_factor = 2.0f, .backoff_factor = 0.5f, .optim_steps = steps};
    step_ctl_t *c = (step_ctl_t *)be->ops->alloc(be, sizeof h);
    OK(be, be->ops->upload(be, c, &h, sizeof h));
    return c;
}

static step_ctl_t ctl_get(backend_t *be, const step_ctl_t *c) {
    step_ctl_t h;
    OK(be, be->ops->download(be, &h, c, sizeof h));
    return h;
}

/* SGD (momentum: a first step then a second, through step_ctl_update; nesterov) and
 * AdamW at step 3 against the CPU backend; then a found_inf step control: nothing
 * written, the count not advanced. */
static void test_optimizers(void) {
    pair_t p = pair_make(true, false);
    const int64_t n = 5003;
    float *hp = hrand(n, 61, -1, 1), *hg = hrand(n, 62, -1, 1), *hm = hrand(n, 63, -0.1f, 0.1f);
    float *hv = hrand(n, 64, 0.0f, 0.01f);
    backend_t *bes[2] = {p.cpu, p.gpu};
    for (int variant = 0; variant < 4; variant++) {
        twin_t pp = twin_new(&p, n, DT_F32, hp), g = twin_new(&p, n, DT_F32, hg);
        twin_t m = twin_new(&p, n, DT_F32, hm), v = twin_new(&p, n, DT_F32, hv);
        for (int i = 0; i < 2; i++) {
            backend_t *be = bes[i];
            step_ctl_t *c = ctl_new(be, variant == 2 ? 2 : (variant == 1 ? 5 : 0), variant == 3, 1.0f);
            if (variant == 0) {   /* momentum, first step then a second one */
                OK(be, be->ops->sgd_step(be, n, (float *)S(pp), (float *)S(g), (float *)S(m), 0.1, 0.9, 0.0,
                                         5e-4, false, c));
                OK(be, be->ops->step_ctl_update(be, c));
                OK(be, be->ops->sgd_step(be, n, (float *)S(pp), (float *)S(g), (float *)S(m), 0.1, 0.9, 0.0,
                                         5e-4, false, c));
                OK(be, be->ops->step_ctl_update(be, c));
                CHECK_INT(ctl_get(be, c).optim_steps, 2);
            } else if (variant == 1) {   /* nesterov with dampening 0, not the first step */
                OK(be, be->ops->sgd_step(be, n, (float *)S(pp), (float *)S(g), (float *)S(m), 0.05, 0.9, 0.0,
                                         1e-4, true, c));
            } else {   /* adamw at step 3; variant 3: skipped */
                OK(be, be->ops->adamw_step(be, n, (float *)S(pp), (float *)S(g), (float *)S(m), (float *)S(v),
                                           1e-3, 0.9, 0.999, 1e-8, 0.01, c));
                if (variant == 3) {
                    OK(be, be->ops->sgd_step(be, n, (float *)S(pp), (float *)S(g), (float *)S(m), 0.1, 0.9,
                                             0.0, 5e-4, false, c));
                    OK(be, be->ops->step_ctl_update(be, c));
                    CHECK_INT(ctl_get(be, c).optim_steps, 0);
                }
            }
            be->ops->release(be, c);
        }
        const char *what = variant == 2 ? "adamw" : variant == 3 ? "skipped" : "sgd";
        CHECK_INT(twin_cmp(what, &p, &pp, 1e-5), 0);
        CHECK_INT(twin_cmp(what, &p, &m, 1e-5), 0);
        if (variant >= 2) CHECK_INT(twin_cmp(what, &p, &v, 1e-5), 0);
        if (variant == 3) {   /* and both still hold the inputs */
            float *cv, *gv;
            twin_get(&p, &pp, &cv, &gv);
            CHECK(memcmp(gv, hp, (size_t)n * 4) == 0);
            free(cv);
            free(gv);
        }
        twin_free(&p, &pp); twin_free(&p, &g); twin_free(&p, &m); twin_free(&p, &v);
    }
    free(hp); free(hg); free(hm); free(hv);
    pair_free(&p);
}

/* Gradient clipping by the global norm (torch.nn.utils.clip_grad_norm_) and the EMA lerp
 * (timm ModelEmaV3): the norm within 1e-6 of the CPU's (both sum in double, in another
 * order), the clipped gradients within 1e-6; gradients left bit for bit when found_inf is
 * set or the norm is under max_norm (the norm still written); the EMA bit for bit equal
 * to the CPU's in both branches of torch.lerp's formula and for decay 0 (a copy). */
static void test_clip_and_ema(void) {
    pair_t p = pair_make(true, false);
    backend_t *bes[2] = {p.cpu, p.gpu};
    const int64_t n = 300007;   /* several blocks and a tail */
    float *hg = hrand(n, 91, -0.01f, 0.01f);
    float norms[2][3];
    for (int variant = 0; variant < 3; variant++) {   /* clip, found_inf, under the bound */
        twin_t g = twin_new(&p, n, DT_F32, hg);
        for (int i = 0; i < 2; i++) {
            backend_t *be = bes[i];
            step_ctl_t *c = ctl_new(be, 0, variant == 1, 1.0f);
            float *dn = (float *)be->ops->alloc(be, 4);
            OK(be, be->ops->clip_grad_norm(be, n, (float *)S(g), variant == 2 ? 1000.0 : 0.5, c, dn));
            OK(be, be->ops->download(be, &norms[i][variant], dn, 4));
            be->ops->release(be, dn);
            be->ops->release(be, c);
        }
        CHECK_NEAR(norms[1][variant], norms[0][variant], 0, 1e-6);
        CHECK(norms[0][variant] > 0.5f);
        float *cv, *gv;
        twin_get(&p, &g, &cv, &gv);
        if (variant == 0) CHECK_INT(cmp_vals("clip_grad_norm", gv, cv, n, 1e-6), 0);
        else CHECK(memcmp(gv, hg, (size_t)n * 4) == 0 && memcmp(cv, hg, (size_t)n * 4) == 0);
        free(cv);
        free(gv);
        twin_free(&p, &g);
    }
    const int64_t m = 5003;
    float *he = hrand(m, 92, -1, 1), *hx = hrand(m, 93, -1, 1);
    const double decays[3] = {0.9, 0.3, 0.0};   /* weight 0.1 (< 0.5), 0.7 (>= 0.5), copy */
    for (int k = 0; k < 3; k++) {
        twin_t ema = twin_new(&p, m, DT_F32, he), x = twin_new(&p, m, DT_F32, hx);
        for (int i = 0; i < 2; i++)
            OK(bes[i], bes[i]->ops->ema_update(bes[i], m, (float *)S(ema), (const float *)S(x), decays[k]));
        float *cv, *gv;
        twin_get(&p, &ema, &cv, &gv);
        CHECK(memcmp(cv, gv, (size_t)m * 4) == 0);
        if (k == 2) CHECK(memcmp(gv, hx, (size_t)m * 4) == 0);
        free(cv);
        free(gv);
        twin_free(&p, &ema);
        twin_free(&p, &x);
    }
    free(hg); free(he); free(hx);
    pair_free(&p);
}

/* step_ctl_update on the device follows the same rule as the CPU (model/step_ctl.h):
 * backoff on overflow, growth after the interval, the count only on clean steps. */
static void test_step_ctl(void) {
    pair_t p = pair_make(true, false);
    backend_t *bes[2] = {p.cpu, p.gpu};
    step_ctl_t got[2];
    for (int i = 0; i < 2; i++) {
        backend_t *be = bes[i];
        step_ctl_t h = {.loss_scale = 1024.0f, .growth_interval = 2, .growth_factor = 2.0f,
                        .backoff_factor = 0.5f};
        step_ctl_t *c = (step_ctl_t *)be->ops->alloc(be, sizeof h);
        int32_t verdicts[6] = {0, 1, 0, 0, 0, 1}, one = 1, zero = 0;
        OK(be, be->ops->upload(be, c, &h, sizeof h));
        for (int k = 0; k < 6; k++) {
            OK(be, be->ops->upload(be, &c->found_inf, verdicts[k] ? &one : &zero, 4));
            OK(be, be->ops->step_ctl_update(be, c));
        }
        got[i] = ctl_get(be, c);
        be->ops->release(be, c);
    }
    /* 1024: clean (t1), inf -> 512 (t0), clean (t1), clean -> 1024 (t0), clean (t1), inf -> 512 */
    CHECK_NEAR(got[0].loss_scale, 512.0, 0, 0);
    CHECK_INT(got[0].optim_steps, 4);
    CHECK_INT(got[0].growth_tracker, 0);
    CHECK(memcmp(&got[0], &got[1], sizeof got[0]) == 0);
    pair_free(&p);
}

/* fp32 -> fp16/bf16 rounds to nearest even exactly like half.h; back is exact. */
static void test_cast_exact(void) {
    pair_t p = pair_make(true, false);
    const int64_t n = 4099;
    float *h = hrand(n, 71, -70000.0f, 70000.0f);
    h[0] = 1.0f + 1.0f / 2048.0f;   /* a tie in fp16: rounds to even (1.0) */
    h[1] = 65520.0f;                /* overflows to inf in fp16 */
    h[2] = 3e-8f;                   /* fp16 subnormal range */
    backend_t *g = p.gpu;
    void *src = g->ops->alloc(g, (size_t)n * 4), *mid = g->ops->alloc(g, (size_t)n * 2);
    void *back = g->ops->alloc(g, (size_t)n * 4);
    OK(g, g->ops->upload(g, src, h, (size_t)n * 4));
    uint16_t *bits = (uint16_t *)calloc((size_t)n, 2);
    float *out = hbuf(n);
    for (int d = DT_F16; d <= DT_BF16; d++) {
        OK(g, g->ops->cast(g, n, src, DT_F32, mid, (dtype_t)d));
        OK(g, g->ops->cast(g, n, mid, (dtype_t)d, back, DT_F32));
        OK(g, g->ops->download(g, bits, mid, (size_t)n * 2));
        OK(g, g->ops->download(g, out, back, (size_t)n * 4));
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
            uint16_t want = d == DT_F16 ? f32_to_f16(h[i]) : f32_to_bf16(h[i]);
            float wantf = d == DT_F16 ? f16_to_f32(want) : bf16_to_f32(want);
            if (bits[i] != want || memcmp(&out[i], &wantf, 4) != 0) {
                if (bad++ < 3) fprintf(stderr, "  cast %s [%lld] %.9g: got 0x%04x want 0x%04x\n",
                                       dtype_names[d], (long long)i, h[i], bits[i], want);
            }
        }
        CHECK_INT(bad, 0);
    }
    free(bits); free(out); free(h);
    g->ops->release(g, src); g->ops->release(g, mid); g->ops->release(g, back);
    pair_free(&p);
}

/* unscale_check_finite scales, leaves found_inf alone when all is finite, sets it for an
 * inf or a NaN anywhere (including the scalar tail); scale multiplies. */
static void test_amp_overflow(void) {
    pair_t p = pair_make(true, false);
    backend_t *g = p.gpu;
    const int64_t n = 1001;
    float *h = hrand(n, 81, -100, 100), *out = hbuf(n);
    float *dev = (float *)g->ops->alloc(g, (size_t)n * 4);
    step_ctl_t *ctl = ctl_new(g, 0, 0, 1024.0f);
    int32_t *found = &ctl->found_inf, f = -1;
    OK(g, g->ops->upload(g, dev, h, (size_t)n * 4));
    OK(g, g->ops->zero(g, found, 4));
    OK(g, g->ops->unscale_check_finite(g, n, dev, ctl));
    OK(g, g->ops->download(g, &f, found, 4));
    OK(g, g->ops->download(g, out, dev, (size_t)n * 4));
    CHECK_INT(f, 0);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += out[i] != h[i] * (1.0f / 1024.0f);
    CHECK_INT(bad, 0);
    int64_t where[3] = {17, 500, 1000};   /* 1000 is in the tail of the 4-wide kernel */
    for (int k = 0; k < 3; k++) {
        float bad_v = k == 1 ? NAN : INFINITY;
        OK(g, g->ops->upload(g, dev, h, (size_t)n * 4));
        OK(g, g->ops->upload(g, dev + where[k], &bad_v, 4));
        OK(g, g->ops->zero(g, found, 4));
        OK(g, g->ops->unscale_check_finite(g, n, dev, ctl));
        OK(g, g->ops->download(g, &f, found, 4));
        CHECK_INT(f, 1);
    }
    /* found_inf is only ever raised, never cleared */
    OK(g, g->ops->upload(g, dev, h, (size_t)n * 4));
    OK(g, g->ops->unscale_check_finite(g, n, dev, ctl));
    OK(g, g->ops->download(g, &f, found, 4));
    CHECK_INT(f, 1);
    OK(g, g->ops->upload(g, dev, h, (size_t)n * 4));
    OK(g, g->ops->scale(g, n, dev, 3.0f));
    OK(g, g->ops->download(g, out, dev, (size_t)n * 4));
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += out[i] != h[i] * 3.0f;
    CHECK_INT(bad, 0);
    g->ops->release(g, dev);
    g->ops->release(g, ctl);
    free(h); free(out);
    pair_free(&p);
}

/* peak_memory is a high-water mark of this backend's allocations. */
static void test_memory_accounting(void) {
    pair_t p = pair_make(true, false);
    backend_t *g = p.gpu;
    size_t base = g->ops->peak_memory(g);
    void *a = g->ops->alloc(g, 64 << 20);
    CHECK(a != NULL);
    CHECK(((uintptr_t)a % 256) == 0);
    CHECK(g->ops->peak_memory(g) >= base + (64 << 20));
    g->ops->release(g, a);
    size_t after = g->ops->peak_memory(g);
    void *b = g->ops->alloc(g, 1 << 20);
    CHECK_INT(g->ops->peak_memory(g), after);   /* reuse below the mark does not raise it */
    g->ops->release(g, b);
    CHECK_INT(backend_elem_size(g, DT_F16), 2);
    CHECK_INT(backend_elem_size(g, DT_BF16), 2);
    CHECK_INT(backend_elem_size(g, DT_F32), 4);
    pair_free(&p);
}

/* A bad device ordinal is an input error that names the visible count. */
static void test_bad_device(void) {
    backend_opts_t o = {0};
    o.kind = BACKEND_CUDA;
    o.device = 999;
    err_t e = {0};
    CHECK(cuda_backend_create(&o, &e) == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "cuda device 999 requested");
}

int main(void) {
    gpu_or_skip();
    TEST_RUN(test_elementwise_fp32);
    TEST_RUN(test_elementwise_fp16);
    TEST_RUN(test_elementwise_bf16);
    TEST_RUN(test_pool);
    TEST_RUN(test_maxpool);
    TEST_RUN(test_linear);
    TEST_RUN(test_softmax_xent);
    TEST_RUN(test_softmax_xent_soft);
    TEST_RUN(test_step_ctl);
    TEST_RUN(test_optimizers);
    TEST_RUN(test_clip_and_ema);
    TEST_RUN(test_cast_exact);
    TEST_RUN(test_amp_overflow);
    TEST_RUN(test_memory_accounting);
    TEST_RUN(test_bad_device);
    return test_main_end();
}
