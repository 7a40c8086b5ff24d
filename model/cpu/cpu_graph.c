/* cpu_graph.c: graphs on the cpu backend (backend.h graph_* ops), with a CUDA graph's
 * semantics, so that the trainer's recorded steps (runner/train_graph.c) can be tested
 * where there is no GPU. A test hook: cpu_backend_create turns it on when
 * RUNNER_CPU_GRAPHS is set in the environment ("1"; "stale": every 5th launch of a graph
 * reports it stale, as a CUDA graph whose workspace was reallocated; "fail": every
 * recording fails, "fail-rank<r>": those of rank r only), and normal runs never have it.
 *
 * Between graph_capture_begin and graph_capture_end every compute op (and copy, zero,
 * host_task) is stored with its arguments instead of running: pointers and scalars are
 * baked in, the memory they point to is read when the recording is launched, exactly what
 * a stream capture records. What a capture cannot hold fails the recording: upload,
 * download, sync and alloc return an error (and release marks the recording bad), as the
 * CUDA calls do inside a capture; graph_capture_end then discards the recording. Launch
 * runs the stored calls in order. The backend's table is a per-backend copy of the plain
 * cpu table with every slot that does work wrapped (test_graph_replay checks that no
 * such slot is left unwrapped, so an op added later cannot run eagerly inside a capture).
 */
#include <stdlib.h>
#include <string.h>

#include "model/cpu/cpu_impl.h"

enum {
    K_CONV_F, K_CONV_BD, K_CONV_BF, K_BN_STATS, K_BN_APPLY, K_BN_RUN, K_BN_BRED, K_BN_BAPP, K_RELU_F, K_RELU_B,
    K_ADD, K_APOOL_F, K_APOOL_B, K_MPOOL_F, K_MPOOL_B, K_LIN_F, K_LIN_B, K_XENT, K_XENT_SOFT, K_SGD, K_ADAMW,
    K_CTL, K_CLIP, K_EMA, K_EMA_DEV, K_CAST, K_UNSCALE, K_SCALE, K_BN_COMBINE, K_HOST, K_COPY, K_ZERO,
    K_RELU6_F, K_RELU6_B, K_BIAS_F, K_BIAS_B, K_DROP_F, K_DROP_B, K_AAPOOL_F, K_AAPOOL_B, K_CONV_BDA, K_CONV_FS,
    K_CONV_BDN
};

/* One stored call: the op's arguments by value (shapes copied, pointers as given). */
typedef struct cpu_call {
    int kind;
    conv_shape_t cs;
    pool_shape_t ps;
    dtype_t dt, dt2;
    const void *p[12];
    int64_t i[4];
    double d[5];
    float f[3];
    bool b;
    int act;         /* act_kind_t of the BN ops */
    uint32_t u;      /* dropout's node */
    void (*fn)(void *);
} cpu_call_t;

struct cpu_graph {
    cpu_call_t *calls;
    int n, cap;
    bool bad;        /* an op the capture cannot hold was called */
};

static const backend_ops_t *plain(backend_t *be) { return cpu_of(be)->plain; }

static int push(backend_t *be, const cpu_call_t *c) {
    cpu_graph_t *g = cpu_of(be)->rec;
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 256;
        cpu_call_t *nc = realloc(g->calls, (size_t)cap * sizeof *nc);
        if (!nc) {
            g->bad = true;
            return err_set(&be->err, ERR_RUNTIME, "cpu graphs: out of memory recording");
        }
        g->calls = nc;
        g->cap = cap;
    }
    g->calls[g->n++] = *c;
    return 0;
}

/* While recording: store the call and return; else fall through to run it. */
#define REC(...) do { if (cpu_of(be)->rec) return push(be, &(cpu_call_t){__VA_ARGS__}); } while (0)
#define V(x) ((void *)(x))

/* Fails an op that a stream capture cannot hold and spoils the recording. */
static int refuse(backend_t *be, const char *what) {
    cpu_of(be)->rec->bad = true;
    return err_set(&be->err, ERR_RUNTIME, "cpu graphs: %s while recording (a CUDA stream capture cannot "
                   "hold it)", what);
}

