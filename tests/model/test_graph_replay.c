/* test_graph_replay.c: what train.cuda_graphs relies on, checked on the CPU: a micro-batch
 * (net_forward + net_loss_async + net_backward) recorded once as a list of backend op calls
 * and replayed later, with new images and labels written into the same buffers in
 * between, computes exactly what running the calls again computes; net_graph_replayed
 * then leaves the net's host state as the calls would have (BN num_batches_tracked).
 * In other words, the recorded sequence depends on device memory only, never on host
 * values that change from step to step.
 *
 * The recording backend: a CPU backend whose op table is swapped for one where every op
 * the three calls use is wrapped; between graph_capture_begin and graph_capture_end the
 * wrappers store the call instead of running it (a CUDA stream capture does the same),
 * graph_launch runs the stored calls in order. Any other op while recording (an upload,
 * a download, a copy) fails the recording, as it would break a CUDA capture.
 *
 * Compared, resnet20 on 8x8 inputs, fp32 and fp16 (emulated, with the loss scale read from
 * a step control), 4 steps of SGD with new data each step: a plain CPU backend running
 * every step, against the recording backend running step 1 normally, recording step 2
 * and replaying it for steps 2..4: params, BN buffers, gradients and counters bit for bit.
 */
#include <stdlib.h>
#include <string.h>

#include "model/amp.h"
#include "model/cpu/cpu_backend.h"
#include "model/net.h"
#include "model/optim.h"
#include "model/resnet.h"
#include "util/rng.h"
#include "tests/test.h"

/* ---- the recording backend ---- */

enum { K_CONV_F, K_CONV_BD, K_CONV_BF, K_BN_STATS, K_BN_APPLY, K_BN_RUN, K_BN_BRED, K_BN_BAPP, K_RELU_F,
       K_RELU_B, K_ADD, K_POOL_F, K_POOL_B, K_LIN_F, K_LIN_B, K_XENT, K_CAST, K_COPY, K_ZERO, K_CONV_BDA };

typedef struct call {
    int kind;
    conv_shape_t s;
    dtype_t dt, dt2;
    const void *p[12];
    int64_t i[4];
    float f[4];
    bool b;
    const step_ctl_t *ctl;
} call_t;

typedef struct recording {
    call_t *calls;
    int n, cap;
} recording_t;

static const backend_ops_t *g_cpu;     /* the CPU backend's own table */
static backend_ops_t g_rec_ops;        /* the wrapped table */
static recording_t *g_rec;             /* non-NULL while recording */
static int g_foreign;                  /* ops called while recording that a capture cannot take */

static int push(const call_t *c) {
    if (g_rec->n == g_rec->cap) {
        int cap = g_rec->cap ? 2 * g_rec->cap : 256;
        call_t *nc = realloc(g_rec->calls, (size_t)cap * sizeof *nc);
        if (!nc) return -1;
        g_rec->calls = nc;
        g_rec->cap = cap;
    }
    g_rec->calls[g_rec->n++] = *c;
    return 0;
}

#define P(x) ((void *)(x))
#define REC(...) do { if (g_rec) { call_t c_ = {__VA_ARGS__}; return push(&c_); } } while (0)

