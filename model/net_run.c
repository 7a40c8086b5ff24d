/* net_run.c: forward, loss and backward of a bound net, written once against the
 * backend op table (no backend branches).
 *
 * Forward walks the nodes in order; under AMP it first casts the fp32 master parameters
 * into the half shadow, and convs/linears read their weights from it. Backward walks the
 * nodes in reverse: a node's output gradient lives in its planned slot; a node's input
 * gradient is written straight into the input's slot by the first consumer to get
 * there and summed in (via a scratch buffer) by later ones. After each node with
 * parameters it tells hooks->grads_ready how far down the gradient array is final.
 * Where the backend has the fused convolution ops (backend.h, issue 25) it calls them
 * on the nodes net_fusion.h names: a conv and the BN statistics after it, a conv's data
 * gradient and the backward reduction of the BN before it, a conv's data gradient added
 * into its input's gradient (no scratch, no add); else the ops one by one. Where it has
 * the mask-bit ops, a BN + add + ReLU keeps its mask as bits in a training forward and
 * both backward passes read them (node mask_ok says they were written); where it has the
 * dual ops, a projection shortcut's BN (net_dual_bn) is applied inside the add-relu BN's
 * forward and backward, its own apply skipped and no gradient given to its output
 * (node dual_ok), falling back to the separate ops where the backend answers 1.
 * What it does not do: double backward, backward through an eval forward.
 */
#include "model/net_fusion.h"
#include "model/net_impl.h"

#include <stdio.h>
#include <string.h>

#include "util/json.h"

/* Fails with the backend's message when an op returned -1. */
#define OP(call, what)                                                                      \
    do {                                                                                    \
        if ((call) < 0)                                                                     \
            return err_set(e, ERR_RUNTIME, "net: %s (%s): %s", what, d->prefix, be->err.msg); \
    } while (0)

/* The act-dtype pointer of a node's output, or of the input batch for NET_INPUT. */
static const void *node_out(const net_t *n, const void *x, int i) {
    return i == NET_INPUT ? x : n->nodes[i].y;
}

/* The conv_shape of conv node i for batch rows. */
static conv_shape_t conv_geom(const net_t *n, int i, int batch) {
    const node_t *d = &n->nodes[i];
    int a = d->in[0];
    conv_shape_t s;
    memset(&s, 0, sizeof s);
    s.n = batch;
    s.h = a == NET_INPUT ? n->in_h : n->nodes[a].h;
    s.w = a == NET_INPUT ? n->in_w : n->nodes[a].w;
    s.c = a == NET_INPUT ? n->in_c : n->nodes[a].c;
    s.k = d->out_c;
    s.r = s.s = d->kernel;
    s.stride = d->stride;
    s.pad = d->pad;
    s.p = d->h;
    s.q = d->w;
    s.groups = d->groups;
    return s;
}

/* The pool_shape of maxpool or avgpool node i for batch rows. */
static pool_shape_t pool_geom(const net_t *n, int i, int batch) {
    const node_t *d = &n->nodes[i];
    int a = d->in[0];
    pool_shape_t s = {.n = batch, .kernel = d->kernel, .stride = d->stride, .pad = d->pad,
                      .p = d->h, .q = d->w, .c = d->c};
    s.h = a == NET_INPUT ? n->in_h : n->nodes[a].h;
    s.w = a == NET_INPUT ? n->in_w : n->nodes[a].w;
    return s;
}

int net_conv_geometry(const net_t *n, int i, int batch, conv_shape_t *s, const char **name) {
    if (i < 0 || i >= n->n_nodes || n->nodes[i].kind != NODE_CONV || !n->be) return -1;
    *s = conv_geom(n, i, batch);
    if (name) *name = n->nodes[i].prefix;
    return 0;
}

