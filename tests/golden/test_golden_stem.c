/* test_golden_stem.c: a ResNet with torchvision's ImageNet stem (7x7/2 conv + max-pool)
 * on the CPU backend against PyTorch: the fixture (make_stem_fixture.py) is
 * torchvision.models.resnet18(num_classes=10) with torchvision's own init, converted by
 * scripts/torchvision_weights.py, and one batch of 8 64x64 images.
 *
 * Usage: test_golden_stem FIXTURE_DIR [cpu|cuda] (cuda: the same checks on the CUDA
 * backend with TF32 off; exits 77 without a GPU). Loads the converted init with
 * safetensors_load_net (strict names and shapes: the net's tensors are torchvision's),
 * then checks against the float64 reference:
 *   1. one training forward: logits, loss, BN running statistics and counters;
 *   2. backward: every parameter gradient of the mean loss;
 *   3. an eval forward with the updated running statistics: the logits torchvision's
 *      model.eval() gives with the same weights (what `runner export` users see);
 *   4. one SGD step (lr 0.1, momentum 0.9, wd 5e-4): every parameter and buffer.
 * Tolerances as tests/golden/test_golden.c: a tensor's relative L2 error must be within
 * max(a base per check, 10 x PyTorch's own fp32 error on it, err.<name> in the fixture).
 */
#include <math.h>
#include <stdlib.h>

#include "model/cpu/cpu_backend.h"
#include "model/net.h"
#include "model/optim.h"
#include "model/arch/resnet.h"
#include "model/safetensors.h"
#include "tests/test.h"

static backend_kind_t g_kind = BACKEND_CPU;
static char g_init[1024], g_gold[1024];

typedef struct ctx {
    backend_t *be;
    net_t *net;
    safetensors_t *gold;
    int batch, h, w;
    int32_t labels[64];
    float *host, *layout, *ref;   /* a flat array, one tensor in torchvision layout, gold */
} ctx_t;

/* max(base, 10 x PyTorch's fp32 error on name); *torch_err gets the latter / 10. */
static double tol_for(const ctx_t *c, const char *name, double base, double *torch_err) {
    char en[200];
    snprintf(en, sizeof en, "err.%s", name);
    const st_tensor_t *t = safetensors_find(c->gold, en);
    float v = 0;
    err_t e = {0};
    if (t && t->numel == 1) safetensors_read_f32(c->gold, t, &v, &e);
    *torch_err = v;
    return 10.0 * v > base ? 10.0 * v : base;
}

/* ||ours - gold|| / ||gold|| (the plain norm when gold is 0). */
static double rel_l2(const float *ours, const float *gold, size_t n) {
    double d2 = 0, g2 = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)ours[i] - gold[i];
        d2 += d * d;
        g2 += (double)gold[i] * gold[i];
    }
    return g2 > 0 ? sqrt(d2 / g2) : sqrt(d2);
}

/* Checks ours (n floats) against gold tensor name; returns error / tolerance. */
static double check_tensor(ctx_t *c, const char *name, const float *ours, size_t n, double base) {
    const st_tensor_t *g = safetensors_find(c->gold, name);
    if (!g || g->numel != n) {
        fprintf(stderr, "gold tensor %s missing or of another size\n", name);
        CHECK(false);
        return INFINITY;
    }
    err_t e = {0};
    CHECK_INT(safetensors_read_f32(c->gold, g, c->ref, &e), 0);
    double terr, tol = tol_for(c, name, base, &terr), r = rel_l2(ours, c->ref, n);
    if (r > tol) fprintf(stderr, "  %s: relative L2 %.3g > tolerance %.3g (PyTorch fp32 %.3g)\n", name, r, tol, terr);
    CHECK(r <= tol);
    return r / tol;
}

/* Every tensor of the net whose store is selected, against gold prefix + name: params
 * from c->host (a downloaded params, grads or buffers array), counters exactly. */
