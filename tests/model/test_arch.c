/* test_arch.c: the architecture table and its builders (model/arch): every name builds in
 * every variant it has, option resolution (defaults, idempotence) and its refusals naming
 * the key, the smallest input each net takes, the inits each family asks for, and the NCHW
 * flattening of a linear after a map larger than 1x1 (VGG's classifier.0): export and
 * import permute its columns so that torchvision's layout, applied as torch does, gives the
 * net's logits. Names, shapes, parameter counts and FLOPs against PyTorch are
 * arch_vs_torch.py's job; numerics against PyTorch the golden tests'.
 */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "model/arch/arch.h"
#include "model/cpu/cpu_backend.h"
#include "model/safetensors.h"
#include "tests/test.h"
#include "util/rng.h"

static arch_opts_t opts(arch_stem_t stem, int classes) {
    return (arch_opts_t){.stem = stem, .in_channels = 3, .num_classes = classes, .dropout = -1};
}

static void test_every_name_builds(void) {
    err_t e = {0};
    int names = 0;
    for (int i = 0; i < ARCH_COUNT; i++) {
        const arch_info_t *a = &ARCH_TABLE[i];
        CHECK(arch_info(a->name) == a && arch_valid(a->name));
        CHECK_CONTAINS(arch_list(), a->name);
        CHECK_STR(ARCH_NAMES[i], a->name);
        for (int j = 0; j < i; j++) CHECK(strcmp(ARCH_TABLE[j].name, a->name) != 0);
        for (int s = 0; s <= (a->imagenet ? 1 : 0); s++) {
            arch_opts_t o = opts((arch_stem_t)s, 7), r, rr;
            CHECK_INT(arch_resolve(a->name, &o, &r, &e), 0);
            CHECK_INT(arch_resolve(a->name, &r, &rr, &e), 0);   /* resolving twice changes nothing */
            CHECK(memcmp(&r, &rr, sizeof r) == 0);
            net_t *n = arch_build(a->name, &o, &e);
            if (!n) fprintf(stderr, "%s: %s\n", a->name, e.msg);
            CHECK(n != NULL);
            if (!n) continue;
            CHECK_INT(net_num_classes(n), 7);
            CHECK_INT(net_in_channels(n), 3);
            CHECK(net_has_dropout(n) == (r.dropout > 0));
            /* tensor names unique */
            for (int t = 1; t < net_num_tensors(n); t++)
                CHECK(strcmp(net_tensor(n, t)->name, net_tensor(n, t - 1)->name) != 0);
            net_free(n);
            names++;
        }
    }
    printf("%d architectures, %d (arch, variant) nets built\n", ARCH_COUNT, names);
    CHECK_INT(ARCH_COUNT, 24);
    CHECK_INT(names, 24 + 15);
    /* the defaults the table gives */
    arch_opts_t o = opts(ARCH_STEM_CIFAR, 10), r;
    CHECK_INT(arch_resolve("wrn28_10", &o, &r, &e), 0);
    CHECK(r.width == 10 && r.groups == 0 && r.dropout == 0);
    CHECK_INT(arch_resolve("resnext29_8x64d", &o, &r, &e), 0);
    CHECK(r.width == 64 && r.groups == 8 && r.dropout == -1);
    CHECK_INT(arch_resolve("resnext50_32x4d", &o, &r, &e), 0);
    CHECK(r.width == 4 && r.groups == 32);
    CHECK_INT(arch_resolve("wide_resnet50_2", &o, &r, &e), 0);
    CHECK(r.width == 128 && r.groups == 0);
    CHECK_INT(arch_resolve("vgg16_bn", &o, &r, &e), 0);
    CHECK(r.width == 0 && r.dropout == 0.5);
    CHECK_INT(arch_resolve("mobilenet_v2", &o, &r, &e), 0);
    CHECK(r.width == 1.0 && r.dropout == 0.2);
    o.dropout = 0;   /* 0 is a value: no dropout node */
    net_t *n = arch_build("vgg11_bn", &o, &e);
    CHECK(n && !net_has_dropout(n));
    net_free(n);
}

/* Each refusal names its key and the fix. */
static void expect_refusal(const char *arch, arch_opts_t o, const char *text) {
    err_t e = {0};
    net_t *n = arch_build(arch, &o, &e);
    CHECK(n == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, text);
    net_free(n);
}