void net_write_conv_engines(const net_t *n, int batch, jw_t *w) {
    static const char *const dir[3] = {"fwd", "bwd_data", "bwd_filter"};
    backend_t *be = n->be;
    char buf[256];
    jw_arr_begin(w);
    for (int i = 0; i < n->n_nodes; i++) {
        conv_shape_t s, o;
        const char *name;
        if (net_conv_geometry(n, i, batch, &s, &name)) continue;
        int first = i;   /* one entry per distinct shape, listing its layers */
        for (int j = 0; j < i && first == i; j++)
            if (!net_conv_geometry(n, j, batch, &o, NULL) && !memcmp(&o, &s, sizeof s)) first = j;
        if (first != i) continue;
        jw_obj_begin(w);
        int len = snprintf(buf, sizeof buf, "n%d %dx%dx%d -> %d, %dx%d stride %d pad %d", s.n, s.h, s.w,
                           s.c, s.k, s.r, s.s, s.stride, s.pad);
        if (conv_groups(&s) > 1 && len > 0 && (size_t)len < sizeof buf)
            snprintf(buf + len, sizeof buf - (size_t)len, " groups %d", conv_groups(&s));
        jw_kstr(w, "shape", buf);
        jw_key(w, "layers");
        jw_arr_begin(w);
        for (int j = i; j < n->n_nodes; j++)
            if (!net_conv_geometry(n, j, batch, &o, &name) && !memcmp(&o, &s, sizeof s)) jw_str(w, name);
        jw_arr_end(w);
        for (int d = 0; d < 3 && be->ops->conv_engine; d++)
            if (be->ops->conv_engine(be, &s, d, buf, sizeof buf) == 0) jw_kstr(w, dir[d], buf);
        jw_obj_end(w);
    }
    jw_arr_end(w);
}

/* The weight a conv/linear computes with: the half shadow under AMP, else the master. */
static const void *node_weight(const net_t *n, const node_t *d) {
    if (n->shadow) return net_act_at(n, n->shadow, d->w_off);
    return n->params + d->w_off;
}

int net_set_rng_key(net_t *n, uint64_t seed, uint64_t epoch, int64_t first_sample,
                    int64_t sample_stride, err_t *e) {
    if (!n->be) return err_set(e, ERR_RUNTIME, "net_set_rng_key: net is not bound");
    if (first_sample < 0 || sample_stride < 1)
        return err_set(e, ERR_RUNTIME, "net_set_rng_key: first sample %lld, stride %lld",
                       (long long)first_sample, (long long)sample_stride);
    if (!n->has_dropout) return 0;
    dropout_key_t k = {.seed = seed, .epoch = epoch, .first_sample = first_sample,
                       .sample_stride = sample_stride};
    if (n->be->ops->upload(n->be, n->rng_key, &k, sizeof k) < 0)
        return err_set(e, ERR_RUNTIME, "net_set_rng_key: %s", n->be->err.msg);
    n->rng_key_set = true;
    return 0;
}

int net_set_rng_key_dev(net_t *n, const dropout_key_t *key, err_t *e) {
    if (!n->be) return err_set(e, ERR_RUNTIME, "net_set_rng_key_dev: net is not bound");
    if (!n->has_dropout) return 0;
    if (n->be->ops->copy(n->be, n->rng_key, key, sizeof *key) < 0)
        return err_set(e, ERR_RUNTIME, "net_set_rng_key_dev: %s", n->be->err.msg);
    n->rng_key_set = true;
    return 0;
}

/* The dropout node's forward: the masked, scaled input in training, a copy otherwise. */
static int dropout_forward(net_t *n, node_t *d, int i, const void *in0, int batch, bool train,
                           err_t *e) {
    backend_t *be = n->be;
    int64_t per = (int64_t)d->h * d->w * d->c;
    if (train && d->p > 0.0)
        OP(be->ops->dropout_fwd(be, batch, per, n->dt, d->p, (uint32_t)i, n->rng_key, in0, d->y),
           "dropout forward");
    else
        OP(be->ops->copy(be, d->y, in0, (size_t)batch * per * n->esz), "dropout (identity)");
    return 0;
}

