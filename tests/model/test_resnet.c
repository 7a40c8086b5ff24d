/* test_resnet.c: the ResNet builders and the net engine on the CPU backend: parameter
 * counts and state_dict sizes (checked with PyTorch/torchvision), names, FLOPs,
 * unknown-arch and too-small-input errors, zero_init_residual, init statistics and
 * determinism, a Fashion-MNIST-shaped (1x28x28) step, bit-identical repeated backward,
 * eval mode, the DDP/SyncBN hooks (grads_ready really means final), AMP forwards close
 * to fp32, and the ImageNet stem (torchvision's counts, a step through the max-pool). */
#include <stdlib.h>

#include "model/cpu/cpu_backend.h"
#include "model/net.h"
#include "model/arch/resnet.h"
#include "util/rng.h"
#include "tests/test.h"

static backend_t *cpu(void) {
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 2};
    backend_t *be = cpu_backend_create(&bo, &e);
    CHECK(be != NULL);
    return be;
}

static void test_counts_and_names(void) {
    struct { const char *arch; int in, classes; size_t params; int tensors; } c[] = {
        {"resnet20", 3, 10, 272474, 0},       {"resnet56", 3, 10, 855770, 344},
        {"resnet110", 3, 10, 1730714, 668},   {"resnet18", 3, 10, 11173962, 0},
        {"resnet18", 1, 10, 11172810, 0},     {"resnet50", 3, 100, 23705252, 320},
    };
    err_t e = {0};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        net_t *n = resnet_build(c[i].arch, c[i].in, c[i].classes, false, &e);
        CHECK(n != NULL);
        if (!n) continue;
        CHECK_INT(net_num_params(n), c[i].params);
        if (c[i].tensors) CHECK_INT(net_num_tensors(n), c[i].tensors);
        CHECK_INT(net_num_classes(n), c[i].classes);
        CHECK_INT(net_in_channels(n), c[i].in);
        net_free(n);
    }
    net_t *n = resnet_build("resnet50", 3, 100, false, &e);
    const char *names[] = {"conv1.weight", "bn1.running_var", "layer1.0.downsample.0.weight",
                           "layer1.0.downsample.1.num_batches_tracked", "layer3.5.bn3.bias",
                           "layer4.2.conv3.weight", "fc.weight", "fc.bias"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) CHECK(net_find_tensor(n, names[i]) != NULL);
    const net_tensor_t *t = net_find_tensor(n, "layer2.0.conv2.weight");   /* stride on the 3x3 */
    CHECK(t && t->shape[0] == 128 && t->shape[1] == 128 && t->shape[2] == 3 && t->conv_weight);
    t = net_find_tensor(n, "fc.weight");
    CHECK(t && t->shape[0] == 100 && t->shape[1] == 2048 && !t->no_decay);
    CHECK(net_find_tensor(n, "fc.bias")->no_decay);
    CHECK(net_find_tensor(n, "bn1.weight")->no_decay);
    CHECK(!net_find_tensor(n, "conv1.weight")->no_decay);
    CHECK(net_find_tensor(n, "maxpool.weight") == NULL);
    /* FLOPs per sample (2 x MACs of convs + fc), counted with PyTorch forward hooks */
    CHECK_NEAR(net_forward_flops(n, 32, 32), 2596028416.0, 0, 0);
    net_free(n);
    n = resnet_build("resnet20", 3, 10, false, &e);
    CHECK_NEAR(net_forward_flops(n, 32, 32), 81626368.0, 0, 0);
    CHECK(net_activation_bytes(n, 128, 32, 32, 4) > (size_t)128 * 32 * 32 * 16 * 4 * 6);
    CHECK_INT(net_activation_bytes(n, 128, 0, 0, 4), 0);
    net_free(n);
    n = resnet_build("resnet20", 1, 10, false, &e);
    CHECK_NEAR(net_forward_flops(n, 28, 28), 62043904.0, 0, 0);
    net_free(n);
}

/* The ImageNet stem: torchvision.models.resnetNN(num_classes) exactly (parameter and
 * state_dict tensor counts, FLOPs at 224 and 96 px counted with PyTorch forward hooks),
 * conv1 7x7 / 2, a max-pool node after bn1 with no tensors; refused for resnet20..110. */
