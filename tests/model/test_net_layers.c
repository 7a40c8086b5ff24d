/* test_net_layers.c: the net layer's support for the new families' node kinds (issue #24)
 * without PyTorch (test_net_torch checks the numbers against it):
 *   - dropout masks follow the sample: a batch of 8 gives each sample the same mask as
 *     DDP world 2 (ranks 0/1 with 4 samples each, interleaved as the sampler deals them),
 *     as DP (two replica chunks), and as a freshly built net (a resumed run); eval and
 *     p = 0 are the identity; a training forward without a fresh key is refused;
 *     another epoch or node draws other masks;
 *   - the builders: grouped / depthwise conv tensor shapes and a bad group count,
 *     conv bias, the linear's flat_c/h/w after an adaptive avgpool, a linear whose map
 *     is known only at bind, avgpool2's output, net_set_init, FLOPs of grouped convs;
 *   - memory: net_activation_bytes equals what net_bind allocates for the families net;
 *   - AMP: the families net in fp16 and bf16 tracks its fp32 run (relative L2 bounds in
 *     test_amp), and conv_engines lists the grouped shapes with "groups".
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu/cpu_backend.h"
#include "model/net.h"
#include "tests/model/families_net.h"
#include "tests/model/model_util.h"
#include "tests/test.h"
#include "util/json.h"
#include "util/rng.h"

enum { SIDE = 6, CH = 4, PER = SIDE * SIDE * CH };

/* dropout(p) on the input, then an identity adaptive pool (1x1 windows), so the logits
 * are the dropout output itself; bound for `batch` rows. */
static net_t *mask_net(backend_t *be, int batch, double p) {
    err_t e = {0};
    net_t *n = net_create(CH, &e);
    int d = net_add_dropout(n, NET_INPUT, p, &e);
    CHECK(net_add_avgpool2(n, d, SIDE, SIDE, &e) >= 0);
    CHECK_INT(net_bind(n, be, batch, SIDE, SIDE, DT_F32, &e), 0);
    return n;
}

/* Training forward of rows rows[0..count) of x (8 x PER) keyed (epoch, first, stride);
 * out gets count x PER outputs. */
static void masked_forward(net_t *n, const float *x, const int *rows, int count, uint64_t epoch, int64_t first,
                           int64_t stride, float *out) {
    err_t e = {0};
    float *in = malloc((size_t)count * PER * sizeof(float));
    for (int i = 0; i < count; i++) memcpy(in + (size_t)i * PER, x + (size_t)rows[i] * PER, PER * sizeof(float));
    CHECK_INT(net_upload_input(n, in, count, &e), 0);
    CHECK_INT(net_set_rng_key(n, 42, epoch, first, stride, &e), 0);
    CHECK_INT(net_forward(n, net_input(n), count, true, NULL, &e), 0);
    backend_t *be = net_backend(n);
    CHECK_INT(be->ops->download(be, out, net_logits(n), (size_t)count * PER * sizeof(float)), 0);
    free(in);
}

