/* test_net_fusion.c: the parts of issue 25's fusions that need no GPU.
 *
 * The byte model (net_fusion.h): ResNet-50 with the CIFAR stem, batch 128, bf16, SGD
 * reproduces the issue's table of non-convolution traffic from the planned shapes (BN
 * forward 3.10 GB, BN backward 6.36, residual adds 1.41, weight-gradient accumulate
 * 0.24, SGD 0.47, weight cast 0.14, zeroing 0.09), and each fusion removes what its
 * eligible nodes account for (the per-node sums are recomputed here from the shapes);
 * bn_remask takes the y reads out of both BN backward passes of the 33 relu BNs
 * without a residual (BN backward 6.36 -> 5.78 GB), and only the apply pass's where
 * dgrad_dbn already moved the reduce pass into the conv.
 *
 * The net's use of the fused ops (net_run.c), on the CPU backend: its own
 * conv2d_bwd_data_accum, and test composites of conv2d_fwd_bn_stats and
 * conv2d_bwd_data_bn made of the CPU's unfused ops (the contract of backend.h), give the
 * same loss, gradients and BN buffers bit for bit as a table without the fused slots, in
 * fp32 and emulated bf16; the slots are called exactly on the nodes the eligibility
 * rules name (resnet20: 21 BN statistics, 9 backward reductions, 9 residual sums), and
 * never in an evaluation forward. The rules on the node kinds of issue 24 (a net with a
 * biased conv, BN + ReLU6, a depthwise conv, a plain BN and a BN add-ReLU): no statistics
 * fusion for a conv with a bias (its BN normalises conv + bias) or a grouped conv, no
 * backward-reduction fusion into a grouped conv or behind a ReLU6 BN (the CUDA graph
 * builds the ReLU mask only), the residual sum into a grouped conv's input still fused;
 * the same bits fused and unfused there too. bn_mask_bits: the byte model's -0.84 GB
 * (the 16 add-relu BNs' y reads become bit reads), and on the CPU the net's use of the
 * mask-bit ops (composites of the CPU's ops): the add-relu BNs' masks written in the
 * training forward only, read by both backward passes, the same bits as reading y, and
 * where the backend answers 1 the y path again. bn_dual_add: the byte model's -0.63 GB
 * (4 projection shortcuts of ResNet-50), and the net's use of the dual ops on the CPU:
 * the same bits as the two BNs' own ops (which caught a gradient slot the liveness plan
 * had shared with a still-live one, now planned from the add-relu BN's backward on),
 * refused and with the mask bits too. backend_fusion_parse/format round-trip the
 * names, and "all" is graph_conv and dgrad_accum (the options the first GPU run measured
 * faster).
 */
#include <stdlib.h>
#include <string.h>

#include "model/cpu/cpu_backend.h"
#include "model/cuda/bn_persist_plan.h"
#include "model/net.h"
#include "model/net_fusion.h"
#include "model/arch/resnet.h"
#include "util/rng.h"
#include "tests/mask_host.h"
#include "tests/test.h"

/* the options that change bytes (the byte model's), all three */
#define FUSE_BYTES (BACKEND_FUSE_CONV_STATS | BACKEND_FUSE_DGRAD_DBN | BACKEND_FUSE_DGRAD_ACCUM)

/* ---- the byte model ---- */

static net_t *resnet50(void) {
    err_t e = {0};
    net_t *n = resnet_build("resnet50", 3, 100, false, &e);
    CHECK(n != NULL);
    return n;
}

static void test_traffic_matches_issue_table(void) {
    net_t *n = resnet50();
    if (!n) return;
    net_traffic_t t;
    err_t e = {0};
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, 0, &t, &e), 0);
    /* the issue's 0.24 for the weight-gradient accumulate is 10 bytes per parameter of
     * all 23.7M; only the 23.4M conv weights pass through it (linear accumulates in its
     * GEMM), 0.234 GB */
    static const double want[NT_COUNT] = {3.10, 6.36, 1.41, 0.234, 0.47, 0.14, 0.09, 0.0};
    for (int k = 0; k < NT_COUNT; k++) {
        printf("  %-12s %.3f GB\n", net_traffic_names[k], t.bytes[k] / 1e9);
        CHECK_NEAR(t.bytes[k] / 1e9, want[k], 0.005, 0);
    }
    printf("  total        %.3f GB\n", t.total / 1e9);
    CHECK_NEAR(t.total / 1e9, 11.8, 0.05, 0);
    /* the exact sums of the three BN/residual rows: per-node elements from the shapes */
    CHECK_NEAR(t.bytes[NT_BN_FWD], 3097493504.0, 0.5, 0);
    CHECK_NEAR(t.bytes[NT_BN_BWD], 6360662016.0, 0.5, 0);
    CHECK_NEAR(t.bytes[NT_RESIDUAL_ADD], 1409286144.0, 0.5, 0);
    CHECK(t.conv_epilogue == 0.0);
    /* fp16 adds the unscale pass over the fp32 gradients (read + write) */
    net_traffic_t h;
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_F16, false, 0, &h, &e), 0);
    CHECK_NEAR(h.bytes[NT_UNSCALE], 8.0 * (double)net_num_params(n), 0.5, 0);
    CHECK_NEAR(h.total - t.total, h.bytes[NT_UNSCALE], 1.0, 0);
    net_free(n);
}

/* Elements per sample of ResNet-50's BN outputs by kind, summed (CIFAR stem, 32x32):
 * relu 0.291504128 GB, plain 0.12582912, add-relu 0.46137344 at batch 128 bf16. The bn1
 * and bn2 of each block (relu, single conv consumer) are 0.274726912 GB. */
static void test_traffic_fusions(void) {
    net_t *n = resnet50();
    if (!n) return;
    err_t e = {0};
    net_traffic_t base, st, db, ac, all;
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, 0, &base, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, BACKEND_FUSE_CONV_STATS, &st, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, BACKEND_FUSE_DGRAD_DBN, &db, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, BACKEND_FUSE_DGRAD_ACCUM, &ac, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, FUSE_BYTES, &all, &e), 0);
    /* every BN follows its conv: the statistics pass (one read of each BN input) goes */
    CHECK_INT(st.fused_stats, 53);
    CHECK_NEAR(base.total - st.total, 878706688.0, 0.5, 0);
    CHECK(st.conv_epilogue == 0.0);
    /* bn1 and bn2 of the 16 blocks: the reduce pass (x, y, dy) leaves the BN kernels, the
     * conv's epilogue reads x and y */
    CHECK_INT(db.fused_dbn, 32);
    CHECK_NEAR(base.total - db.total, 3.0 * 274726912.0, 0.5, 0);
    CHECK_NEAR(db.conv_epilogue, 2.0 * 274726912.0, 0.5, 0);
    /* the 16 residual sums: 3 passes of the add go, the conv reads the old gradient */
    CHECK_INT(ac.fused_accum, 16);
    CHECK(ac.bytes[NT_RESIDUAL_ADD] == 0.0);
    CHECK_NEAR(ac.conv_epilogue, 1409286144.0 / 3.0, 0.5, 0);
    CHECK_INT(base.remasked + st.remasked + db.remasked + ac.remasked + all.remasked, 0);
    /* the three savings add up; vec16 and graph_conv move no bytes */
    CHECK_NEAR(base.total - all.total, (base.total - st.total) + (base.total - db.total) + (base.total - ac.total),
               1.0, 0);
    printf("  non-conv GB: unfused %.3f, conv_stats %.3f, dgrad_dbn %.3f, dgrad_accum %.3f, the three %.3f "
           "(+%.3f read by conv epilogues)\n", base.total / 1e9, st.total / 1e9, db.total / 1e9, ac.total / 1e9,
           all.total / 1e9, all.conv_epilogue / 1e9);
    net_free(n);
}

