/* preact.c: pre-activation ResNet-18 for CIFAR (He et al. 2016, "Identity Mappings in Deep
 * Residual Networks"): kuangliu/pytorch-cifar's PreActResNet18 and PreActBlock with the
 * final BN-ReLU of the paper (as locuslab/robust_overfitting's PreActResNet18 adds it; the
 * kuangliu file pools the last block's raw sum), with their tensor names:
 *
 *   conv1 (3x3/1, 64)  ->  layer1..4 (2 blocks each, widths 64/128/256/512, strides 1/2/2/2)
 *   ->  bn + relu  ->  global average pool  ->  linear
 *
 * A block layerS.i: a = relu(bn1(x)); shortcut = shortcut.0(a) (1x1 conv, the block's
 * stride, no BN) where the shape changes, else x; h = conv1(a) (3x3, stride);
 * h = conv2(relu(bn2(h))) (3x3/1); out = h + shortcut.
 * Initialisation: torch's defaults, which the reference keeps: convs and the linear
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (the linear's bias too), BN 1 / 0.
 */
#include "model/arch/arch.h"

#include <stdio.h>

static int add_block(net_t *n, const char *name, int x, int in_c, int out_c, int stride, err_t *e) {
    char p[64];
    snprintf(p, sizeof p, "%s.bn1", name);
    int a = net_add_bn(n, p, NODE_BN_RELU, x, -2, false, e);
    if (a < 0) return -1;
    int shortcut = x;
    if (stride != 1 || in_c != out_c) {
        snprintf(p, sizeof p, "%s.shortcut.0", name);
        if ((shortcut = net_add_conv(n, p, a, out_c, 1, stride, 0, e)) < 0) return -1;
    }
    snprintf(p, sizeof p, "%s.conv1", name);
    int h = net_add_conv(n, p, a, out_c, 3, stride, 1, e);
    snprintf(p, sizeof p, "%s.bn2", name);
    if (h < 0 || (h = net_add_bn(n, p, NODE_BN_RELU, h, -2, false, e)) < 0) return -1;
    snprintf(p, sizeof p, "%s.conv2", name);
    if ((h = net_add_conv(n, p, h, out_c, 3, 1, 1, e)) < 0) return -1;
    return net_add_add(n, h, shortcut, e);
}

net_t *arch_build_preact(const arch_info_t *a, const arch_opts_t *o, err_t *e) {
    net_t *n = net_create(o->in_channels, e);
    if (!n) return NULL;
    int h = net_add_conv(n, "conv1", NET_INPUT, 64, 3, 1, 1, e), in_c = 64;
    for (int s = 0; s < 4 && h >= 0; s++) {
        for (int b = 0; b < a->blocks[s] && h >= 0; b++) {
            char name[32];
            snprintf(name, sizeof name, "layer%d.%d", s + 1, b);
            h = add_block(n, name, h, in_c, 64 << s, b == 0 && s > 0 ? 2 : 1, e);
            in_c = 64 << s;
        }
    }
    if (h < 0 || (h = net_add_bn(n, "bn", NODE_BN_RELU, h, -2, false, e)) < 0 ||
        (h = net_add_avgpool(n, h, e)) < 0 || net_add_linear(n, "linear", h, o->num_classes, e) < 0)
        goto fail;
    /* torch's default conv init (the reference keeps it), not torchvision's kaiming */
    for (int i = 0; i < net_num_tensors(n); i++) {
        const net_tensor_t *t = net_tensor(n, i);
        if (t->conv_weight && net_set_init(n, t->name, NET_INIT_LINEAR_UNIFORM, e)) goto fail;
    }
    return n;
fail:
    net_free(n);
    return NULL;
}
