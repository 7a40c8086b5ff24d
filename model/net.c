/* net.c: building a node-list net, its tensor table, memory planning and binding to a
 * backend, torchvision initialisation, and host copies of the flat arrays.
 *
 * Forward, loss and backward live in net_run.c. Memory is planned once in net_bind:
 * every node output keeps its own activation buffer (backward needs them), while
 * gradient buffers are shared between nodes whose gradients are never alive at the same
 * time (a liveness pass over the backward order), plus two scratch buffers for nodes
 * whose output feeds several consumers (their gradients are summed).
 * What it does not do: free or re-plan memory after binding, or shrink activations.
 */
#include "model/net_impl.h"
#include "model/net_fusion.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/rng.h"

const char *const node_kind_names[NODE_KIND_COUNT] = {
    "conv", "bn", "bn_relu", "bn_add_relu", "relu", "add", "avgpool", "linear", "maxpool",
    "relu6", "bn_relu6", "dropout",
};
_Static_assert(NODE_KIND_COUNT == 12, "node_kind_names must list every node kind");

net_t *net_create(int in_channels, err_t *e) {
    if (in_channels < 1 || in_channels > 4096) {
        err_set(e, ERR_INPUT, "net: input channels %d out of range [1, 4096]", in_channels);
        return NULL;
    }
    net_t *n = xcalloc(1, sizeof *n, e);
    if (!n) return NULL;
    n->in_c = in_channels;
    return n;
}

void net_free(net_t *n) {
    if (!n) return;
    if (n->be) {
        backend_t *be = n->be;
        void *ptrs[] = {n->params, n->grads, n->buffers, n->shadow, n->input, n->scratch[0],
                        n->scratch[1], n->bn_mem, n->sum_dy, n->sum_dy_xhat, n->labels,
                        n->loss_sum, n->correct, n->targets, n->rng_key, n->sum_dy2, n->sum_dy_xhat2};
        for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
            if (ptrs[i]) be->ops->release(be, ptrs[i]);
        for (int i = 0; i < n->n_nodes; i++) {
            if (n->nodes[i].y) be->ops->release(be, n->nodes[i].y);
            if (n->nodes[i].mask) be->ops->release(be, n->nodes[i].mask);
        }
        for (int i = 0; i < n->n_slots; i++)
            if (n->slots && n->slots[i]) be->ops->release(be, n->slots[i]);
    }
    free(n->slots);
    free(n->grad_written);
    free(n->nodes);
    free(n->tensors);
    free(n->counters);
    free(n);
}

/* Appends a node after checking its inputs; returns its index or -1. */
static int add_node(net_t *n, node_kind_t kind, const char *prefix, int in0, int in1, err_t *e) {
    if (n->be) return err_set(e, ERR_RUNTIME, "net: cannot add nodes after net_bind");
    int ins[2] = {in0, in1};
    for (int k = 0; k < 2; k++) {
        if (ins[k] == NET_NO_INPUT) continue;
        if (ins[k] < NET_INPUT || ins[k] >= n->n_nodes)
            return err_set(e, ERR_RUNTIME, "net: node %d (%s) names input %d, which does not exist yet",
                           n->n_nodes, node_kind_names[kind], ins[k]);
    }
    if (n->n_nodes == n->cap_nodes) {
        int cap = n->cap_nodes ? 2 * n->cap_nodes : 64;
        node_t *p = realloc(n->nodes, (size_t)cap * sizeof *p);
        if (!p) return err_set(e, ERR_RUNTIME, "net: out of memory adding a node");
        n->nodes = p;
        n->cap_nodes = cap;
    }
    node_t *d = &n->nodes[n->n_nodes];
    memset(d, 0, sizeof *d);
    d->kind = kind;
    snprintf(d->prefix, sizeof d->prefix, "%s", prefix ? prefix : "");
    d->in[0] = in0;
    d->in[1] = in1;
    d->counter = -1;
    d->gslot = -1;
    d->groups = 1;
    d->out_h = d->out_w = 1;
    return n->n_nodes++;
}

