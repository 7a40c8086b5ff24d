/* conv_graph.cuh: convolutions on the cuDNN graph (backend) API: the operation graphs the
 * CUDA backend builds (plain fprop / dgrad / wgrad, dgrad accumulating with beta = 1,
 * fprop with per-channel sum and sum of squares of its output, dgrad with an optional
 * ReLU mask and the two per-channel sums of BN's backward), one execution plan per
 * (graph, shape, dtype, pointer alignments) built once, and one variant pack per set of
 * device pointers (a layer's pointers do not move after bind, so each layer reuses its
 * pack). Contract details in conv_graph.cu. Not here: the legacy API (conv.cu), the
 * kernels that finish the fused statistics (fusion.cu).
 */
#ifndef RUNNER_MODEL_CUDA_CONV_GRAPH_CUH
#define RUNNER_MODEL_CUDA_CONV_GRAPH_CUH

#include "model/backend.h"

struct cuda_be;

/* The graphs, with their tensors in the order cu_conv_graph_run takes the pointers
 * (activations and weights in the act dtype; sums and mean: fp32 per-channel vectors). */
typedef enum {
    CG_FPROP = 0,       /* {x, w, y}: y = conv(x, w) */
    CG_DGRAD,           /* {dy, w, dx}: dx = dgrad(dy, w) */
    CG_WGRAD,           /* {x, dy, dw}: dw = wgrad(x, dy), act dtype */
    CG_DGRAD_ACCUM,     /* {dy, w, dx}: dx = dgrad(dy, w) + dx (beta = 1) */
    CG_FPROP_STATS,     /* {x, w, y, sum, sqsum}: y = conv(x, w), per-channel sum(y), sum(y^2) */
    CG_DGRAD_DBN,       /* {dy, w, g, bn_x, mean, s1, s2}: g = dgrad(dy, w), s1 = sum(g),
                           s2 = sum(g * (bn_x - mean)) per channel */
    CG_DGRAD_DRELU_DBN, /* {dy, w, g, relu_y, bn_x, mean, s1, s2}: the same with
                           g = dgrad(dy, w) * (relu_y > 0) */
    /* the scale-bias-ReLU prologue of cuDNN's ConvBNfprop / ConvBNwgrad patterns (the
     * BN apply + ReLU of the layer before folded into the convolution; scale and bias
     * per input channel in the act dtype): measured by the pattern probe
     * (cuda_conv_graph_probe), not yet run by any op */
    CG_SBR_FPROP,       /* {x, scale, bias, w, y}: y = conv(relu(x * scale + bias), w) */
    CG_SBR_FPROP_STATS, /* {x, scale, bias, w, y, sum, sqsum}: the same with genStats of y */
    CG_SBR_WGRAD,       /* {x, scale, bias, dy, dw}: dw = wgrad(relu(x * scale + bias), dy) */
    CG_WGRAD_F32,       /* {x, dy, dw}: dw += wgrad(x, dy) with dw fp32 (beta = 1): the weight
                           gradient into the fp32 gradients without the act-dtype staging and
                           the accumulate kernel (wgrad_f32), where an engine takes it */
    CG_KIND_COUNT
} cg_kind_t;

/* Runs graph kind on shape s in dt with the kind's tensors ptrs (outputs included), on the
 * backend's stream, with the shared workspace. Returns 0 when it ran; 1 when the graph API
 * has no usable engine for it (no engine passes the filters, or none finalizes: decided
 * once per plan key, and the caller then runs its other path); -1 on an error (be->err).
 * The first call for a key builds the plan (heuristics, finalize, and with deterministic
 * off a timing of the first candidates on the given buffers): it synchronizes and may
 * grow the workspace, so it must not happen inside a graph capture (it fails there). */
int cu_conv_graph_run(struct cuda_be *cb, int kind, const conv_shape_t *s, dtype_t dt, void *const *ptrs);

/* The fused kinds' per-layer measurement (fusion.cu times the fused graph against the
 * unfused ops on the first call of a plan): the verdict of the plan of (kind, s, dt, the
 * alignments of ptrs): 0 not measured (or no plan), 1 the fused graph was faster, -1
 * slower. Setting -1 retires the plan: cu_conv_graph_run returns 1 for it from then on
 * (the backend's notice says so once per kind), and conv_engine no longer reports it. */
int cu_conv_graph_verdict(struct cuda_be *cb, int kind, const conv_shape_t *s, dtype_t dt, void *const *ptrs);
void cu_conv_graph_set_verdict(struct cuda_be *cb, int kind, const conv_shape_t *s, dtype_t dt, void *const *ptrs,
                               int verdict);

/* Destroys every plan and variant pack. */
void cu_conv_graph_free(struct cuda_be *cb);

/* The engine of the graph plan that last ran shape s in direction which (0 fwd, 1 bwd
 * data, 2 bwd filter): 0 and buf = "cudnn-graph eng<N> <knobs>[ +<fused ops>]", or 1 when
 * no graph plan ran it (the legacy API did, or nothing yet). For conv_engine. */
int cu_conv_graph_engine(struct cuda_be *cb, const conv_shape_t *s, int which, char *buf, size_t len);

/* conv.cu's dispatch hooks (with graph_conv on): 0 ran on the graph API, 1 use the legacy
 * API, -1 error. wgrad writes the act-dtype gradient to stage (the caller accumulates). */
int cu_conv_graph_fwd(struct cuda_be *cb, const conv_shape_t *s, dtype_t dt, const void *x, const void *w, void *y);
int cu_conv_graph_dgrad(struct cuda_be *cb, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w,
                        void *dx);
int cu_conv_graph_wgrad(struct cuda_be *cb, const conv_shape_t *s, dtype_t dt, const void *x, const void *dy,
                        void *stage);

#endif
