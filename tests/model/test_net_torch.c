/* test_net_torch.c: the net layer with every node kind of the new families against
 * PyTorch (tests/model/families_ref.py, which writes the fixture this reads).
 *
 * Usage: test_net_torch FIXTURE_DIR [cpu|cuda] (cuda: the same checks on the CUDA backend,
 * deterministic, TF32 off; exits 77, skipped, without a GPU).
 * The net (families_net.h) is loaded with the fixture's init through safetensors_load_net
 * (OIHW conv weights, grouped and depthwise too, converted to KRSC), given the dropout key
 * families_ref.py used, and runs one training forward + loss (label smoothing 0.1, mean)
 * + backward. Checked:
 *   - the C mask function (util/dropout.h) against the script's own numpy Philox from
 *     the key layout the header documents: bit for bit;
 *   - logits, loss, every parameter gradient and the BN running statistics after the
 *     forward against PyTorch's float64 run with the same masks: ||ours - ref|| <=
 *     max(base * ||ref||, 10 x ||torch_fp32 - ref||) (absolute L2 norms, because the
 *     stem's bias gradient is ~0: the BN after it cancels it; the fixture's draw is
 *     chosen well conditioned, so the verdict does not depend on the CPU's rounding), the
 *     PyTorch part capped at 1e-4 ||ref|| + 1e-6, beyond which the fixture itself is
 *     refused (a reference whose fp32 run is off would otherwise pass anything);
 *   - num_batches_tracked 1 after the forward; net_forward_flops against the script's
 *     count (grouped convs count c / groups inputs per output).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu/cpu_backend.h"
#include "model/net.h"
#include "model/safetensors.h"
#include "tests/model/families_net.h"
#include "tests/test.h"
#include "util/dropout.h"

static const char *g_dir;
static backend_kind_t g_kind = BACKEND_CPU;
static const dropout_key_t g_key = {.seed = 0x123456789ABCull, .epoch = 3, .first_sample = 5,
                                    .sample_stride = 2};

/* base relative L2 tolerances (measured on AVX-512: worst 4e-7 forward, 3e-6 gradients) */
#define BASE_FWD 1e-5
#define BASE_GRAD 2e-5
/* the fixture's own fp32 error may widen a tolerance only up to this relative size: a
 * fixture whose fp32 and fp64 runs disagree more (a broken reference) fails instead */
#define TORCH_ERR_CAP 1e-4

typedef struct ctx {
    backend_t *be;
    net_t *net;
    safetensors_t *gold;
    int batch, side;
} ctx_t;

/* A gold tensor as floats (malloc'd; NULL with a failed check when absent). */
static float *gold_f32(const ctx_t *c, const char *name, size_t *numel) {
    const st_tensor_t *t = safetensors_find(c->gold, name);
    if (!t) fprintf(stderr, "gold tensor %s missing\n", name);
    CHECK(t != NULL);
    if (!t) return NULL;
    float *v = malloc(t->numel * sizeof(float) + 4);
    err_t e = {0};
    CHECK_INT(safetensors_read_f32(c->gold, t, v, &e), 0);
    if (numel) *numel = t->numel;
    return v;
}

/* Checks ours (n floats) against gold `name`; returns ||ours - ref|| / tolerance. */
static double check_tensor(const ctx_t *c, const char *name, const float *ours, size_t n, double base) {
    size_t gn = 0;
    float *ref = gold_f32(c, name, &gn);
    char en[200];
    snprintf(en, sizeof en, "err.%s", name);
    float *terr = gold_f32(c, en, NULL);
    if (!ref || !terr) {
        free(ref);
        free(terr);
        return 1e30;
    }
    CHECK_INT(gn, n);
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < n && i < gn; i++) {
        double d = (double)ours[i] - ref[i];
        d2 += d * d;
        r2 += (double)ref[i] * ref[i];
    }
    double cap = TORCH_ERR_CAP * sqrt(r2) + 1e-6;
    if (terr[0] > cap) fprintf(stderr, "  %s: the fixture's fp32 run is %.3g from its fp64 one\n", name, terr[0]);
    CHECK(terr[0] <= cap);
    double tol = fmax(base * sqrt(r2), fmin(10.0 * terr[0], cap));
    double ratio = sqrt(d2) / fmax(tol, 1e-30);
    if (ratio > 1.0 || getenv("GOLDEN_VERBOSE"))
        fprintf(stderr, "  %s: ||ours - ref|| %.3g, ||ref|| %.3g, PyTorch fp32 %.3g: %.2f of the tolerance\n",
                name, sqrt(d2), sqrt(r2), terr[0], ratio);
    CHECK(ratio <= 1.0);
    free(ref);
    free(terr);
    return ratio;
}

