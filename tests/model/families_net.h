/* families_net.h: the small net of tests/model/families_ref.py, which uses every node kind
 * the new model families need (grouped and depthwise convs, conv bias, bn_relu6, relu6,
 * dropout on a map and on a 2-D tensor, a pre-activation add whose shortcut is the
 * pre-activated tensor, a 2x2 max-pool, adaptive avgpool to 2x2, a linear on a 2x2x8
 * map, relu on a linear). Node indices match families_ref.py's list. Not a library: a
 * static function included by test_net_torch.c and test_net_layers.c.
 */
#ifndef RUNNER_TESTS_MODEL_FAMILIES_NET_H
#define RUNNER_TESTS_MODEL_FAMILIES_NET_H

#include "model/net.h"

enum { FAM_CLASSES = 5, FAM_DROP_MAP = 4, FAM_DROP_FC = 18 };

/* The net for 3-channel inputs (12x12 in the reference); NULL with e set on failure. */
static inline net_t *families_net(err_t *e) {
    net_t *n = net_create(3, e);
    if (!n) return NULL;
    int a, h;
    if ((h = net_add_conv2(n, "stem", NET_INPUT, 8, 3, 1, 1, 1, true, e)) < 0 ||          /* 0 */
        (a = net_add_bn(n, "stem_bn", NODE_BN_RELU, h, -2, false, e)) < 0 ||               /* 1 */
        (h = net_add_conv2(n, "b1.conv1", a, 8, 3, 1, 1, 2, false, e)) < 0 ||              /* 2 */
        (h = net_add_bn(n, "b1.bn1", NODE_BN_RELU6, h, -2, false, e)) < 0 ||               /* 3 */
        (h = net_add_dropout(n, h, 0.25, e)) < 0 ||                                        /* 4 */
        (h = net_add_conv2(n, "b1.dw", h, 8, 3, 1, 1, 8, false, e)) < 0 ||                 /* 5 */
        (h = net_add_bn(n, "b1.bn2", NODE_BN, h, -2, false, e)) < 0 ||                     /* 6 */
        (h = net_add_add(n, h, a, e)) < 0 ||                                               /* 7 */
        (h = net_add_relu6(n, h, e)) < 0 ||                                                /* 8 */
        (h = net_add_maxpool(n, h, 2, 2, 0, e)) < 0 ||                                     /* 9 */
        (h = net_add_conv(n, "b2.expand", h, 16, 1, 1, 0, e)) < 0 ||                       /* 10 */
        (h = net_add_bn(n, "b2.bn1", NODE_BN_RELU6, h, -2, false, e)) < 0 ||               /* 11 */
        (h = net_add_conv2(n, "b2.dw", h, 16, 3, 2, 1, 16, false, e)) < 0 ||               /* 12 */
        (h = net_add_bn(n, "b2.bn2", NODE_BN_RELU6, h, -2, false, e)) < 0 ||               /* 13 */
        (h = net_add_conv2(n, "b2.project", h, 8, 1, 1, 0, 4, true, e)) < 0 ||             /* 14 */
        (h = net_add_avgpool2(n, h, 2, 2, e)) < 0 ||                                       /* 15 */
        (h = net_add_linear(n, "fc1", h, 12, e)) < 0 ||                                    /* 16 */
        (h = net_add_relu(n, h, e)) < 0 ||                                                 /* 17 */
        (h = net_add_dropout(n, h, 0.5, e)) < 0 ||                                         /* 18 */
        net_add_linear(n, "fc2", h, FAM_CLASSES, e) < 0) {                                 /* 19 */
        net_free(n);
        return NULL;
    }
    return n;
}

#endif
