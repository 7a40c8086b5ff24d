/* test_optim.c: SGD and AdamW against values printed by torch.optim (PyTorch 1.13) for a
 * 5-parameter net over 3 steps with fixed gradients, and the per-tensor weight-decay
 * exemption for BN parameters and biases. */
#include <stdlib.h>

#include <math.h>

#include "model/amp.h"
#include "model/optim.h"
#include "tests/model/model_util.h"

static const float P0[5] = {0.5f, -1.25f, 2.0f, 0.0f, 3.5e-3f};
static const float G[3][5] = {{0.1f, -0.2f, 0.3f, 1e-9f, -4.0f},
                              {-0.05f, 0.25f, 0.3f, 0.0f, 2.0f},
                              {0.02f, -0.01f, -0.6f, 1e-3f, 0.5f}};

/* Runs 3 steps with the fixed gradients and checks the result against expect. */
static void run(backend_t *be, const optim_opts_t *oo, double lr, const float expect[5]) {
    err_t e = {0};
    net_t *n = test_tiny_net(be);
    CHECK_INT(net_upload_params(n, P0, &e), 0);
    optim_t *o = optim_create(n, oo, &e);
    CHECK(o != NULL);
    if (!o) { net_free(n); return; }
    for (int s = 0; s < 3; s++) {
        CHECK_INT(be->ops->upload(be, net_grads(n), G[s], sizeof G[s]), 0);
        CHECK_INT(optim_step(o, lr, &e), 0);
    }
    float p[5];
    CHECK_INT(net_download_params(n, p, &e), 0);
    for (int i = 0; i < 5; i++) CHECK_NEAR(p[i], expect[i], 1e-7, 2e-6);
    int64_t steps = -1;
    CHECK_INT(optim_steps(o, &steps, &e), 0);
    CHECK_INT(steps, 3);
    optim_free(o);
    net_free(n);
}

static void test_sgd(void) {
    backend_t *be = test_cpu_backend(2);
    if (!be) return;
    optim_opts_t mom = {.kind = OPTIM_SGD, .momentum = 0.9, .weight_decay = 0.01};
    run(be, &mom, 0.1, (const float[5]){0.477630377f, -1.23534453f, 1.91063356f, -0.000100000281f, 0.656160772f});
    optim_opts_t nest = mom;
    nest.nesterov = true;
    run(be, &nest, 0.1, (const float[5]){0.471427321f, -1.23714173f, 1.91387689f, -0.000190000355f, 0.738677382f});
    optim_opts_t damp = {.kind = OPTIM_SGD, .momentum = 0.8, .dampening = 0.1};
    run(be, &damp, 0.05, (const float[5]){0.490950018f, -1.24540007f, 1.96609998f, -4.50001244e-05f, 0.307000011f});
    optim_opts_t plain = {.kind = OPTIM_SGD, .weight_decay = 1e-3};
    run(be, &plain, 0.1, (const float[5]){0.492851526f, -1.25362659f, 1.99940896f, -0.000100000107f, 0.153438985f});
    err_t e = {0};
    net_t *n = test_tiny_net(be);
    optim_t *o = optim_create(n, &plain, &e);
    CHECK_INT(optim_num_state(o), 0);
    optim_free(o);
    o = optim_create(n, &mom, &e);
    CHECK_INT(optim_num_state(o), 1);
    CHECK_STR(optim_state_name(o, 0), "momentum_buffer");
    CHECK_INT(optim_state_numel(o), 5);
    optim_free(o);
    optim_opts_t bad = {.kind = OPTIM_SGD, .nesterov = true};
    CHECK(optim_create(n, &bad, &e) == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "nesterov");
    net_free(n);
    backend_free(be);
}

static void test_adamw(void) {
    backend_t *be = test_cpu_backend(2);
    if (!be) return;
    optim_opts_t a = {.kind = OPTIM_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05};
    run(be, &a, 1e-2, (const float[5]){0.483445883f, -1.24082005f, 1.97777283f, -0.00773839979f, 0.0174823888f});
    optim_opts_t b = {.kind = OPTIM_ADAMW, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0};
    run(be, &b, 3e-3, (const float[5]){0.495538563f, -1.24807525f, 1.99448562f, -0.00211961707f, 0.00735195493f});
    err_t e = {0};
    net_t *n = test_tiny_net(be);
    optim_t *o = optim_create(n, &a, &e);
    CHECK_INT(optim_num_state(o), 2);
    CHECK_STR(optim_state_name(o, 1), "exp_avg_sq");
    optim_free(o);
    net_free(n);
    backend_free(be);
}