static int w_conv_f(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *w, void *y) {
    REC(.kind = K_CONV_F, .s = *s, .dt = dt, .p = {x, w, y});
    return g_cpu->conv2d_fwd(be, s, dt, x, w, y);
}
static int w_conv_bd(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w, void *dx) {
    REC(.kind = K_CONV_BD, .s = *s, .dt = dt, .p = {dy, w, dx});
    return g_cpu->conv2d_bwd_data(be, s, dt, dy, w, dx);
}
static int w_conv_bda(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w, void *dx) {
    REC(.kind = K_CONV_BDA, .s = *s, .dt = dt, .p = {dy, w, dx});
    return g_cpu->conv2d_bwd_data_accum(be, s, dt, dy, w, dx);
}
static int w_conv_bf(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *dy, float *dw) {
    REC(.kind = K_CONV_BF, .s = *s, .dt = dt, .p = {x, dy, dw});
    return g_cpu->conv2d_bwd_filter(be, s, dt, x, dy, dw);
}
static int w_bn_stats(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean, float *var) {
    REC(.kind = K_BN_STATS, .i = {m, c}, .dt = dt, .p = {x, mean, var});
    return g_cpu->bn_stats(be, m, c, dt, x, mean, var);
}
static int w_bn_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                      const float *var, const float *gamma, const float *beta, float eps, const void *z,
                      bool relu, void *y) {
    REC(.kind = K_BN_APPLY, .i = {m, c}, .dt = dt, .p = {x, mean, var, gamma, beta, z, y}, .f = {eps}, .b = relu);
    return g_cpu->bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, z, relu, y);
}
static int w_bn_run(backend_t *be, int c, const float *mean, const float *var, int64_t count, float momentum,
                    float *run_mean, float *run_var) {
    REC(.kind = K_BN_RUN, .i = {c, count}, .p = {mean, var, run_mean, run_var}, .f = {momentum});
    return g_cpu->bn_update_running(be, c, mean, var, count, momentum, run_mean, run_var);
}
static int w_bn_bred(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, const void *dy,
                     const float *mean, const float *var, float eps, float *sum_dy, float *sum_dy_xhat,
                     float *dgamma, float *dbeta) {
    REC(.kind = K_BN_BRED, .i = {m, c}, .dt = dt, .p = {x, y, dy, mean, var, sum_dy, sum_dy_xhat, dgamma, dbeta},
        .f = {eps});
    return g_cpu->bn_bwd_reduce(be, m, c, dt, x, y, dy, mean, var, eps, sum_dy, sum_dy_xhat, dgamma, dbeta);
}
static int w_bn_bapp(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, const void *dy,
                     const float *mean, const float *var, const float *gamma, float eps, const float *sum_dy,
                     const float *sum_dy_xhat, int64_t count, void *dx, void *dz) {
    REC(.kind = K_BN_BAPP, .i = {m, c, count}, .dt = dt,
        .p = {x, y, dy, mean, var, gamma, sum_dy, sum_dy_xhat, dx, dz}, .f = {eps});
    return g_cpu->bn_bwd_apply(be, m, c, dt, x, y, dy, mean, var, gamma, eps, sum_dy, sum_dy_xhat, count, dx, dz);
}
static int w_relu_f(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y) {
    REC(.kind = K_RELU_F, .i = {n}, .dt = dt, .p = {x, y});
    return g_cpu->relu_fwd(be, n, dt, x, y);
}
static int w_relu_b(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx) {
    REC(.kind = K_RELU_B, .i = {n}, .dt = dt, .p = {y, dy, dx});
    return g_cpu->relu_bwd(be, n, dt, y, dy, dx);
}
static int w_add(backend_t *be, int64_t n, dtype_t dt, const void *a, const void *b, void *y) {
    REC(.kind = K_ADD, .i = {n}, .dt = dt, .p = {a, b, y});
    return g_cpu->add(be, n, dt, a, b, y);
}
static int w_pool_f(backend_t *be, int n, int hw, int c, dtype_t dt, const void *x, void *y) {
    REC(.kind = K_POOL_F, .i = {n, hw, c}, .dt = dt, .p = {x, y});
    return g_cpu->avgpool_fwd(be, n, hw, c, dt, x, y);
}
static int w_pool_b(backend_t *be, int n, int hw, int c, dtype_t dt, const void *dy, void *dx) {
    REC(.kind = K_POOL_B, .i = {n, hw, c}, .dt = dt, .p = {dy, dx});
    return g_cpu->avgpool_bwd(be, n, hw, c, dt, dy, dx);
}
static int w_lin_f(backend_t *be, int n, int in, int out, dtype_t dt, const void *x, const void *w, const float *b,
                   void *y) {
    REC(.kind = K_LIN_F, .i = {n, in, out}, .dt = dt, .p = {x, w, b, y});
    return g_cpu->linear_fwd(be, n, in, out, dt, x, w, b, y);
}
static int w_lin_b(backend_t *be, int n, int in, int out, dtype_t dt, const void *x, const void *w, const void *dy,
                   void *dx, float *dw, float *db) {
    REC(.kind = K_LIN_B, .i = {n, in, out}, .dt = dt, .p = {x, w, dy, dx, dw, db});
    return g_cpu->linear_bwd(be, n, in, out, dt, x, w, dy, dx, dw, db);
}
static int w_xent(backend_t *be, int n, int classes, dtype_t dt, const void *logits, const int32_t *labels,
                  float smoothing, float grad_scale, const step_ctl_t *ctl, void *dlogits, float *loss_sum,
                  int32_t *correct) {
    REC(.kind = K_XENT, .i = {n, classes}, .dt = dt, .p = {logits, labels, dlogits, loss_sum, correct},
        .f = {smoothing, grad_scale}, .ctl = ctl);
    return g_cpu->softmax_xent(be, n, classes, dt, logits, labels, smoothing, grad_scale, ctl, dlogits, loss_sum,
                               correct);
}
static int w_cast(backend_t *be, int64_t n, const void *src, dtype_t sdt, void *dst, dtype_t ddt) {
    REC(.kind = K_CAST, .i = {n}, .dt = sdt, .dt2 = ddt, .p = {src, dst});
    return g_cpu->cast(be, n, src, sdt, dst, ddt);
}
static int w_copy(backend_t *be, void *dst, const void *src, size_t bytes) {
    REC(.kind = K_COPY, .i = {(int64_t)bytes}, .p = {dst, src});
    return g_cpu->copy(be, dst, src, bytes);
}
static int w_zero(backend_t *be, void *dst, size_t bytes) {
    REC(.kind = K_ZERO, .i = {(int64_t)bytes}, .p = {dst});
    return g_cpu->zero(be, dst, bytes);
}
/* What a stream capture could not take (host transfers): counted, then run. */
static int w_upload(backend_t *be, void *dst, const void *src, size_t bytes) {
    if (g_rec) g_foreign++;
    return g_cpu->upload(be, dst, src, bytes);
}
static int w_download(backend_t *be, void *dst, const void *src, size_t bytes) {
    if (g_rec) g_foreign++;
    return g_cpu->download(be, dst, src, bytes);
}

