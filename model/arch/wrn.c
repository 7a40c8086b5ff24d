/* wrn.c: Wide ResNets for CIFAR (Zagoruyko & Komodakis 2016), as the widely used
 * xternalz/WideResNet-pytorch defines them, with its tensor names:
 *
 *   conv1 (3x3/1, 16)  ->  block1, block2, block3 (n = (depth - 4) / 6 blocks each, widths
 *   16k, 32k, 64k, strides 1, 2, 2)  ->  bn1 + relu  ->  global average pool  ->  fc
 *
 * A block blockS.layer.i is pre-activation: a = relu(bn1(x)); h = conv1(a) (3x3, the
 * block's stride); h = relu(bn2(h)); dropout(p = model.dropout) when p > 0; h = conv2(h)
 * (3x3/1); out = h + shortcut, the shortcut being x itself when the block keeps the channel
 * count, else convShortcut(a) (1x1, the block's stride, no BN) of the PRE-ACTIVATED input.
 * Initialisation as the reference: convs N(0, sqrt(2 / (k x k x out))), BN 1 / 0, fc
 * weight torch's default (U(-1/sqrt(in), 1/sqrt(in))) and bias 0.
 * Not here: the bottleneck WRN variant (WRN-50-2 is torchvision's wide_resnet50_2, resnet.c).
 */
#include "model/arch/arch.h"

#include <stdio.h>

/* One block on x (in_c channels): returns its output node or -1. */
static int add_block(net_t *n, const char *name, int x, int in_c, int out_c, int stride, double drop,
                     err_t *e) {
    char p[64];
    snprintf(p, sizeof p, "%s.bn1", name);
    int a = net_add_bn(n, p, NODE_BN_RELU, x, -2, false, e);
    if (a < 0) return -1;
    snprintf(p, sizeof p, "%s.conv1", name);
    int h = net_add_conv(n, p, a, out_c, 3, stride, 1, e);
    snprintf(p, sizeof p, "%s.bn2", name);
    if (h < 0 || (h = net_add_bn(n, p, NODE_BN_RELU, h, -2, false, e)) < 0) return -1;
    if (drop > 0 && (h = net_add_dropout(n, h, drop, e)) < 0) return -1;
    snprintf(p, sizeof p, "%s.conv2", name);
    if ((h = net_add_conv(n, p, h, out_c, 3, 1, 1, e)) < 0) return -1;
    int shortcut = x;
    if (in_c != out_c) {
        snprintf(p, sizeof p, "%s.convShortcut", name);
        if ((shortcut = net_add_conv(n, p, a, out_c, 1, stride, 0, e)) < 0) return -1;
    }
    return net_add_add(n, h, shortcut, e);
}

net_t *arch_build_wrn(const arch_info_t *a, const arch_opts_t *o, err_t *e) {
    int k = (int)o->width;
    net_t *n = net_create(o->in_channels, e);
    if (!n) return NULL;
    int h = net_add_conv(n, "conv1", NET_INPUT, 16, 3, 1, 1, e), in_c = 16;
    for (int s = 0; s < 3 && h >= 0; s++) {
        int out_c = (16 << s) * k;
        for (int b = 0; b < a->blocks[s] && h >= 0; b++) {
            char name[32];
            snprintf(name, sizeof name, "block%d.layer.%d", s + 1, b);
            h = add_block(n, name, h, in_c, out_c, b == 0 && s > 0 ? 2 : 1, o->dropout, e);
            in_c = out_c;
        }
    }
    if (h < 0 || (h = net_add_bn(n, "bn1", NODE_BN_RELU, h, -2, false, e)) < 0 ||
        (h = net_add_avgpool(n, h, e)) < 0 || net_add_linear(n, "fc", h, o->num_classes, e) < 0 ||
        net_set_init(n, "fc.bias", NET_INIT_ZEROS, e)) {
        net_free(n);
        return NULL;
    }
    return n;
}
