/* test_amp.c: the loss scaler (GradScaler semantics) over a step control in backend
 * memory: an overflow sets found_inf, halves the scale and resets the tracker without
 * counting an optimizer step; growth after growth_interval clean steps (and not to inf);
 * bf16/fp32 do no scaling; the state round trip; bad settings. */
#include <float.h>
#include <math.h>

#include "model/amp.h"
#include "model/cpu/cpu_backend.h"
#include "tests/test.h"

static backend_t *cpu(void) {
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 1};
    return cpu_backend_create(&bo, &e);
}

/* A fresh step control as optim_create makes it. */
static step_ctl_t *new_ctl(backend_t *be) {
    step_ctl_t *c = be->ops->alloc(be, sizeof *c);
    step_ctl_t init = {.loss_scale = 1.0f, .growth_factor = 2.0f, .backoff_factor = 0.5f};
    if (c) be->ops->upload(be, c, &init, sizeof init);
    return c;
}

static step_ctl_t read_ctl(backend_t *be, const step_ctl_t *c) {
    step_ctl_t h;
    be->ops->download(be, &h, c, sizeof h);
    return h;
}

static double scale_of(const loss_scaler_t *s) {
    double v = -1;
    err_t e = {0};
    CHECK_INT(loss_scaler_scale(s, &v, &e), 0);
    return v;
}

/* unscale host[] through the scaler, then the step-control update an optimizer step
 * ends with; returns the verdict. */
static bool step(loss_scaler_t *s, float *g, const float *host, int n) {
    err_t e = {0};
    backend_t *be = s->be;
    bool inf = false;
    CHECK_INT(be->ops->upload(be, g, host, (size_t)n * sizeof(float)), 0);
    CHECK_INT(loss_scaler_unscale(s, g, n, &e), 0);
    CHECK_INT(loss_scaler_found_inf(s, &inf, &e), 0);
    CHECK_INT(be->ops->step_ctl_update(be, s->ctl), 0);
    return inf;
}