int net_forward(net_t *n, const void *x, int batch, bool train, const net_hooks_t *hooks,
                err_t *e) {
    if (!n->be) return err_set(e, ERR_RUNTIME, "net_forward: net is not bound");
    if (batch < 1 || batch > n->max_batch)
        return err_set(e, ERR_RUNTIME, "net_forward: batch %d outside [1, %d] (max_batch at bind)",
                       batch, n->max_batch);
    if (train && n->has_dropout) {
        if (!n->rng_key_set)
            return err_set(e, ERR_RUNTIME, "net_forward: the net has dropout and no key was set for this "
                           "training forward (call net_set_rng_key before each one)");
        n->rng_key_set = false;
    }
    backend_t *be = n->be;
    if (n->shadow && be->ops->cast(be, (int64_t)n->n_params, n->params, DT_F32, n->shadow, n->dt) < 0)
        return err_set(e, ERR_RUNTIME, "net_forward: casting weights to %s: %s", dtype_names[n->dt],
                       be->err.msg);
    n->last_batch = batch;
    n->last_x = x;
    n->last_train = train;
    n->have_dlogits = false;
    int stats_done = -1;   /* the BN node whose statistics the conv before it computed */
    for (int i = 0; i < n->n_nodes; i++) {
        node_t *d = &n->nodes[i];
        const void *in0 = node_out(n, x, d->in[0]);
        int64_t m = (int64_t)batch * d->h * d->w;
        switch (d->kind) {
        case NODE_CONV: {
            conv_shape_t s = conv_geom(n, i, batch);
            int bn = train && be->ops->conv2d_fwd_bn_stats ? net_fused_stats_bn(n, i) : -1;
            if (bn >= 0) {
                node_t *b = &n->nodes[bn];
                OP(be->ops->conv2d_fwd_bn_stats(be, &s, n->dt, in0, node_weight(n, d), d->y, b->mean, b->var),
                   "conv forward + bn statistics");
                stats_done = bn;
            } else {
                OP(be->ops->conv2d_fwd(be, &s, n->dt, in0, node_weight(n, d), d->y), "conv forward");
            }
            if (d->has_bias)
                OP(be->ops->channel_bias_fwd(be, m, d->c, n->dt, n->params + d->b_off, d->y), "conv bias");
            break;
        }
        case NODE_BN:
        case NODE_BN_RELU:
        case NODE_BN_RELU6:
        case NODE_BN_ADD_RELU: {
            const float *mean = n->buffers + d->buf_off, *var = n->buffers + d->buf_off + d->c;
            const void *z = d->kind == NODE_BN_ADD_RELU ? node_out(n, x, d->in[1]) : NULL;
            const float *gamma = n->params + d->w_off, *beta = n->params + d->b_off;
            if (train) {
                float *run_mean = n->buffers + d->buf_off, *run_var = n->buffers + d->buf_off + d->c;
                bool sync = hooks && hooks->bn_sync_stats;
                d->count = m;
                /* bn_persist: statistics, running update and apply in one op (1: the
                 * backend cannot here, the separate ops below) */
                if (stats_done != i && !sync && be->ops->bn_fwd_fused && d->dual < 0 && d->dual_of < 0) {
                    int r = be->ops->bn_fwd_fused(be, m, d->c, n->dt, in0, d->mean, d->var, m, NET_BN_MOMENTUM,
                                                  run_mean, run_var, gamma, beta, NET_BN_EPS, z, net_bn_act(d->kind),
                                                  d->y, d->mask);
                    OP(r, "bn forward (one kernel)");
                    if (r == 0) {
                        n->counters[d->counter]++;
                        d->mask_ok = d->mask != NULL;
                        break;
                    }
                }
                if (stats_done != i && !sync && be->ops->bn_stats_running) {   /* one op (bn_fold_running) */
                    OP(be->ops->bn_stats_running(be, m, d->c, n->dt, in0, d->mean, d->var, m, NET_BN_MOMENTUM,
                                                 run_mean, run_var),
                       "bn statistics + running statistics");
                } else {
                    if (stats_done != i)
                        OP(be->ops->bn_stats(be, m, d->c, n->dt, in0, d->mean, d->var), "bn statistics");
                    if (sync && hooks->bn_sync_stats(hooks->ctx, d->c, d->mean, d->var, m, &d->count) < 0)
                        return err_wrap(e, "net: SyncBN statistics of %s", d->prefix);
                    OP(be->ops->bn_update_running(be, d->c, d->mean, d->var, d->count, NET_BN_MOMENTUM, run_mean,
                                                  run_var),
                       "bn running statistics");
                }
                n->counters[d->counter]++;
                mean = d->mean;
                var = d->var;
            }
            /* bn_dual_add: a shortcut BN's output is made inside the kernel of the
             * add-relu BN that adds it (its statistics were taken above) */
            if (train && d->dual_of >= 0) break;
            if (train && d->dual >= 0) {
                node_t *s = &n->nodes[d->dual];
                const void *x2 = node_out(n, x, s->in[0]);
                const float *g2 = n->params + s->w_off, *b2 = n->params + s->b_off;
                int r = be->ops->bn_apply_dual(be, m, d->c, n->dt, in0, mean, var, gamma, beta, x2, s->mean, s->var,
                                               g2, b2, NET_BN_EPS, net_bn_act(d->kind), d->y, d->mask);
                OP(r, "bn apply (with the shortcut's bn)");
                d->dual_ok = r == 0;
                if (r == 0) {
                    d->mask_ok = d->mask != NULL;
                    break;
                }
                /* the backend cannot here: the shortcut's own apply, then this one's */
                OP(be->ops->bn_apply(be, m, d->c, n->dt, x2, s->mean, s->var, g2, b2, NET_BN_EPS, NULL, ACT_NONE,
                                     s->y),
                   "bn apply (shortcut)");
            }
            if (train && d->mask) {   /* with the mask bits where the backend can (1: cannot) */
                int r = be->ops->bn_apply_mask(be, m, d->c, n->dt, in0, mean, var, gamma, beta, NET_BN_EPS, z,
                                               net_bn_act(d->kind), d->y, d->mask);
                OP(r, "bn apply (mask bits)");
                d->mask_ok = r == 0;
                if (r == 0) break;
            }
            OP(be->ops->bn_apply(be, m, d->c, n->dt, in0, mean, var, gamma, beta, NET_BN_EPS, z,
                                 net_bn_act(d->kind), d->y),
               "bn apply");
            break;
        }
        case NODE_RELU:
            OP(be->ops->relu_fwd(be, m * d->c, n->dt, in0, d->y), "relu forward");
            break;
        case NODE_RELU6:
            OP(be->ops->relu6_fwd(be, m * d->c, n->dt, in0, d->y), "relu6 forward");
            break;
        case NODE_DROPOUT:
            if (dropout_forward(n, d, i, in0, batch, train, e) < 0) return -1;
            break;
        case NODE_ADD:
            OP(be->ops->add(be, m * d->c, n->dt, in0, node_out(n, x, d->in[1]), d->y), "add");
            break;
        case NODE_AVGPOOL: {
            pool_shape_t s = pool_geom(n, i, batch);
            if (s.p == 1 && s.q == 1)
                OP(be->ops->avgpool_fwd(be, batch, s.h * s.w, d->c, n->dt, in0, d->y), "avgpool forward");
            else
                OP(be->ops->adaptive_avgpool_fwd(be, &s, n->dt, in0, d->y), "adaptive avgpool forward");
            break;
        }
        case NODE_MAXPOOL: {
            pool_shape_t s = pool_geom(n, i, batch);
            OP(be->ops->maxpool_fwd(be, &s, n->dt, in0, d->y), "maxpool forward");
            break;
        }
        case NODE_LINEAR: {
            int in_f = (int)(d->w_numel / (size_t)d->out_c);
            OP(be->ops->linear_fwd(be, batch, in_f, d->out_c, n->dt, in0, node_weight(n, d),
                                   n->params + d->b_off, d->y),
               "linear forward");
            break;
        }
        case NODE_KIND_COUNT:
            break;
        }
    }
    return 0;
}