/* ---- memory ---- */

static void *w_alloc(backend_t *be, size_t bytes) {
    if (cpu_of(be)->rec) {
        refuse(be, "alloc");
        return NULL;
    }
    return plain(be)->alloc(be, bytes);
}
static void w_release(backend_t *be, void *p) {
    if (cpu_of(be)->rec) refuse(be, "release");
    plain(be)->release(be, p);
}
static int w_upload(backend_t *be, void *dst, const void *src, size_t bytes) {
    if (cpu_of(be)->rec) return refuse(be, "upload");
    return plain(be)->upload(be, dst, src, bytes);
}
static int w_download(backend_t *be, void *dst, const void *src, size_t bytes) {
    if (cpu_of(be)->rec) return refuse(be, "download");
    return plain(be)->download(be, dst, src, bytes);
}
static int w_sync(backend_t *be) {
    if (cpu_of(be)->rec) return refuse(be, "sync");
    return plain(be)->sync(be);
}
static int w_copy(backend_t *be, void *dst, const void *src, size_t bytes) {
    REC(.kind = K_COPY, .p = {dst, src}, .i = {(int64_t)bytes});
    return plain(be)->copy(be, dst, src, bytes);
}
static int w_zero(backend_t *be, void *dst, size_t bytes) {
    REC(.kind = K_ZERO, .p = {dst}, .i = {(int64_t)bytes});
    return plain(be)->zero(be, dst, bytes);
}

/* ---- compute ---- */