/* Appends a tensor to the table; returns it or NULL. */
static net_tensor_t *add_tensor(net_t *n, int node, const char *suffix, net_store_t store,
                                size_t offset, size_t numel, int ndim, const int64_t *shape,
                                net_init_t init, bool no_decay, err_t *e) {
    if (n->n_tensors == n->cap_tensors) {
        int cap = n->cap_tensors ? 2 * n->cap_tensors : 128;
        net_tensor_t *p = realloc(n->tensors, (size_t)cap * sizeof *p);
        if (!p) {
            err_set(e, ERR_RUNTIME, "net: out of memory adding a tensor");
            return NULL;
        }
        n->tensors = p;
        n->cap_tensors = cap;
    }
    net_tensor_t *t = &n->tensors[n->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s.%s", n->nodes[node].prefix, suffix);
    t->store = store;
    t->offset = offset;
    t->numel = numel;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->init = init;
    t->no_decay = no_decay;
    t->node = node;
    return t;
}

/* Channels of a node's output known at build time (convs and linears fix them; the
 * others pass their input's through). */
static int build_channels(const net_t *n, int i) {
    if (i == NET_INPUT) return n->in_c;
    const node_t *d = &n->nodes[i];
    if (d->kind == NODE_CONV || d->kind == NODE_LINEAR) return d->out_c;
    return build_channels(n, d->in[0]);
}

/* The output map of node i when it is known while building (an avgpool fixes it, a
 * linear is 1x1, elementwise nodes pass theirs through): true and *h, *w; false when it
 * depends on the input size. */
static bool build_map(const net_t *n, int i, int *h, int *w) {
    if (i == NET_INPUT) return false;
    const node_t *d = &n->nodes[i];
    switch (d->kind) {
    case NODE_LINEAR: *h = *w = 1; return true;
    case NODE_AVGPOOL: *h = d->out_h; *w = d->out_w; return true;
    case NODE_CONV: case NODE_MAXPOOL: case NODE_KIND_COUNT: return false;
    default: return build_map(n, d->in[0], h, w);
    }
}

int net_add_conv(net_t *n, const char *prefix, int input, int out_channels, int kernel,
                 int stride, int pad, err_t *e) {
    return net_add_conv2(n, prefix, input, out_channels, kernel, stride, pad, 1, false, e);
}

int net_add_conv2(net_t *n, const char *prefix, int input, int out_channels, int kernel,
                  int stride, int pad, int groups, bool bias, err_t *e) {
    if (out_channels < 1 || kernel < 1 || stride < 1 || pad < 0)
        return err_set(e, ERR_INPUT, "net: conv %s: bad geometry (out %d, kernel %d, stride %d, pad %d)",
                       prefix, out_channels, kernel, stride, pad);
    if (input < NET_INPUT || input >= n->n_nodes)
        return err_set(e, ERR_RUNTIME, "net: conv %s names input %d, which does not exist yet", prefix, input);
    int in_c = build_channels(n, input);
    if (groups < 1 || in_c % groups || out_channels % groups)
        return err_set(e, ERR_INPUT, "net: conv %s: groups %d must divide its %d input and %d output "
                       "channels", prefix, groups, in_c, out_channels);
    int i = add_node(n, NODE_CONV, prefix, input, NET_NO_INPUT, e);
    if (i < 0) return -1;
    node_t *d = &n->nodes[i];
    d->out_c = out_channels;
    d->kernel = kernel;
    d->stride = stride;
    d->pad = pad;
    d->groups = groups;
    d->has_bias = bias;
    d->has_params = true;
    d->w_off = n->n_params;
    d->w_numel = (size_t)out_channels * kernel * kernel * (in_c / groups);
    n->n_params += d->w_numel;
    int64_t shape[4] = {out_channels, in_c / groups, kernel, kernel};
    net_tensor_t *t = add_tensor(n, i, "weight", NET_STORE_PARAM, d->w_off, d->w_numel, 4, shape,
                                 NET_INIT_KAIMING_FAN_OUT, false, e);
    if (!t) return -1;
    t->conv_weight = true;
    if (bias) {
        d->b_off = n->n_params;
        n->n_params += (size_t)out_channels;
        int64_t bs[1] = {out_channels};
        if (!add_tensor(n, i, "bias", NET_STORE_PARAM, d->b_off, out_channels, 1, bs,
                        NET_INIT_LINEAR_UNIFORM, true, e))
            return -1;
    }
    return i;
}

int net_add_bn(net_t *n, const char *prefix, node_kind_t kind, int input, int shortcut,
               bool zero_gamma, err_t *e) {
    if (kind < 0 || kind >= NODE_KIND_COUNT || !net_is_bn(kind))
        return err_set(e, ERR_RUNTIME, "net: net_add_bn with kind %d", (int)kind);
    if (input < NET_INPUT || input >= n->n_nodes)
        return err_set(e, ERR_RUNTIME, "net: bn %s names input %d, which does not exist yet", prefix, input);
    if ((kind == NODE_BN_ADD_RELU) != (shortcut >= NET_INPUT))
        return err_set(e, ERR_RUNTIME, "net: %s: a shortcut input goes with bn_add_relu only", prefix);
    int c = build_channels(n, input);
    if (kind == NODE_BN_ADD_RELU && build_channels(n, shortcut) != c)
        return err_set(e, ERR_INPUT, "net: %s: shortcut has %d channels, the branch %d", prefix,
                       build_channels(n, shortcut), c);
    int i = add_node(n, kind, prefix, input, kind == NODE_BN_ADD_RELU ? shortcut : NET_NO_INPUT, e);
    if (i < 0) return -1;
    node_t *d = &n->nodes[i];
    d->zero_gamma = zero_gamma;
    d->has_params = true;
    d->w_off = n->n_params;
    d->b_off = n->n_params + (size_t)c;
    d->w_numel = (size_t)c;
    n->n_params += 2 * (size_t)c;
    d->buf_off = n->n_buffers;
    n->n_buffers += 2 * (size_t)c;
    d->counter = n->n_counters++;
    int64_t shape[1] = {c};
    if (!add_tensor(n, i, "weight", NET_STORE_PARAM, d->w_off, c, 1, shape,
                    zero_gamma ? NET_INIT_ZEROS : NET_INIT_ONES, true, e) ||
        !add_tensor(n, i, "bias", NET_STORE_PARAM, d->b_off, c, 1, shape, NET_INIT_ZEROS, true, e) ||
        !add_tensor(n, i, "running_mean", NET_STORE_BUFFER, d->buf_off, c, 1, shape,
                    NET_INIT_ZEROS, false, e) ||
        !add_tensor(n, i, "running_var", NET_STORE_BUFFER, d->buf_off + (size_t)c, c, 1, shape,
                    NET_INIT_ONES, false, e) ||
        !add_tensor(n, i, "num_batches_tracked", NET_STORE_COUNTER, (size_t)d->counter, 1, 0,
                    shape, NET_INIT_ZEROS, false, e))
        return -1;
    int64_t *cnt = realloc(n->counters, (size_t)n->n_counters * sizeof *cnt);
    if (!cnt) return err_set(e, ERR_RUNTIME, "net: out of memory");
    n->counters = cnt;
    cnt[d->counter] = 0;
    return i;
}

int net_add_relu(net_t *n, int input, err_t *e) {
    return add_node(n, NODE_RELU, "", input, NET_NO_INPUT, e);
}

int net_add_relu6(net_t *n, int input, err_t *e) {
    return add_node(n, NODE_RELU6, "", input, NET_NO_INPUT, e);
}

int net_add_add(net_t *n, int a, int b, err_t *e) {
    if (a == b)
        return err_set(e, ERR_RUNTIME, "net: add of node %d to itself (scale it instead)", a);
    if (a >= NET_INPUT && b >= NET_INPUT && a < n->n_nodes && b < n->n_nodes &&
        build_channels(n, a) != build_channels(n, b))
        return err_set(e, ERR_INPUT, "net: add of %d and %d channels", build_channels(n, a),
                       build_channels(n, b));
    return add_node(n, NODE_ADD, "", a, b, e);
}

int net_add_dropout(net_t *n, int input, double p, err_t *e) {
    if (!(p >= 0.0 && p <= 1.0))
        return err_set(e, ERR_INPUT, "net: dropout probability %g is outside [0, 1]", p);
    int i = add_node(n, NODE_DROPOUT, "", input, NET_NO_INPUT, e);
    if (i < 0) return -1;
    if (i > 0xffff)
        return err_set(e, ERR_INPUT, "net: dropout at node %d: the mask key holds node indices below 65536", i);
    n->nodes[i].p = p;
    n->has_dropout = true;
    return i;
}

int net_add_avgpool(net_t *n, int input, err_t *e) {
    return net_add_avgpool2(n, input, 1, 1, e);
}

int net_add_avgpool2(net_t *n, int input, int out_h, int out_w, err_t *e) {
    if (out_h < 1 || out_w < 1 || out_h > 4096 || out_w > 4096)
        return err_set(e, ERR_INPUT, "net: avgpool output %dx%d is outside [1, 4096]", out_h, out_w);
    int i = add_node(n, NODE_AVGPOOL, "", input, NET_NO_INPUT, e);
    if (i < 0) return -1;
    n->nodes[i].out_h = out_h;
    n->nodes[i].out_w = out_w;
    return i;
}

int net_add_maxpool(net_t *n, int input, int kernel, int stride, int pad, err_t *e) {
    if (kernel < 1 || stride < 1 || pad < 0 || 2 * pad > kernel)
        return err_set(e, ERR_INPUT, "net: maxpool: bad geometry (kernel %d, stride %d, pad %d; pad must "
                       "be at most half the kernel)", kernel, stride, pad);
    int i = add_node(n, NODE_MAXPOOL, "", input, NET_NO_INPUT, e);
    if (i < 0) return -1;
    n->nodes[i].kernel = kernel;
    n->nodes[i].stride = stride;
    n->nodes[i].pad = pad;
    return i;
}

/* The linear layer's input features: channels x the input's map where building knows
 * it (net.h), else the channels (a 1x1 map, checked at bind). */
int net_add_linear(net_t *n, const char *prefix, int input, int out_features, err_t *e) {
    if (out_features < 1)
        return err_set(e, ERR_INPUT, "net: linear %s: out_features %d < 1", prefix, out_features);
    if (input < NET_INPUT || input >= n->n_nodes)
        return err_set(e, ERR_RUNTIME, "net: linear %s names input %d, which does not exist yet", prefix, input);
    int in_c = build_channels(n, input), mh = 1, mw = 1;
    if (!build_map(n, input, &mh, &mw)) mh = mw = 1;
    int in_f = in_c * mh * mw;
    int i = add_node(n, NODE_LINEAR, prefix, input, NET_NO_INPUT, e);
    if (i < 0) return -1;
    node_t *d = &n->nodes[i];
    d->out_c = out_features;
    d->has_params = true;
    d->w_off = n->n_params;
    d->w_numel = (size_t)out_features * in_f;
    d->b_off = d->w_off + d->w_numel;
    n->n_params += d->w_numel + (size_t)out_features;
    int64_t ws[2] = {out_features, in_f}, bs[1] = {out_features};
    net_tensor_t *t = add_tensor(n, i, "weight", NET_STORE_PARAM, d->w_off, d->w_numel, 2, ws,
                                 NET_INIT_LINEAR_UNIFORM, false, e);
    if (!t) return -1;
    if (mh * mw > 1) {
        t->flat_c = in_c;
        t->flat_h = mh;
        t->flat_w = mw;
    }
    if (!add_tensor(n, i, "bias", NET_STORE_PARAM, d->b_off, out_features, 1, bs,
                    NET_INIT_LINEAR_UNIFORM, true, e))
        return -1;
    return i;
}

int net_set_init(net_t *n, const char *tensor_name, net_init_t init, err_t *e) {
    for (int i = 0; i < n->n_tensors; i++) {
        net_tensor_t *t = &n->tensors[i];
        if (strcmp(t->name, tensor_name)) continue;
        if (init < 0 || init > NET_INIT_NORMAL_0_01 || t->store == NET_STORE_COUNTER ||
            (init == NET_INIT_KAIMING_FAN_OUT && !t->conv_weight))
            return err_set(e, ERR_INPUT, "net: init %d does not apply to %s", (int)init, tensor_name);
        t->init = init;
        return 0;
    }
    return err_set(e, ERR_INPUT, "net: net_set_init: no tensor %s", tensor_name);
}

bool net_has_dropout(const net_t *n) { return n->has_dropout; }

/* ---- introspection ---- */
int net_num_nodes(const net_t *n) { return n->n_nodes; }
node_kind_t net_node_kind(const net_t *n, int i) { return n->nodes[i].kind; }
int net_num_tensors(const net_t *n) { return n->n_tensors; }
const net_tensor_t *net_tensor(const net_t *n, int i) { return &n->tensors[i]; }
size_t net_num_params(const net_t *n) { return n->n_params; }
size_t net_num_buffers(const net_t *n) { return n->n_buffers; }
int net_num_counters(const net_t *n) { return n->n_counters; }
int net_in_channels(const net_t *n) { return n->in_c; }
backend_t *net_backend(const net_t *n) { return n->be; }
dtype_t net_act_dtype(const net_t *n) { return n->dt; }
int net_max_batch(const net_t *n) { return n->max_batch; }
float *net_params(net_t *n) { return n->params; }
float *net_grads(net_t *n) { return n->grads; }
float *net_buffers(net_t *n) { return n->buffers; }
int64_t *net_counters(net_t *n) { return n->counters; }
void *net_input(net_t *n) { return n->input; }

const void *net_logits(const net_t *n) {
    return n->be && n->n_nodes ? n->nodes[n->n_nodes - 1].y : NULL;
}

int net_num_classes(const net_t *n) {
    for (int i = n->n_nodes - 1; i >= 0; i--)
        if (n->nodes[i].kind == NODE_LINEAR) return n->nodes[i].out_c;
    return 0;
}

const net_tensor_t *net_find_tensor(const net_t *n, const char *name) {
    for (int i = 0; i < n->n_tensors; i++)
        if (!strcmp(n->tensors[i].name, name)) return &n->tensors[i];
    return NULL;
}

/* ---- planning ---- */

typedef struct plan {
    int *h, *w, *c;          /* per node output */
    int *slot;               /* gradient slot per node (-1: none) */
    size_t *slot_elems;      /* per slot, per sample */
    int n_slots;
    size_t act_elems;        /* sum of all outputs, per sample */
    size_t max_elems;        /* largest output, per sample */
    int max_c;               /* widest BN */
} plan_t;

static void plan_free(plan_t *p) {
    free(p->h);
    free(p->w);
    free(p->c);
    free(p->slot);
    free(p->slot_elems);
    memset(p, 0, sizeof *p);
}

/* Computes every node's output shape for in_h x in_w inputs and assigns gradient slots
 * by liveness over the backward order. dual (a backend with bn_apply_dual): the input of
 * each shortcut BN net_dual_bn names comes alive with the add-relu BN's backward, which
 * writes its gradient (bn_bwd_apply_dual), not with the shortcut's own. Fails with
 * ERR_INPUT if the input is too small. */
static int plan_net(const net_t *n, int in_h, int in_w, bool dual, plan_t *p, err_t *e) {
    memset(p, 0, sizeof *p);
    int nn = n->n_nodes;
    if (nn == 0) return err_set(e, ERR_RUNTIME, "net: no nodes");
    p->h = calloc((size_t)nn, sizeof(int));
    p->w = calloc((size_t)nn, sizeof(int));
    p->c = calloc((size_t)nn, sizeof(int));
    p->slot = calloc((size_t)nn, sizeof(int));
    p->slot_elems = calloc((size_t)nn, sizeof(size_t));
    bool *slot_busy = calloc((size_t)nn, sizeof(bool));
    if (!p->h || !p->w || !p->c || !p->slot || !p->slot_elems || !slot_busy) {
        free(slot_busy);
        plan_free(p);
        return err_set(e, ERR_RUNTIME, "net: out of memory planning");
    }
    for (int i = 0; i < nn; i++) {
        const node_t *d = &n->nodes[i];
        int a = d->in[0];
        int ih = a == NET_INPUT ? in_h : p->h[a], iw = a == NET_INPUT ? in_w : p->w[a];
        int ic = a == NET_INPUT ? n->in_c : p->c[a];
        switch (d->kind) {
        case NODE_CONV: {
            int oh = (ih + 2 * d->pad - d->kernel) / d->stride + 1;
            int ow = (iw + 2 * d->pad - d->kernel) / d->stride + 1;
            if (ih + 2 * d->pad < d->kernel || iw + 2 * d->pad < d->kernel || oh < 1 || ow < 1) {
                free(slot_busy);
                plan_free(p);
                return err_set(e, ERR_INPUT,
                               "net: input %dx%d is too small: %s sees %dx%d, less than its %dx%d kernel; "
                               "use larger images", in_h, in_w, d->prefix, ih, iw, d->kernel, d->kernel);
            }
            p->h[i] = oh; p->w[i] = ow; p->c[i] = d->out_c;
            break;
        }
        case NODE_MAXPOOL: {
            if (ih + 2 * d->pad < d->kernel || iw + 2 * d->pad < d->kernel) {
                free(slot_busy);
                plan_free(p);
                return err_set(e, ERR_INPUT, "net: input %dx%d is too small: the max pool sees %dx%d, "
                               "less than its %dx%d window; use larger images", in_h, in_w, ih, iw,
                               d->kernel, d->kernel);
            }
            p->h[i] = (ih + 2 * d->pad - d->kernel) / d->stride + 1;
            p->w[i] = (iw + 2 * d->pad - d->kernel) / d->stride + 1;
            p->c[i] = ic;
            break;
        }
        case NODE_AVGPOOL: p->h[i] = d->out_h; p->w[i] = d->out_w; p->c[i] = ic; break;
        case NODE_LINEAR: p->h[i] = 1; p->w[i] = 1; p->c[i] = d->out_c; break;
        default: {
            p->h[i] = ih; p->w[i] = iw; p->c[i] = ic;
            int b = d->in[1];
            if (b != NET_NO_INPUT) {
                int bh = b == NET_INPUT ? in_h : p->h[b], bw = b == NET_INPUT ? in_w : p->w[b];
                int bc = b == NET_INPUT ? n->in_c : p->c[b];
                if (bh != ih || bw != iw || bc != ic) {
                    free(slot_busy);
                    plan_free(p);
                    return err_set(e, ERR_INPUT, "net: node %d (%s %s) adds shapes %dx%dx%d and %dx%dx%d",
                                   i, node_kind_names[d->kind], d->prefix, ih, iw, ic, bh, bw, bc);
                }
            }
            if (net_is_bn(d->kind) && ic > p->max_c) p->max_c = ic;
        }
        }
        size_t el = (size_t)p->h[i] * p->w[i] * p->c[i];
        p->act_elems += el;
        if (el > p->max_elems) p->max_elems = el;
        p->slot[i] = -1;
    }
    /* liveness: walking backward, a node's gradient comes alive when its first consumer
     * (the latest in forward order) runs backward and dies after its own backward */
    int last = nn - 1;
    p->slot[last] = 0;
    p->slot_elems[0] = (size_t)p->h[last] * p->w[last] * p->c[last];
    slot_busy[0] = true;
    p->n_slots = 1;
    for (int j = nn - 1; j >= 0; j--) {
        const node_t *d = &n->nodes[j];
        int z = dual ? net_dual_bn(n, j) : -1;
        for (int k = 0; k < 3; k++) {
            int a = k < 2 ? d->in[k] : z >= 0 ? n->nodes[z].in[0] : -1;
            if (a < 0 || p->slot[a] >= 0) continue;
            size_t need = (size_t)p->h[a] * p->w[a] * p->c[a];
            /* the smallest free slot that fits, else the largest free one (grown) */
            int best = -1;
            for (int s = 0; s < p->n_slots; s++) {
                if (slot_busy[s]) continue;
                if (best < 0) { best = s; continue; }
                bool fits = p->slot_elems[s] >= need, best_fits = p->slot_elems[best] >= need;
                if (fits && (!best_fits || p->slot_elems[s] < p->slot_elems[best])) best = s;
                else if (!fits && !best_fits && p->slot_elems[s] > p->slot_elems[best]) best = s;
            }
            if (best < 0) best = p->n_slots++;
            if (p->slot_elems[best] < need) p->slot_elems[best] = need;
            slot_busy[best] = true;
            p->slot[a] = best;
        }
        if (p->slot[j] >= 0) slot_busy[p->slot[j]] = false;
    }
    free(slot_busy);
    return 0;
}

size_t net_activation_bytes(const net_t *n, int max_batch, int in_h, int in_w,
                            size_t act_elem_bytes) {
    plan_t p;
    err_t e = {0};
    if (plan_net(n, in_h, in_w, false, &p, &e) < 0) return 0;
    size_t per_sample = p.act_elems + 2 * p.max_elems + (size_t)in_h * in_w * n->in_c;
    for (int s = 0; s < p.n_slots; s++) per_sample += p.slot_elems[s];
    size_t bytes = per_sample * (size_t)max_batch * act_elem_bytes;
    bytes += (2 * n->n_buffers + 2 * (size_t)p.max_c) * sizeof(float);
    if (n->has_dropout) bytes += sizeof(dropout_key_t);
    plan_free(&p);
    return bytes;
}

double net_forward_flops(const net_t *n, int in_h, int in_w) {
    plan_t p;
    err_t e = {0};
    if (plan_net(n, in_h, in_w, false, &p, &e) < 0) return 0;
    double f = 0;
    for (int i = 0; i < n->n_nodes; i++) {
        const node_t *d = &n->nodes[i];
        if (d->kind == NODE_CONV || d->kind == NODE_LINEAR)
            f += 2.0 * (double)p.h[i] * p.w[i] * (double)d->w_numel;
    }
    plan_free(&p);
    return f;
}

int net_plan_shapes(const net_t *n, int in_h, int in_w, int *h, int *w, int *c, err_t *e) {
    plan_t p;
    if (plan_net(n, in_h, in_w, false, &p, e) < 0) return -1;
    for (int i = 0; i < n->n_nodes; i++) {
        h[i] = p.h[i];
        w[i] = p.w[i];
        c[i] = p.c[i];
    }
    plan_free(&p);
    return 0;
}

void net_print(const net_t *n, void *file) {
    FILE *f = file;
    for (int i = 0; i < n->n_nodes; i++) {
        const node_t *d = &n->nodes[i];
        fprintf(f, "%3d %-11s %-24s <- %d", i, node_kind_names[d->kind], d->prefix, d->in[0]);
        if (d->in[1] != NET_NO_INPUT) fprintf(f, ",%d", d->in[1]);
        if (n->be) fprintf(f, "  [n,%d,%d,%d] gslot %d", d->h, d->w, d->c, d->gslot);
        fputc('\n', f);
    }
}

/* ---- binding ---- */

/* backend_alloc with a zero fill; NULL + e on failure. */
static void *balloc(net_t *n, size_t bytes, err_t *e) {
    backend_t *be = n->be;
    void *p = be->ops->alloc(be, bytes ? bytes : 4);
    if (!p) {
        err_set(e, ERR_RUNTIME, "net: backend allocation of %zu bytes failed: %s", bytes, be->err.msg);
        return NULL;
    }
    if (be->ops->zero(be, p, bytes ? bytes : 4) < 0) {
        err_set(e, ERR_RUNTIME, "net: zeroing %zu bytes failed: %s", bytes, be->err.msg);
        be->ops->release(be, p);
        return NULL;
    }
    return p;
}

int net_enable_soft_targets(net_t *n, err_t *e) {
    if (!n->be) return err_set(e, ERR_RUNTIME, "net_enable_soft_targets: net is not bound");
    if (n->targets) return 0;
    size_t classes = (size_t)n->nodes[n->n_nodes - 1].c;
    n->targets = balloc(n, (size_t)n->max_batch * classes * sizeof(float), e);
    return n->targets ? 0 : -1;
}

int net_bind(net_t *n, backend_t *be, int max_batch, int in_h, int in_w, dtype_t act_dt,
             err_t *e) {
    if (n->be) return err_set(e, ERR_RUNTIME, "net: already bound");
    if (max_batch < 1) return err_set(e, ERR_INPUT, "net: max_batch %d < 1", max_batch);
    if (act_dt < 0 || act_dt >= DT_COUNT) return err_set(e, ERR_INPUT, "net: bad act dtype");
    plan_t p;
    /* a shortcut BN applied inside its add-relu BN where the backend can (bn_dual_add) */
    bool dual_ops = be->ops->bn_apply_dual && be->ops->bn_bwd_reduce_dual && be->ops->bn_bwd_apply_dual;
    if (plan_net(n, in_h, in_w, dual_ops, &p, e) < 0) return -1;
    n->be = be;
    n->max_batch = max_batch;
    n->in_h = in_h;
    n->in_w = in_w;
    n->dt = act_dt;
    n->esz = backend_elem_size(be, act_dt);
    size_t B = (size_t)max_batch;
    int rc = -1;
    n->slots = calloc((size_t)p.n_slots, sizeof(void *));
    n->grad_written = calloc((size_t)n->n_nodes, sizeof(bool));
    if (!n->slots || !n->grad_written) {
        err_set(e, ERR_RUNTIME, "net: out of memory");
        goto done;
    }
    n->n_slots = p.n_slots;
    if (!(n->params = balloc(n, n->n_params * 4, e)) || !(n->grads = balloc(n, n->n_params * 4, e)) ||
        !(n->buffers = balloc(n, n->n_buffers * 4, e)) ||
        !(n->input = balloc(n, B * in_h * in_w * n->in_c * n->esz, e)) ||
        !(n->scratch[0] = balloc(n, B * p.max_elems * n->esz, e)) ||
        !(n->scratch[1] = balloc(n, B * p.max_elems * n->esz, e)) ||
        !(n->bn_mem = balloc(n, n->n_buffers * 4, e)) ||
        !(n->sum_dy = balloc(n, (size_t)p.max_c * 4, e)) ||
        !(n->sum_dy_xhat = balloc(n, (size_t)p.max_c * 4, e)) ||
        !(n->labels = balloc(n, B * 4, e)) || !(n->loss_sum = balloc(n, 4, e)) ||
        !(n->correct = balloc(n, 8, e)) ||
        (n->has_dropout && !(n->rng_key = balloc(n, sizeof(dropout_key_t), e))))
        goto done;
    if (act_dt != DT_F32 && !(n->shadow = balloc(n, n->n_params * n->esz, e))) goto done;
    for (int s = 0; s < p.n_slots; s++)
        if (!(n->slots[s] = balloc(n, B * p.slot_elems[s] * n->esz, e))) goto done;
    for (int i = 0; i < n->n_nodes; i++) {
        node_t *d = &n->nodes[i];
        d->h = p.h[i];
        d->w = p.w[i];
        d->c = p.c[i];
        d->gslot = p.slot[i];
        if (!(d->y = balloc(n, B * net_node_elems(n, i) * n->esz, e))) goto done;
        /* the mask of a BN + add + ReLU as bits where the backend keeps it so (its
         * bn_mask_bits); bn_remask recomputes the other BN + ReLUs' from x */
        d->mask = NULL;
        d->mask_ok = false;
        if (d->kind == NODE_BN_ADD_RELU && be->ops->bn_apply_mask && be->ops->bn_bwd_reduce_mask &&
            be->ops->bn_bwd_apply_mask && !(d->mask = balloc(n, (B * net_node_elems(n, i) + 7) / 8, e)))
            goto done;
        if (net_is_bn(d->kind)) {
            d->mean = n->bn_mem + d->buf_off;
            d->var = n->bn_mem + d->buf_off + d->c;
        }
        int a = d->in[0];
        int ah = a < 0 ? in_h : p.h[a], aw = a < 0 ? in_w : p.w[a], ac = a < 0 ? n->in_c : p.c[a];
        size_t in_f = (size_t)ah * aw * ac;
        if (d->kind == NODE_LINEAR && (size_t)d->out_c * in_f != d->w_numel) {
            err_set(e, ERR_INPUT, "net: %s expects %zu input features, but at %dx%d input its input is "
                    "a %dx%dx%d map (%zu features); use the input size the model was built for",
                    d->prefix, d->w_numel / (size_t)d->out_c, in_h, in_w, ah, aw, ac, in_f);
            goto done;
        }
    }
    for (int i = 0; i < n->n_nodes; i++) n->nodes[i].dual = n->nodes[i].dual_of = -1;
    for (int i = 0; i < n->n_nodes && dual_ops; i++) {
        node_t *d = &n->nodes[i];
        int z = net_dual_bn(n, i);
        if (z < 0) continue;
        d->dual = z;
        d->dual_ok = false;
        n->nodes[z].dual_of = i;
        if (!n->sum_dy2 && (!(n->sum_dy2 = balloc(n, (size_t)p.max_c * 4, e)) ||
                            !(n->sum_dy_xhat2 = balloc(n, (size_t)p.max_c * 4, e))))
            goto done;
    }
    rc = 0;
done:
    plan_free(&p);
    return rc;
}

/* ---- init ---- */

/* Fills host[] (t->numel floats, torchvision layout) with tensor ti's initial values. */
static void init_tensor(const net_t *n, int ti, uint64_t seed, float *host) {
    const net_tensor_t *t = &n->tensors[ti];
    rng_t r = rng_make(seed, RNG_STREAM_INIT, (uint64_t)ti, 0);
    switch (t->init) {
    case NET_INIT_KAIMING_FAN_OUT: {
        double fan_out = (double)t->shape[0] * t->shape[2] * t->shape[3];
        double std = sqrt(2.0 / fan_out);
        for (size_t i = 0; i < t->numel; i++) host[i] = (float)(std * rng_normal(&r));
        break;
    }
    case NET_INIT_ONES:
        for (size_t i = 0; i < t->numel; i++) host[i] = 1.0f;
        break;
    case NET_INIT_ZEROS:
        memset(host, 0, t->numel * sizeof(float));
        break;
    case NET_INIT_NORMAL_0_01:
        for (size_t i = 0; i < t->numel; i++) host[i] = (float)(0.01 * rng_normal(&r));
        break;
    case NET_INIT_LINEAR_UNIFORM: {
        /* weight and bias both use fan_in = in features (linear) or in/groups * kh * kw
         * (conv): the weight's elements per output */
        const node_t *d = &n->nodes[t->node];
        double fan_in = (double)d->w_numel / d->out_c;
        double bound = 1.0 / sqrt(fan_in);
        for (size_t i = 0; i < t->numel; i++)
            host[i] = (float)((2.0 * rng_uniform_f64(&r) - 1.0) * bound);
        break;
    }
    }
}

/* OIHW (o, i, kh, kw) -> KRSC (o, kh, kw, i) for one conv weight. */
void net_oihw_to_krsc(const float *src, float *dst, const int64_t shape[4]) {
    int64_t O = shape[0], I = shape[1], H = shape[2], W = shape[3];
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < I; i++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++)
                    dst[((o * H + h) * W + w) * I + i] = src[((o * I + i) * H + h) * W + w];
}

