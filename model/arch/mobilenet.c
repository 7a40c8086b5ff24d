/* mobilenet.c: MobileNetV2 (Sandler et al. 2018) as torchvision's mobilenet_v2 defines it,
 * with its tensor names:
 *
 *   features.0: conv 3x3 (stride 2; CIFAR variant 1) to c0 + BN + ReLU6
 *   features.1..17: inverted residuals, per (t, c, n, s) of
 *     (1,16,1,1) (6,24,2,2) (6,32,3,2) (6,64,4,2) (6,96,3,1) (6,160,3,2) (6,320,1,1)
 *     (the CIFAR variant's second stage has stride 1): [conv.0.0 1x1 expand to
 *     hidden = round(in x t) + conv.0.1 BN + ReLU6 when t != 1], the depthwise 3x3 (stride)
 *     + BN + ReLU6, the 1x1 linear projection + BN, plus the input when the stride is 1 and
 *     the channel count stays;
 *   features.18: conv 1x1 to last + BN + ReLU6; global average pool; classifier.0 Dropout
 *   (model.dropout, 0.2), classifier.1 Linear(last, classes).
 * Widths follow model.width (width_mult): c0 = div8(32 w), each c = div8(c w), last =
 * div8(1280 max(1, w)), div8 being torchvision's _make_divisible(v, 8).
 * The CIFAR variant is chenyaofo/pytorch-cifar-models' cifar10_mobilenetv2_x*: torchvision's
 * network with stride 1 in features.0 and the second stage (kuangliu/pytorch-cifar's stride
 * choice; torchvision's ReLU6 blocks and names), output stride 8.
 * Initialisation as torchvision's: convs kaiming_normal_(fan_out), BN 1 / 0, the linear
 * N(0, 0.01) with bias 0.
 */
#include "model/arch/arch.h"

#include <math.h>
#include <stdio.h>

/* torchvision's _make_divisible(v, 8): the nearest multiple of 8, at least 8, not more than
 * 10% below v. */
static int div8(double v) {
    int r = (int)(v + 4.0) / 8 * 8;
    if (r < 8) r = 8;
    if (r < 0.9 * v) r += 8;
    return r;
}

/* conv (kernel k, stride, groups) + BN + ReLU6 named prefix.0 / prefix.1. */
static int conv_bn_relu6(net_t *n, const char *prefix, int x, int out, int k, int stride, int groups,
                         err_t *e) {
    char p[80];
    snprintf(p, sizeof p, "%s.0", prefix);
    int h = net_add_conv2(n, p, x, out, k, stride, k / 2, groups, false, e);
    snprintf(p, sizeof p, "%s.1", prefix);
    return h < 0 ? -1 : net_add_bn(n, p, NODE_BN_RELU6, h, -2, false, e);
}

static int inverted_residual(net_t *n, int idx, int x, int in_c, int out_c, int stride, int t, err_t *e) {
    int hidden = (int)lround(in_c * (double)t), h = x, k = 0;
    char p[64];
    if (t != 1) {
        snprintf(p, sizeof p, "features.%d.conv.%d", idx, k++);
        if ((h = conv_bn_relu6(n, p, h, hidden, 1, 1, 1, e)) < 0) return -1;
    }
    snprintf(p, sizeof p, "features.%d.conv.%d", idx, k++);
    if ((h = conv_bn_relu6(n, p, h, hidden, 3, stride, hidden, e)) < 0) return -1;
    snprintf(p, sizeof p, "features.%d.conv.%d", idx, k++);
    if ((h = net_add_conv(n, p, h, out_c, 1, 1, 0, e)) < 0) return -1;
    snprintf(p, sizeof p, "features.%d.conv.%d", idx, k);
    if ((h = net_add_bn(n, p, NODE_BN, h, -2, false, e)) < 0) return -1;
    return stride == 1 && in_c == out_c ? net_add_add(n, h, x, e) : h;
}

net_t *arch_build_mobilenet_v2(const arch_info_t *a, const arch_opts_t *o, err_t *e) {
    (void)a;
    static const int setting[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                                      {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    bool imagenet = o->stem == ARCH_STEM_IMAGENET;
    double w = o->width;
    int in_c = div8(32 * w), last = div8(1280 * (w > 1 ? w : 1)), idx = 1;
    net_t *n = net_create(o->in_channels, e);
    if (!n) return NULL;
    int h = conv_bn_relu6(n, "features.0", NET_INPUT, in_c, 3, imagenet ? 2 : 1, 1, e);
    for (int r = 0; r < 7 && h >= 0; r++) {
        int out_c = div8(setting[r][1] * w);
        int s0 = r == 1 && !imagenet ? 1 : setting[r][3];
        for (int i = 0; i < setting[r][2] && h >= 0; i++) {
            h = inverted_residual(n, idx++, h, in_c, out_c, i == 0 ? s0 : 1, setting[r][0], e);
            in_c = out_c;
        }
    }
    char p[32];
    snprintf(p, sizeof p, "features.%d", idx);
    if (h >= 0) h = conv_bn_relu6(n, p, h, last, 1, 1, 1, e);
    if (h >= 0) h = net_add_avgpool(n, h, e);
    if (h >= 0 && o->dropout > 0) h = net_add_dropout(n, h, o->dropout, e);
    if (h < 0 || net_add_linear(n, "classifier.1", h, o->num_classes, e) < 0 ||
        net_set_init(n, "classifier.1.weight", NET_INIT_NORMAL_0_01, e) ||
        net_set_init(n, "classifier.1.bias", NET_INIT_ZEROS, e)) {
        net_free(n);
        return NULL;
    }
    return n;
}