static void check_all(ctx_t *c, const char *prefix, net_store_t store, const float *flat, double base) {
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < net_num_tensors(c->net); i++) {
        const net_tensor_t *t = net_tensor(c->net, i);
        char name[160];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        if (t->store == NET_STORE_COUNTER && store == NET_STORE_BUFFER) {
            const st_tensor_t *g = safetensors_find(c->gold, name);
            int64_t v = -1;
            err_t e = {0};
            CHECK(g != NULL);
            if (g) CHECK_INT(safetensors_read_i64(c->gold, g, &v, &e), 0);
            CHECK_INT(net_counters(c->net)[t->offset], v);
            continue;
        }
        if (t->store != store) continue;
        const float *src = flat + t->offset;
        if (t->conv_weight) {   /* KRSC -> torchvision's OIHW */
            int64_t O = t->shape[0], I = t->shape[1], H = t->shape[2], W = t->shape[3];
            for (int64_t o = 0; o < O; o++)
                for (int64_t ci = 0; ci < I; ci++)
                    for (int64_t kh = 0; kh < H; kh++)
                        for (int64_t kw = 0; kw < W; kw++)
                            c->layout[((o * I + ci) * H + kh) * W + kw] = src[((o * H + kh) * W + kw) * I + ci];
            src = c->layout;
        }
        double q = check_tensor(c, name, src, t->numel, base);
        if (q > worst) worst = q, worst_name = t->name;
    }
    printf("resnet18 imagenet stem %s%s: worst at %.2f of its tolerance (%s)\n", prefix,
           store == NET_STORE_BUFFER ? " buffers" : "", worst, worst_name);
}

