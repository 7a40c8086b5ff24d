/* optim.c: SGD and AdamW over a net's flat arrays (semantics in optim.h).
 *
 * At creation the parameter tensors are grouped into maximal contiguous ranges of equal
 * weight decay; a step calls the backend's sgd_step/adamw_step once per range.
 * Clipping by the global gradient norm is one backend op over the flat gradient array.
 * The learning rate reaches the ops through the step control (optim_set_lr writes it, the
 * ops get lr NaN and read ctl->lr), so a step recorded as a graph takes each step's value.
 * What it does not do: per-group learning rates, state on the host.
 */
#include "model/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct range {
    size_t off, len;
    double wd;
} range_t;

struct optim {
    net_t *net;
    backend_t *be;
    optim_opts_t o;
    int64_t steps;
    int n_ranges;
    range_t *ranges;
    int n_state;
    float *state[2];
    step_ctl_t *ctl;      /* backend memory */
};

void optim_free(optim_t *o) {
    if (!o) return;
    for (int i = 0; i < 2; i++)
        if (o->state[i]) o->be->ops->release(o->be, o->state[i]);
    if (o->ctl) o->be->ops->release(o->be, o->ctl);
    free(o->ranges);
    free(o);
}

/* Builds the ranges of equal decay from the tensor table (params are in offset order). */
static int build_ranges(optim_t *o, err_t *e) {
    const net_t *n = o->net;
    int nt = net_num_tensors(n);
    o->ranges = calloc((size_t)nt + 1, sizeof *o->ranges);
    if (!o->ranges) return err_set(e, ERR_RUNTIME, "optim: out of memory");
    size_t expect = 0;
    for (int i = 0; i < nt; i++) {
        const net_tensor_t *t = net_tensor(n, i);
        if (t->store != NET_STORE_PARAM) continue;
        if (t->offset != expect)
            return err_set(e, ERR_RUNTIME, "optim: parameter %s at offset %zu, expected %zu", t->name,
                           t->offset, expect);
        expect += t->numel;
        double wd = (o->o.no_weight_decay_on_bn_and_bias && t->no_decay) ? 0.0 : o->o.weight_decay;
        range_t *last = o->n_ranges ? &o->ranges[o->n_ranges - 1] : NULL;
        if (last && last->wd == wd) {
            last->len += t->numel;
        } else {
            o->ranges[o->n_ranges++] = (range_t){t->offset, t->numel, wd};
        }
    }
    if (expect != net_num_params(n))
        return err_set(e, ERR_RUNTIME, "optim: tensors cover %zu of %zu parameters", expect, net_num_params(n));
    return 0;
}

optim_t *optim_create(net_t *n, const optim_opts_t *opts, err_t *e) {
    backend_t *be = net_backend(n);
    if (!be) {
        err_set(e, ERR_RUNTIME, "optim_create: the net is not bound");
        return NULL;
    }
    if (opts->kind < 0 || opts->kind >= OPTIM_KIND_COUNT) {
        err_set(e, ERR_INPUT, "optimizer.name: unknown optimizer %d", (int)opts->kind);
        return NULL;
    }
    if (opts->kind == OPTIM_SGD && opts->nesterov && (opts->momentum <= 0 || opts->dampening != 0)) {
        err_set(e, ERR_INPUT, "optimizer.nesterov: Nesterov momentum requires momentum > 0 and dampening 0");
        return NULL;
    }
    optim_t *o = calloc(1, sizeof *o);
    if (!o) {
        err_set(e, ERR_RUNTIME, "optim: out of memory");
        return NULL;
    }
    o->net = n;
    o->be = be;
    o->o = *opts;
    if (build_ranges(o, e) < 0) goto fail;
    o->n_state = opts->kind == OPTIM_ADAMW ? 2 : (opts->momentum != 0 ? 1 : 0);
    size_t bytes = net_num_params(n) * sizeof(float);
    for (int i = 0; i < o->n_state; i++) {
        o->state[i] = be->ops->alloc(be, bytes ? bytes : 4);
        if (!o->state[i] || be->ops->zero(be, o->state[i], bytes) < 0) {
            err_set(e, ERR_RUNTIME, "optim: allocating %zu bytes of state: %s", bytes, be->err.msg);
            goto fail;
        }
    }
    o->ctl = be->ops->alloc(be, sizeof(step_ctl_t));
    step_ctl_t c = {.loss_scale = 1.0f, .growth_factor = 2.0f, .backoff_factor = 0.5f};
    if (!o->ctl || be->ops->upload(be, o->ctl, &c, sizeof c) < 0) {
        err_set(e, ERR_RUNTIME, "optim: allocating the step control: %s", be->err.msg);
        goto fail;
    }
    return o;
fail:
    optim_free(o);
    return NULL;
}