/* bn_remask: the relu BNs without a residual (the stem's bn1, bn1 and bn2 of the 16
 * blocks: 33 nodes, 0.291504128 GB of outputs at batch 128 bf16) read no y in either
 * backward pass: 6360662016 - 2 * 291504128 = 5777653760 bytes of BN backward (the
 * add-relu bn3s and the plain downsample BNs unchanged). With dgrad_dbn the 32 block
 * BNs' reduce pass is in the conv (which reads y: conv_epilogue unchanged), so bn_remask
 * saves the stem bn1's two reads (2 * 16777216: 128 x 32 x 32 x 64 x 2 bytes) and the
 * 32 apply passes' one (274726912). No other row moves. */
static void test_traffic_bn_remask(void) {
    net_t *n = resnet50();
    if (!n) return;
    err_t e = {0};
    net_traffic_t base, rm, db, dbrm;
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, 0, &base, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, BACKEND_FUSE_BN_REMASK, &rm, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, BACKEND_FUSE_DGRAD_DBN, &db, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, BACKEND_FUSE_DGRAD_DBN | BACKEND_FUSE_BN_REMASK, &dbrm,
                          &e), 0);
    CHECK_INT(rm.remasked, 33);
    CHECK_INT(dbrm.remasked, 33);
    CHECK_NEAR(rm.bytes[NT_BN_BWD], 5777653760.0, 0.5, 0);
    printf("  bn_bwd GB: unfused %.3f, bn_remask %.3f; non-conv GB %.3f -> %.3f\n", base.bytes[NT_BN_BWD] / 1e9,
           rm.bytes[NT_BN_BWD] / 1e9, base.total / 1e9, rm.total / 1e9);
    CHECK_NEAR(base.bytes[NT_BN_BWD] / 1e9, 6.36, 0.005, 0);   /* as printed by --predict */
    CHECK_NEAR(rm.bytes[NT_BN_BWD] / 1e9, 5.78, 0.005, 0);
    CHECK_NEAR(base.total - rm.total, 583008256.0, 0.5, 0);
    for (int k = 0; k < NT_COUNT; k++)
        if (k != NT_BN_BWD) CHECK(rm.bytes[k] == base.bytes[k]);
    CHECK(rm.conv_epilogue == 0.0 && rm.fused_stats == 0 && rm.fused_dbn == 0 && rm.fused_accum == 0);
    CHECK_NEAR(db.bytes[NT_BN_BWD] - dbrm.bytes[NT_BN_BWD], 2.0 * 16777216.0 + 274726912.0, 0.5, 0);
    CHECK(dbrm.conv_epilogue == db.conv_epilogue);
    CHECK_INT(dbrm.fused_dbn, 32);
    /* fp32 doubles every activation byte */
    net_traffic_t f32, f32rm;
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_F32, false, 0, &f32, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_F32, false, BACKEND_FUSE_BN_REMASK, &f32rm, &e), 0);
    CHECK_NEAR(f32.bytes[NT_BN_BWD] - f32rm.bytes[NT_BN_BWD], 2.0 * 583008256.0, 0.5, 0);
    net_free(n);
}

/* The mixed net of issue 24's kinds (build_mixed below): bn1 relu, bn2 relu6 and bn3
 * relu are remasked; bn4 (no activation) and bn5 (add-relu, its mask needs z) are not. */
static net_t *build_mixed(err_t *e);
static void test_traffic_bn_remask_kinds(void) {
    err_t e = {0};
    net_t *n = build_mixed(&e);
    CHECK(n != NULL);
    if (!n) return;
    net_traffic_t base, rm;
    CHECK_INT(net_traffic(n, 4, 16, 16, DT_BF16, false, 0, &base, &e), 0);
    CHECK_INT(net_traffic(n, 4, 16, 16, DT_BF16, false, BACKEND_FUSE_BN_REMASK, &rm, &e), 0);
    CHECK_INT(rm.remasked, 3);
    /* three 16-channel 16x16 outputs at batch 4, bf16: 2 x 3 x 4 x 16 x 16 x 16 x 2 bytes */
    CHECK_NEAR(base.bytes[NT_BN_BWD] - rm.bytes[NT_BN_BWD], 2.0 * 3 * 4 * 16 * 16 * 16 * 2, 0.5, 0);
    net_free(n);
}

/* bn_mask_bits: the 16 bn3 (add-relu) layers of ResNet-50, E = 230686720 elements at
 * batch 128 (3 x 128x32x32x256 + 4 x 128x16x16x512 + 6 x 128x8x8x1024 + 3 x
 * 128x4x4x2048): the forward writes E / 8 bytes of bits more, each backward pass reads E / 8
 * instead of 2E (bf16 y): BN backward -2 x 1.875 E, forward +E / 8. No other row moves;
 * the mixed net's one add-relu BN (bn5) likewise. */
static void test_traffic_bn_mask_bits(void) {
    net_t *n = resnet50();
    if (!n) return;
    err_t e = {0};
    net_traffic_t all, mb;
    const unsigned PRE_ALL = BACKEND_FUSE_ALL & ~(BACKEND_FUSE_BN_MASK_BITS | BACKEND_FUSE_BN_DUAL_ADD);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, PRE_ALL, &all, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, PRE_ALL | BACKEND_FUSE_BN_MASK_BITS, &mb, &e), 0);
    const double E = 230686720.0;
    CHECK_INT(all.mask_bits, 0);
    CHECK_INT(mb.mask_bits, 16);
    CHECK_NEAR(all.bytes[NT_BN_BWD] - mb.bytes[NT_BN_BWD], 2.0 * (2.0 * E - E / 8.0), 0.5, 0);
    CHECK_NEAR(mb.bytes[NT_BN_FWD] - all.bytes[NT_BN_FWD], E / 8.0, 0.5, 0);
    CHECK_NEAR(all.total - mb.total, 836239360.0, 0.5, 0);
    printf("  non-conv GB: all %.3f, all + bn_mask_bits %.3f\n", all.total / 1e9, mb.total / 1e9);
    CHECK_NEAR(mb.total / 1e9, 8.98, 0.005, 0);   /* as --predict prints it */
    for (int k = 0; k < NT_COUNT; k++)
        if (k != NT_BN_BWD && k != NT_BN_FWD) CHECK(mb.bytes[k] == all.bytes[k]);
    CHECK(mb.conv_epilogue == all.conv_epilogue && mb.remasked == all.remasked);
    net_free(n);
    n = build_mixed(&e);
    CHECK(n != NULL);
    if (!n) return;
    CHECK_INT(net_traffic(n, 4, 16, 16, DT_F32, false, 0, &all, &e), 0);
    CHECK_INT(net_traffic(n, 4, 16, 16, DT_F32, false, BACKEND_FUSE_BN_MASK_BITS, &mb, &e), 0);
    CHECK_INT(mb.mask_bits, 1);
    const double e5 = 4 * 16 * 16 * 16;   /* bn5's elements, fp32 */
    CHECK_NEAR(all.bytes[NT_BN_BWD] - mb.bytes[NT_BN_BWD], 2.0 * (4.0 * e5 - e5 / 8.0), 0.5, 0);
    net_free(n);
}

/* bn_dual_add: ResNet-50's 4 projection shortcuts (the first block of each stage), E =
 * 62914560 elements at batch 128 (128x32x32x256 + 128x16x16x512 + 128x8x8x1024 +
 * 128x4x4x2048): the shortcut's output is not written and read (forward -2E x 2 bytes),
 * its gradient not written and read twice (backward -3E x 2 bytes); with bn_mask_bits
 * the two add up. No other row moves. */