static int setup(ctx_t *c) {
    memset(c, 0, sizeof *c);
    err_t e = {0};
    backend_opts_t bo = {.kind = g_kind, .threads = 0, .deterministic = true, .allow_tf32 = false};
    c->be = g_kind == BACKEND_CPU ? cpu_backend_create(&bo, &e) : backend_create(&bo, &e);
    if (!c->be && g_kind == BACKEND_CUDA) test_skip(e.msg);
    CHECK(c->be != NULL);
    if (!c->be || !(c->gold = safetensors_open(g_gold, 0, &e))) {
        fprintf(stderr, "%s\n", e.msg);
        CHECK(false);
        return -1;
    }
    const st_tensor_t *x = safetensors_find(c->gold, "input"), *y = safetensors_find(c->gold, "labels"),
                      *lg = safetensors_find(c->gold, "logits");
    CHECK(x && y && lg && x->ndim == 4 && x->shape[0] <= 64);
    if (!x || !y || !lg || x->ndim != 4 || x->shape[0] > 64) return -1;
    c->batch = (int)x->shape[0];
    c->h = (int)x->shape[1];
    c->w = (int)x->shape[2];
    c->net = resnet_build_stem("resnet18", ARCH_STEM_IMAGENET, (int)x->shape[3], (int)lg->shape[1], false, &e);
    CHECK(c->net != NULL);
    if (!c->net) return -1;
    CHECK_INT(net_bind(c->net, c->be, c->batch, c->h, c->w, DT_F32, &e), 0);
    /* the converter's file: torchvision's names and shapes, loaded strictly */
    safetensors_t *init = safetensors_open(g_init, 0, &e);
    CHECK(init != NULL);
    if (init) {
        CHECK_STR(safetensors_meta(init, "arch"), "resnet18");
        CHECK_STR(safetensors_meta(init, "stem"), "imagenet");
        safetensors_close(init);
    }
    int rc = safetensors_load_net(c->net, g_init, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    CHECK_INT(rc, 0);
    size_t np = net_num_params(c->net);
    c->host = malloc(np * sizeof(float));
    c->layout = malloc(np * sizeof(float));
    c->ref = malloc((np > x->numel ? np : x->numel) * sizeof(float));
    int64_t lab[64];
    CHECK_INT(safetensors_read_f32(c->gold, x, c->ref, &e), 0);
    CHECK_INT(safetensors_read_i64(c->gold, y, lab, &e), 0);
    for (int i = 0; i < c->batch; i++) c->labels[i] = (int32_t)lab[i];
    CHECK_INT(net_upload_input(c->net, c->ref, c->batch, &e), 0);
    return rc;
}

static void teardown(ctx_t *c) {
    net_free(c->net);
    safetensors_close(c->gold);
    backend_free(c->be);
    free(c->host);
    free(c->layout);
    free(c->ref);
}

static double fwd_bwd(ctx_t *c) {
    err_t e = {0};
    net_loss_out_t lo;
    CHECK_INT(net_zero_grads(c->net, &e), 0);
    CHECK_INT(net_forward(c->net, net_input(c->net), c->batch, true, NULL, &e), 0);
    CHECK_INT(net_loss(c->net, c->labels, 0.1f, 1.0f / (float)c->batch, &lo, &e), 0);
    CHECK_INT(net_backward(c->net, NULL, &e), 0);
    return lo.loss_sum / c->batch;
}

/* The logits of the last forward against gold tensor name. */
static void check_logits(ctx_t *c, const char *name) {
    int classes = net_num_classes(c->net);
    float *lg = malloc((size_t)c->batch * classes * sizeof(float));
    CHECK_INT(c->be->ops->download(c->be, lg, net_logits(c->net), (size_t)c->batch * classes * sizeof(float)), 0);
    double q = check_tensor(c, name, lg, (size_t)c->batch * classes, 2e-5);
    printf("resnet18 imagenet stem %s: %.2f of its tolerance\n", name, q);
    free(lg);
}

static void test_forward_backward_eval(void) {
    ctx_t c;
    if (setup(&c) < 0) { teardown(&c); return; }
    err_t e = {0};
    float loss = (float)fwd_bwd(&c);
    check_logits(&c, "logits");
    check_tensor(&c, "loss", &loss, 1, 1e-5);
    CHECK_INT(net_download_buffers(c.net, c.host, &e), 0);
    check_all(&c, "fwd.", NET_STORE_BUFFER, c.host, 2e-5);
    CHECK_INT(net_download_grads(c.net, c.host, &e), 0);
    check_all(&c, "grad.", NET_STORE_PARAM, c.host, 3e-5);
    /* eval mode: the running statistics the forward above left */
    CHECK_INT(net_forward(c.net, net_input(c.net), c.batch, false, NULL, &e), 0);
    check_logits(&c, "eval_logits");
    teardown(&c);
}

static void test_sgd_step(void) {
    ctx_t c;
    if (setup(&c) < 0) { teardown(&c); return; }
    err_t e = {0};
    optim_opts_t oo = {.kind = OPTIM_SGD, .momentum = 0.9, .weight_decay = 5e-4};
    optim_t *o = optim_create(c.net, &oo, &e);
    CHECK(o != NULL);
    if (o) {
        fwd_bwd(&c);
        CHECK_INT(optim_step(o, 0.1, &e), 0);
        CHECK_INT(net_download_params(c.net, c.host, &e), 0);
        check_all(&c, "sgd.", NET_STORE_PARAM, c.host, 3e-5);
        CHECK_INT(net_download_buffers(c.net, c.host, &e), 0);
        check_all(&c, "sgd.", NET_STORE_BUFFER, c.host, 2e-5);
        optim_free(o);
    }
    teardown(&c);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_golden_stem FIXTURE_DIR [cpu|cuda]\n");
        return 2;
    }
    if (argc > 2 && !strcmp(argv[2], "cuda")) {
        if (backend_cuda_device_count() < 1) test_skip("no CUDA device visible");
        g_kind = BACKEND_CUDA;
    }
    snprintf(g_init, sizeof g_init, "%s/resnet18_imagenet_init.safetensors", argv[1]);
    snprintf(g_gold, sizeof g_gold, "%s/resnet18_imagenet_golden.safetensors", argv[1]);
    TEST_RUN(test_forward_backward_eval);
    TEST_RUN(test_sgd_step);
    return test_main_end();
}
