/* test_ema_clip.c: the EMA of weights against timm's ModelEmaV3 formula and gradient
 * clipping against torch.nn.utils.clip_grad_norm_, on the inputs of
 * tests/model/ema_clip_ref.py (the numbers below are what it prints with PyTorch 1.13):
 * the decay schedule with and without warm-up, four lerp updates, the clipped gradients
 * and their norm. Also: clipping is skipped on a step whose gradients overflowed (found_inf)
 * but the norm is still reported, a norm under max_norm leaves the gradients bit for bit,
 * the norm does not depend on the thread count, and the model/ema.h module (copy at
 * creation, first update copies, swap in and out, buffers averaged too). */
#include <stdlib.h>
#include <string.h>

#include "model/ema.h"
#include "tests/model/model_util.h"

static void decay_schedule_matches_timm(void) {
    const int64_t steps[6] = {1, 2, 3, 10, 1000, 100000};
    struct { ema_opts_t o; double want[6]; } cases[3] = {
        {{0.9998, false, 1.0, 2.0 / 3.0}, {0, 0.9998, 0.9998, 0.9998, 0.9998, 0.9998}},
        {{0.9998, true, 1.0, 2.0 / 3.0},
         {0, 0.3700394750525634, 0.51925014323086383, 0.78455653099681166, 0.98999999999999999,
          0.99953584111663873}},
        {{0.999, true, 2.0, 0.75},
         {0, 0.26221205353311894, 0.40539644249863949, 0.72156233512647394, 0.9905496707712903, 0.999}},
    };
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 6; i++) CHECK_NEAR(ema_decay_at(&cases[c].o, steps[i]), cases[c].want[i], 0, 1e-14);
}

static const float MODEL[4][6] = {{0.5f, -1.25f, 2.0f, 0.0f, 3.5e-3f, 1000.0f},
                                  {0.25f, -1.0f, 2.5f, 1e-3f, 3.0e-3f, -1000.0f},
                                  {0.125f, -0.5f, 3.0f, -1e-3f, 2.5e-3f, 999.0f},
                                  {0.0625f, 0.5f, 3.5f, 2e-3f, 2.0e-3f, 998.0f}};

/* Four updates of the backend op from 7.0 with the decays timm would use. */
static void lerp_updates_match_torch(void) {
    backend_t *be = test_cpu_backend(2);
    struct { ema_opts_t o; float want[6]; } cases[2] = {
        {{0.9, false, 1.0, 2.0 / 3.0}, {0.402249992f, -0.98725003f, 2.28049994f, 0.000191000028f, 0.00321950018f,
                                        837.710022f}},
        {{0.9998, true, 1.0, 2.0 / 3.0}, {0.16831781f, -0.288715273f, 2.98388672f, 0.000701031007f,
                                          0.00251611322f, 604.327209f}},
    };
    for (int c = 0; c < 2; c++) {
        float ema[6] = {7, 7, 7, 7, 7, 7};
        for (int s = 1; s <= 4; s++) {
            CHECK_INT(be->ops->ema_update(be, 6, ema, MODEL[s - 1], ema_decay_at(&cases[c].o, s)), 0);
            if (s == 1)   /* decay 0: an exact copy */
                CHECK(memcmp(ema, MODEL[0], sizeof ema) == 0);
        }
        for (int i = 0; i < 6; i++) CHECK_NEAR(ema[i], cases[c].want[i], 0, 4e-7);
    }
    backend_free(be);
}

enum { NG = 100000 };

static void make_grads(float *g) {
    for (int64_t i = 0; i < NG; i++) g[i] = ((float)((i * 7919) % 2001 - 1000) / 1000.0f) * 0.01f;
}

