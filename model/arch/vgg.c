/* vgg.c: VGG-11/13/16/19 with batch norm (Simonyan & Zisserman 2015; torchvision's
 * vgg11_bn .. vgg19_bn), with torchvision's tensor names:
 *
 *   features: per stage (widths 64, 128, 256, 512, 512; a->blocks convs each) the 3x3/1
 *   convs features.i (with bias) + features.i+1 BN + ReLU (features.i+2), then a 2x2/2
 *   max-pool (one index); then
 *   ImageNet variant (torchvision's model): adaptive average pool to 7x7, classifier.0
 *     Linear(512*7*7, 4096) + ReLU + Dropout, classifier.3 Linear(4096, 4096) + ReLU +
 *     Dropout, classifier.6 Linear(4096, classes). classifier.0 flattens (c, h, w) in
 *     torch and (h, w, c) here: its weight records the 7x7x512 map (net_tensor_t flat_*)
 *     and import/export permute its columns.
 *   CIFAR variant (chenyaofo/pytorch-cifar-models' cifar10_vgg*_bn, the torchvision
 *     features with a 512-wide head): global average pool (a no-op on 32 px inputs, whose
 *     features end at 1x1; it lets 33..64 px inputs in), classifier.0 Linear(512, 512) +
 *     ReLU + Dropout, classifier.3 Linear(512, 512) + ReLU + Dropout, classifier.6
 *     Linear(512, classes).
 * Dropout p is model.dropout (torchvision's and the reference's 0.5). Five max-pools need
 * inputs of at least 32 px. Initialisation as torchvision's: convs kaiming_normal_(fan_out,
 * relu) with bias 0, BN 1 / 0, linears N(0, 0.01) with bias 0.
 */
#include "model/arch/arch.h"

#include <stdio.h>

/* features.* after node h; returns the last max-pool's node or -1. */
static int add_features(net_t *n, const arch_info_t *a, int h, err_t *e) {
    static const int widths[5] = {64, 128, 256, 512, 512};
    int idx = 0;
    for (int s = 0; s < 5; s++) {
        for (int c = 0; c < a->blocks[s]; c++) {
            char p[32];
            snprintf(p, sizeof p, "features.%d", idx);
            if ((h = net_add_conv2(n, p, h, widths[s], 3, 1, 1, 1, true, e)) < 0) return -1;
            snprintf(p, sizeof p, "features.%d.bias", idx);
            if (net_set_init(n, p, NET_INIT_ZEROS, e)) return -1;
            snprintf(p, sizeof p, "features.%d", idx + 1);
            if ((h = net_add_bn(n, p, NODE_BN_RELU, h, -2, false, e)) < 0) return -1;
            idx += 3;
        }
        if ((h = net_add_maxpool(n, h, 2, 2, 0, e)) < 0) return -1;
        idx++;
    }
    return h;
}

/* classifier.<idx>: a linear with torchvision's VGG init. */
static int add_linear(net_t *n, int idx, int h, int out, err_t *e) {
    char p[32], w[48], b[48];
    snprintf(p, sizeof p, "classifier.%d", idx);
    snprintf(w, sizeof w, "%s.weight", p);
    snprintf(b, sizeof b, "%s.bias", p);
    if ((h = net_add_linear(n, p, h, out, e)) < 0 || net_set_init(n, w, NET_INIT_NORMAL_0_01, e) ||
        net_set_init(n, b, NET_INIT_ZEROS, e))
        return -1;
    return h;
}

net_t *arch_build_vgg(const arch_info_t *a, const arch_opts_t *o, err_t *e) {
    bool imagenet = o->stem == ARCH_STEM_IMAGENET;
    int hidden = imagenet ? 4096 : 512;
    net_t *n = net_create(o->in_channels, e);
    if (!n) return NULL;
    int h = add_features(n, a, NET_INPUT, e);
    if (h >= 0) h = imagenet ? net_add_avgpool2(n, h, 7, 7, e) : net_add_avgpool(n, h, e);
    for (int k = 0; k < 2 && h >= 0; k++) {   /* classifier.0 / .3 + ReLU + Dropout */
        if ((h = add_linear(n, 3 * k, h, hidden, e)) >= 0) h = net_add_relu(n, h, e);
        if (h >= 0 && o->dropout > 0) h = net_add_dropout(n, h, o->dropout, e);
    }
    if (h < 0 || add_linear(n, 6, h, o->num_classes, e) < 0) {
        net_free(n);
        return NULL;
    }
    return n;
}
