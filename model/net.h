/* net.h: a network as an ordered list of nodes over flat parameter/gradient/buffer arrays.
 *
 * What it is. A net_t holds nodes (conv, bn, bn_relu, bn_add_relu, relu, add, avgpool,
 * linear, maxpool) in forward order, each naming its input nodes (NET_INPUT = the image batch).
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
 * nothing. What this file does not do: autodiff for arbitrary graphs, grouped or dilated
 * convolutions, dropout.
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
    NODE_CONV = 0,      /* conv2d, no bias, KRSC weight */
    NODE_BN,            /* batch norm */
    NODE_BN_RELU,       /* relu(bn(x)) */
    NODE_BN_ADD_RELU,   /* relu(bn(x) + z): inputs[0] = x, inputs[1] = z (the shortcut) */
    NODE_RELU,
    NODE_ADD,           /* inputs[0] + inputs[1] */
    NODE_AVGPOOL,       /* global average pool (n, h, w, c) -> (n, 1, 1, c) */
    NODE_LINEAR,        /* y = x w^T + b over the flattened input */
    NODE_MAXPOOL,       /* max pool (kernel, stride, pad; torch's max_pool2d, see backend.h) */
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

/* How a parameter is initialised (torchvision's ResNet init). */
typedef enum {
    NET_INIT_KAIMING_FAN_OUT = 0, /* conv: N(0, sqrt(2 / (out * kh * kw))) */
    NET_INIT_ONES,                /* BN weight, running_var */
    NET_INIT_ZEROS,               /* BN bias, running_mean; BN weight with zero_init_residual */
    NET_INIT_LINEAR_UNIFORM       /* linear weight and bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
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
/* kind: NODE_BN, NODE_BN_RELU or NODE_BN_ADD_RELU (shortcut >= -1 only for the latter).
 * zero_gamma: initialise the BN weight to 0 (zero_init_residual). */
int net_add_bn(net_t *n, const char *prefix, node_kind_t kind, int input, int shortcut,
               bool zero_gamma, err_t *e);
int net_add_relu(net_t *n, int input, err_t *e);
int net_add_add(net_t *n, int a, int b, err_t *e);
int net_add_avgpool(net_t *n, int input, err_t *e);
/* kernel x kernel max pool moved by stride over the input padded with -inf by pad
 * (pad <= kernel / 2, as torch requires); the ImageNet stem's is 3, 2, 1. */
int net_add_maxpool(net_t *n, int input, int kernel, int stride, int pad, err_t *e);
int net_add_linear(net_t *n, const char *prefix, int input, int out_features, err_t *e);

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
/* Forward FLOPs per sample (2 x multiply-adds of convs and linear) at in_h x in_w. */
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
