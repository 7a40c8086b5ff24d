/* net.h: a network as an ordered list of nodes over flat parameter/gradient/buffer arrays.
 *
 * What it is. A net_t holds nodes (conv, bn, bn_relu, bn_add_relu, relu, add, avgpool,
 * linear, maxpool, relu6, bn_relu6, dropout) in forward order, each naming its input
 * nodes (NET_INPUT = the image batch). A node's output may feed several later nodes; its
 * gradient is then the sum of theirs.
 * Every parameter lives in ONE contiguous fp32 array in forward (node) order; gradients
 * live in a second array with the identical layout; BN running statistics
 * (running_mean, running_var of every BN, in node order) in a third ("buffers");
 * num_batches_tracked counters are int64 values kept on the host.
 *
 * The tensor table (net_tensor) lists every tensor of torchvision's state_dict, in node
 * order (within a ResNet block the downsample tensors come first, before conv1; a name
 * lookup, not the order, is what import/export rely on), with its name (conv1.weight,
 * layer1.0.bn1.running_mean, fc.bias, ...), torchvision shape (OIHW for convs), and
 * where it lives (which array, offset, numel). Conv weights are stored KRSC (out, kh, kw, in), torchvision's OIHW
 * permuted; import/export converts.
 *
 * Life cycle:
 *   net_t *n = resnet_build("resnet50", 3, 100, false, &e);   (or net_create + net_add_*)
 *   net_bind(n, be, max_batch, 32, 32, DT_F32, &e);   plans and allocates ALL memory
 *   net_init(n, seed, &e);                            torchvision init, deterministic
 *   per step: net_zero_grads; { net_upload_input | write net_input(n);
 *             net_forward(train); net_loss; net_backward } x grad_accum; optimizer
 *   net_free(n);
 * Nothing is allocated inside a step. Activations are NHWC in the act dtype (fp32, or
 * fp16/bf16 under AMP: a half shadow of all parameters is cast from the fp32 master at
 * the start of every forward; BN statistics, the loss and all gradients stay fp32).
 *
 * BN: momentum 0.1, eps 1e-5 (torch defaults); training uses batch statistics and
 * updates the running ones (unbiased variance), eval uses the running ones and updates
 * nothing. Dropout (training only) draws its masks from the key net_set_rng_key gave.
 * What this file does not do: autodiff for arbitrary graphs, dilated convolutions.
 */
#ifndef RUNNER_MODEL_NET_H
#define RUNNER_MODEL_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/backend.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    NODE_CONV = 0,      /* conv2d, KRSC weight (k, r, s, c / groups), optional bias */
    NODE_BN,            /* batch norm */
    NODE_BN_RELU,       /* relu(bn(x)) */
    NODE_BN_ADD_RELU,   /* relu(bn(x) + z): inputs[0] = x, inputs[1] = z (the shortcut) */
    NODE_RELU,
    NODE_ADD,           /* inputs[0] + inputs[1] (no activation: pre-activation blocks) */
    NODE_AVGPOOL,       /* adaptive average pool (n, h, w, c) -> (n, oh, ow, c); 1x1: global */
    NODE_LINEAR,        /* y = x w^T + b over the flattened (NHWC order) input */
    NODE_MAXPOOL,       /* max pool (kernel, stride, pad; torch's max_pool2d, see backend.h) */
    NODE_RELU6,         /* min(max(x, 0), 6) */
    NODE_BN_RELU6,      /* relu6(bn(x)) (MobileNetV2) */
    NODE_DROPOUT,       /* inverted dropout with probability p (training only) */
    NODE_KIND_COUNT
} node_kind_t;
extern const char *const node_kind_names[NODE_KIND_COUNT]; /* "conv", "bn", ... */

enum { NET_INPUT = -1 };   /* as a node input: the image batch */

/* Where a tensor of the table lives. */
typedef enum {
    NET_STORE_PARAM = 0,   /* params/grads arrays (fp32) */
    NET_STORE_BUFFER,      /* running stats array (fp32) */
    NET_STORE_COUNTER      /* num_batches_tracked: host int64 counters, offset = index */
} net_store_t;