int optim_set_lr(optim_t *o, double lr, err_t *e) {
    backend_t *be = o->be;
    if (be->ops->upload(be, &o->ctl->lr, &lr, sizeof lr) < 0)
        return err_set(e, ERR_RUNTIME, "optim: writing the learning rate: %s", be->err.msg);
    return 0;
}

int optim_step(optim_t *o, double lr, err_t *e) {
    return optim_set_lr(o, lr, e) || optim_apply(o, e) ? -1 : 0;
}

int optim_apply(optim_t *o, err_t *e) {
    backend_t *be = o->be;
    const double lr = NAN;   /* the ops read the step's value from the step control */
    float *p = net_params(o->net);
    const float *g = net_grads(o->net);
    for (int i = 0; i < o->n_ranges; i++) {
        const range_t *r = &o->ranges[i];
        int rc;
        if (o->o.kind == OPTIM_SGD) {
            rc = be->ops->sgd_step(be, (int64_t)r->len, p + r->off, g + r->off,
                                   o->n_state ? o->state[0] + r->off : NULL, lr, o->o.momentum,
                                   o->o.dampening, r->wd, o->o.nesterov, o->ctl);
        } else {
            rc = be->ops->adamw_step(be, (int64_t)r->len, p + r->off, g + r->off, o->state[0] + r->off,
                                     o->state[1] + r->off, lr, o->o.beta1, o->o.beta2, o->o.eps, r->wd,
                                     o->ctl);
        }
        if (rc < 0) return err_set(e, ERR_RUNTIME, "optim: step: %s", be->err.msg);
    }
    if (be->ops->step_ctl_update(be, o->ctl) < 0)
        return err_set(e, ERR_RUNTIME, "optim: step control update: %s", be->err.msg);
    return 0;
}

int optim_clip_grad_norm(optim_t *o, double max_norm, float *norm_out, err_t *e) {
    backend_t *be = o->be;
    if (!be->ops->clip_grad_norm)
        return err_set(e, ERR_RUNTIME, "optim: the %s backend cannot clip gradients", be->ops->name);
    if (be->ops->clip_grad_norm(be, (int64_t)net_num_params(o->net), net_grads(o->net), max_norm, o->ctl,
                                norm_out) < 0)
        return err_set(e, ERR_RUNTIME, "optim: clipping the gradient norm: %s", be->err.msg);
    return 0;
}

int optim_steps(const optim_t *o, int64_t *steps, err_t *e) {
    step_ctl_t c;
    if (o->be->ops->download(o->be, &c, o->ctl, sizeof c) < 0)
        return err_set(e, ERR_RUNTIME, "optim: reading the step count: %s", o->be->err.msg);
    *steps = c.optim_steps;
    return 0;
}

int optim_set_steps(optim_t *o, int64_t steps, err_t *e) {
    step_ctl_t c;
    if (o->be->ops->download(o->be, &c, o->ctl, sizeof c) < 0)
        return err_set(e, ERR_RUNTIME, "optim: reading the step control: %s", o->be->err.msg);
    c.optim_steps = steps;
    if (o->be->ops->upload(o->be, o->ctl, &c, sizeof c) < 0)
        return err_set(e, ERR_RUNTIME, "optim: writing the step count: %s", o->be->err.msg);
    return 0;
}

step_ctl_t *optim_ctl(optim_t *o) { return o->ctl; }
int optim_num_state(const optim_t *o) { return o->n_state; }
float *optim_state(optim_t *o, int i) { return i >= 0 && i < o->n_state ? o->state[i] : NULL; }
size_t optim_state_numel(const optim_t *o) { return net_num_params(o->net); }

const char *optim_state_name(const optim_t *o, int i) {
    if (i < 0 || i >= o->n_state) return NULL;
    if (o->o.kind == OPTIM_SGD) return "momentum_buffer";
    return i == 0 ? "exp_avg" : "exp_avg_sq";
}
