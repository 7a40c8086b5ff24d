/* fusion_nets.h: what test_net_traffic.c (the byte model) and test_net_fusion.c (the
 * net's use of the fused ops) share: the options that change bytes, and the small net of
 * issue 24's node kinds around the fused ops. Test code only (static definitions).
 */
#ifndef RUNNER_TESTS_MODEL_FUSION_NETS_H
#define RUNNER_TESTS_MODEL_FUSION_NETS_H

#include "model/backend.h"
#include "model/net.h"

/* the options that change bytes (the byte model's), all three */
#define FUSE_BYTES (BACKEND_FUSE_CONV_STATS | BACKEND_FUSE_DGRAD_DBN | BACKEND_FUSE_DGRAD_ACCUM)

/* The node kinds of issue 24 around the fused ops (comments: what each rule says):
 *   c1 (3x3, bias) -> bn1 relu      stats not fused: bn1 normalises conv + bias
 *   c2 (3x3)       -> bn2 relu6     dbn of bn1 fused; stats fused
 *   c3 (1x1)       -> bn3 relu      dbn of bn2 not fused (relu6); stats fused
 *   c4 (3x3 depthwise) -> bn4       dbn of bn3 and stats not fused (grouped); c4 sums
 *                                   its data gradient into bn3's, which bn5's shortcut
 *                                   wrote first (accumulate fused)
 *   c5 (1x1)       -> bn5 add-relu (shortcut bn3)   dbn of bn4 (plain) fused; stats fused
 *   avgpool -> fc */
static net_t *build_mixed(err_t *e) {
    net_t *n = net_create(3, e);
    if (!n) return NULL;
    int c1 = net_add_conv2(n, "c1", NET_INPUT, 16, 3, 1, 1, 1, true, e);
    int b1 = c1 < 0 ? -1 : net_add_bn(n, "bn1", NODE_BN_RELU, c1, -2, false, e);
    int c2 = b1 < 0 ? -1 : net_add_conv(n, "c2", b1, 16, 3, 1, 1, e);
    int b2 = c2 < 0 ? -1 : net_add_bn(n, "bn2", NODE_BN_RELU6, c2, -2, false, e);
    int c3 = b2 < 0 ? -1 : net_add_conv(n, "c3", b2, 16, 1, 1, 0, e);
    int b3 = c3 < 0 ? -1 : net_add_bn(n, "bn3", NODE_BN_RELU, c3, -2, false, e);
    int c4 = b3 < 0 ? -1 : net_add_conv2(n, "c4", b3, 16, 3, 1, 1, 16, false, e);
    int b4 = c4 < 0 ? -1 : net_add_bn(n, "bn4", NODE_BN, c4, -2, false, e);
    int c5 = b4 < 0 ? -1 : net_add_conv(n, "c5", b4, 16, 1, 1, 0, e);
    int b5 = c5 < 0 ? -1 : net_add_bn(n, "bn5", NODE_BN_ADD_RELU, c5, b3, false, e);
    int p = b5 < 0 ? -1 : net_add_avgpool(n, b5, e);
    if (p < 0 || net_add_linear(n, "fc", p, 10, e) < 0) {
        net_free(n);
        return NULL;
    }
    return n;
}

#endif
