/* test_amp.c: the loss scaler (GradScaler semantics): an overflow skips the step and
 * halves the scale, growth after growth_interval clean steps, bf16/fp32 do no scaling;
 * state round trip. */
#include "model/amp.h"
#include "model/cpu/cpu_backend.h"
#include "tests/test.h"

static backend_t *cpu(void) {
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 1};
    return cpu_backend_create(&bo, &e);
}

static void test_fp16_scaling(void) {
    backend_t *be = cpu();
    CHECK(be != NULL);
    if (!be) return;
    err_t e = {0};
    loss_scaler_t s;
    CHECK_INT(loss_scaler_init(&s, be, DT_F16, 65536.0, 3, &e), 0);
    CHECK(s.enabled);
    CHECK_NEAR(loss_scaler_scale(&s), 65536.0, 0, 0);
    float *g = be->ops->alloc(be, 4 * sizeof(float));
    float host[4] = {65536.0f, -131072.0f, 32768.0f, 0.0f}, out[4];
    CHECK_INT(be->ops->upload(be, g, host, sizeof host), 0);
    bool inf = true;
    CHECK_INT(loss_scaler_unscale(&s, g, 4, &inf, &e), 0);
    CHECK(!inf);
    CHECK_INT(be->ops->download(be, out, g, sizeof out), 0);
    CHECK_NEAR(out[0], 1.0, 0, 0);
    CHECK_NEAR(out[1], -2.0, 0, 0);
    CHECK_NEAR(out[2], 0.5, 0, 0);
    loss_scaler_update(&s, inf);
    CHECK_INT(s.growth_tracker, 1);
    CHECK_NEAR(loss_scaler_scale(&s), 65536.0, 0, 0);
    /* an inf gradient: found, the scale halves and the tracker resets */
    host[2] = INFINITY;
    CHECK_INT(be->ops->upload(be, g, host, sizeof host), 0);
    CHECK_INT(loss_scaler_unscale(&s, g, 4, &inf, &e), 0);
    CHECK(inf);
    loss_scaler_update(&s, inf);
    CHECK_NEAR(loss_scaler_scale(&s), 32768.0, 0, 0);
    CHECK_INT(s.growth_tracker, 0);
    /* NaN too */
    host[2] = NAN;
    CHECK_INT(be->ops->upload(be, g, host, sizeof host), 0);
    CHECK_INT(loss_scaler_unscale(&s, g, 4, &inf, &e), 0);
    CHECK(inf);
    loss_scaler_update(&s, inf);
    CHECK_NEAR(loss_scaler_scale(&s), 16384.0, 0, 0);
    /* three clean steps (growth_interval 3) double it, not two */
    host[2] = 1.0f;
    for (int i = 0; i < 3; i++) {
        CHECK_INT(be->ops->upload(be, g, host, sizeof host), 0);
        CHECK_INT(loss_scaler_unscale(&s, g, 4, &inf, &e), 0);
        CHECK(!inf);
        loss_scaler_update(&s, inf);
        CHECK_NEAR(loss_scaler_scale(&s), i < 2 ? 16384.0 : 32768.0, 0, 0);
    }
    CHECK_INT(s.growth_tracker, 0);
    /* checkpoint state */
    double sc;
    int64_t tr;
    loss_scaler_update(&s, false);
    loss_scaler_get_state(&s, &sc, &tr);
    CHECK_NEAR(sc, 32768.0, 0, 0);
    CHECK_INT(tr, 1);
    loss_scaler_t s2;
    CHECK_INT(loss_scaler_init(&s2, be, DT_F16, 65536.0, 3, &e), 0);
    loss_scaler_set_state(&s2, sc, tr);
    loss_scaler_update(&s2, false);
    loss_scaler_update(&s2, false);
    CHECK_NEAR(loss_scaler_scale(&s2), 65536.0, 0, 0);
    loss_scaler_deinit(&s2);
    be->ops->release(be, g);
    loss_scaler_deinit(&s);
    backend_free(be);
}

static void test_bf16_and_fp32_do_not_scale(void) {
    backend_t *be = cpu();
    CHECK(be != NULL);
    if (!be) return;
    err_t e = {0};
    dtype_t dts[2] = {DT_BF16, DT_F32};
    for (int k = 0; k < 2; k++) {
        loss_scaler_t s;
        CHECK_INT(loss_scaler_init(&s, be, dts[k], 65536.0, 2000, &e), 0);
        CHECK(!s.enabled);
        CHECK_NEAR(loss_scaler_scale(&s), 1.0, 0, 0);
        float *g = be->ops->alloc(be, 2 * sizeof(float));
        float host[2] = {INFINITY, 3.0f}, out[2];
        CHECK_INT(be->ops->upload(be, g, host, sizeof host), 0);
        bool inf = true;
        CHECK_INT(loss_scaler_unscale(&s, g, 2, &inf, &e), 0);
        CHECK(!inf);   /* no scaling, no check, no skipped step */
        CHECK_INT(be->ops->download(be, out, g, sizeof out), 0);
        CHECK_NEAR(out[1], 3.0, 0, 0);
        loss_scaler_update(&s, false);
        CHECK_NEAR(loss_scaler_scale(&s), 1.0, 0, 0);
        be->ops->release(be, g);
        loss_scaler_deinit(&s);
    }
    loss_scaler_t s;
    CHECK_INT(loss_scaler_init(&s, be, DT_F16, 0.0, 2000, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "init_scale");
    backend_free(be);
}

int main(void) {
    TEST_RUN(test_fp16_scaling);
    TEST_RUN(test_bf16_and_fp32_do_not_scale);
    return test_main_end();
}