/* KRSC -> OIHW, the inverse of net_oihw_to_krsc. */
void net_krsc_to_oihw(const float *src, float *dst, const int64_t shape[4]) {
    int64_t O = shape[0], I = shape[1], H = shape[2], W = shape[3];
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < I; i++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++)
                    dst[((o * I + i) * H + h) * W + w] = src[((o * H + h) * W + w) * I + i];
}

int net_init(net_t *n, uint64_t seed, err_t *e) {
    if (!n->be) return err_set(e, ERR_RUNTIME, "net_init: net is not bound");
    float *hp = malloc((n->n_params ? n->n_params : 1) * sizeof(float));
    float *hb = malloc((n->n_buffers ? n->n_buffers : 1) * sizeof(float));
    float *tmp = NULL;
    size_t maxw = 1;
    for (int i = 0; i < n->n_tensors; i++)
        if (n->tensors[i].numel > maxw) maxw = n->tensors[i].numel;
    tmp = malloc(maxw * sizeof(float));
    int rc = -1;
    if (!hp || !hb || !tmp) {
        err_set(e, ERR_RUNTIME, "net_init: out of memory");
        goto done;
    }
    for (int i = 0; i < n->n_tensors; i++) {
        const net_tensor_t *t = &n->tensors[i];
        if (t->store == NET_STORE_COUNTER) {
            n->counters[t->offset] = 0;
            continue;
        }
        float *dst = (t->store == NET_STORE_PARAM ? hp : hb) + t->offset;
        if (t->conv_weight) {
            init_tensor(n, i, seed, tmp);
            net_oihw_to_krsc(tmp, dst, t->shape);
        } else {
            init_tensor(n, i, seed, dst);
        }
    }
    if (net_upload_params(n, hp, e) < 0 || net_upload_buffers(n, hb, e) < 0) goto done;
    rc = 0;
done:
    free(hp);
    free(hb);
    free(tmp);
    return rc;
}