static int replay(backend_t *be, const recording_t *r) {
    const backend_ops_t *o = g_cpu;
    for (int k = 0; k < r->n; k++) {
        const call_t *c = &r->calls[k];
        void *const *p = (void *const *)c->p;
        int rc = 0;
        switch (c->kind) {
        case K_CONV_F: rc = o->conv2d_fwd(be, &c->s, c->dt, p[0], p[1], p[2]); break;
        case K_CONV_BD: rc = o->conv2d_bwd_data(be, &c->s, c->dt, p[0], p[1], p[2]); break;
        case K_CONV_BF: rc = o->conv2d_bwd_filter(be, &c->s, c->dt, p[0], p[1], p[2]); break;
        case K_CONV_BDA: rc = o->conv2d_bwd_data_accum(be, &c->s, c->dt, p[0], p[1], p[2]); break;
        case K_BN_STATS: rc = o->bn_stats(be, c->i[0], (int)c->i[1], c->dt, p[0], p[1], p[2]); break;
        case K_BN_APPLY:
            rc = o->bn_apply(be, c->i[0], (int)c->i[1], c->dt, p[0], p[1], p[2], p[3], p[4], c->f[0], p[5], c->b, p[6]);
            break;
        case K_BN_RUN: rc = o->bn_update_running(be, (int)c->i[0], p[0], p[1], c->i[1], c->f[0], p[2], p[3]); break;
        case K_BN_BRED:
            rc = o->bn_bwd_reduce(be, c->i[0], (int)c->i[1], c->dt, p[0], p[1], p[2], p[3], p[4], c->f[0], p[5], p[6],
                                  p[7], p[8]);
            break;
        case K_BN_BAPP:
            rc = o->bn_bwd_apply(be, c->i[0], (int)c->i[1], c->dt, p[0], p[1], p[2], p[3], p[4], p[5], c->f[0], p[6],
                                 p[7], c->i[2], p[8], p[9]);
            break;
        case K_RELU_F: rc = o->relu_fwd(be, c->i[0], c->dt, p[0], p[1]); break;
        case K_RELU_B: rc = o->relu_bwd(be, c->i[0], c->dt, p[0], p[1], p[2]); break;
        case K_ADD: rc = o->add(be, c->i[0], c->dt, p[0], p[1], p[2]); break;
        case K_POOL_F: rc = o->avgpool_fwd(be, (int)c->i[0], (int)c->i[1], (int)c->i[2], c->dt, p[0], p[1]); break;
        case K_POOL_B: rc = o->avgpool_bwd(be, (int)c->i[0], (int)c->i[1], (int)c->i[2], c->dt, p[0], p[1]); break;
        case K_LIN_F:
            rc = o->linear_fwd(be, (int)c->i[0], (int)c->i[1], (int)c->i[2], c->dt, p[0], p[1], p[2], p[3]);
            break;
        case K_LIN_B:
            rc = o->linear_bwd(be, (int)c->i[0], (int)c->i[1], (int)c->i[2], c->dt, p[0], p[1], p[2], p[3], p[4],
                               p[5]);
            break;
        case K_XENT:
            rc = o->softmax_xent(be, (int)c->i[0], (int)c->i[1], c->dt, p[0], p[1], c->f[0], c->f[1], c->ctl, p[2],
                                 p[3], p[4]);
            break;
        case K_CAST: rc = o->cast(be, c->i[0], p[0], c->dt, p[1], c->dt2); break;
        case K_COPY: rc = o->copy(be, p[0], p[1], (size_t)c->i[0]); break;
        case K_ZERO: rc = o->zero(be, p[0], (size_t)c->i[0]); break;
        }
        if (rc < 0) return -1;
    }
    return 0;
}

