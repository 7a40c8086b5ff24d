/* resnet.c: the ResNet builders (arch.h; described in resnet.h), emitting node lists with
 * torchvision's names, and the resnet_build shorthands.
 *
 * A block is built as: [downsample.0 conv -> downsample.1 bn] (when the shape changes),
 * conv1 -> bn1 (bn_relu) -> conv2 -> [bn2 (bn_relu) -> conv3 ->] last bn as
 * bn_add_relu(branch, shortcut). Parameters are laid out in this node order.
 * The stem is conv1 -> bn1 (bn_relu) [-> max-pool 3x3/2 pad 1 for the ImageNet stem].
 * wide_resnet* and resnext* are torchvision's ResNet class with width_per_group (model.width)
 * and groups (model.groups) in the Bottleneck's 3x3 conv; the names are resnet50's.
 */
#include "model/arch/resnet.h"

#include <stdio.h>
#include <string.h>

/* Adds one residual block whose input is node x with in_c channels; planes is the stage's
 * width (64 << stage), mid the width of the inner (3x3, grouped) conv of a Bottleneck.
 * Returns the block's output node or -1. */
static int add_block(net_t *n, const char *name, int x, int in_c, int planes, int mid, int groups,
                     int stride, bool bottleneck, bool zero_init, err_t *e) {
    int out_c = planes * (bottleneck ? 4 : 1);
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
        if ((h = net_add_conv(n, p, x, mid, 1, 1, 0, e)) < 0) return -1;
    } else if ((h = net_add_conv(n, p, x, planes, 3, stride, 1, e)) < 0) {
        return -1;
    }
    snprintf(p, sizeof p, "%s.bn1", name);
    if ((h = net_add_bn(n, p, NODE_BN_RELU, h, -2, false, e)) < 0) return -1;
    snprintf(p, sizeof p, "%s.conv2", name);
    if (bottleneck) {
        if ((h = net_add_conv2(n, p, h, mid, 3, stride, 1, groups, false, e)) < 0) return -1;
        snprintf(p, sizeof p, "%s.bn2", name);
        if ((h = net_add_bn(n, p, NODE_BN_RELU, h, -2, false, e)) < 0) return -1;
        snprintf(p, sizeof p, "%s.conv3", name);
        if ((h = net_add_conv(n, p, h, out_c, 1, 1, 0, e)) < 0) return -1;
    } else if ((h = net_add_conv(n, p, h, planes, 3, 1, 1, e)) < 0) {
        return -1;
    }
    snprintf(p, sizeof p, "%s.bn%d", name, bottleneck ? 3 : 2);
    return net_add_bn(n, p, NODE_BN_ADD_RELU, h, shortcut, zero_init, e);
}

/* The stages of a ResNet after its stem (node h, stem_c channels), the pool and fc. */
static net_t *finish(net_t *n, const arch_info_t *a, const arch_opts_t *o, int h, int stem_c,
                     int stages, err_t *e) {
    int in_c = stem_c;
    for (int s = 0; s < stages; s++) {
        int planes = stem_c << s;
        /* torchvision: width = int(planes * (base_width / 64.)) * groups */
        int groups = o->groups > 0 ? o->groups : 1;
        int mid = (int)(planes * (o->width > 0 ? o->width : 64) / 64.0) * groups;
        for (int b = 0; b < a->blocks[s]; b++) {
            char name[32];
            snprintf(name, sizeof name, "layer%d.%d", s + 1, b);
            int stride = (b == 0 && s > 0) ? 2 : 1;
            h = add_block(n, name, h, in_c, planes, mid, groups, stride, a->bottleneck,
                          o->zero_init_residual, e);
            if (h < 0) goto fail;
            in_c = planes * (a->bottleneck ? 4 : 1);
        }
    }
    if ((h = net_add_avgpool(n, h, e)) < 0 || net_add_linear(n, "fc", h, o->num_classes, e) < 0) goto fail;
    return n;
fail:
    net_free(n);
    return NULL;
}

net_t *arch_build_resnet(const arch_info_t *a, const arch_opts_t *o, err_t *e) {
    bool imagenet = o->stem == ARCH_STEM_IMAGENET;
    net_t *n = net_create(o->in_channels, e);
    if (!n) return NULL;
    int h = imagenet ? net_add_conv(n, "conv1", NET_INPUT, 64, 7, 2, 3, e)
                     : net_add_conv(n, "conv1", NET_INPUT, 64, 3, 1, 1, e);
    if (h < 0 || (h = net_add_bn(n, "bn1", NODE_BN_RELU, h, -2, false, e)) < 0 ||
        (imagenet && (h = net_add_maxpool(n, h, 3, 2, 1, e)) < 0)) {
        net_free(n);
        return NULL;
    }
    return finish(n, a, o, h, 64, 4, e);
}

net_t *arch_build_resnet_cifar(const arch_info_t *a, const arch_opts_t *o, err_t *e) {
    net_t *n = net_create(o->in_channels, e);
    if (!n) return NULL;
    int h = net_add_conv(n, "conv1", NET_INPUT, 16, 3, 1, 1, e);
    if (h < 0 || (h = net_add_bn(n, "bn1", NODE_BN_RELU, h, -2, false, e)) < 0) {
        net_free(n);
        return NULL;
    }
    return finish(n, a, o, h, 16, 3, e);
}

net_t *resnet_build(const char *arch, int in_channels, int num_classes, bool zero_init_residual,
                    err_t *e) {
    return resnet_build_stem(arch, ARCH_STEM_CIFAR, in_channels, num_classes, zero_init_residual, e);
}

net_t *resnet_build_stem(const char *arch, arch_stem_t stem, int in_channels, int num_classes,
                         bool zero_init_residual, err_t *e) {
    arch_opts_t o = {.stem = stem, .in_channels = in_channels, .num_classes = num_classes,
                     .zero_init_residual = zero_init_residual, .dropout = -1};
    return arch_build(arch, &o, e);
}