/* ---- host copies ---- */

/* Copies between host and a flat backend array, naming what in errors. */
static int xfer(net_t *n, bool up, void *dev, void *host, size_t bytes, const char *what, err_t *e) {
    if (!n->be) return err_set(e, ERR_RUNTIME, "net: %s: net is not bound", what);
    if (!bytes) return 0;
    backend_t *be = n->be;
    int rc = up ? be->ops->upload(be, dev, host, bytes) : be->ops->download(be, host, dev, bytes);
    if (rc < 0) return err_set(e, ERR_RUNTIME, "net: %s: %s", what, be->err.msg);
    return 0;
}

int net_zero_grads(net_t *n, err_t *e) {
    if (!n->be) return err_set(e, ERR_RUNTIME, "net_zero_grads: net is not bound");
    if (n->be->ops->zero(n->be, n->grads, n->n_params * 4) < 0)
        return err_set(e, ERR_RUNTIME, "net_zero_grads: %s", n->be->err.msg);
    return 0;
}

int net_download_params(net_t *n, float *host, err_t *e) {
    return xfer(n, false, n->params, host, n->n_params * 4, "download params", e);
}
int net_upload_params(net_t *n, const float *host, err_t *e) {
    return xfer(n, true, n->params, (void *)host, n->n_params * 4, "upload params", e);
}
int net_download_grads(net_t *n, float *host, err_t *e) {
    return xfer(n, false, n->grads, host, n->n_params * 4, "download grads", e);
}
int net_download_buffers(net_t *n, float *host, err_t *e) {
    return xfer(n, false, n->buffers, host, n->n_buffers * 4, "download buffers", e);
}
int net_upload_buffers(net_t *n, const float *host, err_t *e) {
    return xfer(n, true, n->buffers, (void *)host, n->n_buffers * 4, "upload buffers", e);
}