static void test_traffic_bn_dual_add(void) {
    net_t *n = resnet50();
    if (!n) return;
    err_t e = {0};
    net_traffic_t all, du, both, dflt;
    /* all as it was before the H200 run of 7a04ce7 took both options into it */
    const unsigned PRE_ALL = BACKEND_FUSE_ALL & ~(BACKEND_FUSE_BN_MASK_BITS | BACKEND_FUSE_BN_DUAL_ADD);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, PRE_ALL, &all, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, PRE_ALL | BACKEND_FUSE_BN_DUAL_ADD, &du, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false,
                          PRE_ALL | BACKEND_FUSE_BN_DUAL_ADD | BACKEND_FUSE_BN_MASK_BITS, &both, &e), 0);
    const double E = 62914560.0;
    CHECK_INT(du.dual, 4);
    CHECK_INT(all.dual, 0);
    CHECK_NEAR(all.bytes[NT_BN_FWD] - du.bytes[NT_BN_FWD], 2.0 * 2.0 * E, 0.5, 0);
    CHECK_NEAR(all.bytes[NT_BN_BWD] - du.bytes[NT_BN_BWD], 3.0 * 2.0 * E, 0.5, 0);
    CHECK_NEAR(all.total - du.total, 629145600.0, 0.5, 0);
    CHECK_NEAR(all.total - both.total, 629145600.0 + 836239360.0, 0.5, 0);
    /* the default all is the two on top: 8.36 GB, what the H200's bench printed */
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, BACKEND_FUSE_ALL, &dflt, &e), 0);
    CHECK(dflt.total == both.total && dflt.dual == 4 && dflt.mask_bits == 16);
    CHECK_NEAR(dflt.total / 1e9, 8.36, 0.005, 0);
    printf("  non-conv GB: all %.3f, + bn_dual_add %.3f, + bn_mask_bits too %.3f\n", all.total / 1e9, du.total / 1e9,
           both.total / 1e9);
    for (int k = 0; k < NT_COUNT; k++)
        if (k != NT_BN_BWD && k != NT_BN_FWD) CHECK(du.bytes[k] == all.bytes[k]);
    /* the shortcut BN is the add-relu BN's residual input: downsample.1 of layerN.0 */
    int found = 0;
    for (int i = 0; i < net_num_nodes(n); i++) {
        int z = net_dual_bn(n, i);
        if (z < 0) continue;
        found++;
        CHECK(net_node_kind(n, z) == NODE_BN && net_consumers(n, z) == 1);
    }
    CHECK_INT(found, 4);
    net_free(n);
}

/* bn_persist (by its launch plan on an H100 / H200): on top of all, the forward of every
 * BN but the 8 of bn_dual_add's pairs keeps its rows (45: statistics and apply from one
 * reading), the backward likewise; what is saved is the second reading of what fits:
 * 0.520 GB forward, 0.826 backward at bf16 batch 128 (8.355 -> 7.009 GB). */
static void test_traffic_bn_persist(void) {
    net_t *n = resnet50();
    if (!n) return;
    err_t e = {0};
    net_traffic_t all, pe, p1;
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, BACKEND_FUSE_ALL, &all, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, BACKEND_FUSE_ALL | BACKEND_FUSE_BN_PERSIST, &pe, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false,
                          BACKEND_FUSE_ALL | BACKEND_FUSE_BN_PERSIST | BACKEND_FUSE_BN_ONE_PASS, &p1, &e), 0);
    CHECK_INT(all.persisted_fwd + all.persisted_bwd, 0);
    CHECK_INT(pe.persisted_fwd, 45);
    CHECK_INT(pe.persisted_bwd, 45);
    printf("  non-conv GB: all %.3f, + bn_persist %.3f (forward -%.3f, backward -%.3f); with bn_one_pass %.3f\n",
           all.total / 1e9, pe.total / 1e9, (all.bytes[NT_BN_FWD] - pe.bytes[NT_BN_FWD]) / 1e9,
           (all.bytes[NT_BN_BWD] - pe.bytes[NT_BN_BWD]) / 1e9, p1.total / 1e9);
    CHECK_NEAR((all.bytes[NT_BN_FWD] - pe.bytes[NT_BN_FWD]) / 1e9, 0.520, 0.0005, 0);
    CHECK_NEAR((all.bytes[NT_BN_BWD] - pe.bytes[NT_BN_BWD]) / 1e9, 0.826, 0.0005, 0);
    for (int k = 0; k < NT_COUNT; k++)
        if (k != NT_BN_BWD && k != NT_BN_FWD) CHECK(pe.bytes[k] == all.bytes[k]);
    CHECK(p1.persisted_fwd < pe.persisted_fwd && p1.total > pe.total);   /* its small layers refused */
    net_free(n);
}

/* bn_persist's launch plan (model/cuda/bn_persist_plan.h, the arithmetic the kernels
 * launch with) on an H100 / H200: two ResNet-50 shapes by hand, the overrides, and over a
 * grid of inputs that the blocks an SM fit its shared memory, a block its opt-in limit,
 * and the grid the co-resident blocks and the virtual blocks. */
static void test_persist_plan(void) {
    const bn_persist_dev_t d = BN_PERSIST_DEV_H100;
    /* the bf16 forward kernel (4 KB static, 3 blocks an SM): 8192 x 256, 64 row splits of
     * 16 rows, one block each, all 16 rows kept */
    bn_persist_plan_t p = bn_persist_plan(&d, 3, 4096, 64, 16, 256, 16, 0, 0);
    CHECK(p.grid == 64 && p.slots == 16 && p.dyn == 65536);
    /* 131072 x 256: 1024 splits on 396 blocks (3 an SM: 72704 bytes each for rows), 17 of 48 rows kept */
    p = bn_persist_plan(&d, 3, 4096, 1024, 16, 256, 16, 0, 0);
    CHECK(p.grid == 396 && p.slots == 17 && p.dyn == 69632);
    p = bn_persist_plan(&d, 3, 4096, 1024, 16, 256, 16, 3, 2);
    CHECK(p.grid == 3 && p.slots == 2);
    p = bn_persist_plan(&d, 3, 4096, 1024, 16, 256, 16, 0, -1);
    CHECK(p.grid == 396 && p.slots == 0 && p.dyn == 0);
    p = bn_persist_plan(&d, 0, 4096, 1024, 16, 256, 16, 0, 0);
    CHECK(p.grid == 0);
    /* the rows kept: 1024 virtual blocks of 16 rows on 396 blocks keeping 17: 232 blocks
     * take 3 (48 rows, keep 17), 164 take 2 (32, keep 17) */
    p = bn_persist_plan(&d, 3, 4096, 1024, 16, 256, 16, 0, 0);
    CHECK(bn_persist_kept_rows(&p, 1024, 16) == 396 * 17);
    p = bn_persist_plan(&d, 3, 4096, 1024, 16, 256, 16, 0, 40);   /* (17 fit: the cap above it changes nothing) */
    CHECK(p.slots == 17);
    p = bn_persist_plan(&d, 3, 4096, 1000, 16, 256, 16, 0, 0);
    CHECK(p.grid == 396 && bn_persist_kept_rows(&p, 1000, 16) == 396 * 17);
    p = bn_persist_plan(&d, 2, 4096, 600, 8, 256, 32, 0, 0);     /* 264 blocks: 72 take 3, 192 take 2 */
    CHECK(p.grid == 264 && p.slots == 13);
    CHECK(bn_persist_kept_rows(&p, 600, 8) == 72 * 13 + 192 * 13);
    p = bn_persist_plan(&d, 2, 4096, 600, 4, 256, 32, 0, 0);     /* 72 take 12 rows, 192 take 8 */
    CHECK(bn_persist_kept_rows(&p, 600, 4) == 72 * 12 + 192 * 8);
    /* the row kernels' geometry (norm_impl.cuh's bn_geom is made of these) */
    CHECK_INT(bn_row_v(256, 2, 16, 0, 0), 8);
    CHECK_INT(bn_row_v(128, 2, 16, 0, 0), 4);    /* 32 lanes of 4 */
    CHECK_INT(bn_row_v(64, 2, 16, 0, 0), 2);
    CHECK_INT(bn_row_v(24, 2, 16, 0, 0), 1);
    CHECK_INT(bn_row_v(256, 4, 16, 0, 0), 4);    /* fp32: 16 bytes at most */
    CHECK_INT(bn_row_v(256, 2, 8, 0, 0), 4);     /* a pointer aligned to 8 bytes only */
    CHECK_INT(bn_row_v(64, 2, 16, 1, 0), 8);     /* vec16: 16 bytes wherever they divide c */
    CHECK_INT(bn_row_v(24, 2, 16, 1, 0), 8);
    CHECK_INT(bn_row_v(64, 2, 8, 1, 0), 2);      /* vec16 needs 16-byte pointers */
    CHECK_INT(bn_row_v(256, 2, 16, 0, 4), 4);    /* the v_max override */
    CHECK_INT(bn_row_v(64, 2, 16, 1, 2), 2);
    bn_row_geom_t g = bn_row_grid(8192, 256, 8, 0, 16, 8, 132);
    CHECK(g.tx == 32 && g.ty == 8 && g.gx == 1 && g.gy == 64);
    g = bn_row_grid(131072, 256, 8, 0, 16, 8, 132);
    CHECK(g.gx == 1 && g.gy == 1024);
    g = bn_row_grid(131072, 64, 2, 0, 16, 8, 132);
    CHECK(g.gx == 1 && g.gy == 1024);
    g = bn_row_grid(8192, 256, 8, 0, 4, 8, 132);    /* bn_more_splits */
    CHECK(g.gy == 256);
    g = bn_row_grid(32768, 1024, 8, 0, 16, 8, 132);  /* 4 channel blocks: 264 splits for 8 an SM */
    CHECK(g.gx == 4 && g.gy == 256);
    g = bn_row_grid(512, 24, 8, 1, 16, 8, 132);      /* vec16's narrow blocks: 3 lanes x 85 rows */
    CHECK(g.tx == 3 && g.ty == 85 && g.gx == 1 && g.gy == 1);
    int bad = 0, cases = 0;
    for (int nb0 = 1; nb0 <= 8; nb0++)
        for (int64_t nvb = 1; nvb <= 4096; nvb *= 3)
            for (int64_t rows = 1; rows <= 256; rows *= 4)
                for (size_t row = 4; row <= 64; row *= 2)
                    for (size_t st = 4096; st <= 18432; st += 14336) {
                        p = bn_persist_plan(&d, nb0, st, nvb, rows, 256, row, 0, 0);
                        int64_t per_sm = (p.grid + d.sms - 1) / d.sms;
                        cases++;
                        bad += p.grid < 1 || p.grid > (int64_t)nb0 * d.sms || p.grid > nvb ||
                               per_sm * (int64_t)(p.dyn + st + (size_t)d.smem_reserved) > d.smem_sm ||
                               (int64_t)(p.dyn + st) > d.smem_optin ||
                               p.slots > (nvb + p.grid - 1) / p.grid * rows || p.dyn != (size_t)p.slots * 256 * row;
                    }
    CHECK_INT(bad, 0);
    CHECK(cases > 1000);
}