/* How a parameter is initialised (torchvision's inits). */
typedef enum {
    NET_INIT_KAIMING_FAN_OUT = 0, /* conv: N(0, sqrt(2 / (out * kh * kw))) (grouped too, as torch) */
    NET_INIT_ONES,                /* BN weight, running_var */
    NET_INIT_ZEROS,               /* BN bias, running_mean; BN weight with zero_init_residual;
                                   * conv biases of VGG, linear biases of VGG/MobileNetV2 */
    NET_INIT_LINEAR_UNIFORM,      /* torch's default Linear/Conv2d init of weight and bias:
                                   * U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in features,
                                   * or in/groups * kh * kw for a conv */
    NET_INIT_NORMAL_0_01          /* N(0, 0.01): VGG / MobileNetV2 classifier weights */
} net_init_t;

/* One tensor of the state_dict. */
typedef struct net_tensor {
    char name[80];         /* torchvision name, e.g. "layer2.0.downsample.1.running_var" */
    net_store_t store;
    size_t offset;         /* elements into its array (counter index for NET_STORE_COUNTER) */
    size_t numel;
    int ndim;
    int64_t shape[4];      /* torchvision shape: conv OIHW, linear [out, in], bn [c] */
    bool conv_weight;      /* stored KRSC; export/import permutes to/from OIHW */
    bool no_decay;         /* BN weight/bias or a bias: weight decay 0 when
                              no_weight_decay_on_bn_and_bias */
    net_init_t init;
    int node;              /* the node that owns it */
    /* A linear weight whose input is a (h, w, c) map rather than 1x1: the map, whose NHWC
     * flattening (h, w, c) orders the weight's columns here, while torchvision flattens
     * NCHW (c, h, w); import/export permute the columns. 0 when the input is 1x1. */
    int flat_c, flat_h, flat_w;
} net_tensor_t;

typedef struct net net_t;

/* Hooks backward calls (all optional; hooks itself may be NULL). */
typedef struct net_hooks {
    void *ctx;
    /* After the backward of each node that owns parameters (i.e. whenever ready_from
     * decreases), and once more with 0 if the walk ended above 0: every gradient at flat
     * offset >= ready_from is final (params are laid out in forward order, so ready_from
     * only decreases; test_resnet checks the claim). DDP starts a bucket's all-reduce as
     * soon as the bucket lies entirely above ready_from. */
    void (*grads_ready)(void *ctx, size_t ready_from);
    /* SyncBN, forward: replace the local per-channel mean and biased var (backend memory,
     * c floats each) with the statistics over all ranks and set *global_count to the
     * number of rows they cover. Return 0, or -1 to abort the forward. */
    int (*bn_sync_stats)(void *ctx, int c, float *mean, float *var, int64_t local_count,
                         int64_t *global_count);
    /* SyncBN, backward: all-reduce-sum sum_dy and sum_dy_xhat (backend memory, c each). */
    int (*bn_sync_grads)(void *ctx, int c, float *sum_dy, float *sum_dy_xhat);
} net_hooks_t;

/* What net_loss reports for one batch. */
typedef struct net_loss_out {
    double loss_sum;       /* sum over the batch of per-sample losses (unscaled) */
    int64_t correct1;      /* top-1 hits */
    int64_t correct5;      /* top-5 hits */
} net_loss_out_t;

/* ---- building ---- */

/* An empty net whose input has in_channels channels. */
net_t *net_create(int in_channels, err_t *e);
void net_free(net_t *n);

/* Node builders; each returns the new node's index or -1 (e set). prefix is the
 * torchvision module name ("layer1.0.conv1", "fc"); tensors get prefix + ".weight" etc.
 * Nodes must be added in forward order; inputs refer to earlier nodes or NET_INPUT. */
int net_add_conv(net_t *n, const char *prefix, int input, int out_channels, int kernel,
                 int stride, int pad, err_t *e);
/* net_add_conv with groups (1: dense; the input's channels: depthwise) and an optional
 * bias prefix.bias [out_channels] (init NET_INIT_LINEAR_UNIFORM as torch's default; set
 * another with net_set_init). A group count that does not divide both the input and the
 * output channels is ERR_INPUT naming the layer. net_add_conv(...) is
 * net_add_conv2(..., 1, false, e). */