static int setup(ctx_t *c) {
    memset(c, 0, sizeof *c);
    err_t e = {0};
    backend_opts_t bo = {.kind = g_kind, .threads = 0, .deterministic = true, .allow_tf32 = false};
    c->be = g_kind == BACKEND_CPU ? cpu_backend_create(&bo, &e) : backend_create(&bo, &e);
    if (!c->be && g_kind == BACKEND_CUDA) test_skip(e.msg);
    CHECK(c->be != NULL);
    if (!c->be) return -1;
    char path[1024];
    snprintf(path, sizeof path, "%s/families_gold.safetensors", g_dir);
    c->gold = safetensors_open(path, 0, &e);
    if (!c->gold) fprintf(stderr, "%s\n", e.msg);
    CHECK(c->gold != NULL);
    if (!c->gold) return -1;
    const st_tensor_t *x = safetensors_find(c->gold, "input");
    CHECK(x != NULL && x->ndim == 4);
    if (!x) return -1;
    c->batch = (int)x->shape[0];
    c->side = (int)x->shape[1];
    c->net = families_net(&e);
    CHECK(c->net != NULL);
    if (!c->net) return -1;
    CHECK_INT(net_bind(c->net, c->be, c->batch, c->side, c->side, DT_F32, &e), 0);
    snprintf(path, sizeof path, "%s/families_init.safetensors", g_dir);
    int rc = safetensors_load_net(c->net, path, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    CHECK_INT(rc, 0);
    return rc;
}

static void teardown(ctx_t *c) {
    net_free(c->net);
    safetensors_close(c->gold);
    if (c->be) backend_free(c->be);
}

/* util/dropout.h's masks equal the script's independent computation, element for element. */
static void test_masks_match_reference(void) {
    ctx_t c;
    if (setup(&c) < 0) { teardown(&c); return; }
    const int nodes[2] = {FAM_DROP_MAP, FAM_DROP_FC};
    const double ps[2] = {0.25, 0.5};
    for (int k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof name, "mask.%d", nodes[k]);
        size_t n = 0;
        float *ref = gold_f32(&c, name, &n);
        if (!ref) continue;
        size_t per = n / (size_t)c.batch, bad = 0, kept = 0;
        uint64_t thr = dropout_threshold(ps[k]);
        for (int i = 0; i < c.batch; i++)
            for (size_t el = 0; el < per; el++) {
                uint32_t u[4];
                dropout_block(g_key.seed, g_key.epoch, (uint64_t)(g_key.first_sample + i * g_key.sample_stride),
                              (uint32_t)nodes[k], (uint32_t)(el / 4), u);
                float keep = (uint64_t)u[el % 4] >= thr ? 1.0f : 0.0f;
                bad += keep != ref[(size_t)i * per + el];
                kept += keep != 0.0f;
            }
        fprintf(stderr, "  mask of node %d: %zu of %zu kept (p = %.2f)\n", nodes[k], kept, n, ps[k]);
        CHECK_INT(bad, 0);
        free(ref);
    }
    teardown(&c);
}