static int w_conv_f(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *w, void *y) {
    REC(.kind = K_CONV_F, .cs = *s, .dt = dt, .p = {x, w, y});
    return plain(be)->conv2d_fwd(be, s, dt, x, w, y);
}
static int w_conv_bd(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w, void *dx) {
    REC(.kind = K_CONV_BD, .cs = *s, .dt = dt, .p = {dy, w, dx});
    return plain(be)->conv2d_bwd_data(be, s, dt, dy, w, dx);
}
static int w_conv_bf(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *dy, float *dw) {
    REC(.kind = K_CONV_BF, .cs = *s, .dt = dt, .p = {x, dy, dw});
    return plain(be)->conv2d_bwd_filter(be, s, dt, x, dy, dw);
}
/* the fused convolutions (issue 25; wrapped where the plain table has them) */
static int w_conv_bda(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w, void *dx) {
    REC(.kind = K_CONV_BDA, .cs = *s, .dt = dt, .p = {dy, w, dx});
    return plain(be)->conv2d_bwd_data_accum(be, s, dt, dy, w, dx);
}
static int w_conv_fs(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *w, void *y,
                     float *mean, float *var) {
    REC(.kind = K_CONV_FS, .cs = *s, .dt = dt, .p = {x, w, y, mean, var});
    return plain(be)->conv2d_fwd_bn_stats(be, s, dt, x, w, y, mean, var);
}
static int w_conv_bdn(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w, void *dx,
                      const void *bn_x, const void *relu_y, act_kind_t act, const float *mean, const float *var,
                      float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta) {
    REC(.kind = K_CONV_BDN, .cs = *s, .dt = dt, .p = {dy, w, dx, bn_x, relu_y, mean, var, sum_dy, sum_dy_xhat, dgamma,
        dbeta}, .f = {eps}, .act = act);
    return plain(be)->conv2d_bwd_data_bn(be, s, dt, dy, w, dx, bn_x, relu_y, act, mean, var, eps, sum_dy, sum_dy_xhat,
                                         dgamma, dbeta);
}
static int w_bn_stats(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean, float *var) {
    REC(.kind = K_BN_STATS, .i = {m, c}, .dt = dt, .p = {x, mean, var});
    return plain(be)->bn_stats(be, m, c, dt, x, mean, var);
}
static int w_bn_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                      const float *var, const float *gamma, const float *beta, float eps, const void *z,
                      act_kind_t act, void *y) {
    REC(.kind = K_BN_APPLY, .i = {m, c}, .dt = dt, .p = {x, mean, var, gamma, beta, z, y}, .f = {eps}, .act = act);
    return plain(be)->bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, z, act, y);
}
static int w_bn_run(backend_t *be, int c, const float *mean, const float *var, int64_t count, float momentum,
                    float *run_mean, float *run_var) {
    REC(.kind = K_BN_RUN, .i = {c, count}, .p = {mean, var, run_mean, run_var}, .f = {momentum});
    return plain(be)->bn_update_running(be, c, mean, var, count, momentum, run_mean, run_var);
}
static int w_bn_bred(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                     const void *dy, const float *mean, const float *var, const float *gamma, const float *beta,
                     float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta) {
    REC(.kind = K_BN_BRED, .i = {m, c}, .dt = dt,
        .p = {x, y, dy, mean, var, gamma, beta, sum_dy, sum_dy_xhat, dgamma, dbeta}, .f = {eps}, .act = act);
    return plain(be)->bn_bwd_reduce(be, m, c, dt, x, y, act, dy, mean, var, gamma, beta, eps, sum_dy, sum_dy_xhat,
                                    dgamma, dbeta);
}
static int w_bn_bapp(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                     const void *dy, const float *mean, const float *var, const float *gamma, const float *beta,
                     float eps, const float *sum_dy, const float *sum_dy_xhat, int64_t count, void *dx, void *dz) {
    REC(.kind = K_BN_BAPP, .i = {m, c, count}, .dt = dt,
        .p = {x, y, dy, mean, var, gamma, beta, sum_dy, sum_dy_xhat, dx, dz}, .f = {eps}, .act = act);
    return plain(be)->bn_bwd_apply(be, m, c, dt, x, y, act, dy, mean, var, gamma, beta, eps, sum_dy, sum_dy_xhat,
                                   count, dx, dz);
}
static int w_relu_f(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y) {
    REC(.kind = K_RELU_F, .i = {n}, .dt = dt, .p = {x, y});
    return plain(be)->relu_fwd(be, n, dt, x, y);
}
static int w_relu_b(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx) {
    REC(.kind = K_RELU_B, .i = {n}, .dt = dt, .p = {y, dy, dx});
    return plain(be)->relu_bwd(be, n, dt, y, dy, dx);
}
static int w_relu6_f(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y) {
    REC(.kind = K_RELU6_F, .i = {n}, .dt = dt, .p = {x, y});
    return plain(be)->relu6_fwd(be, n, dt, x, y);
}
static int w_relu6_b(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx) {
    REC(.kind = K_RELU6_B, .i = {n}, .dt = dt, .p = {y, dy, dx});
    return plain(be)->relu6_bwd(be, n, dt, y, dy, dx);
}
static int w_bias_f(backend_t *be, int64_t m, int c, dtype_t dt, const float *b, void *y) {
    REC(.kind = K_BIAS_F, .i = {m, c}, .dt = dt, .p = {b, y});
    return plain(be)->channel_bias_fwd(be, m, c, dt, b, y);
}
static int w_bias_b(backend_t *be, int64_t m, int c, dtype_t dt, const void *dy, float *db) {
    REC(.kind = K_BIAS_B, .i = {m, c}, .dt = dt, .p = {dy, db});
    return plain(be)->channel_bias_bwd(be, m, c, dt, dy, db);
}
static int w_drop_f(backend_t *be, int n, int64_t per_sample, dtype_t dt, double p, uint32_t node,
                    const dropout_key_t *key, const void *x, void *y) {
    REC(.kind = K_DROP_F, .i = {n, per_sample}, .dt = dt, .d = {p}, .u = node, .p = {key, x, y});
    return plain(be)->dropout_fwd(be, n, per_sample, dt, p, node, key, x, y);
}
static int w_drop_b(backend_t *be, int n, int64_t per_sample, dtype_t dt, double p, uint32_t node,
                    const dropout_key_t *key, const void *dy, void *dx) {
    REC(.kind = K_DROP_B, .i = {n, per_sample}, .dt = dt, .d = {p}, .u = node, .p = {key, dy, dx});
    return plain(be)->dropout_bwd(be, n, per_sample, dt, p, node, key, dy, dx);
}
static int w_aapool_f(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y) {
    REC(.kind = K_AAPOOL_F, .ps = *s, .dt = dt, .p = {x, y});
    return plain(be)->adaptive_avgpool_fwd(be, s, dt, x, y);
}
static int w_aapool_b(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *dy, void *dx) {
    REC(.kind = K_AAPOOL_B, .ps = *s, .dt = dt, .p = {dy, dx});
    return plain(be)->adaptive_avgpool_bwd(be, s, dt, dy, dx);
}
static int w_add(backend_t *be, int64_t n, dtype_t dt, const void *a, const void *b, void *y) {
    REC(.kind = K_ADD, .i = {n}, .dt = dt, .p = {a, b, y});
    return plain(be)->add(be, n, dt, a, b, y);
}
static int w_apool_f(backend_t *be, int n, int hw, int c, dtype_t dt, const void *x, void *y) {
    REC(.kind = K_APOOL_F, .i = {n, hw, c}, .dt = dt, .p = {x, y});
    return plain(be)->avgpool_fwd(be, n, hw, c, dt, x, y);
}
static int w_apool_b(backend_t *be, int n, int hw, int c, dtype_t dt, const void *dy, void *dx) {
    REC(.kind = K_APOOL_B, .i = {n, hw, c}, .dt = dt, .p = {dy, dx});
    return plain(be)->avgpool_bwd(be, n, hw, c, dt, dy, dx);
}
static int w_mpool_f(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y) {
    REC(.kind = K_MPOOL_F, .ps = *s, .dt = dt, .p = {x, y});
    return plain(be)->maxpool_fwd(be, s, dt, x, y);
}
static int w_mpool_b(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, const void *dy, void *dx) {
    REC(.kind = K_MPOOL_B, .ps = *s, .dt = dt, .p = {x, dy, dx});
    return plain(be)->maxpool_bwd(be, s, dt, x, dy, dx);
}
static int w_lin_f(backend_t *be, int n, int in, int out, dtype_t dt, const void *x, const void *w, const float *b,
                   void *y) {
    REC(.kind = K_LIN_F, .i = {n, in, out}, .dt = dt, .p = {x, w, b, y});
    return plain(be)->linear_fwd(be, n, in, out, dt, x, w, b, y);
}
static int w_lin_b(backend_t *be, int n, int in, int out, dtype_t dt, const void *x, const void *w, const void *dy,
                   void *dx, float *dw, float *db) {
    REC(.kind = K_LIN_B, .i = {n, in, out}, .dt = dt, .p = {x, w, dy, dx, dw, db});
    return plain(be)->linear_bwd(be, n, in, out, dt, x, w, dy, dx, dw, db);
}
static int w_xent(backend_t *be, int n, int classes, dtype_t dt, const void *logits, const int32_t *labels,
                  float smoothing, float grad_scale, const step_ctl_t *ctl, void *dlogits, float *loss_sum,
                  int32_t *correct) {
    REC(.kind = K_XENT, .i = {n, classes}, .dt = dt, .p = {logits, labels, ctl, dlogits, loss_sum, correct},
        .f = {smoothing, grad_scale});
    return plain(be)->softmax_xent(be, n, classes, dt, logits, labels, smoothing, grad_scale, ctl, dlogits, loss_sum,
                                   correct);
}
static int w_xent_soft(backend_t *be, int n, int classes, dtype_t dt, const void *logits, const float *targets,
                       float grad_scale, const step_ctl_t *ctl, void *dlogits, float *loss_sum, int32_t *correct) {
    REC(.kind = K_XENT_SOFT, .i = {n, classes}, .dt = dt, .p = {logits, targets, ctl, dlogits, loss_sum, correct},
        .f = {grad_scale});
    return plain(be)->softmax_xent_soft(be, n, classes, dt, logits, targets, grad_scale, ctl, dlogits, loss_sum,
                                        correct);
}
static int w_sgd(backend_t *be, int64_t n, float *p, const float *g, float *buf, double lr, double momentum,
                 double dampening, double weight_decay, bool nesterov, const step_ctl_t *ctl) {
    REC(.kind = K_SGD, .i = {n}, .p = {p, g, buf, ctl}, .d = {lr, momentum, dampening, weight_decay}, .b = nesterov);
    return plain(be)->sgd_step(be, n, p, g, buf, lr, momentum, dampening, weight_decay, nesterov, ctl);
}
static int w_adamw(backend_t *be, int64_t n, float *p, const float *g, float *m, float *v, double lr, double beta1,
                   double beta2, double eps, double weight_decay, const step_ctl_t *ctl) {
    REC(.kind = K_ADAMW, .i = {n}, .p = {p, g, m, v, ctl}, .d = {lr, beta1, beta2, eps, weight_decay});
    return plain(be)->adamw_step(be, n, p, g, m, v, lr, beta1, beta2, eps, weight_decay, ctl);
}
static int w_ctl(backend_t *be, step_ctl_t *ctl) {
    REC(.kind = K_CTL, .p = {ctl});
    return plain(be)->step_ctl_update(be, ctl);
}
static int w_clip(backend_t *be, int64_t n, float *g, double max_norm, const step_ctl_t *ctl, float *norm) {
    REC(.kind = K_CLIP, .i = {n}, .p = {g, ctl, norm}, .d = {max_norm});
    return plain(be)->clip_grad_norm(be, n, g, max_norm, ctl, norm);
}
static int w_ema(backend_t *be, int64_t n, float *ema, const float *x, double decay) {
    REC(.kind = K_EMA, .i = {n}, .p = {ema, x}, .d = {decay});
    return plain(be)->ema_update(be, n, ema, x, decay);
}
static int w_ema_dev(backend_t *be, int64_t n, float *ema, const float *x, const double *decay) {
    REC(.kind = K_EMA_DEV, .i = {n}, .p = {ema, x, decay});
    return plain(be)->ema_update_dev(be, n, ema, x, decay);
}
static int w_cast(backend_t *be, int64_t n, const void *src, dtype_t sdt, void *dst, dtype_t ddt) {
    REC(.kind = K_CAST, .i = {n}, .dt = sdt, .dt2 = ddt, .p = {src, dst});
    return plain(be)->cast(be, n, src, sdt, dst, ddt);
}
static int w_unscale(backend_t *be, int64_t n, float *g, step_ctl_t *ctl) {
    REC(.kind = K_UNSCALE, .i = {n}, .p = {g, ctl});
    return plain(be)->unscale_check_finite(be, n, g, ctl);
}
static int w_scale(backend_t *be, int64_t n, float *x, float alpha) {
    REC(.kind = K_SCALE, .i = {n}, .p = {x}, .f = {alpha});
    return plain(be)->scale(be, n, x, alpha);
}
static int w_bn_combine(backend_t *be, int world, int c, const float *gathered, int64_t count, float *mean,
                        float *var) {
    REC(.kind = K_BN_COMBINE, .i = {world, c, count}, .p = {gathered, mean, var});
    return plain(be)->bn_combine(be, world, c, gathered, count, mean, var);
}
static int w_host(backend_t *be, void (*fn)(void *ctx), void *ctx) {
    REC(.kind = K_HOST, .fn = fn, .p = {ctx});
    return plain(be)->host_task(be, fn, ctx);
}