static void test_refusals(void) {
    arch_opts_t o = opts(ARCH_STEM_CIFAR, 10);
    expect_refusal("wrn28_11", o, "model.arch: unknown architecture 'wrn28_11'; valid: resnet18, resnet34");
    expect_refusal("wrn28_11", o, "wrn16_8, wrn28_10, preact_resnet18, resnext29_8x64d, vgg11_bn");
    arch_opts_t x = opts(ARCH_STEM_IMAGENET, 10);
    expect_refusal("wrn28_10", x, "model.stem: imagenet: wrn28_10 has only the CIFAR variant");
    expect_refusal("preact_resnet18", x, "use model.stem: cifar (or auto)");
    x = o, x.width = 2;
    expect_refusal("resnet50", x, "model.width: resnet50 has no width setting");
    expect_refusal("vgg16_bn", x, "remove the key");
    x = o, x.width = 2.5;
    expect_refusal("wrn28_10", x, "model.width: 2.5: wrn28_10's width is the widen factor k, a whole number >= 1 "
                                  "(default 10)");
    expect_refusal("resnext29_8x64d", x, "the base width of each group, a whole number");
    x = o, x.width = 0.01;
    expect_refusal("mobilenet_v2", x, "model.width: 0.01: mobilenet_v2's width multiplier must be in [0.05, 4]");
    x = o, x.width = 300;
    expect_refusal("wrn16_8", x, "model.width 300 makes wrn16_8's widest layer 19200 channels; at most 16384");
    x = o, x.width = 64, x.groups = 100;
    expect_refusal("resnext29_8x64d", x, "widest layer 25600 channels; at most 16384 (lower model.width or model.groups)");
    x = o, x.groups = 4;
    expect_refusal("vgg11_bn", x, "model.groups: vgg11_bn has no grouped convolutions");
    expect_refusal("wide_resnet50_2", x, "(model.groups is the cardinality of resnext*)");
    x = o, x.dropout = 0.3;
    expect_refusal("preact_resnet18", x, "model.dropout: preact_resnet18 has no dropout layer");
    expect_refusal("resnext50_32x4d", x, "applies to wrn*, vgg*_bn and mobilenet_v2");
    x = o, x.num_classes = 0;
    expect_refusal("vgg11_bn", x, "model.num_classes: 0 out of range");
}

/* The smallest square input each net takes (plan's "too small" message): five 2x2
 * max-pools need 32 px; strided convs with padding take anything. */
static void test_min_input(void) {
    struct { const char *arch; arch_stem_t stem; int min; } c[] = {
        {"vgg11_bn", ARCH_STEM_CIFAR, 32},   {"vgg16_bn", ARCH_STEM_IMAGENET, 32},
        {"resnet20", ARCH_STEM_CIFAR, 1},    {"mobilenet_v2", ARCH_STEM_IMAGENET, 1},
        {"wrn16_8", ARCH_STEM_CIFAR, 1},     {"resnet18", ARCH_STEM_IMAGENET, 1},
    };
    err_t e = {0};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        arch_opts_t o = opts(c[i].stem, 10);
        net_t *n = arch_build(c[i].arch, &o, &e);
        CHECK(n != NULL);
        CHECK_INT(arch_min_input(n), c[i].min);
        if (c[i].min > 1) CHECK_INT(net_activation_bytes(n, 1, c[i].min - 1, c[i].min - 1, 4), 0);
        net_free(n);
    }
}

/* The init each reference asks for, recorded in the tensor table. */
static void test_inits(void) {
    struct { const char *arch, *tensor; net_init_t init; } c[] = {
        {"vgg11_bn", "features.0.weight", NET_INIT_KAIMING_FAN_OUT},
        {"vgg11_bn", "features.0.bias", NET_INIT_ZEROS},
        {"vgg11_bn", "classifier.3.weight", NET_INIT_NORMAL_0_01},
        {"vgg11_bn", "classifier.6.bias", NET_INIT_ZEROS},
        {"mobilenet_v2", "features.2.conv.1.0.weight", NET_INIT_KAIMING_FAN_OUT},
        {"mobilenet_v2", "classifier.1.weight", NET_INIT_NORMAL_0_01},
        {"mobilenet_v2", "classifier.1.bias", NET_INIT_ZEROS},
        {"preact_resnet18", "layer2.0.shortcut.0.weight", NET_INIT_LINEAR_UNIFORM},
        {"preact_resnet18", "linear.bias", NET_INIT_LINEAR_UNIFORM},
        {"wrn16_8", "block2.layer.0.convShortcut.weight", NET_INIT_KAIMING_FAN_OUT},
        {"wrn16_8", "fc.weight", NET_INIT_LINEAR_UNIFORM},
        {"wrn16_8", "fc.bias", NET_INIT_ZEROS},
        {"resnext29_8x64d", "stage_1.stage_1_bottleneck_0.conv_conv.weight", NET_INIT_KAIMING_FAN_OUT},
        {"resnext29_8x64d", "classifier.bias", NET_INIT_ZEROS},
        {"resnext50_32x4d", "fc.bias", NET_INIT_LINEAR_UNIFORM},
    };
    err_t e = {0};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        arch_opts_t o = opts(ARCH_STEM_CIFAR, 10);
        net_t *n = arch_build(c[i].arch, &o, &e);
        const net_tensor_t *t = n ? net_find_tensor(n, c[i].tensor) : NULL;
        CHECK(t != NULL);
        if (t && t->init != c[i].init) fprintf(stderr, "%s %s: init %d, expected %d\n", c[i].arch, c[i].tensor,
                                               (int)t->init, (int)c[i].init);
        CHECK(t && t->init == c[i].init);
        net_free(n);
    }
    /* grouped convs: the weight is [k, c / groups, 3, 3] */
    arch_opts_t o = opts(ARCH_STEM_CIFAR, 10);
    net_t *n = arch_build("mobilenet_v2", &o, &e);
    const net_tensor_t *t = net_find_tensor(n, "features.2.conv.1.0.weight");   /* depthwise, 96 ch */
    CHECK(t && t->shape[0] == 96 && t->shape[1] == 1 && t->shape[2] == 3);
    net_free(n);
    /* VGG's classifier.0 flattens a 7x7x512 map in the ImageNet variant, a 1x1 one in the CIFAR one */
    o = opts(ARCH_STEM_IMAGENET, 10);
    n = arch_build("vgg16_bn", &o, &e);
    t = net_find_tensor(n, "classifier.0.weight");
    CHECK(t && t->flat_c == 512 && t->flat_h == 7 && t->flat_w == 7 && t->shape[1] == 25088);
    net_free(n);
    o = opts(ARCH_STEM_CIFAR, 10);
    n = arch_build("vgg16_bn", &o, &e);
    t = net_find_tensor(n, "classifier.0.weight");
    CHECK(t && t->flat_c == 0 && t->shape[1] == 512);
    net_free(n);
}