int net_add_conv2(net_t *n, const char *prefix, int input, int out_channels, int kernel,
                  int stride, int pad, int groups, bool bias, err_t *e);
/* kind: NODE_BN, NODE_BN_RELU, NODE_BN_RELU6 or NODE_BN_ADD_RELU (shortcut >= -1 only
 * for the latter, else -2). zero_gamma: initialise the BN weight to 0 (zero_init_residual). */
int net_add_bn(net_t *n, const char *prefix, node_kind_t kind, int input, int shortcut,
               bool zero_gamma, err_t *e);
int net_add_relu(net_t *n, int input, err_t *e);
int net_add_relu6(net_t *n, int input, err_t *e);
int net_add_add(net_t *n, int a, int b, err_t *e);
/* Inverted dropout (torch.nn.Dropout(p), 0 <= p <= 1, p as the double the YAML gave) of
 * any input, 2-D (after a linear) or a feature map: identity in evaluation; in training each element is zeroed
 * with probability p, else multiplied by 1 / (1 - p) as torch's fp32 does
 * (util/dropout.h), the mask drawn from the key of net_set_rng_key. */
int net_add_dropout(net_t *n, int input, double p, err_t *e);
/* Global average pool (n, h, w, c) -> (n, 1, 1, c). */
int net_add_avgpool(net_t *n, int input, err_t *e);
/* Adaptive average pool to out_h x out_w (torch adaptive_avg_pool2d; VGG's (7, 7));
 * (1, 1) is net_add_avgpool. */
int net_add_avgpool2(net_t *n, int input, int out_h, int out_w, err_t *e);
/* kernel x kernel max pool moved by stride over the input padded with -inf by pad
 * (pad <= kernel / 2, as torch requires); the ImageNet stem's is 3, 2, 1. */
int net_add_maxpool(net_t *n, int input, int kernel, int stride, int pad, err_t *e);
/* A linear layer over its input flattened in NHWC order. Its in-features are fixed when
 * it is added: channels x the input's map when that is known while building (after an
 * avgpool of a given size, a linear or elementwise nodes on them), else the channels
 * alone (a 1x1 map expected; net_bind fails with ERR_INPUT naming the layer when the
 * input size gives another map). The weight tensor records a map larger than 1x1 in
 * flat_c/h/w. */
int net_add_linear(net_t *n, const char *prefix, int input, int out_features, err_t *e);

/* Overrides the init of tensor_name (as net_tensor names it) after building and before
 * net_init; an unknown name is ERR_INPUT. */
int net_set_init(net_t *n, const char *tensor_name, net_init_t init, err_t *e);

/* ---- introspection (valid right after building) ---- */
int net_num_nodes(const net_t *n);
node_kind_t net_node_kind(const net_t *n, int i);
/* Bound nets: the geometry of conv node i at `batch` rows and its module name
 * ("layer1.0.conv1"); -1 when node i is not a conv or the net is not bound. */
int net_conv_geometry(const net_t *n, int i, int batch, conv_shape_t *s, const char **name);
/* Writes to w (a JSON writer, util/json.h) an array with one object per distinct conv
 * shape of a bound net at `batch` rows: {"shape", "layers": [...], "fwd", "bwd_data",
 * "bwd_filter"}, the last three the kernel the backend runs each direction on (its
 * conv_engine op; absent where the backend has none). */
struct jw;
void net_write_conv_engines(const net_t *n, int batch, struct jw *w);
int net_num_tensors(const net_t *n);
const net_tensor_t *net_tensor(const net_t *n, int i);
/* The tensor called name, or NULL. */
const net_tensor_t *net_find_tensor(const net_t *n, const char *name);
size_t net_num_params(const net_t *n);     /* elements of the params array (= trainable count) */
size_t net_num_buffers(const net_t *n);    /* elements of the running-stats array */
int net_num_counters(const net_t *n);      /* BN layers (num_batches_tracked counters) */
int net_in_channels(const net_t *n);
int net_num_classes(const net_t *n);       /* out_features of the last node (linear) */
/* Whether the net has dropout nodes (its training forwards need net_set_rng_key). */
bool net_has_dropout(const net_t *n);
/* Forward FLOPs per sample (2 x multiply-adds of convs, grouped ones counting
 * 2 * p*q*k*r*s*(c/groups), and of linears; biases and elementwise nodes not counted) at
 * in_h x in_w. */