/* With zero gradients and no momentum, a step only applies weight decay: p *= 1 - lr*wd
 * where decay applies, p unchanged for BN weight/bias and the fc bias. */
static void test_no_decay_on_bn_and_bias(void) {
    backend_t *be = test_cpu_backend(2);
    if (!be) return;
    err_t e = {0};
    for (int exempt = 0; exempt < 2; exempt++) {
        net_t *n = test_tiny_net(be);
        float p0[5] = {1, 1, 1, 1, 1}, p[5];
        CHECK_INT(net_upload_params(n, p0, &e), 0);
        CHECK_INT(net_zero_grads(n, &e), 0);
        optim_opts_t oo = {.kind = OPTIM_SGD, .weight_decay = 0.1, .no_weight_decay_on_bn_and_bias = exempt};
        optim_t *o = optim_create(n, &oo, &e);
        CHECK_INT(optim_step(o, 0.5, &e), 0);
        CHECK_INT(net_download_params(n, p, &e), 0);
        /* layout: conv.weight, bn.weight, bn.bias, fc.weight, fc.bias */
        CHECK_NEAR(p[0], 0.95, 1e-7, 0);
        CHECK_NEAR(p[1], exempt ? 1.0 : 0.95, 1e-7, 0);
        CHECK_NEAR(p[2], exempt ? 1.0 : 0.95, 1e-7, 0);
        CHECK_NEAR(p[3], 0.95, 1e-7, 0);
        CHECK_NEAR(p[4], exempt ? 1.0 : 0.95, 1e-7, 0);
        optim_free(o);
        net_free(n);
    }
    backend_free(be);
}

/* An fp16 step whose gradients overflowed: the unscale flags it on the backend, the
 * optimizer writes neither parameters nor state and does not count the step, the scale
 * halves; the next clean step is the first (SGD momentum buffer = gradient) and matches
 * a run that never overflowed. */
static void test_overflow_skips_step(void) {
    backend_t *be = test_cpu_backend(2);
    if (!be) return;
    err_t e = {0};
    optim_opts_t mom = {.kind = OPTIM_SGD, .momentum = 0.9, .weight_decay = 0.01};
    float want[5], got[5];
    for (int overflow = 0; overflow < 2; overflow++) {
        net_t *n = test_tiny_net(be);
        CHECK_INT(net_upload_params(n, P0, &e), 0);
        optim_t *o = optim_create(n, &mom, &e);
        loss_scaler_t s;
        CHECK_INT(loss_scaler_init(&s, be, optim_ctl(o), DT_F16, 1024.0, 2000, &e), 0);
        if (overflow) {
            float g[5] = {1, 2, INFINITY, 4, 5};
            CHECK_INT(be->ops->upload(be, net_grads(n), g, sizeof g), 0);
            CHECK_INT(loss_scaler_unscale(&s, net_grads(n), 5, &e), 0);
            CHECK_INT(optim_step(o, 0.1, &e), 0);
            float p[5], buf[5];
            CHECK_INT(net_download_params(n, p, &e), 0);
            CHECK_INT(be->ops->download(be, buf, optim_state(o, 0), sizeof buf), 0);
            for (int i = 0; i < 5; i++) CHECK(p[i] == P0[i] && buf[i] == 0.0f);
            int64_t steps = -1;
            double scale = 0;
            CHECK_INT(optim_steps(o, &steps, &e), 0);
            CHECK_INT(steps, 0);
            CHECK_INT(loss_scaler_scale(&s, &scale, &e), 0);
            CHECK_NEAR(scale, 512.0, 0, 0);
        }
        float g[5];
        double scale = 0;
        CHECK_INT(loss_scaler_scale(&s, &scale, &e), 0);
        for (int i = 0; i < 5; i++) g[i] = G[0][i] * (float)scale;
        CHECK_INT(be->ops->upload(be, net_grads(n), g, sizeof g), 0);
        CHECK_INT(loss_scaler_unscale(&s, net_grads(n), 5, &e), 0);
        CHECK_INT(optim_step(o, 0.1, &e), 0);
        CHECK_INT(net_download_params(n, overflow ? got : want, &e), 0);
        optim_free(o);
        net_free(n);
    }
    for (int i = 0; i < 5; i++) CHECK(got[i] == want[i]);
    CHECK(want[0] != P0[0]);
    backend_free(be);
}

int main(void) {
    TEST_RUN(test_sgd);
    TEST_RUN(test_adamw);
    TEST_RUN(test_overflow_skips_step);
    TEST_RUN(test_no_decay_on_bn_and_bias);
    return test_main_end();
}