static int w_capture_begin(backend_t *be) {
    (void)be;
    g_rec = calloc(1, sizeof *g_rec);
    g_foreign = 0;
    return g_rec ? 0 : -1;
}
static int w_capture_end(backend_t *be, void **graph) {
    (void)be;
    *graph = g_foreign ? NULL : g_rec;
    if (g_foreign) {
        free(g_rec->calls);
        free(g_rec);
    }
    g_rec = NULL;
    return *graph ? 0 : -1;
}
static int w_launch(backend_t *be, void *graph) { return replay(be, graph); }
static void w_graph_free(backend_t *be, void *graph) {
    (void)be;
    recording_t *r = graph;
    if (r) free(r->calls);
    free(r);
}

static void make_rec_ops(void) {
    g_rec_ops = *g_cpu;
    g_rec_ops.conv2d_fwd = w_conv_f;
    g_rec_ops.conv2d_bwd_data = w_conv_bd;
    g_rec_ops.conv2d_bwd_filter = w_conv_bf;
    if (g_cpu->conv2d_bwd_data_accum) g_rec_ops.conv2d_bwd_data_accum = w_conv_bda;
    g_rec_ops.conv2d_fwd_bn_stats = NULL;   /* not wrapped: the net runs the ops they fuse */
    g_rec_ops.conv2d_bwd_data_bn = NULL;
    g_rec_ops.bn_stats = w_bn_stats;
    g_rec_ops.bn_apply = w_bn_apply;
    g_rec_ops.bn_update_running = w_bn_run;
    g_rec_ops.bn_bwd_reduce = w_bn_bred;
    g_rec_ops.bn_bwd_apply = w_bn_bapp;
    g_rec_ops.relu_fwd = w_relu_f;
    g_rec_ops.relu_bwd = w_relu_b;
    g_rec_ops.add = w_add;
    g_rec_ops.avgpool_fwd = w_pool_f;
    g_rec_ops.avgpool_bwd = w_pool_b;
    g_rec_ops.linear_fwd = w_lin_f;
    g_rec_ops.linear_bwd = w_lin_b;
    g_rec_ops.softmax_xent = w_xent;
    g_rec_ops.cast = w_cast;
    g_rec_ops.copy = w_copy;
    g_rec_ops.zero = w_zero;
    g_rec_ops.upload = w_upload;
    g_rec_ops.download = w_download;
    g_rec_ops.graph_capture_begin = w_capture_begin;
    g_rec_ops.graph_capture_end = w_capture_end;
    g_rec_ops.graph_launch = w_launch;
    g_rec_ops.graph_free = w_graph_free;
}