static void test_imagenet_stem(void) {
    struct { const char *arch; int in, classes; size_t params; int tensors; double f224, f96; } c[] = {
        {"resnet18", 3, 1000, 11689512, 122, 3628146688.0, 667230208.0},
        {"resnet34", 3, 1000, 21797672, 218, 7327522816.0, 1346707456.0},
        {"resnet50", 3, 1000, 25557032, 320, 8178368512.0, 1505492992.0},
        {"resnet101", 3, 1000, 44549160, 626, 15602810880.0, 2869166080.0},
        {"resnet152", 3, 1000, 60192808, 932, 23027253248.0, 4232839168.0},
        {"resnet18", 1, 10, 11175370, 122, 3469780992.0, 637315072.0},
    };
    err_t e = {0};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        net_t *n = resnet_build_stem(c[i].arch, ARCH_STEM_IMAGENET, c[i].in, c[i].classes, false, &e);
        CHECK(n != NULL);
        if (!n) continue;
        CHECK_INT(net_num_params(n), c[i].params);
        CHECK_INT(net_num_tensors(n), c[i].tensors);
        CHECK_NEAR(net_forward_flops(n, 224, 224), c[i].f224, 0, 0);
        CHECK_NEAR(net_forward_flops(n, 96, 96), c[i].f96, 0, 0);
        const net_tensor_t *t = net_find_tensor(n, "conv1.weight");
        CHECK(t && t->shape[0] == 64 && t->shape[1] == c[i].in && t->shape[2] == 7 && t->shape[3] == 7);
        /* conv1, bn1, then the max-pool, then layer1 */
        CHECK_INT(net_node_kind(n, 0), NODE_CONV);
        CHECK_INT(net_node_kind(n, 1), NODE_BN_RELU);
        CHECK_INT(net_node_kind(n, 2), NODE_MAXPOOL);
        CHECK(net_find_tensor(n, "maxpool.weight") == NULL);
        net_free(n);
    }
    CHECK_STR(arch_stem_name(ARCH_STEM_IMAGENET), "imagenet");
    CHECK_STR(arch_stem_name(ARCH_STEM_CIFAR), "cifar");
    CHECK(arch_info("resnet152")->imagenet && !arch_info("resnet20")->imagenet);
    CHECK(resnet_build_stem("resnet56", ARCH_STEM_IMAGENET, 3, 10, false, &e) == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "model.stem: imagenet: resnet56 has only the CIFAR variant");
    /* 224 -> conv1 112 -> max-pool 56 -> ... -> layer4 7; a step runs and is finite */
    backend_t *be = cpu();
    net_t *n = resnet_build_stem("resnet18", ARCH_STEM_IMAGENET, 3, 5, false, &e);
    CHECK_INT(net_bind(n, be, 2, 64, 48, DT_F32, &e), 0);
    CHECK_INT(net_init(n, 3, &e), 0);
    float *img = malloc(2 * 64 * 48 * 3 * sizeof(float));
    rng_t r = rng_make(5, RNG_STREAM_MISC, 2, 0);
    for (int i = 0; i < 2 * 64 * 48 * 3; i++) img[i] = (float)rng_normal(&r);
    int32_t lab[2] = {0, 4};
    net_loss_out_t lo;
    CHECK_INT(net_upload_input(n, img, 2, &e), 0);
    CHECK_INT(net_zero_grads(n, &e), 0);
    CHECK_INT(net_forward(n, net_input(n), 2, true, NULL, &e), 0);
    CHECK_INT(net_loss(n, lab, 0, 0.5f, &lo, &e), 0);
    CHECK_INT(net_backward(n, NULL, &e), 0);
    CHECK(isfinite(lo.loss_sum) && lo.loss_sum > 0);
    float *g = malloc(net_num_params(n) * sizeof(float));
    CHECK_INT(net_download_grads(n, g, &e), 0);
    const net_tensor_t *t = net_find_tensor(n, "conv1.weight");   /* reached through the max-pool */
    double g2 = 0;
    for (size_t i = 0; i < t->numel; i++) g2 += (double)g[t->offset + i] * g[t->offset + i];
    CHECK(g2 > 0 && isfinite(g2));
    free(g);
    free(img);
    net_free(n);
    backend_free(be);
}

/* net_activation_bytes (what `runner plan` prints) is what net_bind really allocates
 * beyond params, grads and running stats. */