int net_loss_async(net_t *n, const int32_t *labels, float smoothing, float grad_scale,
                   const step_ctl_t *ctl, float *loss_sum, int32_t *correct, err_t *e) {
    if (!n->be || !n->last_batch) return err_set(e, ERR_RUNTIME, "net_loss: no forward to take the loss of");
    int batch = n->last_batch, classes = n->nodes[n->n_nodes - 1].c;
    backend_t *be = n->be;
    if (labels) {
        for (int i = 0; i < batch; i++)
            if (labels[i] < 0 || labels[i] >= classes)
                return err_set(e, ERR_INPUT, "net_loss: label %d of sample %d is outside [0, %d); "
                               "check the dataset's classes and model.num_classes", labels[i], i, classes);
        if (be->ops->upload(be, n->labels, labels, (size_t)batch * 4) < 0)
            return err_set(e, ERR_RUNTIME, "net_loss: uploading labels: %s", be->err.msg);
    }
    const node_t *d = &n->nodes[n->n_nodes - 1];
    void *dlogits = n->last_train ? n->slots[d->gslot] : NULL;
    OP(be->ops->softmax_xent(be, batch, classes, n->dt, d->y, n->labels, smoothing, grad_scale, ctl,
                             dlogits, loss_sum ? loss_sum : n->loss_sum, correct ? correct : n->correct),
       "softmax cross-entropy");
    n->have_dlogits = n->last_train;
    return 0;
}