/* Runs one stored call with the plain ops. */
static int run_call(backend_t *be, const cpu_call_t *c) {
    const backend_ops_t *o = plain(be);
    const void *const *q = c->p;
    switch (c->kind) {
    case K_CONV_F: return o->conv2d_fwd(be, &c->cs, c->dt, q[0], q[1], V(q[2]));
    case K_CONV_BD: return o->conv2d_bwd_data(be, &c->cs, c->dt, q[0], q[1], V(q[2]));
    case K_CONV_BF: return o->conv2d_bwd_filter(be, &c->cs, c->dt, q[0], q[1], V(q[2]));
    case K_CONV_BDA: return o->conv2d_bwd_data_accum(be, &c->cs, c->dt, q[0], q[1], V(q[2]));
    case K_CONV_FS: return o->conv2d_fwd_bn_stats(be, &c->cs, c->dt, q[0], q[1], V(q[2]), V(q[3]), V(q[4]));
    case K_CONV_BDN:
        return o->conv2d_bwd_data_bn(be, &c->cs, c->dt, q[0], q[1], V(q[2]), q[3], q[4], (act_kind_t)c->act, q[5],
                                     q[6], c->f[0], V(q[7]), V(q[8]), V(q[9]), V(q[10]));
    case K_BN_STATS: return o->bn_stats(be, c->i[0], (int)c->i[1], c->dt, q[0], V(q[1]), V(q[2]));
    case K_BN_APPLY:
        return o->bn_apply(be, c->i[0], (int)c->i[1], c->dt, q[0], q[1], q[2], q[3], q[4], c->f[0], q[5],
                           (act_kind_t)c->act, V(q[6]));
    case K_BN_RUN: return o->bn_update_running(be, (int)c->i[0], q[0], q[1], c->i[1], c->f[0], V(q[2]), V(q[3]));
    case K_BN_BRED:
        return o->bn_bwd_reduce(be, c->i[0], (int)c->i[1], c->dt, q[0], q[1], (act_kind_t)c->act, q[2], q[3], q[4],
                                q[5], q[6], c->f[0], V(q[7]), V(q[8]), V(q[9]), V(q[10]));
    case K_BN_BAPP:
        return o->bn_bwd_apply(be, c->i[0], (int)c->i[1], c->dt, q[0], q[1], (act_kind_t)c->act, q[2], q[3], q[4],
                               q[5], q[6], c->f[0], q[7], q[8], c->i[2], V(q[9]), V(q[10]));
    case K_RELU_F: return o->relu_fwd(be, c->i[0], c->dt, q[0], V(q[1]));
    case K_RELU_B: return o->relu_bwd(be, c->i[0], c->dt, q[0], q[1], V(q[2]));
    case K_RELU6_F: return o->relu6_fwd(be, c->i[0], c->dt, q[0], V(q[1]));
    case K_RELU6_B: return o->relu6_bwd(be, c->i[0], c->dt, q[0], q[1], V(q[2]));
    case K_BIAS_F: return o->channel_bias_fwd(be, c->i[0], (int)c->i[1], c->dt, q[0], V(q[1]));
    case K_BIAS_B: return o->channel_bias_bwd(be, c->i[0], (int)c->i[1], c->dt, q[0], V(q[1]));
    case K_DROP_F: return o->dropout_fwd(be, (int)c->i[0], c->i[1], c->dt, c->d[0], c->u, q[0], q[1], V(q[2]));
    case K_DROP_B: return o->dropout_bwd(be, (int)c->i[0], c->i[1], c->dt, c->d[0], c->u, q[0], q[1], V(q[2]));
    case K_AAPOOL_F: return o->adaptive_avgpool_fwd(be, &c->ps, c->dt, q[0], V(q[1]));
    case K_AAPOOL_B: return o->adaptive_avgpool_bwd(be, &c->ps, c->dt, q[0], V(q[1]));
    case K_ADD: return o->add(be, c->i[0], c->dt, q[0], q[1], V(q[2]));
    case K_APOOL_F: return o->avgpool_fwd(be, (int)c->i[0], (int)c->i[1], (int)c->i[2], c->dt, q[0], V(q[1]));
    case K_APOOL_B: return o->avgpool_bwd(be, (int)c->i[0], (int)c->i[1], (int)c->i[2], c->dt, q[0], V(q[1]));
    case K_MPOOL_F: return o->maxpool_fwd(be, &c->ps, c->dt, q[0], V(q[1]));
    case K_MPOOL_B: return o->maxpool_bwd(be, &c->ps, c->dt, q[0], q[1], V(q[2]));
    case K_LIN_F: return o->linear_fwd(be, (int)c->i[0], (int)c->i[1], (int)c->i[2], c->dt, q[0], q[1], q[2], V(q[3]));
    case K_LIN_B:
        return o->linear_bwd(be, (int)c->i[0], (int)c->i[1], (int)c->i[2], c->dt, q[0], q[1], q[2], V(q[3]), V(q[4]),
                             V(q[5]));
    case K_XENT:
        return o->softmax_xent(be, (int)c->i[0], (int)c->i[1], c->dt, q[0], q[1], c->f[0], c->f[1], q[2], V(q[3]),
                               V(q[4]), V(q[5]));
    case K_XENT_SOFT:
        return o->softmax_xent_soft(be, (int)c->i[0], (int)c->i[1], c->dt, q[0], q[1], c->f[0], q[2], V(q[3]), V(q[4]),
                                    V(q[5]));
    case K_SGD:
        return o->sgd_step(be, c->i[0], V(q[0]), q[1], V(q[2]), c->d[0], c->d[1], c->d[2], c->d[3], c->b, q[3]);
    case K_ADAMW:
        return o->adamw_step(be, c->i[0], V(q[0]), q[1], V(q[2]), V(q[3]), c->d[0], c->d[1], c->d[2], c->d[3],
                             c->d[4], q[4]);
    case K_CTL: return o->step_ctl_update(be, V(q[0]));
    case K_CLIP: return o->clip_grad_norm(be, c->i[0], V(q[0]), c->d[0], q[1], V(q[2]));
    case K_EMA: return o->ema_update(be, c->i[0], V(q[0]), q[1], c->d[0]);
    case K_EMA_DEV: return o->ema_update_dev(be, c->i[0], V(q[0]), q[1], q[2]);
    case K_CAST: return o->cast(be, c->i[0], q[0], c->dt, V(q[1]), c->dt2);
    case K_UNSCALE: return o->unscale_check_finite(be, c->i[0], V(q[0]), V(q[1]));
    case K_SCALE: return o->scale(be, c->i[0], V(q[0]), c->f[0]);
    case K_BN_COMBINE: return o->bn_combine(be, (int)c->i[0], (int)c->i[1], q[0], c->i[2], V(q[1]), V(q[2]));
    case K_HOST: return o->host_task(be, c->fn, V(q[0]));
    case K_COPY: return o->copy(be, V(q[0]), q[1], (size_t)c->i[0]);
    case K_ZERO: return o->zero(be, V(q[0]), (size_t)c->i[0]);
    }
    return err_set(&be->err, ERR_RUNTIME, "cpu graphs: unknown call %d", c->kind);
}

