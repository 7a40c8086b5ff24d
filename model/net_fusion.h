/* net_fusion.h: where the fused convolution ops of backend.h (issue 25) apply in a net,
 * and the byte model that predicts what they save.
 *
 * Eligibility (used by net_run.c, which calls the fused ops, and by the byte model, so
 * both agree on every node):
 *   - conv2d_fwd_bn_stats: dense conv node i without a bias (the statistics are those
 *     of the conv's own output) immediately followed by the BN node that normalises its
 *     output (every BN of a ResNet);
 *   - conv2d_bwd_data_bn: dense conv node i whose input is the BN node i - 1 (plain,
 *     with ReLU or with add + ReLU; not ReLU6, whose mask the CUDA graph does not build)
 *     and the only consumer of that BN's output (bn1 -> conv2 and bn2 -> conv3 in a
 *     bottleneck), so the conv's data gradient is that BN's whole output gradient and the
 *     BN's backward comes right after the conv's (the reduction's sums are still the net's);
 *   - conv2d_bwd_data_accum: a conv (grouped too) whose input's gradient already holds
 *     another consumer's part when the conv's backward runs (the 16 residual sums of
 *     ResNet-50).
 * Grouped convolutions stay unfused for the first two: the CUDA backend's graph API
 * kinds build dense convolutions only.
 *
 * The byte model counts the bytes the non-convolution kernels of one training step read
 * and write, by the categories of issue 25's table (ResNet-50, CIFAR stem, batch 128,
 * bf16: BN forward 3.10 GB, BN backward 6.36, residual adds 1.41, weight-gradient
 * accumulate 0.24, SGD 0.47, weight cast 0.14, zeroing 0.09, 11.8 in all), from the
 * planned shapes, for a set of BACKEND_FUSE_* options. What a fusion moves into a
 * convolution's epilogue (reads the conv kernel now does) is counted apart
 * (conv_epilogue), so the total traffic change is total + conv_epilogue. Elementwise
 * passes count each tensor once per read and once per write (no cache reuse); kernels
 * outside the table (loss, pooling, the classifier, relu/add nodes) are not counted.
 */
#ifndef RUNNER_MODEL_NET_FUSION_H
#define RUNNER_MODEL_NET_FUSION_H

#include <stdbool.h>

#include "model/backend.h"
#include "model/net.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Nodes that read node a's output (each input reference counts; NET_INPUT: the image). */
int net_consumers(const net_t *n, int a);
/* Conv node i: the BN node whose statistics conv2d_fwd_bn_stats computes (i + 1), or -1. */
int net_fused_stats_bn(const net_t *n, int i);
/* Conv node i: the BN node whose backward reduction conv2d_bwd_data_bn computes (i - 1),
 * or -1. */
int net_fused_dbn_bn(const net_t *n, int i);
/* BN add-relu node i: the shortcut BN node bn_apply_dual applies inside it (its residual
 * input: a plain BN whose output nothing else reads), or -1. */
int net_dual_bn(const net_t *n, int i);

typedef enum {
    NT_BN_FWD = 0,      /* statistics pass + apply (+ residual input) */
    NT_BN_BWD,          /* reduce pass + apply pass */
    NT_RESIDUAL_ADD,    /* gradient sums of nodes with two consumers */
    NT_WGRAD_ACCUM,     /* conv weight gradients staged, added into fp32 */
    NT_OPTIM,           /* SGD (momentum) or AdamW over all parameters */
    NT_WEIGHT_CAST,     /* fp32 master -> half shadow (AMP) */
    NT_ZERO_GRADS,      /* gradient zeroing */
    NT_UNSCALE,         /* fp16 loss scaling: unscale + finite check */
    NT_COUNT
} net_traffic_kind_t;
extern const char *const net_traffic_names[NT_COUNT];   /* "bn_fwd", "bn_bwd", ... */

typedef struct net_traffic {
    double bytes[NT_COUNT];   /* per category, bytes per training step */
    double total;             /* their sum: the non-convolution bytes */
    double conv_epilogue;     /* bytes the fused convolutions read in addition */
    int fused_stats;          /* BN nodes whose statistics come from their conv */
    int fused_dbn;            /* BN nodes whose backward reduction is in a conv */
    int fused_accum;          /* residual sums done by the conv (beta = 1) */
    int remasked;             /* BN nodes whose backward kernels recompute the mask (bn_remask) */
    int mask_bits;            /* BN add-relu nodes whose mask is kept as bits (bn_mask_bits) */
    int dual;                 /* shortcut BNs applied inside their add-relu BN (bn_dual_add) */
    int persisted_fwd, persisted_bwd;   /* BN passes bn_persist keeps rows of on chip */
} net_traffic_t;

/* The model for one training step of batch rows at in_h x in_w with activations of dt
 * (2 bytes for half, as on the GPU), SGD with momentum (adamw false) or AdamW, and the
 * fusion options `fusion` (BACKEND_FUSE_*; only conv_stats, dgrad_dbn, dgrad_accum,
 * bn_remask, bn_mask_bits, bn_dual_add, wgrad_f32 and bn_persist change bytes; bn_persist
 * by its launch plan on an H100 / H200). 0, or -1 with e set. */
int net_traffic(const net_t *n, int batch, int in_h, int in_w, dtype_t dt, bool adamw, unsigned fusion,
                net_traffic_t *t, err_t *e);

#ifdef __cplusplus
}
#endif
#endif