/* ---- the comparison ---- */

enum { B = 6, HW = 8, CLASSES = 5, STEPS = 4 };

typedef struct side {
    backend_t *be;
    net_t *net;
    optim_t *opt;
    loss_scaler_t ls;
} side_t;

static side_t side_make(bool recording, dtype_t dt) {
    side_t s = {0};
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 2};
    s.be = cpu_backend_create(&bo, &e);
    if (recording) {
        g_cpu = s.be->ops;
        make_rec_ops();
        s.be->ops = &g_rec_ops;
    }
    s.net = resnet_build("resnet20", 3, CLASSES, false, &e);
    optim_opts_t oo = {.kind = OPTIM_SGD, .momentum = 0.9, .weight_decay = 5e-4};
    if (!s.net || net_bind(s.net, s.be, B, HW, HW, dt, &e) || net_init(s.net, 17, &e) ||
        !(s.opt = optim_create(s.net, &oo, &e)) ||
        loss_scaler_init(&s.ls, s.be, optim_ctl(s.opt), dt, 1024.0, 2000, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        exit(1);
    }
    return s;
}

/* Step k's data into the net's input and label buffers (what the GPU data path's kernel
 * does between steps). */
static void put_data(side_t *s, int k) {
    err_t e = {0};
    float img[B * HW * HW * 3];
    int32_t lab[B];
    rng_t r = rng_make(99, RNG_STREAM_MISC, (uint64_t)k, 0);
    for (int i = 0; i < B * HW * HW * 3; i++) img[i] = rng_uniform(&r) * 2.0f - 1.0f;
    for (int i = 0; i < B; i++) lab[i] = (int32_t)rng_below(&r, CLASSES);
    CHECK_INT(net_upload_input(s->net, img, B, &e), 0);
    CHECK_INT(s->be->ops->upload(s->be, net_labels(s->net), lab, sizeof lab), 0);
}

static int micro(side_t *s, err_t *e) {
    return net_forward(s->net, net_input(s->net), B, true, NULL, e) ||
           net_loss_async(s->net, NULL, 0.1f, 1.0f / B, optim_ctl(s->opt), NULL, NULL, e) ||
           net_backward(s->net, NULL, e);
}

static int finish_step(side_t *s, err_t *e) {
    return loss_scaler_unscale(&s->ls, net_grads(s->net), (int64_t)net_num_params(s->net), e) ||
           optim_step(s->opt, 0.05, e);
}

static long diff_words(const float *a, const float *b, size_t n) {
    long bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], 4) != 0;
    return bad;
}