static void test_forward_backward(void) {
    ctx_t c;
    if (setup(&c) < 0) { teardown(&c); return; }
    err_t e = {0};
    size_t nx = 0;
    float *img = gold_f32(&c, "input", &nx);
    const st_tensor_t *lt = safetensors_find(c.gold, "labels");
    int64_t lab[64];
    int32_t labels[64];
    CHECK(lt != NULL && c.batch <= 64);
    if (!img || !lt || c.batch > 64) { free(img); teardown(&c); return; }
    CHECK_INT(safetensors_read_i64(c.gold, lt, lab, &e), 0);
    for (int i = 0; i < c.batch; i++) labels[i] = (int32_t)lab[i];
    CHECK_INT(net_upload_input(c.net, img, c.batch, &e), 0);
    CHECK_INT(net_set_rng_key(c.net, g_key.seed, g_key.epoch, g_key.first_sample, g_key.sample_stride, &e), 0);
    CHECK_INT(net_zero_grads(c.net, &e), 0);
    CHECK_INT(net_forward(c.net, net_input(c.net), c.batch, true, NULL, &e), 0);
    net_loss_out_t lo;
    CHECK_INT(net_loss(c.net, labels, 0.1f, 1.0f / (float)c.batch, &lo, &e), 0);
    CHECK_INT(net_backward(c.net, NULL, &e), 0);
    if (e.code) fprintf(stderr, "%s\n", e.msg);

    double worst = 0;
    float logits[64 * FAM_CLASSES], loss = (float)(lo.loss_sum / c.batch);
    CHECK_INT(c.be->ops->download(c.be, logits, net_logits(c.net), (size_t)c.batch * FAM_CLASSES * 4), 0);
    worst = fmax(worst, check_tensor(&c, "logits", logits, (size_t)c.batch * FAM_CLASSES, BASE_FWD));
    worst = fmax(worst, check_tensor(&c, "loss", &loss, 1, BASE_FWD));

    size_t np = net_num_params(c.net), nb = net_num_buffers(c.net);
    float *grads = malloc(np * 4), *bufs = malloc(nb * 4 + 4), *tv = malloc(np * 4);
    CHECK_INT(net_download_grads(c.net, grads, &e), 0);
    CHECK_INT(net_download_buffers(c.net, bufs, &e), 0);
    int checked = 0;
    for (int i = 0; i < net_num_tensors(c.net); i++) {
        const net_tensor_t *t = net_tensor(c.net, i);
        char name[160];
        if (t->store == NET_STORE_COUNTER) {
            CHECK_INT(net_counters(c.net)[t->offset], 1);
            continue;
        }
        const float *src = (t->store == NET_STORE_PARAM ? grads : bufs) + t->offset;
        if (t->conv_weight) net_krsc_to_oihw(src, tv, t->shape);
        else memcpy(tv, src, t->numel * 4);
        snprintf(name, sizeof name, "%s%s", t->store == NET_STORE_PARAM ? "grad." : "fwd.", t->name);
        worst = fmax(worst, check_tensor(&c, name, tv, t->numel, t->store == NET_STORE_PARAM ? BASE_GRAD : BASE_FWD));
        checked++;
    }
    /* 2 convs with bias (2 tensors each) + 4 without + 5 BNs (4 each) + 2 linears (2 each) */
    CHECK_INT(checked, 4 + 4 + 20 + 4);
    printf("families net (%s): worst error %.2f of its tolerance over logits, loss, %d gradients and "
           "running statistics\n", g_kind == BACKEND_CPU ? "cpu" : "cuda", worst, checked);
    float *flops = gold_f32(&c, "flops", NULL);
    if (flops) CHECK_NEAR(net_forward_flops(c.net, c.side, c.side), flops[0], 0.5, 0);
    free(flops);
    free(grads);
    free(bufs);
    free(tv);
    free(img);
    teardown(&c);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FIXTURE_DIR [cpu|cuda]\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    if (argc > 2 && !strcmp(argv[2], "cuda")) g_kind = BACKEND_CUDA;
    TEST_RUN(test_masks_match_reference);
    TEST_RUN(test_forward_backward);
    return test_main_end();
}
