/* test_net_traffic.c: the byte model of issue 25's fusions (net_fusion.h), the options'
 * names, and bn_persist's launch arithmetic, none of which needs a GPU (split from
 * test_net_fusion.c, which keeps the net's use of the fused ops).
 *
 * The byte model (net_fusion.h): ResNet-50 with the CIFAR stem, batch 128, bf16, SGD
 * reproduces the issue's table of non-convolution traffic from the planned shapes (BN
 * forward 3.10 GB, BN backward 6.36, residual adds 1.41, weight-gradient accumulate
 * 0.24, SGD 0.47, weight cast 0.14, zeroing 0.09), and each fusion removes what its
 * eligible nodes account for (the per-node sums are recomputed here from the shapes);
 * bn_remask takes the y reads out of both BN backward passes of the 33 relu BNs
 * without a residual (BN backward 6.36 -> 5.78 GB), and only the apply pass's where
 * dgrad_dbn already moved the reduce pass into the conv.
 * bn_mask_bits: -0.84 GB (the 16 add-relu BNs' y reads become bit reads); bn_dual_add:
 * -0.63 GB (4 projection shortcuts of ResNet-50); bn_persist: what its kernels keep on
 * chip by the launch plan (bn_persist_plan.h), whose arithmetic is checked by hand and
 * over a grid of inputs. backend_fusion_parse/format round-trip the names.
 */

#include <stdio.h>

#include "model/cuda/bn_persist_plan.h"
#include "model/net.h"
#include "model/net_fusion.h"
#include "model/arch/resnet.h"
#include "tests/model/fusion_nets.h"
#include "tests/test.h"

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

/* The mixed net of issue 24's kinds (fusion_nets.h's build_mixed): bn1 relu, bn2 relu6
 * and bn3 relu are remasked; bn4 (no activation) and bn5 (add-relu, its mask needs z)
 * are not. */
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
    return test_main_end();
}
