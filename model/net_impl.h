/* net_impl.h: the private layout of net_t, shared by net.c (building, planning, memory,
 * init, host I/O) and net_run.c (forward, loss, backward). Not for use outside model/net*.c.
 */
#ifndef RUNNER_MODEL_NET_IMPL_H
#define RUNNER_MODEL_NET_IMPL_H

#include "model/net.h"

#define NET_BN_MOMENTUM 0.1f
#define NET_BN_EPS 1e-5f

typedef struct node {
    node_kind_t kind;
    char prefix[56];
    int in[2];             /* input nodes (NET_INPUT = image); in[1] = -2 when unused */
    int out_c;             /* conv: out channels; linear: out features; others: planned */
    int kernel, stride, pad;
    int groups;            /* conv: 1 dense, else grouped */
    bool has_bias;         /* conv: a bias at b_off (linears always have one) */
    int out_h, out_w;      /* avgpool: output size (1x1: global) */
    double p;              /* dropout probability */
    bool zero_gamma;
    bool has_params;
    size_t w_off, b_off;   /* conv/linear weight, conv/linear bias; bn gamma (w) and beta (b) */
    size_t w_numel;
    size_t buf_off;        /* bn: running_mean at buf_off, running_var at buf_off + c */
    int counter;           /* bn: num_batches_tracked index */
    /* planned at bind */
    int h, w, c;           /* output per sample */
    void *y;               /* output activations (act dtype) */
    int gslot;             /* gradient slot of the output */
    float *mean, *var;     /* bn: batch statistics of the last training forward */
    int64_t count;         /* bn: rows the statistics cover (global under SyncBN) */
    uint8_t *mask;         /* bn add-relu with the backend's bn_apply_mask: the mask bits
                            * (backend memory, max_batch rows), else NULL */
    bool mask_ok;          /* the last training forward wrote them (else read y) */
    int dual;              /* bn add-relu with the backend's bn_apply_dual: the shortcut BN
                            * node it applies inside its kernels (net_dual_bn), else -1 */
    int dual_of;           /* that shortcut BN: the add-relu node, else -1 */
    bool dual_ok;          /* bn add-relu: the last training forward applied the shortcut
                            * BN inside (its output and gradient are not stored) */
} node_t;

#define NET_NO_INPUT (-2)

struct net {
    int in_c;
    int n_nodes, cap_nodes;
    node_t *nodes;
    int n_tensors, cap_tensors;
    net_tensor_t *tensors;
    size_t n_params, n_buffers;
    int n_counters;
    int64_t *counters;       /* host */
    /* bound state */
    backend_t *be;
    int max_batch, in_h, in_w;
    dtype_t dt;
    size_t esz;              /* backend bytes per activation element */
    float *params, *grads, *buffers;
    void *shadow;            /* act-dtype copy of params (AMP only; else NULL) */
    void *input;
    int n_slots;
    void **slots;            /* gradient buffers, shared by liveness */
    void *scratch[2];        /* for gradients of nodes with several consumers */
    float *bn_mem;           /* saved statistics of all BN nodes */
    float *sum_dy, *sum_dy_xhat;
    float *sum_dy2, *sum_dy_xhat2;   /* the shortcut BN's sums under bn_apply_dual, else NULL */
    int32_t *labels;         /* backend: max_batch */
    float *targets;          /* backend: max_batch x classes soft targets (net_enable_soft_targets) */
    float *loss_sum;         /* backend: 1 */
    int32_t *correct;        /* backend: 2 */
    int last_batch;          /* batch of the last forward */
    const void *last_x;      /* its input */
    bool last_train;         /* the last forward was a training one */
    bool have_dlogits;       /* net_loss wrote dlogits for it */
    bool *grad_written;      /* per node during backward */
    bool has_dropout;        /* some node is NODE_DROPOUT */
    dropout_key_t *rng_key;  /* backend: the dropout key (has_dropout only) */
    bool rng_key_set;        /* net_set_rng_key since the last training forward */
};

/* Whether a node kind is a batch norm (with or without a fused activation). */
static inline bool net_is_bn(node_kind_t k) {
    return k == NODE_BN || k == NODE_BN_RELU || k == NODE_BN_ADD_RELU || k == NODE_BN_RELU6;
}

/* The activation a batch-norm kind fuses. */
static inline act_kind_t net_bn_act(node_kind_t k) {
    return k == NODE_BN ? ACT_NONE : k == NODE_BN_RELU6 ? ACT_RELU6 : ACT_RELU;
}

/* Elements of the output of node i per sample (after planning). */
static inline size_t net_node_elems(const net_t *n, int i) {
    const node_t *d = &n->nodes[i];
    return (size_t)d->h * d->w * d->c;
}

/* Pointer arithmetic on backend activation memory in elements of the act dtype. */
static inline void *net_act_at(const net_t *n, void *base, size_t elems) {
    return (char *)base + elems * n->esz;
}

#endif