static void clip_matches_torch(void) {
    backend_t *be1 = test_cpu_backend(1), *be2 = test_cpu_backend(2);
    float *g = malloc(NG * sizeof *g), *g2 = malloc(NG * sizeof *g2), *orig = malloc(NG * sizeof *orig);
    make_grads(g);
    memcpy(g2, g, NG * sizeof *g);
    memcpy(orig, g, NG * sizeof *g);
    step_ctl_t ctl = {.loss_scale = 1.0f};
    float norm = 0, norm2 = 0;
    CHECK_INT(be1->ops->clip_grad_norm(be1, NG, g, 1.0, &ctl, &norm), 0);
    CHECK_NEAR(norm, 1.82662642, 0, 1e-6);
    const int idx[7] = {0, 1, 7, 32767, 32768, 65537, 99999};
    const float want[7] = {-0.00547457021f, 0.0050147064f, 0.00222267536f, -0.00439607957f, -0.00486141816f,
                           -0.00471360516f, -0.0036515384f};
    for (int k = 0; k < 7; k++) CHECK_NEAR(g[idx[k]], want[k], 0, 1e-6);
    /* 2 threads: the same sum, bit for bit */
    CHECK_INT(be2->ops->clip_grad_norm(be2, NG, g2, 1.0, &ctl, &norm2), 0);
    CHECK(memcmp(&norm, &norm2, sizeof norm) == 0);
    CHECK(memcmp(g, g2, NG * sizeof *g) == 0);
    /* within the bound: untouched, norm reported */
    memcpy(g, orig, NG * sizeof *g);
    CHECK_INT(be1->ops->clip_grad_norm(be1, NG, g, 5.0, &ctl, &norm), 0);
    CHECK_NEAR(norm, 1.82662642, 0, 1e-6);
    CHECK(memcmp(g, orig, NG * sizeof *g) == 0);
    /* norm only (max_norm 0) */
    CHECK_INT(be1->ops->clip_grad_norm(be1, NG, g, 0.0, &ctl, &norm), 0);
    CHECK(memcmp(g, orig, NG * sizeof *g) == 0);
    /* an overflowed step is skipped, not clipped; the norm is still written */
    ctl.found_inf = 1;
    norm = -1;
    CHECK_INT(be1->ops->clip_grad_norm(be1, NG, g, 1.0, &ctl, &norm), 0);
    CHECK_NEAR(norm, 1.82662642, 0, 1e-6);
    CHECK(memcmp(g, orig, NG * sizeof *g) == 0);
    free(g);
    free(g2);
    free(orig);
    backend_free(be1);
    backend_free(be2);
}

/* model/ema.h over a net: conv 1x1 (1 weight), bn (2 params, 2 buffers), fc (2). */
static void ema_module_over_a_net(void) {
    backend_t *be = test_cpu_backend(1);
    err_t e = {0};
    net_t *n = test_tiny_net(be);
    size_t np = net_num_params(n), nb = net_num_buffers(n);
    CHECK_INT(np, 5);
    CHECK_INT(nb, 2);
    float p0[5] = {1, 2, 3, 4, 5}, b0[2] = {0.5f, 2.0f};
    CHECK_INT(net_upload_params(n, p0, &e), 0);
    CHECK_INT(net_upload_buffers(n, b0, &e), 0);
    ema_opts_t o = {0.5, false, 1.0, 2.0 / 3.0};
    ema_t *m = ema_create(n, &o, &e);
    CHECK(m != NULL);
    if (!m) return;
    CHECK(memcmp(ema_params(m), p0, sizeof p0) == 0);
    /* step 1: decay 0 (a copy); step 2: decay 0.5 towards the new values */
    float p1[5] = {3, 2, 1, 0, -1}, b1[2] = {1.5f, 4.0f};
    CHECK_INT(net_upload_params(n, p1, &e), 0);
    CHECK_INT(net_upload_buffers(n, b1, &e), 0);
    CHECK_INT(ema_update(m, 1, &e), 0);
    CHECK(memcmp(ema_params(m), p1, sizeof p1) == 0);
    CHECK(memcmp(ema_buffers(m), b1, sizeof b1) == 0);
    CHECK_INT(net_upload_params(n, p0, &e), 0);
    CHECK_INT(net_upload_buffers(n, b0, &e), 0);
    CHECK_INT(ema_update(m, 2, &e), 0);
    const float want_p[5] = {2, 2, 2, 2, 2}, want_b[2] = {1.0f, 3.0f};
    CHECK(memcmp(ema_params(m), want_p, sizeof want_p) == 0);
    CHECK(memcmp(ema_buffers(m), want_b, sizeof want_b) == 0);
    /* swap in, swap out */
    float hp[5], hb[2];
    CHECK_INT(ema_swap(m, &e), 0);
    CHECK_INT(net_download_params(n, hp, &e), 0);
    CHECK_INT(net_download_buffers(n, hb, &e), 0);
    CHECK(memcmp(hp, want_p, sizeof hp) == 0);
    CHECK(memcmp(hb, want_b, sizeof hb) == 0);
    CHECK(memcmp(ema_params(m), p0, sizeof p0) == 0);
    CHECK_INT(ema_swap(m, &e), 0);
    CHECK_INT(net_download_params(n, hp, &e), 0);
    CHECK(memcmp(hp, p0, sizeof hp) == 0);
    CHECK(memcmp(ema_params(m), want_p, sizeof want_p) == 0);
    /* bad options are refused with the key's name */
    ema_opts_t bad = {1.0, false, 1.0, 2.0 / 3.0};
    CHECK(ema_create(n, &bad, &e) == NULL);
    CHECK_CONTAINS(e.msg, "train.ema");
    ema_free(m);
    net_free(n);
    backend_free(be);
}

int main(void) {
    TEST_RUN(decay_schedule_matches_timm);
    TEST_RUN(lerp_updates_match_torch);
    TEST_RUN(clip_matches_torch);
    TEST_RUN(ema_module_over_a_net);
    return test_main_end();
}