/* A linear over a 2x3 map of 4 channels (the input itself, through a 2x3 adaptive average
 * pool that is the identity there): its weight in the exported file is torchvision's
 * NCHW-flattened layout, so logits computed from the file's weight as torch does
 * (x.permute(0, 3, 1, 2).flatten(1) @ W^T + b) equal the net's; loading the file back
 * gives the same parameters. */
static void test_flat_linear_layout(void) {
    enum { H = 2, W = 3, C = 4, OUT = 5, B = 2 };
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 1};
    backend_t *be = cpu_backend_create(&bo, &e);
    net_t *n = net_create(C, &e);
    int p = net_add_avgpool2(n, NET_INPUT, H, W, &e);
    CHECK(p >= 0 && net_add_linear(n, "fc", p, OUT, &e) >= 0);
    const net_tensor_t *t = net_find_tensor(n, "fc.weight");
    CHECK(t && t->flat_c == C && t->flat_h == H && t->flat_w == W && t->shape[1] == H * W * C);
    CHECK_INT(net_bind(n, be, B, H, W, DT_F32, &e), 0);
    CHECK_INT(net_init(n, 5, &e), 0);
    float x[B * H * W * C], logits[B * OUT];
    rng_t r = rng_make(9, RNG_STREAM_MISC, 0, 0);
    for (int i = 0; i < B * H * W * C; i++) x[i] = (float)rng_normal(&r);
    CHECK_INT(net_upload_input(n, x, B, &e), 0);
    int rc = net_forward(n, net_input(n), B, false, NULL, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    CHECK_INT(rc, 0);
    CHECK_INT(be->ops->download(be, logits, net_logits(n), sizeof logits), 0);
    char dir[512], path[600];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    snprintf(path, sizeof path, "%s/flat.safetensors", dir);
    CHECK_INT(safetensors_save_net(n, path, NULL, NULL, 0, &e), 0);
    safetensors_t *st = safetensors_open(path, 0, &e);
    float wt[OUT * H * W * C], bias[OUT];
    CHECK_INT(safetensors_read_f32(st, safetensors_find(st, "fc.weight"), wt, &e), 0);
    CHECK_INT(safetensors_read_f32(st, safetensors_find(st, "fc.bias"), bias, &e), 0);
    safetensors_close(st);
    for (int b = 0; b < B; b++)
        for (int o = 0; o < OUT; o++) {
            double y = bias[o];
            for (int c = 0; c < C; c++)
                for (int h = 0; h < H; h++)
                    for (int w = 0; w < W; w++)
                        y += (double)wt[o * H * W * C + (c * H + h) * W + w] * x[((b * H + h) * W + w) * C + c];
            CHECK_NEAR(logits[b * OUT + o], y, 1e-5, 1e-5);
        }
    /* and back: the file loads into a fresh net as the same parameters */
    net_t *m = net_create(C, &e);
    p = net_add_avgpool2(m, NET_INPUT, H, W, &e);
    CHECK(net_add_linear(m, "fc", p, OUT, &e) >= 0);
    CHECK_INT(net_bind(m, be, B, H, W, DT_F32, &e), 0);
    CHECK_INT(safetensors_load_net(m, path, &e), 0);
    float pa[OUT * H * W * C + OUT], pb[OUT * H * W * C + OUT];
    CHECK_INT(net_download_params(n, pa, &e), 0);
    CHECK_INT(net_download_params(m, pb, &e), 0);
    CHECK(memcmp(pa, pb, sizeof pa) == 0);
    unlink(path);
    rmdir(dir);
    net_free(m);
    net_free(n);
    backend_free(be);
}

int main(void) {
    TEST_RUN(test_every_name_builds);
    TEST_RUN(test_refusals);
    TEST_RUN(test_min_input);
    TEST_RUN(test_inits);
    TEST_RUN(test_flat_linear_layout);
    return test_main_end();
}