double net_forward_flops(const net_t *n, int in_h, int in_w);
/* Every node's output shape per sample (h[i], w[i], c[i]; arrays of net_num_nodes) at
 * in_h x in_w, as net_bind plans it; usable before binding. 0, or -1 with e set (ERR_INPUT
 * when the input is too small). */
int net_plan_shapes(const net_t *n, int in_h, int in_w, int *h, int *w, int *c, err_t *e);
/* Bytes net_bind would allocate for activations, their gradients and scratch (not
 * params/grads/buffers/optimizer) for max_batch at in_h x in_w, with act_elem_bytes per
 * activation element (backend_elem_size; 4 on cpu). Usable before binding. Returns 0 if
 * the input is too small for the net (bind then fails with the reason). */
size_t net_activation_bytes(const net_t *n, int max_batch, int in_h, int in_w,
                            size_t act_elem_bytes);
/* One line per node ("12 bn_relu layer1.0.bn1 <- 11  [n,32,32,64]") to f; for debugging. */
void net_print(const net_t *n, void *file /* FILE* */);

/* Conv weight layout conversions between torchvision's OIHW and the net's KRSC, for one
 * tensor of torchvision shape `shape` (grouped weights: shape[1] = in / groups). */
void net_oihw_to_krsc(const float *src, float *dst, const int64_t shape[4]);
void net_krsc_to_oihw(const float *src, float *dst, const int64_t shape[4]);

/* ---- binding and memory ---- */

/* Plans shapes for in_h x in_w inputs and allocates in be: params, grads, buffers, the
 * half parameter shadow (AMP), the input buffer, activations and gradients for up to
 * max_batch, BN saved statistics, loss scratch. Parameters are zero until net_init or a
 * load. Fails with ERR_INPUT if the input is too small or the channels mismatch. Binding
 * twice is an error. */
int net_bind(net_t *n, backend_t *be, int max_batch, int in_h, int in_w, dtype_t act_dt,
             err_t *e);
backend_t *net_backend(const net_t *n);
dtype_t net_act_dtype(const net_t *n);
int net_max_batch(const net_t *n);

/* Backend pointers of the flat arrays (valid after bind). */
float *net_params(net_t *n);
float *net_grads(net_t *n);
float *net_buffers(net_t *n);
/* Host num_batches_tracked counters, net_num_counters entries (valid after build). */
int64_t *net_counters(net_t *n);
/* The input buffer (act dtype, max_batch * in_h * in_w * in_channels elements, NHWC). */
void *net_input(net_t *n);
/* The logits of the last forward (act dtype, batch x classes, backend memory). */
const void *net_logits(const net_t *n);

/* Initialises every parameter and buffer as torchvision does, from (seed, tensor index)
 * with RNG_STREAM_INIT; counters reset to 0. The result depends only on the seed and the
 * architecture. */
int net_init(net_t *n, uint64_t seed, err_t *e);
int net_zero_grads(net_t *n, err_t *e);

/* Host copies (count = net_num_params / net_num_buffers floats). */
int net_download_params(net_t *n, float *host, err_t *e);
int net_upload_params(net_t *n, const float *host, err_t *e);
int net_download_grads(net_t *n, float *host, err_t *e);
int net_download_buffers(net_t *n, float *host, err_t *e);
int net_upload_buffers(net_t *n, const float *host, err_t *e);

/* Uploads batch NHWC fp32 images from the host into net_input, rounding to the act
 * dtype under AMP. */
int net_upload_input(net_t *n, const float *host_nhwc, int batch, err_t *e);

/* The same from backend memory: batch NHWC fp32 images at dev into net_input (a copy, or
 * a cast to the act dtype under AMP), enqueued on the backend. */
int net_input_from_f32(net_t *n, const float *dev, int batch, err_t *e);

/* ---- running ---- */