/* ---- graph ops ---- */

static void graph_free(backend_t *be, void *graph) {
    (void)be;
    cpu_graph_t *g = graph;
    if (!g) return;
    free(g->calls);
    free(g);
}

static int capture_begin(backend_t *be) {
    cpu_backend_t *c = cpu_of(be);
    if (c->rec) return err_set(&be->err, ERR_RUNTIME, "cpu graphs: already recording");
    if (!(c->rec = calloc(1, sizeof *c->rec))) return err_set(&be->err, ERR_RUNTIME, "cpu graphs: out of memory");
    return 0;
}

static int capture_end(backend_t *be, void **graph) {
    cpu_backend_t *c = cpu_of(be);
    cpu_graph_t *g = c->rec;
    *graph = NULL;
    c->rec = NULL;
    if (!g) return err_set(&be->err, ERR_RUNTIME, "cpu graphs: capture_end without capture_begin");
    if (g->bad) {
        graph_free(be, g);
        return -1;   /* be->err holds the op that spoiled it */
    }
    if (c->fail_recordings) {
        graph_free(be, g);
        return err_set(&be->err, ERR_RUNTIME, "cpu graphs: recording refused (RUNNER_CPU_GRAPHS=%s)",
                       getenv("RUNNER_CPU_GRAPHS"));
    }
    *graph = g;
    return 0;
}