static void replay_equals_eager(dtype_t dt) {
    side_t plain = side_make(false, dt), rec = side_make(true, dt);
    err_t e = {0};
    void *graph = NULL;
    for (int k = 0; k < STEPS; k++) {
        CHECK_INT(net_zero_grads(plain.net, &e), 0);
        put_data(&plain, k);
        CHECK_INT(micro(&plain, &e), 0);
        CHECK_INT(finish_step(&plain, &e), 0);

        CHECK_INT(net_zero_grads(rec.net, &e), 0);
        put_data(&rec, k);
        if (k == 0) {
            CHECK_INT(micro(&rec, &e), 0);
        } else {
            if (!graph) {
                /* what the trainer does: the host state the recording touches is put back */
                int nc = net_num_counters(rec.net);
                int64_t saved[128];
                CHECK(nc <= 128);
                memcpy(saved, net_counters(rec.net), (size_t)nc * sizeof *saved);
                CHECK_INT(rec.be->ops->graph_capture_begin(rec.be), 0);
                CHECK_INT(micro(&rec, &e), 0);
                CHECK_INT(rec.be->ops->graph_capture_end(rec.be, &graph), 0);
                memcpy(net_counters(rec.net), saved, (size_t)nc * sizeof *saved);
                CHECK(graph != NULL);
                if (!graph) break;
                CHECK_INT(((recording_t *)graph)->n > 100, 1);   /* it recorded, did not run */
            }
            CHECK_INT(rec.be->ops->graph_launch(rec.be, graph), 0);
            net_graph_replayed(rec.net, net_input(rec.net), B);
        }
        CHECK_INT(finish_step(&rec, &e), 0);
    }
    size_t np = net_num_params(plain.net), nb = net_num_buffers(plain.net);
    float *pa = malloc(np * 4), *pb = malloc(np * 4), *ba = malloc(nb * 4), *bb = malloc(nb * 4);
    CHECK_INT(net_download_params(plain.net, pa, &e), 0);
    CHECK_INT(net_download_params(rec.net, pb, &e), 0);
    CHECK_INT(net_download_buffers(plain.net, ba, &e), 0);
    CHECK_INT(net_download_buffers(rec.net, bb, &e), 0);
    CHECK_INT(diff_words(pb, pa, np), 0);
    CHECK_INT(diff_words(bb, ba, nb), 0);
    CHECK_INT(diff_words(net_grads(rec.net), net_grads(plain.net), np), 0);
    for (int i = 0; i < net_num_counters(plain.net); i++) CHECK_INT(net_counters(rec.net)[i], STEPS);
    CHECK(memcmp(net_counters(rec.net), net_counters(plain.net),
                 (size_t)net_num_counters(plain.net) * sizeof(int64_t)) == 0);
    CHECK(diff_words(pa, pb, np) == 0 && pa[0] != 0.0f);
    /* a recording that would need a host transfer is refused (the trainer then runs the
     * micro-batch normally): net_loss with host labels uploads them */
    void *bad = NULL;
    int32_t lab[B] = {0};
    CHECK_INT(rec.be->ops->graph_capture_begin(rec.be), 0);
    CHECK_INT(net_forward(rec.net, net_input(rec.net), B, true, NULL, &e), 0);
    CHECK_INT(net_loss_async(rec.net, lab, 0.0f, 1.0f / B, NULL, NULL, NULL, &e), 0);
    CHECK_INT(rec.be->ops->graph_capture_end(rec.be, &bad), -1);
    CHECK(bad == NULL);
    rec.be->ops->graph_free(rec.be, graph);
    free(pa); free(pb); free(ba); free(bb);
    side_t sides[2] = {plain, rec};
    for (int i = 0; i < 2; i++) {
        optim_free(sides[i].opt);
        net_free(sides[i].net);
        backend_free(sides[i].be);
    }
}

static void test_fp32(void) { replay_equals_eager(DT_F32); }
static void test_fp16(void) { replay_equals_eager(DT_F16); }

int main(void) {
    TEST_RUN(test_fp32);
    TEST_RUN(test_fp16);
    return test_main_end();
}