static void test_dropout_masks_follow_samples(void) {
    backend_t *be = test_cpu_backend(2);
    net_t *n8 = mask_net(be, 8, 0.3), *n4 = mask_net(be, 4, 0.3);
    float x[8 * PER], all[8 * PER], part[4 * PER];
    rng_t r = rng_make(5, RNG_STREAM_MISC, 0, 0);
    for (int i = 0; i < 8 * PER; i++) x[i] = 0.5f + rng_uniform(&r);   /* never 0: zeros are drops */
    const int single[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    masked_forward(n8, x, single, 8, 3, 16, 1, all);   /* a micro-batch starting at place 16 */
    int kept = 0;
    float scale = 1.0f / (float)(1.0 - 0.3);
    for (int i = 0; i < 8 * PER; i++) {
        CHECK(all[i] == 0.0f || all[i] == x[i] * scale);
        kept += all[i] != 0.0f;
    }
    fprintf(stderr, "  %d of %d kept at p 0.3\n", kept, 8 * PER);
    CHECK(kept > 8 * PER * 0.6 && kept < 8 * PER * 0.8);
    /* DDP world 2: rank r gets places 16 + r, 16 + r + 2, ... (first = r + 8 * 2, stride 2) */
    for (int rank = 0; rank < 2; rank++) {
        const int rows[4] = {rank, rank + 2, rank + 4, rank + 6};
        masked_forward(n4, x, rows, 4, 3, rank + 16, 2, part);
        for (int i = 0; i < 4; i++) CHECK(memcmp(part + i * PER, all + rows[i] * PER, PER * sizeof(float)) == 0);
    }
    /* DP: replica chunks [0, 4) and [4, 8) of the micro-batch */
    for (int c = 0; c < 2; c++) {
        const int rows[4] = {4 * c, 4 * c + 1, 4 * c + 2, 4 * c + 3};
        masked_forward(n4, x, rows, 4, 3, 16 + 4 * c, 1, part);
        CHECK(memcmp(part, all + 4 * c * PER, 4 * PER * sizeof(float)) == 0);
    }
    /* a resumed run: a fresh net and backend, the same key */
    backend_t *be2 = test_cpu_backend(1);
    net_t *again = mask_net(be2, 8, 0.3);
    float *again_out = malloc(sizeof all);
    masked_forward(again, x, single, 8, 3, 16, 1, again_out);
    CHECK(memcmp(again_out, all, sizeof all) == 0);
    /* the next epoch draws other masks */
    masked_forward(again, x, single, 8, 4, 16, 1, again_out);
    int same = 0;
    for (int i = 0; i < 8 * PER; i++) same += (again_out[i] == 0.0f) == (all[i] == 0.0f);
    CHECK(same < 8 * PER * 0.75);   /* independent masks agree on ~58% of elements at p 0.3 */
    free(again_out);
    net_free(again);
    backend_free(be2);
    net_free(n8);
    net_free(n4);
    backend_free(be);
}

/* Evaluation and p = 0 pass the input through; a training forward needs a fresh key. */
static void test_dropout_identity_and_key(void) {
    backend_t *be = test_cpu_backend(2);
    err_t e = {0};
    net_t *n = mask_net(be, 2, 0.5), *z = mask_net(be, 2, 0.0);
    float x[2 * PER], y[2 * PER];
    for (int i = 0; i < 2 * PER; i++) x[i] = (float)(i % 13) - 6.0f;
    CHECK_INT(net_upload_input(n, x, 2, &e), 0);
    CHECK_INT(net_forward(n, net_input(n), 2, false, NULL, &e), 0);   /* eval: no key needed */
    CHECK_INT(be->ops->download(be, y, net_logits(n), sizeof y), 0);
    CHECK(memcmp(x, y, sizeof x) == 0);
    CHECK_INT(net_forward(n, net_input(n), 2, true, NULL, &e), -1);
    CHECK_CONTAINS(e.msg, "net_set_rng_key");
    e = (err_t){0};
    CHECK_INT(net_set_rng_key(n, 1, 0, 0, 1, &e), 0);
    CHECK_INT(net_forward(n, net_input(n), 2, true, NULL, &e), 0);
    CHECK_INT(net_forward(n, net_input(n), 2, true, NULL, &e), -1);   /* the key was used */
    e = (err_t){0};
    CHECK_INT(net_upload_input(z, x, 2, &e), 0);
    CHECK_INT(net_set_rng_key(z, 1, 0, 0, 1, &e), 0);
    CHECK_INT(net_forward(z, net_input(z), 2, true, NULL, &e), 0);
    CHECK_INT(be->ops->download(be, y, net_logits(z), sizeof y), 0);
    CHECK(memcmp(x, y, sizeof x) == 0);
    CHECK(net_has_dropout(n));
    CHECK_INT(net_add_dropout(n, 0, 1.5, &e), -1);   /* after bind, and p > 1 */
    net_free(n);
    net_free(z);
    backend_free(be);
}

/* Tensor table of the families net, errors of the builders, FLOPs, init overrides. */
static void test_builders(void) {
    err_t e = {0};
    net_t *n = families_net(&e);
    CHECK(n != NULL);
    if (!n) return;
    const net_tensor_t *t = net_find_tensor(n, "b1.conv1.weight");
    CHECK(t && t->shape[0] == 8 && t->shape[1] == 4 && t->shape[2] == 3 && t->numel == 8 * 4 * 9);
    t = net_find_tensor(n, "b1.dw.weight");
    CHECK(t && t->shape[1] == 1 && t->numel == 8 * 9 && t->conv_weight);
    t = net_find_tensor(n, "stem.bias");
    CHECK(t && t->numel == 8 && t->no_decay && t->init == NET_INIT_LINEAR_UNIFORM);
    t = net_find_tensor(n, "fc1.weight");
    CHECK(t && t->shape[1] == 32 && t->flat_c == 8 && t->flat_h == 2 && t->flat_w == 2);
    t = net_find_tensor(n, "fc2.weight");
    CHECK(t && t->flat_c == 0 && t->flat_h == 0);
    CHECK_INT(net_node_kind(n, 3), NODE_BN_RELU6);
    CHECK_INT(net_node_kind(n, 8), NODE_RELU6);
    CHECK_INT(net_node_kind(n, FAM_DROP_FC), NODE_DROPOUT);
    /* grouped convs count c / groups inputs per output */
    CHECK_NEAR(net_forward_flops(n, 12, 12),
               2.0 * (144 * 8 * 27 + 144 * 8 * 36 + 144 * 8 * 9 + 36 * 16 * 8 + 9 * 16 * 9 + 9 * 8 * 4) +
                   2.0 * (32 * 12 + 12 * 5), 0, 0);
    CHECK_INT(net_set_init(n, "fc2.weight", NET_INIT_NORMAL_0_01, &e), 0);
    CHECK_INT(net_find_tensor(n, "fc2.weight")->init, NET_INIT_NORMAL_0_01);
    CHECK_INT(net_set_init(n, "fc9.weight", NET_INIT_ZEROS, &e), -1);
    CHECK_CONTAINS(e.msg, "fc9.weight");
    e = (err_t){0};
    CHECK_INT(net_set_init(n, "fc2.bias", NET_INIT_KAIMING_FAN_OUT, &e), -1);
    e = (err_t){0};
    /* a group count that divides neither side */
    CHECK_INT(net_add_conv2(n, "bad.conv", 1, 12, 3, 1, 1, 3, false, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "bad.conv");
    CHECK_CONTAINS(e.msg, "groups 3");
    net_free(n);

    /* a linear after a max-pool expects a 1x1 map; bind at another size names it */
    n = net_create(3, &e);
    int h = net_add_conv(n, "c", NET_INPUT, 8, 3, 1, 1, &e);
    h = net_add_maxpool(n, h, 2, 2, 0, &e);
    CHECK_INT(net_add_linear(n, "fc", h, 4, &e) >= 0, 1);
    CHECK_INT(net_find_tensor(n, "fc.weight")->shape[1], 8);
    backend_t *be = test_cpu_backend(1);
    CHECK_INT(net_bind(n, be, 2, 4, 4, DT_F32, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "fc expects 8 input features");
    CHECK_CONTAINS(e.msg, "2x2x8");
    net_free(n);
    e = (err_t){0};
    n = net_create(3, &e);
    h = net_add_conv(n, "c", NET_INPUT, 8, 3, 1, 1, &e);
    h = net_add_maxpool(n, h, 2, 2, 0, &e);
    CHECK(net_add_linear(n, "fc", h, 4, &e) >= 0);
    CHECK_INT(net_bind(n, be, 2, 2, 2, DT_F32, &e), 0);   /* 2x2 -> 1x1 after the pool */
    net_free(n);
    backend_free(be);
}

/* NORMAL_0_01 draws N(0, 0.01); ZEROS zeroes; LINEAR_UNIFORM on a grouped conv uses
 * fan_in = in / groups * kh * kw; KAIMING_FAN_OUT std sqrt(2 / (out * kh * kw)). */
static void test_inits(void) {
    backend_t *be = test_cpu_backend(1);
    err_t e = {0};
    net_t *n = net_create(64, &e);
    int h = net_add_conv2(n, "g", NET_INPUT, 64, 3, 1, 1, 4, true, &e);
    h = net_add_avgpool(n, h, &e);
    CHECK(net_add_linear(n, "fc", h, 1000, &e) >= 0);
    CHECK_INT(net_set_init(n, "fc.weight", NET_INIT_NORMAL_0_01, &e), 0);
    CHECK_INT(net_set_init(n, "fc.bias", NET_INIT_ZEROS, &e), 0);
    CHECK_INT(net_bind(n, be, 1, 4, 4, DT_F32, &e), 0);
    CHECK_INT(net_init(n, 3, &e), 0);
    float *p = malloc(net_num_params(n) * sizeof(float));
    CHECK_INT(net_download_params(n, p, &e), 0);
    struct { const char *name; double std, bound; } want[] = {
        {"g.weight", sqrt(2.0 / (64 * 9)), 0}, {"g.bias", 0, 1.0 / sqrt(16 * 9)},
        {"fc.weight", 0.01, 0}, {"fc.bias", 0, 0}};
    for (int k = 0; k < 4; k++) {
        const net_tensor_t *t = net_find_tensor(n, want[k].name);
        double s2 = 0, mx = 0;
        for (size_t i = 0; i < t->numel; i++) {
            s2 += (double)p[t->offset + i] * p[t->offset + i];
            mx = fmax(mx, fabs(p[t->offset + i]));
        }
        double std = sqrt(s2 / t->numel);
        if (want[k].std > 0) CHECK_NEAR(std, want[k].std, 0, 0.1);
        else if (want[k].bound > 0) CHECK(mx <= want[k].bound && mx > 0.8 * want[k].bound);
        else CHECK(mx == 0);
    }
    free(p);
    net_free(n);
    backend_free(be);
}

/* What `runner plan` estimates is what bind allocates, and the adaptive pool's and the
 * dropout's outputs are planned. */
static void test_activation_bytes(void) {
    backend_t *be = test_cpu_backend(1);
    err_t e = {0};
    net_t *n = families_net(&e);
    size_t before = be->ops->peak_memory(be);
    size_t est = net_activation_bytes(n, 16, 12, 12, 4);
    CHECK_INT(net_bind(n, be, 16, 12, 12, DT_F32, &e), 0);
    size_t got = be->ops->peak_memory(be) - before;
    size_t fixed = net_num_params(n) * 8 + net_num_buffers(n) * 4;
    CHECK_NEAR((double)(got - fixed), (double)est, 0, 0.01);
    CHECK_INT(net_activation_bytes(n, 16, 1, 1, 4), 0);   /* the 2x2 max-pool cannot run on 1x1 */
    net_free(n);
    backend_free(be);
}

/* One training step of the families net in dt from the same init, input and key;
 * logits and gradients to the host. */
static void families_step(dtype_t dt, float *logits, float *grads) {
    backend_t *be = test_cpu_backend(2);
    err_t e = {0};
    net_t *n = families_net(&e);
    CHECK_INT(net_bind(n, be, 4, 12, 12, dt, &e), 0);
    CHECK_INT(net_init(n, 21, &e), 0);
    float x[4 * 12 * 12 * 3];
    rng_t r = rng_make(6, RNG_STREAM_MISC, 0, 0);
    for (int i = 0; i < 4 * 12 * 12 * 3; i++) x[i] = rng_uniform(&r) * 2.0f - 1.0f;
    const int32_t labels[4] = {0, 3, 1, 4};
    net_loss_out_t lo;
    CHECK_INT(net_upload_input(n, x, 4, &e), 0);
    CHECK_INT(net_set_rng_key(n, 1, 0, 0, 1, &e), 0);
    CHECK_INT(net_zero_grads(n, &e), 0);
    CHECK_INT(net_forward(n, net_input(n), 4, true, NULL, &e), 0);
    CHECK_INT(net_loss(n, labels, 0.0f, 0.25f, &lo, &e), 0);
    CHECK_INT(net_backward(n, NULL, &e), 0);
    CHECK_INT(be->ops->download(be, logits, net_logits(n), 4 * FAM_CLASSES * sizeof(float)), 0);
    CHECK_INT(net_download_grads(n, grads, &e), 0);
    if (dt == DT_BF16) {   /* the conv engine listing names the groups */
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        jw_t w;
        jw_init(&w, f, false);
        net_write_conv_engines(n, 4, &w);
        fclose(f);
        CHECK_CONTAINS(buf, "12x12x8 -> 8, 3x3 stride 1 pad 1 groups 8");
        CHECK_CONTAINS(buf, "\"b2.dw\"");
        free(buf);
    }
    net_free(n);
    backend_free(be);
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(d / r);
}

static void test_amp(void) {
    err_t e = {0};
    net_t *probe = families_net(&e);
    size_t np = net_num_params(probe);
    net_free(probe);
    float l32[4 * FAM_CLASSES], lh[4 * FAM_CLASSES];
    float *g32 = malloc(np * sizeof(float)), *gh = malloc(np * sizeof(float));
    families_step(DT_F32, l32, g32);
    for (int d = DT_F16; d <= DT_BF16; d++) {
        families_step((dtype_t)d, lh, gh);
        double el = rel_l2(lh, l32, 4 * FAM_CLASSES), eg = rel_l2(gh, g32, np);
        fprintf(stderr, "  %s vs fp32: logits %.3g, gradients %.3g (relative L2)\n", dtype_names[d], el, eg);
        /* fp16 (measured 7e-4 / 1e-3) within 1e-2; bf16 (4e-3 / 6e-2: its rounding ties
         * max-pool windows and moves relu/relu6 masks, which reroutes whole gradients in
         * the layers before the pool) within 3e-2 / 0.25; a half path that scaled,
         * masked or dropped anything wrongly is off by O(1) */
        CHECK(el < (d == DT_F16 ? 1e-2 : 3e-2) && eg < (d == DT_F16 ? 1e-2 : 0.25));
        CHECK(el > 0);   /* it did run in half */
    }
    free(g32);
    free(gh);
}

int main(void) {
    TEST_RUN(test_dropout_masks_follow_samples);
    TEST_RUN(test_dropout_identity_and_key);
    TEST_RUN(test_builders);
    TEST_RUN(test_inits);
    TEST_RUN(test_activation_bytes);
    TEST_RUN(test_amp);
    return test_main_end();
}