static int launch(backend_t *be, void *graph) {
    cpu_backend_t *c = cpu_of(be);
    cpu_graph_t *g = graph;
    if (!g) return err_set(&be->err, ERR_RUNTIME, "cpu graphs: launch of no graph");
    if (c->rec) return refuse(be, "graph_launch");
    if (c->stale_every > 0 && ++c->launches % c->stale_every == 0) return 1;
    for (int k = 0; k < g->n; k++)
        if (run_call(be, &g->calls[k]) < 0) return -1;
    return 0;
}

void cpu_graph_install(cpu_backend_t *c, const char *mode) {
    backend_ops_t *o = &c->graph_ops;
    c->plain = c->base.ops;
    *o = *c->plain;
    o->alloc = w_alloc;
    o->release = w_release;
    o->upload = w_upload;
    o->download = w_download;
    o->copy = w_copy;
    o->zero = w_zero;
    o->sync = w_sync;
    o->conv2d_fwd = w_conv_f;
    o->conv2d_bwd_data = w_conv_bd;
    o->conv2d_bwd_filter = w_conv_bf;
    o->conv2d_bwd_data_accum = o->conv2d_bwd_data_accum ? w_conv_bda : NULL;
    o->conv2d_fwd_bn_stats = o->conv2d_fwd_bn_stats ? w_conv_fs : NULL;
    o->conv2d_bwd_data_bn = o->conv2d_bwd_data_bn ? w_conv_bdn : NULL;
    o->bn_stats = w_bn_stats;
    o->bn_apply = w_bn_apply;
    o->bn_update_running = w_bn_run;
    o->bn_bwd_reduce = w_bn_bred;
    o->bn_bwd_apply = w_bn_bapp;
    o->relu_fwd = w_relu_f;
    o->relu_bwd = w_relu_b;
    o->add = w_add;
    o->relu6_fwd = w_relu6_f;
    o->relu6_bwd = w_relu6_b;
    o->channel_bias_fwd = w_bias_f;
    o->channel_bias_bwd = w_bias_b;
    o->dropout_fwd = w_drop_f;
    o->dropout_bwd = w_drop_b;
    o->adaptive_avgpool_fwd = w_aapool_f;
    o->adaptive_avgpool_bwd = w_aapool_b;
    o->avgpool_fwd = w_apool_f;
    o->avgpool_bwd = w_apool_b;
    o->maxpool_fwd = w_mpool_f;
    o->maxpool_bwd = w_mpool_b;
    o->linear_fwd = w_lin_f;
    o->linear_bwd = w_lin_b;
    o->softmax_xent = w_xent;
    o->softmax_xent_soft = w_xent_soft;
    o->sgd_step = w_sgd;
    o->adamw_step = w_adamw;
    o->step_ctl_update = w_ctl;
    o->clip_grad_norm = w_clip;
    o->ema_update = w_ema;
    o->ema_update_dev = w_ema_dev;
    o->cast = w_cast;
    o->unscale_check_finite = w_unscale;
    o->scale = w_scale;
    o->bn_combine = w_bn_combine;
    o->host_task = w_host;
    o->graph_capture_begin = capture_begin;
    o->graph_capture_end = capture_end;
    o->graph_launch = launch;
    o->graph_free = graph_free;
    c->stale_every = !strcmp(mode, "stale") ? 5 : 0;
    /* "fail": every recording fails at its end; "fail-rank<r>": only in the process of
     * rank r (RANK, set by the launcher), for the ranks' agreement after a recording */
    const char *rank = getenv("RANK");
    c->fail_recordings = !strcmp(mode, "fail") ||
                         (!strncmp(mode, "fail-rank", 9) && rank && !strcmp(rank, mode + 9));
    c->base.ops = o;
}

void cpu_graph_abandon(cpu_backend_t *c) {
    graph_free(&c->base, c->rec);
    c->rec = NULL;
}
