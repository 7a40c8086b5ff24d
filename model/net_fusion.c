/* net_fusion.c: which nodes the fused convolution ops apply to, and the byte model of
 * the non-convolution kernels of a training step (contract in net_fusion.h).
 */
#include "model/net_fusion.h"

#include <stdlib.h>

#include "model/cuda/bn_persist_plan.h"
#include "model/net_impl.h"

const char *const net_traffic_names[NT_COUNT] = {"bn_fwd", "bn_bwd", "residual_add", "wgrad_accum",
                                                 "optim", "weight_cast", "zero_grads", "unscale"};

int net_consumers(const net_t *n, int a) {
    int c = 0;
    for (int j = 0; j < n->n_nodes; j++)
        for (int k = 0; k < 2; k++)
            if (n->nodes[j].in[k] == a) c++;
    return c;
}

/* A dense convolution (groups 0 or 1): the graph API's fused kinds build dense ones only. */
static bool dense_conv(const node_t *d) { return d->kind == NODE_CONV && d->groups <= 1; }

int net_fused_stats_bn(const net_t *n, int i) {
    if (i < 0 || i + 1 >= n->n_nodes || !dense_conv(&n->nodes[i]) || n->nodes[i].has_bias) return -1;
    const node_t *b = &n->nodes[i + 1];
    return net_is_bn(b->kind) && b->in[0] == i ? i + 1 : -1;
}

int net_fused_dbn_bn(const net_t *n, int i) {
    if (i < 1 || i >= n->n_nodes || !dense_conv(&n->nodes[i])) return -1;
    int a = n->nodes[i].in[0];
    if (a != i - 1 || !net_is_bn(n->nodes[a].kind) || net_bn_act(n->nodes[a].kind) == ACT_RELU6 ||
        net_consumers(n, a) != 1)
        return -1;
    return a;
}

int net_dual_bn(const net_t *n, int i) {
    if (i < 0 || i >= n->n_nodes || n->nodes[i].kind != NODE_BN_ADD_RELU) return -1;
    int z = n->nodes[i].in[1];
    if (z < 0 || n->nodes[z].kind != NODE_BN || net_consumers(n, z) != 1) return -1;
    return z;
}

/* The share of a BN's rows (m x c, dt) bn_persist's kernel keeps on chip, by the launch
 * arithmetic the kernels use (model/cuda/bn_persist_plan.h: the row kernels' geometry for
 * aligned tensors under the fusion options, the cooperative grid, the rows kept) on an
 * H100 / H200, for the half kernels of the sm_90 build at 8 channels a thread (ptxas: 4
 * KB of static shared memory; forward 70 to 80 registers, 3 blocks an SM; backward 90 to
 * 128, 2); 0 where the backend refuses (bn_one_pass' layers, more than 1024 splits, the
 * forward's mask bits where c is not a multiple of 8). */
static double bn_persist_kept(int64_t m, int c, dtype_t dt, unsigned fusion, bool bwd, bool mask) {
    const bn_persist_dev_t dev = BN_PERSIST_DEV_H100;
    size_t esz = dt == DT_F32 ? 4 : 2;
    bool vec16 = fusion & BACKEND_FUSE_VEC16;
    int v = bn_row_v(c, esz, 16, vec16, 0);
    if (mask && c % 8 != 0) return 0.0;
    bn_row_geom_t g = bn_row_grid(m, c, v, vec16, (fusion & BACKEND_FUSE_BN_MORE_SPLITS) ? 4 : 16, 8, dev.sms);
    if ((fusion & BACKEND_FUSE_BN_ONE_PASS) && g.gy <= 64) return 0.0;
    int64_t nvb = (int64_t)g.gx * g.gy, rows_vb = (m + (int64_t)g.ty * g.gy - 1) / ((int64_t)g.ty * g.gy);
    int nt = g.tx * g.ty;
    bn_persist_plan_t p = bn_persist_plan(&dev, bwd ? 2 : 3, 4096, nvb, rows_vb, nt, (size_t)(bwd ? 2 : 1) * v * esz,
                                          0, 0);
    double all = (double)nvb * (double)rows_vb, kept = (double)bn_persist_kept_rows(&p, nvb, rows_vb);
    return all > 0.0 ? kept / all : 0.0;
}