/* wgrad_f32 (with graph_conv): the conv weight gradients' accumulate pass (10 bytes per
 * conv weight at bf16: staged 2, read 2 + 4, written 4) goes, the convs read and write
 * the fp32 gradient instead of writing 2 bytes (+6 each): -0.094 GB for ResNet-50's 23.45M
 * conv weights; without graph_conv nothing moves (the legacy API stages) */
static void test_traffic_wgrad_f32(void) {
    net_t *n = resnet50();
    if (!n) return;
    err_t e = {0};
    net_traffic_t all, wf, legacy;
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, BACKEND_FUSE_ALL, &all, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, BACKEND_FUSE_ALL | BACKEND_FUSE_WGRAD_F32, &wf, &e), 0);
    CHECK_INT(net_traffic(n, 128, 32, 32, DT_BF16, false, BACKEND_FUSE_WGRAD_F32, &legacy, &e), 0);
    double w = all.bytes[NT_WGRAD_ACCUM] / 10.0;   /* the conv weights */
    CHECK_NEAR(w, 23.45e6, 0.01e6, 0);
    CHECK(wf.bytes[NT_WGRAD_ACCUM] == 0.0);
    CHECK_NEAR(wf.conv_epilogue - all.conv_epilogue, 6.0 * w, 0.5, 0);
    CHECK_NEAR(all.total - wf.total + all.conv_epilogue - wf.conv_epilogue, 4.0 * w, 0.5, 0);
    CHECK(legacy.bytes[NT_WGRAD_ACCUM] == all.bytes[NT_WGRAD_ACCUM] && legacy.conv_epilogue == 0.0);
    net_free(n);
}