/* The dropout key of the next training forward (dropout_key_t, backend.h): row i of
 * the batch is sample first_sample + i * sample_stride of epoch `epoch`, counted in the
 * epoch's global sample order, so that a sample's masks depend only on (seed, epoch, its
 * place in the epoch's order, the node, the element): the same whatever the world size,
 * DP replica count, gradient accumulation, worker count or resume. A DDP rank r of W
 * whose micro-batch starts at its local sample k passes first_sample = r + k * W and
 * sample_stride = W (data/sampler.h interleaves ranks). Uploaded into backend memory
 * (enqueued like an upload; a recorded graph reads it when replayed). A net with
 * dropout fails a training forward whose key was not set since the previous one, so a
 * forgotten call cannot repeat masks silently. A no-op for nets without dropout. */
int net_set_rng_key(net_t *n, uint64_t seed, uint64_t epoch, int64_t first_sample,
                    int64_t sample_stride, err_t *e);
/* net_set_rng_key from a key already in backend memory (a device-to-device copy, so it
 * can be recorded into a graph: the trainer writes each micro-batch's key into a slot of
 * its own before the step and the recorded work copies slot m here). */
int net_set_rng_key_dev(net_t *n, const dropout_key_t *key, err_t *e);

/* Forward of batch <= max_batch images at x (backend memory, NHWC, act dtype; may be
 * net_input(n)). train: batch statistics + running-stat update + counters; else running
 * statistics, nothing updated. hooks: only bn_sync_stats is used (train only). */
int net_forward(net_t *n, const void *x, int batch, bool train, const net_hooks_t *hooks,
                err_t *e);

/* Softmax cross-entropy of the last forward's logits against labels (host int32, batch
 * entries in [0, classes)) with label smoothing (torch CrossEntropyLoss semantics).
 * Writes dlogits = grad_scale * d(loss_sum)/dlogits for backward; the trainer picks
 * grad_scale = loss_scale / global_batch so gradients are of the mean loss. out gets the
 * unscaled loss sum and the top-1/top-5 hit counts. Labels out of range are ERR_INPUT. */
int net_loss(net_t *n, const int32_t *labels, float smoothing, float grad_scale,
             net_loss_out_t *out, err_t *e);

/* net_loss without waiting for the result: labels (host, checked, then uploaded) may be
 * NULL when net_labels(n) already holds the batch's labels on the device; the gradient
 * factor is grad_scale * ctl->loss_scale (ctl in backend memory, NULL: 1), read on the
 * device; the loss sum (float) goes to loss_sum[0] and the top-1/top-5 hits to
 * correct[0..1] (backend memory; NULL: the net's own, which net_loss reads). */
int net_loss_async(net_t *n, const int32_t *labels, float smoothing, float grad_scale,
                   const step_ctl_t *ctl, float *loss_sum, int32_t *correct, err_t *e);

/* The net's label buffer (backend memory, max_batch int32) that net_loss_async reads
 * when given no host labels. */
int32_t *net_labels(net_t *n);

/* Soft targets (mixup): net_enable_soft_targets allocates the net's target buffer
 * (max_batch x classes fp32, backend memory; once, after net_bind); net_loss_soft_async is
 * net_loss_async against soft targets (backend softmax_xent_soft): targets is host memory
 * uploaded first, or NULL when net_targets(n) already holds them. */
int net_enable_soft_targets(net_t *n, err_t *e);
float *net_targets(net_t *n);
int net_loss_soft_async(net_t *n, const float *targets, float grad_scale, const step_ctl_t *ctl,
                        float *loss_sum, int32_t *correct, err_t *e);
/* net_loss against soft targets (host memory), waiting for the result. */
int net_loss_soft(net_t *n, const float *targets, float grad_scale, net_loss_out_t *out, err_t *e);

/* After replaying a graph recorded (graph_* ops of the backend) from exactly
 * net_forward(n, x, batch, train = true, hooks = NULL) + net_loss_async + net_backward:
 * applies what those calls do on the host and a replay does not (BN
 * num_batches_tracked counters, the last-forward bookkeeping), so the net's host state
 * is as if they had run. */
void net_graph_replayed(net_t *n, const void *x, int batch);

/* Backward of the last training forward from the dlogits net_loss wrote. ADDS into the
 * gradient array (zero it per optimizer step with net_zero_grads). hooks may be NULL. */
int net_backward(net_t *n, const net_hooks_t *hooks, err_t *e);

#ifdef __cplusplus
}
#endif
#endif
