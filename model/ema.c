/* ema.c: timm ModelEmaV3 over a net's flat params and buffers (semantics in ema.h). */
#include "model/ema.h"

#include <math.h>
#include <stdlib.h>

struct ema {
    net_t *net;
    backend_t *be;
    ema_opts_t o;
    float *params, *buffers;      /* the average */
    float *spare_p, *spare_b;     /* for ema_swap */
    double *decay;                /* backend memory: the next update's decay (ema_prepare) */
    size_t np, nb;
};

double ema_decay_at(const ema_opts_t *o, int64_t step) {
    int64_t k = step - 1 > 0 ? step - 1 : 0;
    if (k <= 0) return 0.0;
    if (!o->warmup) return o->decay;
    double d = 1.0 - pow(1.0 + (double)k / o->warmup_gamma, -o->warmup_power);
    if (d > o->decay) d = o->decay;
    return d < 0.0 ? 0.0 : d;
}

void ema_free(ema_t *m) {
    if (!m) return;
    void *arrays[5] = {m->params, m->buffers, m->spare_p, m->spare_b, m->decay};
    for (int i = 0; i < 5; i++)
        if (arrays[i]) m->be->ops->release(m->be, arrays[i]);
    free(m);
}

static int be_fail(ema_t *m, err_t *e, const char *what) {
    return err_set(e, ERR_RUNTIME, "ema: %s: %s", what, m->be->err.msg);
}

int ema_reset(ema_t *m, err_t *e) {
    backend_t *be = m->be;
    if (be->ops->copy(be, m->params, net_params(m->net), m->np * sizeof(float)) ||
        (m->nb && be->ops->copy(be, m->buffers, net_buffers(m->net), m->nb * sizeof(float))))
        return be_fail(m, e, "copying the weights");
    return 0;
}

ema_t *ema_create(net_t *n, const ema_opts_t *o, err_t *e) {
    backend_t *be = net_backend(n);
    if (!be || !be->ops->ema_update || !be->ops->ema_update_dev) {
        err_set(e, ERR_RUNTIME, "ema: the net is not bound to a backend with ema_update");
        return NULL;
    }
    if (!(o->decay > 0 && o->decay < 1) || !(o->warmup_gamma > 0) || !(o->warmup_power > 0)) {
        err_set(e, ERR_INPUT, "train.ema: decay %g must be in (0, 1), warmup_gamma and warmup_power > 0",
                o->decay);
        return NULL;
    }
    ema_t *m = calloc(1, sizeof *m);
    if (!m) {
        err_set(e, ERR_RUNTIME, "ema: out of memory");
        return NULL;
    }
    m->net = n;
    m->be = be;
    m->o = *o;
    m->np = net_num_params(n);
    m->nb = net_num_buffers(n);
    size_t pb = (m->np ? m->np : 1) * sizeof(float), bb = (m->nb ? m->nb : 1) * sizeof(float);
    if (!(m->params = be->ops->alloc(be, pb)) || !(m->buffers = be->ops->alloc(be, bb)) ||
        !(m->spare_p = be->ops->alloc(be, pb)) || !(m->spare_b = be->ops->alloc(be, bb)) ||
        !(m->decay = be->ops->alloc(be, sizeof(double)))) {
        be_fail(m, e, "allocating the averaged weights");
        ema_free(m);
        return NULL;
    }
    if (ema_reset(m, e)) {
        ema_free(m);
        return NULL;
    }
    return m;
}

int ema_prepare(ema_t *m, int64_t step, err_t *e) {
    double d = ema_decay_at(&m->o, step);
    if (m->be->ops->upload(m->be, m->decay, &d, sizeof d)) return be_fail(m, e, "writing the decay");
    return 0;
}

int ema_apply(ema_t *m, err_t *e) {
    backend_t *be = m->be;
    if (be->ops->ema_update_dev(be, (int64_t)m->np, m->params, net_params(m->net), m->decay) ||
        be->ops->ema_update_dev(be, (int64_t)m->nb, m->buffers, net_buffers(m->net), m->decay))
        return be_fail(m, e, "update");
    return 0;
}

int ema_update(ema_t *m, int64_t step, err_t *e) {
    return ema_prepare(m, step, e) || ema_apply(m, e) ? -1 : 0;
}

int ema_swap(ema_t *m, err_t *e) {
    backend_t *be = m->be;
    size_t pb = m->np * sizeof(float), bb = m->nb * sizeof(float);
    float *p = net_params(m->net), *b = net_buffers(m->net);
    /* spare <- net, net <- average, average <- spare: no pointer of the net changes, so
     * recorded CUDA graphs and DDP buckets stay valid */
    if (be->ops->copy(be, m->spare_p, p, pb) || be->ops->copy(be, p, m->params, pb) ||
        be->ops->copy(be, m->params, m->spare_p, pb))
        return be_fail(m, e, "swapping the weights");
    if (m->nb && (be->ops->copy(be, m->spare_b, b, bb) || be->ops->copy(be, b, m->buffers, bb) ||
                  be->ops->copy(be, m->buffers, m->spare_b, bb)))
        return be_fail(m, e, "swapping the BN buffers");
    return 0;
}

float *ema_params(ema_t *m) { return m->params; }
float *ema_buffers(ema_t *m) { return m->buffers; }