static void test_fusion_names(void) {
    unsigned m = 0;
    err_t e = {0};
    char buf[BACKEND_FUSION_NAMES_MAX];
    CHECK_INT(backend_fusion_parse("conv_stats, dgrad_accum", &m, &e), 0);
    CHECK_INT(m, BACKEND_FUSE_CONV_STATS | BACKEND_FUSE_DGRAD_ACCUM);
    backend_fusion_format(m, buf, sizeof buf);
    CHECK_STR(buf, "conv_stats,dgrad_accum");
    CHECK_INT(backend_fusion_parse("all", &m, &e), 0);
    CHECK_INT(m, BACKEND_FUSE_ALL);
    backend_fusion_format(m, buf, sizeof buf);
    /* measured faster; the others stay selectable */
    CHECK_STR(buf, "graph_conv,dgrad_accum,bn_remask,bn_wide_final,bn_fold_running,pdl,bn_mask_bits,bn_dual_add");
    CHECK_INT(backend_fusion_parse("all,conv_stats,dgrad_dbn,vec16,dgrad_accum_tune,bn_more_splits,pdl,heur_b,"
                                   "bn_mask_bits,bn_dual_add,wgrad_f32,bn_one_pass,bn_apply_tune,bn_persist", &m, &e), 0);
    CHECK_INT(m, BACKEND_FUSE_EVERY);
    backend_fusion_format(m, buf, sizeof buf);
    CHECK_STR(buf, "graph_conv,conv_stats,dgrad_dbn,dgrad_accum,vec16,bn_remask,bn_wide_final,bn_fold_running,"
                   "dgrad_accum_tune,bn_more_splits,pdl,heur_b,bn_mask_bits,bn_dual_add,wgrad_f32,bn_one_pass,bn_apply_tune,"
                   "bn_persist");
    CHECK_INT(backend_fusion_parse("graph_conv,dgrad_accum,bn_remask,bn_wide_final,bn_fold_running,pdl,"
                                   "bn_mask_bits,bn_dual_add", &m, &e), 0);
    /* bn_remask measured faster (H100, 2026-11-26), bn_wide_final and bn_fold_running (H200),
     * pdl, bn_mask_bits and bn_dual_add (H200, 7a04ce7) */
    CHECK_INT(m, BACKEND_FUSE_ALL);
    CHECK(!(BACKEND_FUSE_ALL & (BACKEND_FUSE_CONV_STATS | BACKEND_FUSE_DGRAD_DBN | BACKEND_FUSE_VEC16 |
                                BACKEND_FUSE_DGRAD_ACCUM_TUNE | BACKEND_FUSE_BN_MORE_SPLITS |
                                BACKEND_FUSE_HEUR_B | BACKEND_FUSE_WGRAD_F32 | BACKEND_FUSE_BN_ONE_PASS |
                                BACKEND_FUSE_BN_APPLY_TUNE | BACKEND_FUSE_BN_PERSIST)));   /* no gain, slower, or not measured */
    CHECK_STR(backend_fusion_name(5), "bn_remask");
    CHECK_STR(backend_fusion_name(6), "bn_wide_final");
    CHECK_STR(backend_fusion_name(7), "bn_fold_running");
    CHECK_STR(backend_fusion_name(8), "dgrad_accum_tune");
    CHECK_STR(backend_fusion_name(9), "bn_more_splits");
    CHECK_STR(backend_fusion_name(10), "pdl");
    CHECK_STR(backend_fusion_name(11), "heur_b");
    CHECK_STR(backend_fusion_name(12), "bn_mask_bits");
    CHECK_STR(backend_fusion_name(13), "bn_dual_add");
    CHECK_STR(backend_fusion_name(14), "wgrad_f32");
    CHECK_STR(backend_fusion_name(15), "bn_one_pass");
    CHECK_STR(backend_fusion_name(16), "bn_apply_tune");
    CHECK_STR(backend_fusion_name(17), "bn_persist");
    CHECK(backend_fusion_name(BACKEND_FUSE_COUNT) == NULL);
    CHECK_INT(backend_fusion_parse("none", &m, &e), 0);
    CHECK_INT(m, 0);
    backend_fusion_format(0, buf, sizeof buf);
    CHECK_STR(buf, "none");
    CHECK_INT(backend_fusion_parse("graph_conv,bogus", &m, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "unknown option 'bogus'");
    /* the names come from the one list (BACKEND_FUSION_NAMES), as they did spelled out */
    CHECK_STR(e.msg, "cuda fusion: unknown option 'bogus'; use graph_conv, conv_stats, dgrad_dbn, dgrad_accum, "
                     "vec16, bn_remask, bn_wide_final, bn_fold_running, dgrad_accum_tune, bn_more_splits, pdl, "
                     "heur_b, bn_mask_bits, bn_dual_add, wgrad_f32, bn_one_pass, bn_apply_tune, bn_persist, all or none");
}

/* ---- the net's calls, on the CPU ---- */

static const backend_ops_t *g_cpu;   /* the CPU backend's own table */
static int g_stats, g_dbn, g_accum;  /* calls of each fused slot */
static bool g_mask;                  /* the composite dbn masks dx (else leaves it unmasked) */

static int c_accum(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w, void *dx) {
    g_accum++;
    return g_cpu->conv2d_bwd_data_accum(be, s, dt, dy, w, dx);
}

static int c_stats(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *w, void *y,
                   float *mean, float *var) {
    g_stats++;
    if (g_cpu->conv2d_fwd(be, s, dt, x, w, y)) return -1;
    return g_cpu->bn_stats(be, (int64_t)s->n * s->p * s->q, s->k, dt, y, mean, var);
}

static int c_dbn(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w, void *dx,
                 const void *bn_x, const void *relu_y, act_kind_t act, const float *mean, const float *var, float eps,
                 float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta) {
    g_dbn++;
    int64_t m = (int64_t)s->n * s->h * s->w;
    if (g_cpu->conv2d_bwd_data(be, s, dt, dy, w, dx)) return -1;
    if (g_mask && relu_y &&
        (act == ACT_RELU6 ? g_cpu->relu6_bwd(be, m * s->c, dt, relu_y, dx, dx)
                          : g_cpu->relu_bwd(be, m * s->c, dt, relu_y, dx, dx)))
        return -1;
    return g_cpu->bn_bwd_reduce(be, m, s->c, dt, bn_x, relu_y, act, dx, mean, var, NULL, NULL, eps, sum_dy,
                                sum_dy_xhat, dgamma, dbeta);
}

/* resnet20 */
static net_t *build_resnet20(err_t *e) { return resnet_build("resnet20", 3, 10, false, e); }

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

enum { B = 4, HW = 16 };

typedef struct result {
    float loss;
    float *grads, *bufs;
    size_t np, nb;
} result_t;

/* One training step of the net build() makes (seed 5) on fixed data with the op table ops
 * (NULL: the CPU's own); then an evaluation forward. */
static result_t run_step(net_t *(*build)(err_t *), const backend_ops_t *ops, dtype_t dt) {
    result_t r = {0};
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 2};
    backend_t *be = cpu_backend_create(&bo, &e);
    CHECK(be != NULL);
    if (!be) return r;
    g_cpu = be->ops;
    if (ops) be->ops = ops;
    net_t *n = build(&e);
    CHECK(n != NULL);
    if (!n || net_bind(n, be, B, HW, HW, dt, &e) || net_init(n, 5, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        test_failures_++;
        net_free(n);
        backend_free(be);
        return r;
    }
    float *img = malloc(sizeof(float) * B * HW * HW * 3);
    rng_t g = rng_make(7, RNG_STREAM_MISC, 0, 0);
    for (int i = 0; i < B * HW * HW * 3; i++) img[i] = rng_uniform(&g) * 4.0f - 2.0f;
    int32_t labels[B] = {1, 7, 3, 3};
    net_loss_out_t out = {0};
    r.np = net_num_params(n);
    r.nb = net_num_buffers(n);
    r.grads = calloc(r.np, sizeof(float));
    r.bufs = calloc(r.nb, sizeof(float));
    if (net_upload_input(n, img, B, &e) || net_zero_grads(n, &e) || net_forward(n, net_input(n), B, true, NULL, &e) ||
        net_loss(n, labels, 0.1f, 1.0f / B, &out, &e) || net_backward(n, NULL, &e) ||
        net_download_grads(n, r.grads, &e) || net_download_buffers(n, r.bufs, &e)) {
        fprintf(stderr, "step: %s\n", e.msg);
        test_failures_++;
    }
    r.loss = (float)out.loss_sum;
    int before = g_stats;
    CHECK_INT(net_forward(n, net_input(n), B, false, NULL, &e), 0);
    CHECK_INT(g_stats, before);   /* evaluation uses the running statistics */
    free(img);
    net_free(n);
    backend_free(be);
    return r;
}

static void check_same(const result_t *a, const result_t *b) {
    CHECK(a->grads && b->grads && a->np == b->np && a->nb == b->nb);
    if (!a->grads || !b->grads) return;
    CHECK(memcmp(&a->loss, &b->loss, sizeof a->loss) == 0);
    CHECK(memcmp(a->grads, b->grads, a->np * sizeof(float)) == 0);
    CHECK(memcmp(a->bufs, b->bufs, a->nb * sizeof(float)) == 0);
    double s = 0;
    for (size_t i = 0; i < a->np; i++) s += a->grads[i] != 0.0f;
    CHECK(s > (double)a->np / 2);   /* a real gradient */
}

static void free_result(result_t *r) {
    free(r->grads);
    free(r->bufs);
}

/* *out = the CPU backend's op table (the composites below start from it); false when
 * no CPU backend could be made. */
static bool cpu_table(backend_ops_t *out) {
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 1};
    backend_t *tmp = cpu_backend_create(&bo, &e);
    CHECK(tmp != NULL);
    if (!tmp) return false;
    *out = *tmp->ops;
    backend_free(tmp);
    return true;
}

/* The net build() makes, trained one step with the CPU's table without fused slots, with
 * its own (the accumulate slot) and with the composites: the same bits; the composites
 * called stats / dbn / accum times, which the byte model's counts repeat. */
static void check_fused_calls(net_t *(*build)(err_t *), dtype_t dt, bool mask, int stats, int dbn, int accum) {
    /* reference: the CPU's table without any fused slot */
    err_t e = {0};
    static backend_ops_t plain, fused;
    if (!cpu_table(&plain)) return;
    CHECK(plain.conv2d_bwd_data_accum != NULL);   /* the cpu backend has it */
    fused = plain;
    plain.conv2d_bwd_data_accum = NULL;
    fused.conv2d_bwd_data_accum = c_accum;
    fused.conv2d_fwd_bn_stats = c_stats;
    fused.conv2d_bwd_data_bn = c_dbn;
    g_mask = mask;
    g_stats = g_dbn = g_accum = 0;
    result_t ref = run_step(build, &plain, dt);
    CHECK(g_stats == 0 && g_dbn == 0 && g_accum == 0);
    result_t own = run_step(build, NULL, dt);   /* the CPU's own table: its accumulate slot */
    check_same(&ref, &own);
    result_t fu = run_step(build, &fused, dt);
    check_same(&ref, &fu);
    CHECK_INT(g_stats, stats);
    CHECK_INT(g_dbn, dbn);
    CHECK_INT(g_accum, accum);
    /* the byte model names the same nodes */
    net_t *n = build(&e);
    net_traffic_t t;
    CHECK_INT(net_traffic(n, B, HW, HW, dt, false, FUSE_BYTES, &t, &e), 0);
    CHECK_INT(t.fused_stats, stats);
    CHECK_INT(t.fused_dbn, dbn);
    CHECK_INT(t.fused_accum, accum);
    net_free(n);
    free_result(&ref);
    free_result(&own);
    free_result(&fu);
}

/* ---- the net's promise behind bn_remask ---- */

static int g_remask_calls, g_remask_same;   /* BN backward calls given beta; of them, y as recomputed */

/* y as bn_apply(x, mean, var, gamma, beta, eps, no z, act) writes it, into a new buffer
 * (NULL on failure); counts whether it equals the y the net passed, byte for byte. */