static void test_fp16_scaling(void) {
    backend_t *be = cpu();
    CHECK(be != NULL);
    if (!be) return;
    err_t e = {0};
    step_ctl_t *ctl = new_ctl(be);
    loss_scaler_t s;
    CHECK_INT(loss_scaler_init(&s, be, ctl, DT_F16, 65536.0, 3, &e), 0);
    CHECK(s.enabled);
    CHECK_NEAR(scale_of(&s), 65536.0, 0, 0);
    float *g = be->ops->alloc(be, 4 * sizeof(float));
    float host[4] = {65536.0f, -131072.0f, 32768.0f, 0.0f}, out[4];
    CHECK(!step(&s, g, host, 4));
    CHECK_INT(be->ops->download(be, out, g, sizeof out), 0);
    CHECK_NEAR(out[0], 1.0, 0, 0);
    CHECK_NEAR(out[1], -2.0, 0, 0);
    CHECK_NEAR(out[2], 0.5, 0, 0);
    step_ctl_t h = read_ctl(be, ctl);
    CHECK_INT(h.growth_tracker, 1);
    CHECK_INT(h.optim_steps, 1);
    CHECK_NEAR(h.loss_scale, 65536.0, 0, 0);
    /* an inf gradient: found, the scale halves, the tracker resets, no step counted */
    host[2] = INFINITY;
    CHECK(step(&s, g, host, 4));
    h = read_ctl(be, ctl);
    CHECK_NEAR(h.loss_scale, 32768.0, 0, 0);
    CHECK_INT(h.growth_tracker, 0);
    CHECK_INT(h.optim_steps, 1);
    /* NaN too */
    host[2] = NAN;
    CHECK(step(&s, g, host, 4));
    CHECK_NEAR(scale_of(&s), 16384.0, 0, 0);
    /* three clean steps (growth_interval 3) double it, not two; found_inf is cleared by
     * each unscale */
    host[2] = 1.0f;
    for (int i = 0; i < 3; i++) {
        CHECK(!step(&s, g, host, 4));
        CHECK_NEAR(scale_of(&s), i < 2 ? 16384.0 : 32768.0, 0, 0);
    }
    h = read_ctl(be, ctl);
    CHECK_INT(h.growth_tracker, 0);
    CHECK_INT(h.optim_steps, 4);
    /* checkpoint state */
    double sc;
    int64_t tr;
    CHECK(!step(&s, g, host, 4));
    CHECK_INT(loss_scaler_get_state(&s, &sc, &tr, &e), 0);
    CHECK_NEAR(sc, 32768.0, 0, 0);
    CHECK_INT(tr, 1);
    step_ctl_t *ctl2 = new_ctl(be);
    loss_scaler_t s2;
    CHECK_INT(loss_scaler_init(&s2, be, ctl2, DT_F16, 65536.0, 3, &e), 0);
    CHECK_INT(loss_scaler_set_state(&s2, sc, tr, &e), 0);
    CHECK(!step(&s2, g, host, 4));
    CHECK_NEAR(scale_of(&s2), 32768.0, 0, 0);
    CHECK(!step(&s2, g, host, 4));
    CHECK_NEAR(scale_of(&s2), 65536.0, 0, 0);
    CHECK_INT(loss_scaler_set_state(&s2, -1.0, 0, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    be->ops->release(be, g);
    be->ops->release(be, ctl);
    be->ops->release(be, ctl2);
    backend_free(be);
}

/* Growth stops below float overflow: GradScaler keeps the old scale when the grown one
 * is not finite. */
static void test_growth_stays_finite(void) {
    backend_t *be = cpu();
    CHECK(be != NULL);
    if (!be) return;
    err_t e = {0};
    step_ctl_t *ctl = new_ctl(be);
    loss_scaler_t s;
    CHECK_INT(loss_scaler_init(&s, be, ctl, DT_F16, 0x1p127, 1, &e), 0);
    float *g = be->ops->alloc(be, sizeof(float));
    float one = 1.0f;
    CHECK(!step(&s, g, &one, 1));
    CHECK_NEAR(scale_of(&s), 0x1p127, 0, 0);
    CHECK_INT(read_ctl(be, ctl).growth_tracker, 0);
    be->ops->release(be, g);
    be->ops->release(be, ctl);
    backend_free(be);
}

static void test_bf16_and_fp32_do_not_scale(void) {
    backend_t *be = cpu();
    CHECK(be != NULL);
    if (!be) return;
    err_t e = {0};
    dtype_t dts[2] = {DT_BF16, DT_F32};
    for (int k = 0; k < 2; k++) {
        step_ctl_t *ctl = new_ctl(be);
        loss_scaler_t s;
        CHECK_INT(loss_scaler_init(&s, be, ctl, dts[k], 65536.0, 2000, &e), 0);
        CHECK(!s.enabled);
        CHECK_NEAR(scale_of(&s), 1.0, 0, 0);
        float *g = be->ops->alloc(be, 2 * sizeof(float));
        float host[2] = {INFINITY, 3.0f}, out[2];
        CHECK(!step(&s, g, host, 2));   /* no scaling, no check, no skipped step */
        CHECK_INT(be->ops->download(be, out, g, sizeof out), 0);
        CHECK_NEAR(out[1], 3.0, 0, 0);
        step_ctl_t h = read_ctl(be, ctl);
        CHECK_NEAR(h.loss_scale, 1.0, 0, 0);
        CHECK_INT(h.found_inf, 0);
        CHECK_INT(h.optim_steps, 1);
        be->ops->release(be, g);
        be->ops->release(be, ctl);
    }
    step_ctl_t *ctl = new_ctl(be);
    loss_scaler_t s;
    CHECK_INT(loss_scaler_init(&s, be, ctl, DT_F16, 0.0, 2000, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "init_scale");
    CHECK_INT(loss_scaler_init(&s, be, ctl, DT_F16, 1e39, 2000, &e), -1);
    CHECK_CONTAINS(e.msg, "init_scale");
    CHECK_INT(loss_scaler_init(&s, be, ctl, DT_F16, 1024.0, 0, &e), -1);
    CHECK_CONTAINS(e.msg, "growth_interval");
    be->ops->release(be, ctl);
    backend_free(be);
}

int main(void) {
    TEST_RUN(test_fp16_scaling);
    TEST_RUN(test_growth_stays_finite);
    TEST_RUN(test_bf16_and_fp32_do_not_scale);
    return test_main_end();
}