int net_traffic(const net_t *n, int batch, int in_h, int in_w, dtype_t dt, bool adamw, unsigned fusion,
                net_traffic_t *t, err_t *e) {
    int nn = n->n_nodes;
    *t = (net_traffic_t){0};
    int *h = calloc((size_t)nn + 1, sizeof(int)), *w = calloc((size_t)nn + 1, sizeof(int));
    int *c = calloc((size_t)nn + 1, sizeof(int));
    if (!h || !w || !c) {
        free(h); free(w); free(c);
        return err_set(e, ERR_RUNTIME, "net_traffic: out of memory");
    }
    if (net_plan_shapes(n, in_h, in_w, h, w, c, e) < 0) {
        free(h); free(w); free(c);
        return -1;
    }
    double a = dt == DT_F32 ? 4.0 : 2.0;
    bool stats = fusion & BACKEND_FUSE_CONV_STATS, dbn = fusion & BACKEND_FUSE_DGRAD_DBN;
    bool accum = fusion & BACKEND_FUSE_DGRAD_ACCUM, remask = fusion & BACKEND_FUSE_BN_REMASK;
    bool bits = fusion & BACKEND_FUSE_BN_MASK_BITS, dual = fusion & BACKEND_FUSE_BN_DUAL_ADD;
    bool persist = fusion & BACKEND_FUSE_BN_PERSIST;
    /* a node's input gradient is summed (not written) by every consumer after the first
     * to run backward, i.e. all but the one latest in forward order */
    int *seen = calloc((size_t)nn + 1, sizeof(int)), *pair = calloc((size_t)nn + 1, sizeof(int));
    if (!seen || !pair) {
        free(seen); free(pair);
        free(h); free(w); free(c);
        return err_set(e, ERR_RUNTIME, "net_traffic: out of memory");
    }
    /* bn_dual_add's pairs (the add-relu BN and its shortcut's): bn_persist leaves them */
    for (int i = 0; i < nn && dual; i++) {
        int z = net_dual_bn(n, i);
        if (z >= 0) pair[i] = pair[z] = 1;
    }
    double conv_w = 0, conv_w_dense = 0;
    for (int i = nn - 1; i >= 0; i--) {
        const node_t *d = &n->nodes[i];
        double E = (double)batch * h[i] * w[i] * c[i];
        if (d->kind == NODE_CONV) conv_w += (double)d->w_numel;
        if (dense_conv(d)) conv_w_dense += (double)d->w_numel;
        if (net_is_bn(d->kind)) {
            bool relu = net_bn_act(d->kind) != ACT_NONE, add = d->kind == NODE_BN_ADD_RELU;
            /* forward: statistics (read x), apply (read x [+ z], write y) */
            bool fs = stats && d->in[0] >= 0 && net_fused_stats_bn(n, d->in[0]) == i;
            /* bn_mask_bits: a BN + add + ReLU writes its mask (a bit an element) with y,
             * and its backward passes read the bits instead of y */
            bool mb = bits && add;
            t->fused_stats += fs;
            t->mask_bits += mb;
            t->bytes[NT_BN_FWD] += a * E * ((fs ? 0 : 1) + 2 + (add ? 1 : 0)) + (mb ? E / 8.0 : 0.0);
            /* backward: reduce (x, dy [, y]), apply (x, dy [, y], write dx [, dz]); with
             * bn_remask the BN kernels of a relu / relu6 BN without a residual recompute
             * the mask from x and read no y (a fused dgrad_dbn conv still reads it) */
            double ymask = mb ? E / 8.0 : a * E;   /* what a pass reads for the mask */
            double reduce = a * E * 2 + (relu ? ymask : 0.0);
            bool fd = dbn && i + 1 < nn && net_fused_dbn_bn(n, i + 1) == i;
            bool rm = remask && relu && !add;
            t->fused_dbn += fd;
            t->remasked += rm;
            if (fd) t->conv_epilogue += a * E * (1 + (relu ? 1 : 0));   /* the conv reads x [and y], not dy again */
            t->bytes[NT_BN_BWD] += (fd ? 0 : reduce - (rm ? a * E : 0)) +
                                   a * E * (3 + (add ? 1 : 0)) + (relu && !rm ? ymask : 0.0);
            /* bn_persist: the rows its kernels keep on chip are not read again: the
             * forward's x (its statistics pass reads it, the apply takes what was kept),
             * the backward's x, dy and mask source; not on bn_dual_add's pairs, and not
             * the passes another fusion took (conv_stats, dgrad_dbn) */
            if (persist && !pair[i]) {
                double ff = fs ? 0.0 : bn_persist_kept(batch * (int64_t)h[i] * w[i], c[i], dt, fusion, false, mb);
                double fb = fd ? 0.0 : bn_persist_kept(batch * (int64_t)h[i] * w[i], c[i], dt, fusion, true, false);
                t->persisted_fwd += ff > 0.0;
                t->persisted_bwd += fb > 0.0;
                t->bytes[NT_BN_FWD] -= ff * a * E;
                t->bytes[NT_BN_BWD] -= fb * (a * E * 2 + (relu && !rm ? ymask : 0.0));
            }
            /* bn_dual_add: the shortcut BN z applied inside this add-relu BN: z is not
             * written and read (forward), dz not written and read by z's two passes */
            if (dual && net_dual_bn(n, i) >= 0) {
                t->dual++;
                t->bytes[NT_BN_FWD] -= 2.0 * a * E;
                t->bytes[NT_BN_BWD] -= 3.0 * a * E;
            }
        }
        for (int k = 0; k < 2; k++) {
            int in = d->in[k];
            if (in < 0) continue;
            if (seen[in]++ == 0) continue;   /* the first to write it */
            double Ein = (double)batch * h[in] * w[in] * c[in];
            if (accum && d->kind == NODE_CONV && k == 0) {   /* the conv adds into the slot */
                t->fused_accum++;
                t->conv_epilogue += a * Ein;
            } else {
                t->bytes[NT_RESIDUAL_ADD] += 3.0 * a * Ein;   /* slot + scratch -> slot */
            }
        }
    }
    double p = (double)n->n_params;
    /* conv weight gradients: staged in the act dtype, added into fp32 (read both, write) */
    t->bytes[NT_WGRAD_ACCUM] = conv_w * (a + 4.0 + 4.0);
    /* wgrad_f32 (with graph_conv): the dense convs add into the fp32 gradient themselves
     * (read and write 4 bytes in their epilogue instead of writing a) */
    if ((fusion & BACKEND_FUSE_WGRAD_F32) && (fusion & BACKEND_FUSE_GRAPH_CONV)) {
        t->bytes[NT_WGRAD_ACCUM] -= conv_w_dense * (a + 4.0 + 4.0);
        t->conv_epilogue += conv_w_dense * (8.0 - a);
    }
    t->bytes[NT_OPTIM] = p * 4.0 * (adamw ? 7.0 : 5.0);   /* SGD: p, g, buf read; p, buf written */
    t->bytes[NT_WEIGHT_CAST] = dt == DT_F32 ? 0.0 : p * (4.0 + a);
    t->bytes[NT_ZERO_GRADS] = p * 4.0;
    t->bytes[NT_UNSCALE] = dt == DT_F16 ? p * 8.0 : 0.0;
    for (int k = 0; k < NT_COUNT; k++) t->total += t->bytes[k];
    free(h); free(w); free(c); free(seen); free(pair);
    return 0;
}