static void *recompute_y(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                         const float *mean, const float *var, const float *gamma, const float *beta, float eps) {
    size_t bytes = (size_t)m * c * 4;   /* the cpu backend stores every dtype as rounded floats */
    void *r = malloc(bytes);
    if (!r || g_cpu->bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, NULL, act, r)) {
        free(r);
        return NULL;
    }
    g_remask_calls++;
    g_remask_same += memcmp(r, y, bytes) == 0;
    return r;
}

/* The CPU's BN backward ops taking the mask from the recomputed y whenever the net says
 * they may (beta given), as the CUDA backend's bn_remask does from x. */
static int c_bred(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                  const void *dy, const float *mean, const float *var, const float *gamma, const float *beta,
                  float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta) {
    void *r = beta ? recompute_y(be, m, c, dt, x, y, act, mean, var, gamma, beta, eps) : NULL;
    if (beta && !r) return -1;
    int rc = g_cpu->bn_bwd_reduce(be, m, c, dt, x, r ? r : y, act, dy, mean, var, NULL, NULL, eps, sum_dy,
                                  sum_dy_xhat, dgamma, dbeta);
    free(r);
    return rc;
}
static int c_bapp(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                  const void *dy, const float *mean, const float *var, const float *gamma, const float *beta,
                  float eps, const float *sum_dy, const float *sum_dy_xhat, int64_t count, void *dx, void *dz) {
    CHECK(!(beta && dz));   /* never for a BN with a residual */
    void *r = beta ? recompute_y(be, m, c, dt, x, y, act, mean, var, gamma, beta, eps) : NULL;
    if (beta && !r) return -1;
    int rc = g_cpu->bn_bwd_apply(be, m, c, dt, x, r ? r : y, act, dy, mean, var, gamma, NULL, eps, sum_dy,
                                 sum_dy_xhat, count, dx, dz);
    free(r);
    return rc;
}

/* The net passes beta to the BN backward ops exactly for the BNs whose y it may take from
 * x (relu / relu6, no residual: the byte model's remasked nodes, a reduce and an apply
 * each), and there y is what bn_apply makes of x, mean, var, gamma, beta: recomputing it
 * gives y byte for byte, and the step the same bits. */
static void check_remask_promise(net_t *(*build)(err_t *), dtype_t dt, int remasked) {
    err_t e = {0};
    static backend_ops_t remask;
    if (!cpu_table(&remask)) return;
    remask.bn_bwd_reduce = c_bred;
    remask.bn_bwd_apply = c_bapp;
    g_remask_calls = g_remask_same = 0;
    result_t ref = run_step(build, NULL, dt);
    CHECK_INT(g_remask_calls, 0);
    result_t rm = run_step(build, &remask, dt);
    check_same(&ref, &rm);
    CHECK_INT(g_remask_calls, 2 * remasked);
    CHECK_INT(g_remask_same, 2 * remasked);
    net_t *n = build(&e);
    net_traffic_t t;
    CHECK_INT(net_traffic(n, B, HW, HW, dt, false, BACKEND_FUSE_BN_REMASK, &t, &e), 0);
    CHECK_INT(t.remasked, remasked);
    net_free(n);
    free_result(&ref);
    free_result(&rm);
}

/* ---- the net's use of the mask-bit ops (bn_mask_bits) ---- */

static int g_mb_apply, g_mb_refused, g_mb_bwd, g_mb_same;   /* calls; refused; backward calls; bits == y's mask */
static bool g_mb_refuse;                                     /* the composite apply answers 1 (cannot) */


static int c_apply_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                        const float *var, const float *gamma, const float *beta, float eps, const void *z,
                        act_kind_t act, void *y, uint8_t *mask) {
    g_mb_apply++;
    CHECK(act != ACT_NONE && z != NULL);   /* the net asks for add-relu BNs only */
    if (g_mb_refuse) {
        g_mb_refused++;
        return 1;
    }
    if (g_cpu->bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, z, act, y)) return -1;
    mask_from_y(mask, m * c, act, y);
    return 0;
}

/* A y made of the bits (1 where kept, 0 where masked; both backward ops of the cpu
 * backend use y for the mask only), after checking the bits against the net's y. */
static float *y_of_bits(int64_t m, int c, const void *y, act_kind_t act, const uint8_t *mask) {
    float *r = malloc((size_t)(m * c) * sizeof(float));
    if (!r) return NULL;
    bool same = true;
    for (int64_t i = 0; i < m * c; i++) {
        bool bit = mask_bit(mask, i);
        r[i] = bit ? 1.0f : 0.0f;
        same = same && bit == mask_keeps(act, ((const float *)y)[i]);
    }
    g_mb_bwd++;
    g_mb_same += same;
    return r;
}

static int c_bred_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const float *gamma, float eps,
                       float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta, const uint8_t *mask) {
    float *r = y_of_bits(m, c, y, act, mask);
    int rc = r ? g_cpu->bn_bwd_reduce(be, m, c, dt, x, r, act, dy, mean, var, gamma, NULL, eps, sum_dy, sum_dy_xhat,
                                      dgamma, dbeta)
               : -1;
    free(r);
    return rc;
}

static int c_bapp_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const float *gamma, float eps,
                       const float *sum_dy, const float *sum_dy_xhat, int64_t count, void *dx, void *dz,
                       const uint8_t *mask) {
    float *r = y_of_bits(m, c, y, act, mask);
    int rc = r ? g_cpu->bn_bwd_apply(be, m, c, dt, x, r, act, dy, mean, var, gamma, NULL, eps, sum_dy, sum_dy_xhat,
                                     count, dx, dz)
               : -1;
    free(r);
    return rc;
}

/* The mask-bit composites into table o. */
static void install_mask_ops(backend_ops_t *o) {
    o->bn_apply_mask = c_apply_mask;
    o->bn_bwd_reduce_mask = c_bred_mask;
    o->bn_bwd_apply_mask = c_bapp_mask;
}

/* The net keeps the mask of exactly its add-relu BNs (add_relu of them: the byte model's
 * mask_bits) as bits in the training forward, never in the evaluation forward, reads
 * them in both backward passes, and the step gives the same bits as reading y; where the
 * backend answers 1 (cannot), the net reads y and the same bits come out again. */
static void check_mask_bits(net_t *(*build)(err_t *), dtype_t dt, int add_relu) {
    err_t e = {0};
    static backend_ops_t mb;
    if (!cpu_table(&mb)) return;
    CHECK(mb.bn_apply_mask == NULL);   /* a cuda option: the cpu backend reads y */
    install_mask_ops(&mb);
    result_t ref = run_step(build, NULL, dt);
    g_mb_apply = g_mb_refused = g_mb_bwd = g_mb_same = 0;
    g_mb_refuse = false;
    result_t bits = run_step(build, &mb, dt);
    check_same(&ref, &bits);
    CHECK_INT(g_mb_apply, add_relu);   /* the training forward's; none in the evaluation */
    CHECK_INT(g_mb_bwd, 2 * add_relu);
    CHECK_INT(g_mb_same, 2 * add_relu);
    g_mb_apply = g_mb_refused = g_mb_bwd = g_mb_same = 0;
    g_mb_refuse = true;
    result_t refused = run_step(build, &mb, dt);
    check_same(&ref, &refused);
    CHECK_INT(g_mb_refused, add_relu);
    CHECK_INT(g_mb_bwd, 0);
    g_mb_refuse = false;
    net_t *n = build(&e);
    net_traffic_t t;
    CHECK_INT(net_traffic(n, B, HW, HW, dt, false, BACKEND_FUSE_BN_MASK_BITS, &t, &e), 0);
    CHECK_INT(t.mask_bits, add_relu);
    net_free(n);
    free_result(&ref);
    free_result(&bits);
    free_result(&refused);
}

/* ---- the net's use of the dual ops (bn_dual_add) ---- */

static int g_du_apply, g_du_refused, g_du_bwd, g_du_bits;   /* calls; refused; backward calls; with bits */
static bool g_du_refuse;

/* The CPU's two bn_apply calls: z into a buffer of its own, then y with it (and the
 * bits as c_apply_mask writes them). */