/* Reads the net's own loss sum and hits back into out. */
static int loss_readback(net_t *n, net_loss_out_t *out, err_t *e) {
    backend_t *be = n->be;
    float loss;
    int32_t correct[2];
    if (be->ops->download(be, &loss, n->loss_sum, 4) < 0 || be->ops->download(be, correct, n->correct, 8) < 0)
        return err_set(e, ERR_RUNTIME, "net_loss: downloading the loss: %s", be->err.msg);
    if (out) {
        out->loss_sum = loss;
        out->correct1 = correct[0];
        out->correct5 = correct[1];
    }
    return 0;
}

int net_loss(net_t *n, const int32_t *labels, float smoothing, float grad_scale,
             net_loss_out_t *out, err_t *e) {
    if (net_loss_async(n, labels, smoothing, grad_scale, NULL, NULL, NULL, e)) return -1;
    return loss_readback(n, out, e);
}

int net_loss_soft(net_t *n, const float *targets, float grad_scale, net_loss_out_t *out, err_t *e) {
    if (net_loss_soft_async(n, targets, grad_scale, NULL, NULL, NULL, e)) return -1;
    return loss_readback(n, out, e);
}

int net_loss_soft_async(net_t *n, const float *targets, float grad_scale, const step_ctl_t *ctl,
                        float *loss_sum, int32_t *correct, err_t *e) {
    if (!n->be || !n->last_batch) return err_set(e, ERR_RUNTIME, "net_loss: no forward to take the loss of");
    if (!n->targets) return err_set(e, ERR_RUNTIME, "net_loss: soft targets not enabled (net_enable_soft_targets)");
    int batch = n->last_batch, classes = n->nodes[n->n_nodes - 1].c;
    backend_t *be = n->be;
    if (targets && be->ops->upload(be, n->targets, targets, (size_t)batch * classes * sizeof(float)) < 0)
        return err_set(e, ERR_RUNTIME, "net_loss: uploading soft targets: %s", be->err.msg);
    const node_t *d = &n->nodes[n->n_nodes - 1];
    void *dlogits = n->last_train ? n->slots[d->gslot] : NULL;
    OP(be->ops->softmax_xent_soft(be, batch, classes, n->dt, d->y, n->targets, grad_scale, ctl, dlogits,
                                  loss_sum ? loss_sum : n->loss_sum, correct ? correct : n->correct),
       "soft-target cross-entropy");
    n->have_dlogits = n->last_train;
    return 0;
}

float *net_targets(net_t *n) { return n->targets; }

int32_t *net_labels(net_t *n) { return n->labels; }

void net_graph_replayed(net_t *n, const void *x, int batch) {
    n->last_batch = batch;
    n->last_x = x;
    n->last_train = true;
    n->have_dlogits = false;   /* backward consumed them */
    n->rng_key_set = false;   /* the replay consumed the key */
    for (int i = 0; i < n->n_nodes; i++) {
        node_t *d = &n->nodes[i];
        if (!net_is_bn(d->kind)) continue;
        d->count = (int64_t)batch * d->h * d->w;
        n->counters[d->counter]++;
    }
}

/* Where the gradient for input a of the current node goes: a's slot if nothing was
 * written there yet in this backward, else scratch[which] (the caller then adds it in). */
static void *grad_target(net_t *n, int a, int which, bool *accumulate) {
    if (!n->grad_written[a]) {
        *accumulate = false;
        return n->slots[n->nodes[a].gslot];
    }
    *accumulate = true;
    return n->scratch[which];
}