int net_input_from_f32(net_t *n, const float *dev, int batch, err_t *e) {
    if (!n->be) return err_set(e, ERR_RUNTIME, "net_input_from_f32: net is not bound");
    if (batch < 1 || batch > n->max_batch)
        return err_set(e, ERR_RUNTIME, "net_input_from_f32: batch %d outside [1, %d]", batch, n->max_batch);
    size_t count = (size_t)batch * n->in_h * n->in_w * n->in_c;
    backend_t *be = n->be;
    int rc = n->dt == DT_F32 ? be->ops->copy(be, n->input, dev, count * 4)
                             : be->ops->cast(be, (int64_t)count, dev, DT_F32, n->input, n->dt);
    if (rc < 0) return err_set(e, ERR_RUNTIME, "net_input_from_f32: %s", be->err.msg);
    return 0;
}

int net_upload_input(net_t *n, const float *host_nhwc, int batch, err_t *e) {
    if (!n->be) return err_set(e, ERR_RUNTIME, "net_upload_input: net is not bound");
    if (batch < 1 || batch > n->max_batch)
        return err_set(e, ERR_RUNTIME, "net_upload_input: batch %d outside [1, %d]", batch, n->max_batch);
    size_t count = (size_t)batch * n->in_h * n->in_w * n->in_c;
    backend_t *be = n->be;
    if (n->dt == DT_F32) return xfer(n, true, n->input, (void *)host_nhwc, count * 4, "upload input", e);
    /* stage the fp32 images in scratch[0] (at least as large) and cast */
    size_t scratch_elems = 0;
    for (int i = 0; i < n->n_nodes; i++)
        if (net_node_elems(n, i) > scratch_elems) scratch_elems = net_node_elems(n, i);
    if (count * 4 <= scratch_elems * n->max_batch * n->esz) {
        if (xfer(n, true, n->scratch[0], (void *)host_nhwc, count * 4, "upload input", e) < 0) return -1;
        if (be->ops->cast(be, (int64_t)count, n->scratch[0], DT_F32, n->input, n->dt) < 0)
            return err_set(e, ERR_RUNTIME, "net_upload_input: cast: %s", be->err.msg);
        return 0;
    }
    return err_set(e, ERR_RUNTIME, "net_upload_input: no staging room for %zu floats", count);
}