static int c_apply_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean, const float *var,
                        const float *gamma, const float *beta, const void *x2, const float *mean2, const float *var2,
                        const float *gamma2, const float *beta2, float eps, act_kind_t act, void *y, uint8_t *mask) {
    g_du_apply++;
    if (g_du_refuse) {
        g_du_refused++;
        return 1;
    }
    float *z = malloc((size_t)(m * c) * sizeof(float));
    int rc = !z || g_cpu->bn_apply(be, m, c, dt, x2, mean2, var2, gamma2, beta2, eps, NULL, ACT_NONE, z) ||
             g_cpu->bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, z, act, y);
    free(z);
    if (rc) return -1;
    if (mask) {
        g_du_bits++;
        mask_from_y(mask, m * c, act, y);
    }
    return 0;
}

/* dz as the add-relu BN's bn_bwd_apply writes it: dy masked at y (or by the bits) */
static float *c_dz(int64_t m, int c, const void *y, act_kind_t act, const void *dy, const uint8_t *mask) {
    float *g = malloc((size_t)(m * c) * sizeof(float));
    if (!g) return NULL;
    for (int64_t i = 0; i < m * c; i++) {
        bool k = mask ? mask_bit(mask, i) : mask_keeps(act, ((const float *)y)[i]);
        g[i] = k ? ((const float *)dy)[i] : 0.0f;
    }
    return g;
}

static int c_bred_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const void *x2, const float *mean2,
                       const float *var2, float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta,
                       float *sum_dy2, float *sum_dy_xhat2, float *dgamma2, float *dbeta2, const uint8_t *mask) {
    g_du_bwd++;
    float *g = c_dz(m, c, y, act, dy, mask);
    int rc = !g || g_cpu->bn_bwd_reduce(be, m, c, dt, x, y, act, dy, mean, var, NULL, NULL, eps, sum_dy, sum_dy_xhat,
                                        dgamma, dbeta) ||
             g_cpu->bn_bwd_reduce(be, m, c, dt, x2, NULL, ACT_NONE, g, mean2, var2, NULL, NULL, eps, sum_dy2,
                                  sum_dy_xhat2, dgamma2, dbeta2);
    free(g);
    return rc ? -1 : 0;
}

static int c_bapp_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const float *gamma, const void *x2,
                       const float *mean2, const float *var2, const float *gamma2, float eps, const float *sum_dy,
                       const float *sum_dy_xhat, int64_t count, const float *sum_dy2, const float *sum_dy_xhat2,
                       int64_t count2, void *dx, void *dx2, const uint8_t *mask) {
    g_du_bwd++;
    float *g = malloc((size_t)(m * c) * sizeof(float));
    int rc = !g || g_cpu->bn_bwd_apply(be, m, c, dt, x, y, act, dy, mean, var, gamma, NULL, eps, sum_dy, sum_dy_xhat,
                                       count, dx, g) ||
             g_cpu->bn_bwd_apply(be, m, c, dt, x2, NULL, ACT_NONE, g, mean2, var2, gamma2, NULL, eps, sum_dy2,
                                 sum_dy_xhat2, count2, dx2, NULL);
    if (!rc && mask) {   /* the bits give the mask y gave */
        float *h = c_dz(m, c, y, act, dy, mask), *k = c_dz(m, c, y, act, dy, NULL);
        CHECK(h && k && !memcmp(h, k, (size_t)(m * c) * sizeof(float)));
        free(h);
        free(k);
    }
    free(g);
    return rc ? -1 : 0;
}

/* The net applies each projection shortcut's BN inside its add-relu BN (dual of them),
 * in the training forward only, with one reduce and one apply call backward, and the step
 * gives the same bits as the two BNs' own ops; the shortcut's own backward is skipped
 * (no gradient reaches its output). Refused (1), the net runs the two BNs as before:
 * the same bits again. With the mask-bit composites too, the dual ops get the bits. */
static void check_dual(net_t *(*build)(err_t *), dtype_t dt, int dual) {
    err_t e = {0};
    static backend_ops_t du, dumb;
    if (!cpu_table(&du)) return;
    CHECK(du.bn_apply_dual == NULL);   /* a cuda option */
    du.bn_apply_dual = c_apply_dual;
    du.bn_bwd_reduce_dual = c_bred_dual;
    du.bn_bwd_apply_dual = c_bapp_dual;
    dumb = du;
    install_mask_ops(&dumb);
    result_t ref = run_step(build, NULL, dt);
    g_du_apply = g_du_refused = g_du_bwd = g_du_bits = 0;
    g_du_refuse = false;
    result_t r1 = run_step(build, &du, dt);
    check_same(&ref, &r1);
    CHECK_INT(g_du_apply, dual);   /* the training forward's; not the evaluation's */
    CHECK_INT(g_du_bwd, 2 * dual);
    CHECK_INT(g_du_bits, 0);
    g_du_apply = g_du_refused = g_du_bwd = 0;
    g_du_refuse = true;
    result_t r2 = run_step(build, &du, dt);
    check_same(&ref, &r2);
    CHECK_INT(g_du_refused, dual);
    CHECK_INT(g_du_bwd, 0);
    g_du_refuse = false;
    g_du_apply = g_du_bwd = g_du_bits = 0;
    g_mb_apply = g_mb_bwd = 0;
    g_mb_refuse = false;
    result_t r3 = run_step(build, &dumb, dt);
    check_same(&ref, &r3);
    CHECK_INT(g_du_bits, dual);    /* the dual nodes' bits come from bn_apply_dual */
    CHECK_INT(g_du_bwd, 2 * dual);
    net_t *n = build(&e);
    net_traffic_t t;
    CHECK_INT(net_traffic(n, B, HW, HW, dt, false, BACKEND_FUSE_BN_DUAL_ADD, &t, &e), 0);
    CHECK_INT(t.dual, dual);
    net_free(n);
    free_result(&ref);
    free_result(&r1);
    free_result(&r2);
    free_result(&r3);
}

/* ---- the net's use of the one-op BN passes (bn_persist) ---- */

static int g_pf_fwd, g_pf_bwd, g_pf_refused, g_pf_masked;   /* calls each way; refused; given mask bits */
static bool g_pf_refuse;

/* The CPU's separate ops in the order the net calls them: bn_stats, the running update,
 * bn_apply (with the bits as c_apply_mask writes them when mask is given). */
static int c_fwd_fused(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean, float *var,
                       int64_t count, float momentum, float *run_mean, float *run_var, const float *gamma,
                       const float *beta, float eps, const void *z, act_kind_t act, void *y, uint8_t *mask) {
    g_pf_fwd++;
    CHECK(run_mean != NULL && run_var != NULL && count == m);
    if (g_pf_refuse) {
        g_pf_refused++;
        return 1;
    }
    if (g_cpu->bn_stats(be, m, c, dt, x, mean, var) ||
        g_cpu->bn_update_running(be, c, mean, var, count, momentum, run_mean, run_var) ||
        g_cpu->bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, z, act, y))
        return -1;
    if (mask) {
        g_pf_masked++;
        mask_from_y(mask, m * c, act, y);
    }
    return 0;
}

/* bn_bwd_reduce then bn_bwd_apply (with the mask bits: from a y made of them). */
static int c_bwd_fused(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const float *gamma, const float *beta,
                       float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta, int64_t count,
                       void *dx, void *dz, const uint8_t *mask) {
    g_pf_bwd++;
    CHECK(dx != NULL);
    if (g_pf_refuse) {
        g_pf_refused++;
        return 1;
    }
    float *r = mask ? y_of_bits(m, c, y, act, mask) : NULL;
    const void *yy = mask ? (const void *)r : y;
    const float *bb = mask ? NULL : beta;
    int rc = (mask && !r) ||
             g_cpu->bn_bwd_reduce(be, m, c, dt, x, yy, act, dy, mean, var, gamma, bb, eps, sum_dy, sum_dy_xhat,
                                  dgamma, dbeta) ||
             g_cpu->bn_bwd_apply(be, m, c, dt, x, yy, act, dy, mean, var, gamma, bb, eps, sum_dy, sum_dy_xhat,
                                 count, dx, dz)
                 ? -1
                 : 0;
    free(r);
    return rc;
}