static void test_activation_bytes_match_bind(void) {
    backend_t *be = cpu();
    err_t e = {0};
    size_t before = be->ops->peak_memory(be);
    net_t *n = resnet_build("resnet20", 3, 10, false, &e);
    size_t est = net_activation_bytes(n, 64, 32, 32, backend_elem_size(be, DT_F32));
    CHECK_INT(net_bind(n, be, 64, 32, 32, DT_F32, &e), 0);
    size_t got = be->ops->peak_memory(be) - before;
    size_t fixed = net_num_params(n) * 8 + net_num_buffers(n) * 4;
    printf("resnet20 batch 64: activation estimate %zu bytes, bind allocated %zu beyond params\n", est,
           got - fixed);
    CHECK_NEAR((double)(got - fixed), (double)est, 0, 0.01);
    CHECK(est > (size_t)100 << 20);
    net_free(n);
    backend_free(be);
}

static void test_errors(void) {
    err_t e = {0};
    CHECK(resnet_build("resnet19", 3, 10, false, &e) == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "unknown architecture 'resnet19'");
    CHECK_CONTAINS(e.msg, "resnet18, resnet34, resnet50, resnet101, resnet152, resnet20");
    CHECK(!arch_valid("resnet19"));
    CHECK(arch_valid("resnet110"));
    CHECK(resnet_build("resnet20", 3, 0, false, &e) == NULL);
    CHECK_CONTAINS(e.msg, "num_classes");
    backend_t *be = cpu();
    net_t *n = resnet_build("resnet20", 3, 10, false, &e);
    CHECK_INT(net_bind(n, be, 2, 1, 1, DT_F32, &e), 0);   /* 1x1 still works: pad 1 */
    net_free(n);
    n = resnet_build("resnet20", 3, 10, false, &e);
    err_clear(&e);
    CHECK_INT(net_bind(n, be, 2, 0, 0, DT_F32, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "too small");
    net_free(n);
    backend_free(be);
}

/* Host copy of a tensor's values (storage layout). */
static float *tensor_values(net_t *n, const char *name, const float *hp) {
    const net_tensor_t *t = net_find_tensor(n, name);
    float *v = malloc(t->numel * sizeof(float));
    memcpy(v, hp + t->offset, t->numel * sizeof(float));
    return v;
}

static void stats(const float *v, size_t n, double *mean, double *std, double *mn, double *mx) {
    double s = 0, s2 = 0;
    *mn = 1e30;
    *mx = -1e30;
    for (size_t i = 0; i < n; i++) {
        s += v[i];
        s2 += (double)v[i] * v[i];
        if (v[i] < *mn) *mn = v[i];
        if (v[i] > *mx) *mx = v[i];
    }
    *mean = s / n;
    *std = sqrt(s2 / n - *mean * *mean);
}

static void test_init(void) {
    backend_t *be = cpu();
    err_t e = {0};
    net_t *n = resnet_build("resnet50", 3, 100, true, &e);
    CHECK_INT(net_bind(n, be, 1, 8, 8, DT_F32, &e), 0);
    CHECK_INT(net_init(n, 1, &e), 0);
    float *hp = malloc(net_num_params(n) * 4);
    CHECK_INT(net_download_params(n, hp, &e), 0);
    double mean, std, mn, mx;
    float *w = tensor_values(n, "layer3.0.conv2.weight", hp);   /* 256x256x3x3, fan_out 2304 */
    stats(w, 256 * 256 * 9, &mean, &std, &mn, &mx);
    printf("layer3.0.conv2.weight: mean %.3g std %.5f (expected %.5f)\n", mean, std, sqrt(2.0 / 2304));
    CHECK_NEAR(std, sqrt(2.0 / 2304), 0, 0.01);
    CHECK_NEAR(mean, 0, 3e-4, 0);
    free(w);
    w = tensor_values(n, "layer1.0.conv3.weight", hp);           /* 256x64x1x1, fan_out 256 */
    stats(w, 256 * 64, &mean, &std, &mn, &mx);
    CHECK_NEAR(std, sqrt(2.0 / 256), 0, 0.02);
    free(w);
    w = tensor_values(n, "fc.weight", hp);                        /* U(-1/sqrt(2048), ..) */
    stats(w, 100 * 2048, &mean, &std, &mn, &mx);
    double bound = 1.0 / sqrt(2048.0);
    CHECK(mx <= bound && mn >= -bound && mx > 0.99 * bound && mn < -0.99 * bound);
    CHECK_NEAR(std, bound / sqrt(3.0), 0, 0.01);
    free(w);
    w = tensor_values(n, "fc.bias", hp);
    stats(w, 100, &mean, &std, &mn, &mx);
    CHECK(mx <= bound && mn >= -bound && std > 0);
    free(w);
    /* zero_init_residual: the last BN of each block 0, every other BN weight 1, biases 0 */
    w = tensor_values(n, "layer2.3.bn3.weight", hp);
    stats(w, 512, &mean, &std, &mn, &mx);
    CHECK(mn == 0 && mx == 0);
    free(w);
    w = tensor_values(n, "layer2.0.downsample.1.weight", hp);
    stats(w, 512, &mean, &std, &mn, &mx);
    CHECK(mn == 1 && mx == 1);
    free(w);
    w = tensor_values(n, "layer2.3.bn2.bias", hp);
    stats(w, 128, &mean, &std, &mn, &mx);
    CHECK(mn == 0 && mx == 0);
    free(w);
    /* running stats 0 / 1, counters 0 */
    float *hb = malloc(net_num_buffers(n) * 4);
    CHECK_INT(net_download_buffers(n, hb, &e), 0);
    const net_tensor_t *rv = net_find_tensor(n, "layer4.2.bn3.running_var");
    const net_tensor_t *rm = net_find_tensor(n, "layer4.2.bn3.running_mean");
    CHECK(hb[rv->offset + 7] == 1.0f && hb[rm->offset + 7] == 0.0f);
    CHECK_INT(net_counters(n)[3], 0);
    /* same seed, same bits; another seed differs */
    float *hp2 = malloc(net_num_params(n) * 4);
    CHECK_INT(net_init(n, 1, &e), 0);
    CHECK_INT(net_download_params(n, hp2, &e), 0);
    CHECK(memcmp(hp, hp2, net_num_params(n) * 4) == 0);
    CHECK_INT(net_init(n, 2, &e), 0);
    CHECK_INT(net_download_params(n, hp2, &e), 0);
    CHECK(memcmp(hp, hp2, net_num_params(n) * 4) != 0);
    free(hp);
    free(hp2);
    free(hb);
    net_free(n);
    /* without zero_init_residual the last BN weights are 1 */
    n = resnet_build("resnet20", 3, 10, false, &e);
    CHECK_INT(net_bind(n, be, 1, 8, 8, DT_F32, &e), 0);
    CHECK_INT(net_init(n, 1, &e), 0);
    hp = malloc(net_num_params(n) * 4);
    CHECK_INT(net_download_params(n, hp, &e), 0);
    CHECK(hp[net_find_tensor(n, "layer1.0.bn2.weight")->offset] == 1.0f);
    free(hp);
    net_free(n);
    backend_free(be);
}

/* Hook recorder. */
typedef struct rec {
    int ready_calls, stats_calls, grads_calls;
    size_t last_ready;
    bool monotonic;
    int64_t counts_seen;
} rec_t;

static void on_ready(void *ctx, size_t from) {
    rec_t *r = ctx;
    if (r->ready_calls && from > r->last_ready) r->monotonic = false;
    r->last_ready = from;
    r->ready_calls++;
}
static int on_stats(void *ctx, int c, float *mean, float *var, int64_t local, int64_t *global) {
    (void)c; (void)mean; (void)var;
    rec_t *r = ctx;
    r->stats_calls++;
    r->counts_seen += local;
    *global = local;   /* a world of one: same statistics */
    return 0;
}
static int on_grads(void *ctx, int c, float *a, float *b) {
    (void)c; (void)a; (void)b;
    ((rec_t *)ctx)->grads_calls++;
    return 0;
}

/* One forward/loss/backward of a resnet20 on 1x28x28 images; returns the loss. */
static double step(net_t *n, const float *img, const int32_t *lab, int batch, const net_hooks_t *h) {
    err_t e = {0};
    net_loss_out_t lo = {0};
    CHECK_INT(net_zero_grads(n, &e), 0);
    CHECK_INT(net_upload_input(n, img, batch, &e), 0);
    CHECK_INT(net_forward(n, net_input(n), batch, true, h, &e), 0);
    CHECK_INT(net_loss(n, lab, 0.0f, 1.0f / batch, &lo, &e), 0);
    CHECK(lo.correct1 >= 0 && lo.correct1 <= lo.correct5 && lo.correct5 <= batch);
    int rc = net_backward(n, h, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    CHECK_INT(rc, 0);
    return lo.loss_sum / batch;
}

static void test_fashion_mnist_step_determinism_hooks(void) {
    backend_t *be = cpu();
    err_t e = {0};
    enum { B = 4 };
    net_t *n = resnet_build("resnet20", 1, 10, false, &e);
    CHECK_INT(net_bind(n, be, B, 28, 28, DT_F32, &e), 0);
    CHECK_INT(net_init(n, 5, &e), 0);
    float *img = malloc(B * 28 * 28 * sizeof(float));
    rng_t r = rng_make(9, RNG_STREAM_MISC, 0, 0);
    for (int i = 0; i < B * 28 * 28; i++) img[i] = (float)rng_normal(&r);
    int32_t lab[B] = {0, 3, 9, 3};
    size_t np = net_num_params(n);
    float *g1 = malloc(np * 4), *g2 = malloc(np * 4), *g3 = malloc(np * 4);
    double l1 = step(n, img, lab, B, NULL);
    printf("resnet20 1x28x28 batch %d: loss %.4f\n", B, l1);
    CHECK(l1 > 1.0 && l1 < 6.0);
    CHECK_INT(net_download_grads(n, g1, &e), 0);
    /* bit-identical on repetition (the running stats move, but not the batch stats) */
    double l2 = step(n, img, lab, B, NULL);
    CHECK(l1 == l2);
    CHECK_INT(net_download_grads(n, g2, &e), 0);
    CHECK(memcmp(g1, g2, np * 4) == 0);
    CHECK_INT(net_counters(n)[0], 2);
    /* hooks: identity SyncBN gives the same bits; grads_ready walks down to 0 */
    rec_t rec = {.monotonic = true};
    net_hooks_t h = {.ctx = &rec, .grads_ready = on_ready, .bn_sync_stats = on_stats, .bn_sync_grads = on_grads};
    step(n, img, lab, B, &h);
    CHECK_INT(net_download_grads(n, g3, &e), 0);
    CHECK(memcmp(g1, g3, np * 4) == 0);
    CHECK_INT(rec.stats_calls, 21);   /* 19 BNs in the blocks and stem + 2 downsample BNs */
    CHECK_INT(rec.grads_calls, 21);
    CHECK(rec.monotonic);
    CHECK_INT(rec.last_ready, 0);
    CHECK(rec.ready_calls >= 21);
    /* stem BN sees B*28*28 rows, the stage-3 ones B*7*7 */
    CHECK_INT(rec.counts_seen, (int64_t)B * (7 * 28 * 28 + 7 * 14 * 14 + 7 * 7 * 7));
    /* gradients accumulate without zeroing: two backward passes = 2x one */
    err_t e2 = {0};
    net_loss_out_t lo;
    CHECK_INT(net_forward(n, net_input(n), B, true, NULL, &e2), 0);
    CHECK_INT(net_loss(n, lab, 0.0f, 1.0f / B, &lo, &e2), 0);
    CHECK_INT(net_backward(n, NULL, &e2), 0);
    CHECK_INT(net_download_grads(n, g3, &e), 0);
    double worst = 0;
    for (size_t i = 0; i < np; i++) {
        double d = fabs(g3[i] - 2.0 * g1[i]);
        if (d > worst) worst = d;
    }
    CHECK(worst < 1e-6);
    /* eval: running statistics and counters stay, logits are finite */
    float *hb1 = malloc(net_num_buffers(n) * 4), *hb2 = malloc(net_num_buffers(n) * 4);
    CHECK_INT(net_download_buffers(n, hb1, &e), 0);
    int64_t c0 = net_counters(n)[0];
    CHECK_INT(net_forward(n, net_input(n), B, false, NULL, &e), 0);
    CHECK_INT(net_loss(n, lab, 0.1f, 1.0f, &lo, &e), 0);
    CHECK(isfinite(lo.loss_sum));
    CHECK_INT(net_download_buffers(n, hb2, &e), 0);
    CHECK(memcmp(hb1, hb2, net_num_buffers(n) * 4) == 0);
    CHECK_INT(net_counters(n)[0], c0);
    CHECK_INT(net_backward(n, NULL, &e), -1);    /* no backward through an eval forward */
    /* labels out of range */
    int32_t bad[B] = {0, 10, 1, 2};
    CHECK_INT(net_forward(n, net_input(n), B, true, NULL, &e), 0);
    err_clear(&e);
    CHECK_INT(net_loss(n, bad, 0.0f, 1.0f, &lo, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "label 10 of sample 1");
    free(hb1); free(hb2);
    free(g1); free(g2); free(g3);
    free(img);
    net_free(n);
    backend_free(be);
}

/* The DDP contract of grads_ready: at each call, every gradient at offset >= ready_from
 * already has its final value. Snapshots the gradient array at each call and compares
 * the claimed-final part with the gradients after backward. */
typedef struct snap {
    net_t *net;
    int n;
    size_t from[256];
    float *copy[256];
} snap_t;

static void on_ready_snap(void *ctx, size_t from) {
    snap_t *s = ctx;
    if (s->n >= 256) return;
    size_t np = net_num_params(s->net);
    err_t e = {0};
    s->copy[s->n] = malloc(np * sizeof(float));
    net_download_grads(s->net, s->copy[s->n], &e);
    s->from[s->n++] = from;
}

static void test_grads_ready_means_final(void) {
    backend_t *be = cpu();
    err_t e = {0};
    enum { B = 2 };
    net_t *n = resnet_build("resnet20", 3, 10, false, &e);
    CHECK_INT(net_bind(n, be, B, 16, 16, DT_F32, &e), 0);
    CHECK_INT(net_init(n, 2, &e), 0);
    float img[B * 16 * 16 * 3];
    rng_t r = rng_make(4, RNG_STREAM_MISC, 2, 0);
    for (int i = 0; i < B * 16 * 16 * 3; i++) img[i] = (float)rng_normal(&r);
    int32_t lab[B] = {4, 2};
    snap_t s = {.net = n};
    net_hooks_t h = {.ctx = &s, .grads_ready = on_ready_snap};
    step(n, img, lab, B, &h);
    size_t np = net_num_params(n);
    float *fin = malloc(np * sizeof(float));
    CHECK_INT(net_download_grads(n, fin, &e), 0);
    CHECK(s.n >= 21);
    CHECK_INT(s.from[s.n - 1], 0);
    int bad = 0;
    for (int k = 0; k < s.n; k++) {
        if (memcmp(s.copy[k] + s.from[k], fin + s.from[k], (np - s.from[k]) * sizeof(float))) bad++;
        free(s.copy[k]);
    }
    CHECK_INT(bad, 0);
    free(fin);
    net_free(n);
    backend_free(be);
}

/* fp16 / bf16 activations (emulated on the CPU) give logits close to fp32. */
static void test_amp_forward(void) {
    backend_t *be = cpu();
    err_t e = {0};
    enum { B = 2 };
    float *img = malloc(B * 32 * 32 * 3 * sizeof(float));
    rng_t r = rng_make(3, RNG_STREAM_MISC, 1, 0);
    for (int i = 0; i < B * 32 * 32 * 3; i++) img[i] = (float)rng_normal(&r);
    int32_t lab[B] = {1, 7};
    float logits[3][B * 10];
    dtype_t dts[3] = {DT_F32, DT_F16, DT_BF16};
    for (int k = 0; k < 3; k++) {
        net_t *n = resnet_build("resnet20", 3, 10, false, &e);
        CHECK_INT(net_bind(n, be, B, 32, 32, dts[k], &e), 0);
        CHECK_INT(net_init(n, 11, &e), 0);
        step(n, img, lab, B, NULL);
        CHECK_INT(be->ops->download(be, logits[k], net_logits(n), sizeof logits[k]), 0);
        net_free(n);
    }
    for (int k = 1; k < 3; k++) {
        double d2 = 0, n2 = 0;
        for (int i = 0; i < B * 10; i++) {
            d2 += (logits[k][i] - logits[0][i]) * (logits[k][i] - logits[0][i]);
            n2 += logits[0][i] * logits[0][i];
        }
        printf("%s logits vs fp32: relative L2 %.3g\n", dtype_names[dts[k]], sqrt(d2 / n2));
        CHECK(sqrt(d2 / n2) < (k == 1 ? 1e-2 : 5e-2));
        CHECK(sqrt(d2 / n2) > 0);   /* the half path really rounds */
    }
    free(img);
    backend_free(be);
}

int main(void) {
    TEST_RUN(test_counts_and_names);
    TEST_RUN(test_errors);
    TEST_RUN(test_imagenet_stem);
    TEST_RUN(test_activation_bytes_match_bind);
    TEST_RUN(test_init);
    TEST_RUN(test_fashion_mnist_step_determinism_hooks);
    TEST_RUN(test_grads_ready_means_final);
    TEST_RUN(test_amp_forward);
    return test_main_end();
}