/* Finishes a write made through grad_target: sums scratch into a's slot if needed. */
static int grad_commit(net_t *n, int a, void *target, bool accumulate, err_t *e) {
    backend_t *be = n->be;
    if (accumulate) {
        void *slot = n->slots[n->nodes[a].gslot];
        int64_t count = (int64_t)n->last_batch * (int64_t)net_node_elems(n, a);
        if (be->ops->add(be, count, n->dt, slot, target, slot) < 0)
            return err_set(e, ERR_RUNTIME, "net: summing gradients of node %d: %s", a, be->err.msg);
    }
    n->grad_written[a] = true;
    return 0;
}

/* The data gradient of conv node i (shape s, output gradient dy) into its input a's
 * gradient dx (grad_target's choice; *acc: whether it still has to be summed in): fused
 * with the backward reduction of BN node a where the backend can (*reduced = a), or
 * added into a's slot by the conv where it must be summed and the backend can. */
static int conv_backward_data(net_t *n, int i, const conv_shape_t *s, const void *dy, void *dx, bool *acc,
                              int *reduced, err_t *e) {
    backend_t *be = n->be;
    node_t *d = &n->nodes[i];
    int a = d->in[0];
    int bn = !*acc && be->ops->conv2d_bwd_data_bn ? net_fused_dbn_bn(n, i) : -1;
    if (bn >= 0) {
        node_t *b = &n->nodes[bn];
        OP(be->ops->conv2d_bwd_data_bn(be, s, n->dt, dy, node_weight(n, d), dx, node_out(n, n->last_x, b->in[0]),
                                       b->kind == NODE_BN ? NULL : b->y, net_bn_act(b->kind), b->mean, b->var,
                                       NET_BN_EPS, n->sum_dy, n->sum_dy_xhat, n->grads + b->w_off,
                                       n->grads + b->b_off),
           "conv backward (data) + bn backward (reduce)");
        *reduced = bn;
        return 0;
    }
    if (*acc && be->ops->conv2d_bwd_data_accum) {
        OP(be->ops->conv2d_bwd_data_accum(be, s, n->dt, dy, node_weight(n, d), n->slots[n->nodes[a].gslot]),
           "conv backward (data, summed into the input's gradient)");
        *acc = false;   /* nothing left to add */
        return 0;
    }
    OP(be->ops->conv2d_bwd_data(be, s, n->dt, dy, node_weight(n, d), dx), "conv backward (data)");
    return 0;
}

/* Backward of one node given its output gradient dy. *reduced: the BN node whose
 * backward reduction a conv already did (set by the conv, used by the BN right after). */