/* The net runs each BN's passes through the one-op slots where the backend has them
 * (bns of them each way in the training forward and backward, none in evaluation) and the
 * step gives the same bits as the separate ops; refused (1), the separate ops, the same
 * bits again. With the mask-bit ops the add-relu BNs' bits come from bn_fwd_fused
 * (add_relu of them); with the dual ops the dual pairs (2 * dual BNs) keep theirs; with
 * the fused statistics of the convolution (conv2d_fwd_bn_stats) every BN that follows a
 * conv runs its separate ops forward. */
static void check_persist(net_t *(*build)(err_t *), dtype_t dt, int bns, int add_relu, int dual) {
    static backend_ops_t pf, pfm, pfd, pfs;
    if (!cpu_table(&pf)) return;
    CHECK(pf.bn_fwd_fused == NULL && pf.bn_bwd_fused == NULL);   /* a cuda option */
    pf.bn_fwd_fused = c_fwd_fused;
    pf.bn_bwd_fused = c_bwd_fused;
    pfm = pf;
    install_mask_ops(&pfm);
    pfd = pf;
    pfd.bn_apply_dual = c_apply_dual;
    pfd.bn_bwd_reduce_dual = c_bred_dual;
    pfd.bn_bwd_apply_dual = c_bapp_dual;
    pfs = pf;
    pfs.conv2d_fwd_bn_stats = c_stats;
    result_t ref = run_step(build, NULL, dt);
    g_pf_fwd = g_pf_bwd = g_pf_refused = g_pf_masked = 0;
    g_pf_refuse = false;
    result_t r1 = run_step(build, &pf, dt);
    check_same(&ref, &r1);
    CHECK_INT(g_pf_fwd, bns);   /* the training forward's; not the evaluation's */
    CHECK_INT(g_pf_bwd, bns);
    CHECK_INT(g_pf_masked, 0);
    g_pf_fwd = g_pf_bwd = 0;
    g_pf_refuse = true;
    result_t r2 = run_step(build, &pf, dt);
    check_same(&ref, &r2);
    CHECK_INT(g_pf_refused, 2 * bns);
    g_pf_refuse = false;
    g_pf_fwd = g_pf_bwd = g_pf_masked = 0;
    g_mb_apply = g_mb_bwd = g_mb_same = 0;
    g_mb_refuse = false;
    result_t r3 = run_step(build, &pfm, dt);
    check_same(&ref, &r3);
    CHECK_INT(g_pf_fwd, bns);
    CHECK_INT(g_pf_masked, add_relu);
    CHECK_INT(g_mb_apply, 0);                 /* the bits from bn_fwd_fused */
    CHECK_INT(g_mb_bwd, add_relu);            /* c_bwd_fused read them once each */
    CHECK_INT(g_mb_same, add_relu);
    g_pf_fwd = g_pf_bwd = 0;
    g_du_apply = g_du_bwd = 0;
    g_du_refuse = false;
    result_t r4 = run_step(build, &pfd, dt);
    check_same(&ref, &r4);
    CHECK_INT(g_du_apply, dual);
    CHECK_INT(g_pf_fwd, bns - 2 * dual);
    CHECK_INT(g_pf_bwd, bns - 2 * dual);
    g_pf_fwd = g_pf_bwd = 0;
    g_stats = 0;
    g_mask = false;
    result_t r5 = run_step(build, &pfs, dt);
    check_same(&ref, &r5);
    CHECK_INT(g_pf_fwd, bns - g_stats);
    CHECK(g_stats > 0);
    CHECK_INT(g_pf_bwd, bns);
    free_result(&ref);
    free_result(&r1);
    free_result(&r2);
    free_result(&r3);
    free_result(&r4);
    free_result(&r5);
}

/* resnet20: 21 BNs, 9 add-relu, 2 projection shortcuts; the mixed net: 5 BNs, 1 add-relu */
static void test_persist(void) {
    check_persist(build_resnet20, DT_F32, 21, 9, 2);
    check_persist(build_resnet20, DT_BF16, 21, 9, 2);
    check_persist(build_mixed, DT_F32, 5, 1, 0);
    check_persist(build_mixed, DT_BF16, 5, 1, 0);
}

/* resnet20: the first blocks of stages 2 and 3 have a projection shortcut (1x1 conv +
 * BN); the mixed net's shortcut is bn3, which c4 reads too: none */
static void test_dual(void) {
    check_dual(build_resnet20, DT_F32, 2);
    check_dual(build_resnet20, DT_BF16, 2);
    check_dual(build_mixed, DT_F32, 0);
}

/* resnet20: bn2 of each of the 9 blocks adds the shortcut; the mixed net: bn5 */
static void test_mask_bits(void) {
    check_mask_bits(build_resnet20, DT_F32, 9);
    check_mask_bits(build_resnet20, DT_BF16, 9);
    check_mask_bits(build_mixed, DT_F32, 1);
    check_mask_bits(build_mixed, DT_BF16, 1);
}

/* resnet20: the stem's bn1 and bn1 of the 9 blocks (the bn2s add the shortcut); the mixed
 * net: bn1 (relu), bn2 (relu6), bn3 (relu) */
static void test_remask_promise(void) {
    check_remask_promise(build_resnet20, DT_F32, 10);
    check_remask_promise(build_resnet20, DT_BF16, 10);
    check_remask_promise(build_mixed, DT_F32, 3);
    check_remask_promise(build_mixed, DT_BF16, 3);
}

/* resnet20: every BN follows its conv (21), bn1 -> conv2 of each of the 9 blocks, each
 * block input summed into by conv1 (or downsample.0) */
static void test_fused_calls_fp32(void) { check_fused_calls(build_resnet20, DT_F32, false, 21, 9, 9); }
static void test_fused_calls_bf16_masked(void) { check_fused_calls(build_resnet20, DT_BF16, true, 21, 9, 9); }

/* the eligibility rules on the issue-24 node kinds, node by node, then the same bits */
static void test_fused_rules_new_kinds(void) {
    err_t e = {0};
    net_t *n = build_mixed(&e);
    CHECK(n != NULL);
    if (!n) {
        fprintf(stderr, "build: %s\n", e.msg);
        return;
    }
    /* nodes: c1 0, bn1 1, c2 2, bn2 3, c3 4, bn3 5, c4 6, bn4 7, c5 8, bn5 9 */
    static const int stats_bn[5] = {-1, 3, 5, -1, 9}, dbn_bn[5] = {-1, 1, -1, -1, 7};
    for (int k = 0; k < 5; k++) {
        CHECK_INT(net_fused_stats_bn(n, 2 * k), stats_bn[k]);
        CHECK_INT(net_fused_dbn_bn(n, 2 * k), dbn_bn[k]);
    }
    CHECK_INT(net_fused_stats_bn(n, 1), -1);   /* not a conv */
    CHECK_INT(net_consumers(n, 5), 2);         /* bn3: c4 and bn5's shortcut */
    net_free(n);
    check_fused_calls(build_mixed, DT_F32, false, 3, 2, 1);
    check_fused_calls(build_mixed, DT_BF16, true, 3, 2, 1);
}

int main(void) {
    TEST_RUN(test_traffic_matches_issue_table);
    TEST_RUN(test_traffic_fusions);
    TEST_RUN(test_traffic_bn_remask);
    TEST_RUN(test_traffic_bn_remask_kinds);
    TEST_RUN(test_traffic_bn_mask_bits);
    TEST_RUN(test_traffic_bn_dual_add);
    TEST_RUN(test_traffic_wgrad_f32);
    TEST_RUN(test_traffic_bn_persist);
    TEST_RUN(test_persist_plan);
    TEST_RUN(test_fusion_names);
    TEST_RUN(test_fused_calls_fp32);
    TEST_RUN(test_fused_calls_bf16_masked);
    TEST_RUN(test_fused_rules_new_kinds);
    TEST_RUN(test_remask_promise);
    TEST_RUN(test_mask_bits);
    TEST_RUN(test_dual);
    TEST_RUN(test_persist);
    return test_main_end();
}
