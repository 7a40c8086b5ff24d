/* resnext.c: ResNeXt-29 for CIFAR (Xie et al. 2017) as prlz77/ResNeXt.pytorch defines it
 * (CifarResNeXt, widen factor 4), with its tensor names:
 *
 *   conv_1_3x3 (3x3/1, 64) -> bn_1 + relu -> stage_1..3 (3 bottlenecks each, outputs
 *   256/512/1024, strides 1/2/2) -> global average pool -> classifier
 *
 * A bottleneck stage_S.stage_S_bottleneck_i: conv_reduce (1x1 to D) -> bn_reduce + relu ->
 * conv_conv (3x3, the stride, `groups` groups) -> bn + relu -> conv_expand (1x1 to the
 * output) -> bn_expand, plus the shortcut (shortcut.shortcut_conv 1x1 with the stride +
 * shortcut.shortcut_bn where the channel count changes, else the input), then relu.
 * D = groups x int(base_width x out / 256): model.groups is the cardinality (8 in 8x64d),
 * model.width the base width (64). torchvision's resnext50_32x4d is the ResNet class
 * (resnet.c). Initialisation as the reference: convs kaiming_normal_(fan_out), BN 1 / 0,
 * the classifier's bias 0 and its weight kaiming_normal_ (fan_in).
 */
#include "model/arch/arch.h"

#include <stdio.h>

static int add_bottleneck(net_t *n, const char *name, int x, int in_c, int out_c, int stride,
                          int d, int groups, bool zero_init, err_t *e) {
    char p[96];
    int shortcut = x;
    if (in_c != out_c) {
        snprintf(p, sizeof p, "%s.shortcut.shortcut_conv", name);
        int c = net_add_conv(n, p, x, out_c, 1, stride, 0, e);
        snprintf(p, sizeof p, "%s.shortcut.shortcut_bn", name);
        if (c < 0 || (shortcut = net_add_bn(n, p, NODE_BN, c, -2, false, e)) < 0) return -1;
    }
    snprintf(p, sizeof p, "%s.conv_reduce", name);
    int h = net_add_conv(n, p, x, d, 1, 1, 0, e);
    snprintf(p, sizeof p, "%s.bn_reduce", name);
    if (h < 0 || (h = net_add_bn(n, p, NODE_BN_RELU, h, -2, false, e)) < 0) return -1;
    snprintf(p, sizeof p, "%s.conv_conv", name);
    if ((h = net_add_conv2(n, p, h, d, 3, stride, 1, groups, false, e)) < 0) return -1;
    snprintf(p, sizeof p, "%s.bn", name);
    if ((h = net_add_bn(n, p, NODE_BN_RELU, h, -2, false, e)) < 0) return -1;
    snprintf(p, sizeof p, "%s.conv_expand", name);
    if ((h = net_add_conv(n, p, h, out_c, 1, 1, 0, e)) < 0) return -1;
    snprintf(p, sizeof p, "%s.bn_expand", name);
    return net_add_bn(n, p, NODE_BN_ADD_RELU, h, shortcut, zero_init, e);
}

net_t *arch_build_resnext_cifar(const arch_info_t *a, const arch_opts_t *o, err_t *e) {
    const int widen = 4;
    net_t *n = net_create(o->in_channels, e);
    if (!n) return NULL;
    int h = net_add_conv(n, "conv_1_3x3", NET_INPUT, 64, 3, 1, 1, e), in_c = 64;
    if (h >= 0) h = net_add_bn(n, "bn_1", NODE_BN_RELU, h, -2, false, e);
    for (int s = 0; s < 3 && h >= 0; s++) {
        int out_c = (64 << s) * widen;
        int d = o->groups * (int)(o->width * out_c / (widen * 64.0));
        for (int b = 0; b < a->blocks[s] && h >= 0; b++) {
            char name[64];
            snprintf(name, sizeof name, "stage_%d.stage_%d_bottleneck_%d", s + 1, s + 1, b);
            h = add_bottleneck(n, name, h, in_c, out_c, b == 0 && s > 0 ? 2 : 1, d, o->groups,
                               o->zero_init_residual, e);
            in_c = out_c;
        }
    }
    /* the reference's kaiming_normal_ (fan_in) classifier weight awaits NET_INIT_KAIMING_FAN_IN
     * (API24.md); torch's default Linear init until then */
    if (h < 0 || (h = net_add_avgpool(n, h, e)) < 0 || net_add_linear(n, "classifier", h, o->num_classes, e) < 0 ||
        net_set_init(n, "classifier.bias", NET_INIT_ZEROS, e)) {
        net_free(n);
        return NULL;
    }
    return n;
}