static int node_backward(net_t *n, int i, const net_hooks_t *hooks, int *reduced, err_t *e) {
    backend_t *be = n->be;
    node_t *d = &n->nodes[i];
    int batch = n->last_batch;
    const void *dy = n->slots[d->gslot];
    int a = d->in[0], b = d->in[1];
    const void *x = node_out(n, n->last_x, a);
    int64_t m = (int64_t)batch * d->h * d->w;
    bool acc_a = false, acc_b = false;
    /* bn_dual_add: the shortcut BN's backward is this node's too, and its output (this
     * node's second input) gets no gradient */
    bool dual = d->kind == NODE_BN_ADD_RELU && d->dual >= 0 && d->dual_ok && *reduced != i;
    void *dx = a >= 0 ? grad_target(n, a, 0, &acc_a) : NULL;
    void *dz = b >= 0 && !dual ? grad_target(n, b, 1, &acc_b) : NULL;
    switch (d->kind) {
    case NODE_CONV: {
        conv_shape_t s = conv_geom(n, i, batch);
        OP(be->ops->conv2d_bwd_filter(be, &s, n->dt, x, dy, n->grads + d->w_off), "conv backward (filter)");
        if (d->has_bias)
            OP(be->ops->channel_bias_bwd(be, m, d->c, n->dt, dy, n->grads + d->b_off), "conv bias backward");
        if (dx && conv_backward_data(n, i, &s, dy, dx, &acc_a, reduced, e) < 0) return -1;
        break;
    }
    case NODE_BN:
    case NODE_BN_RELU:
    case NODE_BN_RELU6:
    case NODE_BN_ADD_RELU: {
        const void *y = d->kind == NODE_BN ? NULL : d->y;
        act_kind_t act = net_bn_act(d->kind);
        /* y = act(bn(x)) with these parameters and no residual: the mask may come from x */
        const float *gamma = n->params + d->w_off;
        const float *beta = y && d->kind != NODE_BN_ADD_RELU ? n->params + d->b_off : NULL;
        /* the mask from the bits the training forward wrote with y (bn_mask_bits) */
        const uint8_t *bits = d->mask && d->mask_ok ? d->mask : NULL;
        if (dual) {   /* this add-relu BN and its shortcut's BN, from one pass each way */
            node_t *s = &n->nodes[d->dual];
            int a2 = s->in[0];
            const void *x2 = node_out(n, n->last_x, a2);
            bool acc2 = false;
            void *dx2 = a2 >= 0 ? grad_target(n, a2, 1, &acc2) : n->scratch[1];
            OP(be->ops->bn_bwd_reduce_dual(be, m, d->c, n->dt, x, y, act, dy, d->mean, d->var, x2, s->mean, s->var,
                                           NET_BN_EPS, n->sum_dy, n->sum_dy_xhat, n->grads + d->w_off,
                                           n->grads + d->b_off, n->sum_dy2, n->sum_dy_xhat2, n->grads + s->w_off,
                                           n->grads + s->b_off, bits),
               "bn backward (reduce, with the shortcut's bn)");
            *reduced = -1;
            if (hooks && hooks->bn_sync_grads &&
                (hooks->bn_sync_grads(hooks->ctx, d->c, n->sum_dy, n->sum_dy_xhat) < 0 ||
                 hooks->bn_sync_grads(hooks->ctx, s->c, n->sum_dy2, n->sum_dy_xhat2) < 0))
                return err_wrap(e, "net: SyncBN gradients of %s", d->prefix);
            OP(be->ops->bn_bwd_apply_dual(be, m, d->c, n->dt, x, y, act, dy, d->mean, d->var, gamma, x2, s->mean,
                                          s->var, n->params + s->w_off, NET_BN_EPS, n->sum_dy, n->sum_dy_xhat,
                                          d->count, n->sum_dy2, n->sum_dy_xhat2, s->count, dx ? dx : n->scratch[0],
                                          dx2, bits),
               "bn backward (apply, with the shortcut's bn)");
            if (a2 >= 0 && grad_commit(n, a2, dx2, acc2, e) < 0) return -1;
            break;
        }
        /* bn_persist: both passes in one op (1: the backend cannot here) */
        if (*reduced != i && (dx || dz) && be->ops->bn_bwd_fused && !(hooks && hooks->bn_sync_grads)) {
            int r = be->ops->bn_bwd_fused(be, m, d->c, n->dt, x, y, act, dy, d->mean, d->var, gamma, beta, NET_BN_EPS,
                                          n->sum_dy, n->sum_dy_xhat, n->grads + d->w_off, n->grads + d->b_off,
                                          d->count, dx ? dx : n->scratch[0], dz, bits);
            OP(r, "bn backward (one kernel)");
            if (r == 0) {
                *reduced = -1;
                break;
            }
        }
        if (*reduced != i && bits)
            OP(be->ops->bn_bwd_reduce_mask(be, m, d->c, n->dt, x, y, act, dy, d->mean, d->var, gamma, NET_BN_EPS,
                                           n->sum_dy, n->sum_dy_xhat, n->grads + d->w_off, n->grads + d->b_off,
                                           bits),
               "bn backward (reduce, mask bits)");
        else if (*reduced != i)
            OP(be->ops->bn_bwd_reduce(be, m, d->c, n->dt, x, y, act, dy, d->mean, d->var, gamma, beta,
                                      NET_BN_EPS, n->sum_dy, n->sum_dy_xhat, n->grads + d->w_off,
                                      n->grads + d->b_off),
               "bn backward (reduce)");
        *reduced = -1;
        if (hooks && hooks->bn_sync_grads &&
            hooks->bn_sync_grads(hooks->ctx, d->c, n->sum_dy, n->sum_dy_xhat) < 0)
            return err_wrap(e, "net: SyncBN gradients of %s", d->prefix);
        if (dx || dz) {
            /* bn_bwd_apply always writes dx; without a real target use scratch */
            void *dxt = dx ? dx : n->scratch[0];
            if (bits)
                OP(be->ops->bn_bwd_apply_mask(be, m, d->c, n->dt, x, y, act, dy, d->mean, d->var, gamma,
                                              NET_BN_EPS, n->sum_dy, n->sum_dy_xhat, d->count, dxt, dz, bits),
                   "bn backward (apply, mask bits)");
            else
                OP(be->ops->bn_bwd_apply(be, m, d->c, n->dt, x, y, act, dy, d->mean, d->var, gamma, beta,
                                         NET_BN_EPS, n->sum_dy, n->sum_dy_xhat, d->count, dxt, dz),
                   "bn backward (apply)");
        }
        break;
    }
    case NODE_RELU:
        if (dx) OP(be->ops->relu_bwd(be, m * d->c, n->dt, d->y, dy, dx), "relu backward");
        break;
    case NODE_RELU6:
        if (dx) OP(be->ops->relu6_bwd(be, m * d->c, n->dt, d->y, dy, dx), "relu6 backward");
        break;
    case NODE_DROPOUT:
        if (dx && d->p > 0.0)
            OP(be->ops->dropout_bwd(be, batch, (int64_t)d->h * d->w * d->c, n->dt, d->p, (uint32_t)i,
                                    n->rng_key, dy, dx), "dropout backward");
        else if (dx)
            OP(be->ops->copy(be, dx, dy, (size_t)m * d->c * n->esz), "dropout backward (identity)");
        break;
    case NODE_ADD: {
        size_t bytes = (size_t)m * d->c * n->esz;
        if (dx) OP(be->ops->copy(be, dx, dy, bytes), "add backward");
        if (dz) OP(be->ops->copy(be, dz, dy, bytes), "add backward");
        break;
    }
    case NODE_AVGPOOL: {
        pool_shape_t s = pool_geom(n, i, batch);
        if (dx && s.p == 1 && s.q == 1)
            OP(be->ops->avgpool_bwd(be, batch, s.h * s.w, d->c, n->dt, dy, dx), "avgpool backward");
        else if (dx)
            OP(be->ops->adaptive_avgpool_bwd(be, &s, n->dt, dy, dx), "adaptive avgpool backward");
        break;
    }
    case NODE_MAXPOOL: {
        pool_shape_t s = pool_geom(n, i, batch);
        if (dx) OP(be->ops->maxpool_bwd(be, &s, n->dt, x, dy, dx), "maxpool backward");
        break;
    }
    case NODE_LINEAR: {
        int in_f = (int)(d->w_numel / (size_t)d->out_c);
        OP(be->ops->linear_bwd(be, batch, in_f, d->out_c, n->dt, x, node_weight(n, d), dy, dx,
                               n->grads + d->w_off, n->grads + d->b_off),
           "linear backward");
        break;
    }
    case NODE_KIND_COUNT:
        break;
    }
    if (dx && grad_commit(n, a, dx, acc_a, e) < 0) return -1;
    if (dz && grad_commit(n, b, dz, acc_b, e) < 0) return -1;
    return 0;
}

int net_backward(net_t *n, const net_hooks_t *hooks, err_t *e) {
    if (!n->be || !n->last_batch || !n->last_train)
        return err_set(e, ERR_RUNTIME, "net_backward: the last forward was not a training forward");
    if (!n->have_dlogits) return err_set(e, ERR_RUNTIME, "net_backward: call net_loss first");
    memset(n->grad_written, 0, (size_t)n->n_nodes * sizeof(bool));
    n->grad_written[n->n_nodes - 1] = true;
    size_t ready_from = n->n_params;
    int reduced = -1;
    for (int i = n->n_nodes - 1; i >= 0; i--) {
        node_t *d = &n->nodes[i];
        if (d->gslot < 0 || !n->grad_written[i]) continue; /* nothing flows back here */
        if (node_backward(n, i, hooks, &reduced, e) < 0) return -1;
        if (d->has_params && d->w_off < ready_from) {
            ready_from = d->w_off;
            if (hooks && hooks->grads_ready) hooks->grads_ready(hooks->ctx, ready_from);
        }
    }
    if (ready_from > 0 && hooks && hooks->grads_ready) hooks->grads_ready(hooks->ctx, 0);
    n->have_dlogits = false;
    return 0;
}
