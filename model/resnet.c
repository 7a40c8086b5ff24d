/* resnet.c: the ResNet builders of resnet.h, emitting node lists with torchvision names.
 *
 * A block is built as: [downsample.0 conv -> downsample.1 bn] (when the shape changes),
 * conv1 -> bn1 (bn_relu) -> conv2 -> [bn2 (bn_relu) -> conv3 ->] last bn as
 * bn_add_relu(branch, shortcut). Parameters are laid out in this node order.
 * The stem is conv1 -> bn1 (bn_relu) [-> max-pool 3x3/2 pad 1 for the ImageNet stem].
 * What it does not do: grouped/wide variants (resnext, wide_resnet).
 */
#include "model/resnet.h"

#include <stdio.h>
#include <string.h>

typedef struct arch {
    const char *name;
    bool bottleneck;
    bool cifar_he;       /* He et al. CIFAR ResNet (3 stages, widths 16/32/64) */
    int blocks[4];
} arch_t;

static const arch_t ARCHS[] = {
    {"resnet18", false, false, {2, 2, 2, 2}},   {"resnet34", false, false, {3, 4, 6, 3}},
    {"resnet50", true, false, {3, 4, 6, 3}},    {"resnet101", true, false, {3, 4, 23, 3}},
    {"resnet152", true, false, {3, 8, 36, 3}},  {"resnet20", false, true, {3, 3, 3, 0}},
    {"resnet32", false, true, {5, 5, 5, 0}},    {"resnet44", false, true, {7, 7, 7, 0}},
    {"resnet56", false, true, {9, 9, 9, 0}},    {"resnet110", false, true, {18, 18, 18, 0}},
};
enum { N_ARCHS = sizeof ARCHS / sizeof ARCHS[0] };

const char *resnet_arch_list(void) {
    return "resnet18, resnet34, resnet50, resnet101, resnet152, resnet20, resnet32, resnet44, "
           "resnet56, resnet110";
}

bool resnet_arch_valid(const char *arch) {
    for (int i = 0; i < N_ARCHS; i++)
        if (arch && !strcmp(arch, ARCHS[i].name)) return true;
    return false;
}

/* Adds one residual block whose input is node x with in_c channels; returns the block's
 * output node or -1. */
static int add_block(net_t *n, const char *name, int x, int in_c, int width, int stride,
                     bool bottleneck, bool zero_init, err_t *e) {
    int expansion = bottleneck ? 4 : 1, out_c = width * expansion;
    char p[64];
    int shortcut = x;
    if (stride != 1 || in_c != out_c) {
        snprintf(p, sizeof p, "%s.downsample.0", name);
        int c = net_add_conv(n, p, x, out_c, 1, stride, 0, e);
        snprintf(p, sizeof p, "%s.downsample.1", name);
        if (c < 0 || (shortcut = net_add_bn(n, p, NODE_BN, c, -2, false, e)) < 0) return -1;
    }
    int h;
    snprintf(p, sizeof p, "%s.conv1", name);
    if (bottleneck) {
        if ((h = net_add_conv(n, p, x, width, 1, 1, 0, e)) < 0) return -1;
    } else if ((h = net_add_conv(n, p, x, width, 3, stride, 1, e)) < 0) {
        return -1;
    }
    snprintf(p, sizeof p, "%s.bn1", name);
    if ((h = net_add_bn(n, p, NODE_BN_RELU, h, -2, false, e)) < 0) return -1;
    snprintf(p, sizeof p, "%s.conv2", name);
    if ((h = net_add_conv(n, p, h, width, 3, bottleneck ? stride : 1, 1, e)) < 0) return -1;
    if (bottleneck) {
        snprintf(p, sizeof p, "%s.bn2", name);
        if ((h = net_add_bn(n, p, NODE_BN_RELU, h, -2, false, e)) < 0) return -1;
        snprintf(p, sizeof p, "%s.conv3", name);
        if ((h = net_add_conv(n, p, h, out_c, 1, 1, 0, e)) < 0) return -1;
    }
    snprintf(p, sizeof p, "%s.bn%d", name, bottleneck ? 3 : 2);
    return net_add_bn(n, p, NODE_BN_ADD_RELU, h, shortcut, zero_init, e);
}

const char *resnet_stem_name(resnet_stem_t stem) {
    return stem == RESNET_STEM_IMAGENET ? "imagenet" : "cifar";
}

bool resnet_has_imagenet_stem(const char *arch) {
    for (int i = 0; i < N_ARCHS; i++)
        if (arch && !strcmp(arch, ARCHS[i].name)) return !ARCHS[i].cifar_he;
    return false;
}

net_t *resnet_build(const char *arch, int in_channels, int num_classes, bool zero_init_residual,
                    err_t *e) {
    return resnet_build_stem(arch, RESNET_STEM_CIFAR, in_channels, num_classes, zero_init_residual, e);
}

net_t *resnet_build_stem(const char *arch, resnet_stem_t stem, int in_channels, int num_classes,
                         bool zero_init_residual, err_t *e) {
    const arch_t *a = NULL;
    for (int i = 0; i < N_ARCHS; i++)
        if (arch && !strcmp(arch, ARCHS[i].name)) a = &ARCHS[i];
    if (!a) {
        err_set(e, ERR_INPUT, "model.arch: unknown architecture '%s'; valid: %s", arch ? arch : "",
                resnet_arch_list());
        return NULL;
    }
    if (num_classes < 1 || num_classes > 1000000) {
        err_set(e, ERR_INPUT, "model.num_classes: %d out of range [1, 1000000]", num_classes);
        return NULL;
    }
    bool imagenet = stem == RESNET_STEM_IMAGENET;
    if (imagenet && a->cifar_he) {
        err_set(e, ERR_INPUT, "model.stem: imagenet: %s is a CIFAR ResNet (He et al.) and has only the "
                "CIFAR stem; use model.stem: cifar (or auto), or resnet18/34/50/101/152", a->name);
        return NULL;
    }
    net_t *n = net_create(in_channels, e);
    if (!n) return NULL;
    int stem_c = a->cifar_he ? 16 : 64;
    int h = imagenet ? net_add_conv(n, "conv1", NET_INPUT, stem_c, 7, 2, 3, e)
                     : net_add_conv(n, "conv1", NET_INPUT, stem_c, 3, 1, 1, e);
    if (h < 0 || (h = net_add_bn(n, "bn1", NODE_BN_RELU, h, -2, false, e)) < 0) goto fail;
    if (imagenet && (h = net_add_maxpool(n, h, 3, 2, 1, e)) < 0) goto fail;
    int in_c = stem_c, stages = a->cifar_he ? 3 : 4;
    for (int s = 0; s < stages; s++) {
        int width = (a->cifar_he ? 16 : 64) << s;
        for (int b = 0; b < a->blocks[s]; b++) {
            char name[32];
            snprintf(name, sizeof name, "layer%d.%d", s + 1, b);
            int stride = (b == 0 && s > 0) ? 2 : 1;
            h = add_block(n, name, h, in_c, width, stride, a->bottleneck, zero_init_residual, e);
            if (h < 0) goto fail;
            in_c = width * (a->bottleneck ? 4 : 1);
        }
    }
    if ((h = net_add_avgpool(n, h, e)) < 0 || net_add_linear(n, "fc", h, num_classes, e) < 0) goto fail;
    return n;
fail:
    net_free(n);
    return NULL;
}
