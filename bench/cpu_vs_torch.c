/* cpu_vs_torch.c: training throughput of the runner's CPU backend for one architecture of
 * model.arch, the C half of bench/cpu_vs_torch (which runs PyTorch beside it and prints the
 * ratio).
 *
 * Usage: bench_cpu_vs_torch --model M --batch B [--steps N] [--warmup W] [--threads T]
 *                           [--size S] [--channels C] [--classes K] [--profile] [--winograd]
 *                           [--width W] [--groups G] [--dropout P] [--stem cifar|imagenet]
 * (--width / --groups / --dropout: model.width / model.groups / model.dropout, 0 / 0 / -1
 * the architecture's own; --stem: the variant, cifar by default)
 * Measures full training steps (zero grads, forward, loss, backward, SGD momentum step)
 * on synthetic data already in backend memory, and prints
 *   runner: <images/s> img/s (median of N steps, <ms> ms/step)
 * --profile wraps the backend's op table with timers (no globals: the wrapper table
 * carries its own counters) and prints where the time goes, per op, the math libraries
 * with the ISA level they run at, and every distinct convolution with the engine and
 * oneDNN kernel it ran on (backend conv_engine op).
 * --winograd: the CPU backend with train.cpu_winograd (Winograd filter gradients where
 * oneDNN has them), to measure what the opt-in gains.
 * What it does not do: data loading, augmentation, evaluation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/backend.h"
#include "model/net.h"
#include "model/optim.h"
#include "model/arch/arch.h"
#include "util/clock.h"
#include "util/rng.h"

/* ---- profiling wrapper: a copy of the op table whose slots time the originals ---- */

enum { P_CONV_FWD, P_CONV_BWD_DATA, P_CONV_BWD_FILTER, P_BN_STATS, P_BN_APPLY, P_BN_RUNNING,
       P_BN_BWD_REDUCE, P_BN_BWD_APPLY, P_ADD, P_POOL, P_LINEAR, P_LOSS, P_SGD, P_ZERO, P_COPY,
       P_RELU, P_BIAS, P_DROPOUT, P_MAXPOOL, P_N };
static const char *const P_NAMES[P_N] = {"conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_filter",
    "bn_stats", "bn_apply", "bn_update_running", "bn_bwd_reduce", "bn_bwd_apply", "add",
    "avgpool", "linear", "softmax_xent", "sgd_step", "zero", "copy", "relu/relu6",
    "conv bias", "dropout", "max/adaptive pool"};
_Static_assert(P_N == 19, "P_NAMES must list every profiled op");

/* One distinct convolution (shape, direction) seen while profiling, with the kernel the
 * backend ran it on. */
typedef struct prof_conv {
    conv_shape_t s;
    int which;                   /* 0 fwd, 1 bwd data, 2 bwd filter */
    char engine[64];
    double t;
    long calls;
} prof_conv_t;

#define PROF_CONVS 256

typedef struct prof {
    backend_ops_t ops;           /* first: be->ops points here */
    const backend_ops_t *orig;
    double t[P_N];
    double conv1x1[3], conv3x3[3]; /* fwd, bwd_data, bwd_filter split by kernel size */
    long calls[P_N];
    prof_conv_t conv[PROF_CONVS];
    int nconv;
} prof_t;

/* Adds d seconds to the row of (s, which), naming its kernel on first sight. */
static void prof_conv_add(prof_t *p, backend_t *be, const conv_shape_t *s, int which, double d) {
    int i = 0;
    while (i < p->nconv && !(p->conv[i].which == which && !memcmp(&p->conv[i].s, s, sizeof *s))) i++;
    if (i == p->nconv) {
        if (i == PROF_CONVS) return;
        prof_conv_t *c = &p->conv[p->nconv++];
        memset(c, 0, sizeof *c);
        c->s = *s;
        c->which = which;
        if (!p->orig->conv_engine || p->orig->conv_engine(be, s, which, c->engine, sizeof c->engine))
            snprintf(c->engine, sizeof c->engine, "?");
    }
    p->conv[i].t += d;
    p->conv[i].calls++;
}

#define PROF(be) ((prof_t *)(void *)(be)->ops)
#define TIMED(slot, call)                                   \
    do {                                                    \
        prof_t *p_ = PROF(be);                              \
        double t0_ = now_s();                               \
        int rc_ = (call);                                   \
        p_->t[slot] += now_s() - t0_;                       \
        p_->calls[slot]++;                                  \
        return rc_;                                         \
    } while (0)

static int w_conv_fwd(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *w, void *y) {
    prof_t *p = PROF(be);
    double t0 = now_s();
    int rc = p->orig->conv2d_fwd(be, s, dt, x, w, y);
    double d = now_s() - t0;
    p->t[P_CONV_FWD] += d;
    p->calls[P_CONV_FWD]++;
    (s->r == 1 ? p->conv1x1 : p->conv3x3)[0] += d;
    prof_conv_add(p, be, s, 0, d);
    return rc;
}
static int w_conv_bwd_data(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w, void *dx) {
    prof_t *p = PROF(be);
    double t0 = now_s();
    int rc = p->orig->conv2d_bwd_data(be, s, dt, dy, w, dx);
    double d = now_s() - t0;
    p->t[P_CONV_BWD_DATA] += d;
    p->calls[P_CONV_BWD_DATA]++;
    (s->r == 1 ? p->conv1x1 : p->conv3x3)[1] += d;
    prof_conv_add(p, be, s, 1, d);
    return rc;
}
static int w_conv_bwd_filter(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *dy, float *dw) {
    prof_t *p = PROF(be);
    double t0 = now_s();
    int rc = p->orig->conv2d_bwd_filter(be, s, dt, x, dy, dw);
    double d = now_s() - t0;
    p->t[P_CONV_BWD_FILTER] += d;
    p->calls[P_CONV_BWD_FILTER]++;
    (s->r == 1 ? p->conv1x1 : p->conv3x3)[2] += d;
    prof_conv_add(p, be, s, 2, d);
    return rc;
}
static int w_bn_stats(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean, float *var) {
    TIMED(P_BN_STATS, PROF(be)->orig->bn_stats(be, m, c, dt, x, mean, var));
}
static int w_bn_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                      const float *var, const float *g, const float *b, float eps, const void *z, act_kind_t act,
                      void *y) {
    TIMED(P_BN_APPLY, PROF(be)->orig->bn_apply(be, m, c, dt, x, mean, var, g, b, eps, z, act, y));
}
static int w_bn_running(backend_t *be, int c, const float *mean, const float *var, int64_t count,
                        float mom, float *rm, float *rv) {
    TIMED(P_BN_RUNNING, PROF(be)->orig->bn_update_running(be, c, mean, var, count, mom, rm, rv));
}
static int w_bn_bwd_reduce(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                           act_kind_t act, const void *dy, const float *mean, const float *var, const float *g,
                           const float *b, float eps, float *sdy, float *sdyx, float *dg, float *db) {
    TIMED(P_BN_BWD_REDUCE,
          PROF(be)->orig->bn_bwd_reduce(be, m, c, dt, x, y, act, dy, mean, var, g, b, eps, sdy, sdyx, dg, db));
}
static int w_bn_bwd_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                          act_kind_t act, const void *dy, const float *mean, const float *var, const float *g,
                          const float *b, float eps, const float *sdy, const float *sdyx, int64_t count, void *dx,
                          void *dz) {
    TIMED(P_BN_BWD_APPLY,
          PROF(be)->orig->bn_bwd_apply(be, m, c, dt, x, y, act, dy, mean, var, g, b, eps, sdy, sdyx, count, dx,
                                       dz));
}
static int w_add(backend_t *be, int64_t n, dtype_t dt, const void *a, const void *b, void *y) {
    TIMED(P_ADD, PROF(be)->orig->add(be, n, dt, a, b, y));
}
static int w_pool_fwd(backend_t *be, int n, int hw, int c, dtype_t dt, const void *x, void *y) {
    TIMED(P_POOL, PROF(be)->orig->avgpool_fwd(be, n, hw, c, dt, x, y));
}
static int w_pool_bwd(backend_t *be, int n, int hw, int c, dtype_t dt, const void *dy, void *dx) {
    TIMED(P_POOL, PROF(be)->orig->avgpool_bwd(be, n, hw, c, dt, dy, dx));
}
static int w_lin_fwd(backend_t *be, int n, int in, int out, dtype_t dt, const void *x, const void *w,
                     const float *b, void *y) {
    TIMED(P_LINEAR, PROF(be)->orig->linear_fwd(be, n, in, out, dt, x, w, b, y));
}
static int w_lin_bwd(backend_t *be, int n, int in, int out, dtype_t dt, const void *x, const void *w,
                     const void *dy, void *dx, float *dw, float *db) {
    TIMED(P_LINEAR, PROF(be)->orig->linear_bwd(be, n, in, out, dt, x, w, dy, dx, dw, db));
}
static int w_loss(backend_t *be, int n, int classes, dtype_t dt, const void *logits, const int32_t *labels,
                  float sm, float gs, const step_ctl_t *ctl, void *dl, float *ls, int32_t *corr) {
    TIMED(P_LOSS, PROF(be)->orig->softmax_xent(be, n, classes, dt, logits, labels, sm, gs, ctl, dl, ls, corr));
}
static int w_sgd(backend_t *be, int64_t n, float *p, const float *g, float *buf, double lr, double mom,
                 double damp, double wd, bool nest, const step_ctl_t *ctl) {
    TIMED(P_SGD, PROF(be)->orig->sgd_step(be, n, p, g, buf, lr, mom, damp, wd, nest, ctl));
}
static int w_relu_fwd(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y) {
    TIMED(P_RELU, PROF(be)->orig->relu_fwd(be, n, dt, x, y));
}
static int w_relu_bwd(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx) {
    TIMED(P_RELU, PROF(be)->orig->relu_bwd(be, n, dt, y, dy, dx));
}
static int w_relu6_fwd(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y) {
    TIMED(P_RELU, PROF(be)->orig->relu6_fwd(be, n, dt, x, y));
}
static int w_relu6_bwd(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx) {
    TIMED(P_RELU, PROF(be)->orig->relu6_bwd(be, n, dt, y, dy, dx));
}
static int w_bias_fwd(backend_t *be, int64_t m, int c, dtype_t dt, const float *b, void *y) {
    TIMED(P_BIAS, PROF(be)->orig->channel_bias_fwd(be, m, c, dt, b, y));
}
static int w_bias_bwd(backend_t *be, int64_t m, int c, dtype_t dt, const void *dy, float *db) {
    TIMED(P_BIAS, PROF(be)->orig->channel_bias_bwd(be, m, c, dt, dy, db));
}
static int w_drop_fwd(backend_t *be, int n, int64_t per, dtype_t dt, double p, uint32_t node,
                      const dropout_key_t *key, const void *x, void *y) {
    TIMED(P_DROPOUT, PROF(be)->orig->dropout_fwd(be, n, per, dt, p, node, key, x, y));
}
static int w_drop_bwd(backend_t *be, int n, int64_t per, dtype_t dt, double p, uint32_t node,
                      const dropout_key_t *key, const void *dy, void *dx) {
    TIMED(P_DROPOUT, PROF(be)->orig->dropout_bwd(be, n, per, dt, p, node, key, dy, dx));
}
static int w_max_fwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y) {
    TIMED(P_MAXPOOL, PROF(be)->orig->maxpool_fwd(be, s, dt, x, y));
}
static int w_max_bwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, const void *dy, void *dx) {
    TIMED(P_MAXPOOL, PROF(be)->orig->maxpool_bwd(be, s, dt, x, dy, dx));
}
static int w_apool_fwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y) {
    TIMED(P_MAXPOOL, PROF(be)->orig->adaptive_avgpool_fwd(be, s, dt, x, y));
}
static int w_apool_bwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *dy, void *dx) {
    TIMED(P_MAXPOOL, PROF(be)->orig->adaptive_avgpool_bwd(be, s, dt, dy, dx));
}
static int w_zero(backend_t *be, void *dst, size_t bytes) {
    TIMED(P_ZERO, PROF(be)->orig->zero(be, dst, bytes));
}
static int w_copy(backend_t *be, void *dst, const void *src, size_t bytes) {
    TIMED(P_COPY, PROF(be)->orig->copy(be, dst, src, bytes));
}

/* Points be at a timing copy of its op table (owned by the caller). */
static void prof_install(prof_t *p, backend_t *be) {
    memset(p, 0, sizeof *p);
    p->orig = be->ops;
    p->ops = *be->ops;
    p->ops.conv2d_fwd = w_conv_fwd;
    p->ops.conv2d_bwd_data = w_conv_bwd_data;
    p->ops.conv2d_bwd_filter = w_conv_bwd_filter;
    p->ops.bn_stats = w_bn_stats;
    p->ops.bn_apply = w_bn_apply;
    p->ops.bn_update_running = w_bn_running;
    p->ops.bn_bwd_reduce = w_bn_bwd_reduce;
    p->ops.bn_bwd_apply = w_bn_bwd_apply;
    p->ops.add = w_add;
    p->ops.avgpool_fwd = w_pool_fwd;
    p->ops.avgpool_bwd = w_pool_bwd;
    p->ops.linear_fwd = w_lin_fwd;
    p->ops.linear_bwd = w_lin_bwd;
    p->ops.softmax_xent = w_loss;
    p->ops.sgd_step = w_sgd;
    p->ops.zero = w_zero;
    p->ops.copy = w_copy;
    /* the ops of the other families (issue 24); a backend without one keeps NULL */
    if (p->orig->relu_fwd) p->ops.relu_fwd = w_relu_fwd, p->ops.relu_bwd = w_relu_bwd;
    if (p->orig->relu6_fwd) p->ops.relu6_fwd = w_relu6_fwd, p->ops.relu6_bwd = w_relu6_bwd;
    if (p->orig->channel_bias_fwd) p->ops.channel_bias_fwd = w_bias_fwd, p->ops.channel_bias_bwd = w_bias_bwd;
    if (p->orig->dropout_fwd) p->ops.dropout_fwd = w_drop_fwd, p->ops.dropout_bwd = w_drop_bwd;
    if (p->orig->maxpool_fwd) p->ops.maxpool_fwd = w_max_fwd, p->ops.maxpool_bwd = w_max_bwd;
    if (p->orig->adaptive_avgpool_fwd)
        p->ops.adaptive_avgpool_fwd = w_apool_fwd, p->ops.adaptive_avgpool_bwd = w_apool_bwd;
    /* the net then sums residual gradients with conv2d_bwd_data + add, each timed (the
     * cpu backend's accumulate slot is those two ops, the same bits) */
    p->ops.conv2d_bwd_data_accum = NULL;
    be->ops = &p->ops;
}

static void prof_report(const prof_t *p, double total, int steps) {
    printf("profile over %d steps (%.1f ms/step):\n", steps, 1e3 * total / steps);
    double sum = 0;
    for (int i = 0; i < P_N; i++) sum += p->t[i];
    for (int i = 0; i < P_N; i++)
        if (p->calls[i])
            printf("  %-18s %8.2f ms/step %5.1f%%  (%ld calls/step)\n", P_NAMES[i], 1e3 * p->t[i] / steps,
                   100 * p->t[i] / total, p->calls[i] / steps);
    printf("  conv 3x3 fwd/bwd_data/bwd_filter: %.2f / %.2f / %.2f ms/step\n", 1e3 * p->conv3x3[0] / steps,
           1e3 * p->conv3x3[1] / steps, 1e3 * p->conv3x3[2] / steps);
    printf("  conv 1x1 fwd/bwd_data/bwd_filter: %.2f / %.2f / %.2f ms/step\n", 1e3 * p->conv1x1[0] / steps,
           1e3 * p->conv1x1[1] / steps, 1e3 * p->conv1x1[2] / steps);
    printf("  outside ops: %.2f ms/step\n", 1e3 * (total - sum) / steps);
    static const char *const dir[3] = {"fwd", "bwd_data", "bwd_filter"};
    printf("  conv kernels (shape n hxw c->k kernel/stride [groups]: direction, engine and kernel, time):\n");
    for (int i = 0; i < p->nconv; i++) {
        const prof_conv_t *c = &p->conv[i];
        char g[16] = "";
        if (conv_groups(&c->s) > 1) snprintf(g, sizeof g, " g%d", conv_groups(&c->s));
        printf("    n%d %dx%d %d->%d k%d s%d%-6s %-10s %-28s %7.2f ms/step (%ld calls/step)\n", c->s.n,
               c->s.h, c->s.w, c->s.c, c->s.k, c->s.r, c->s.stride, g, dir[c->which], c->engine,
               1e3 * c->t / steps, c->calls / steps);
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *model = "resnet20";
    int batch = 128, steps = 10, warmup = 2, threads = 0, size = 32, channels = 3, classes = 10;
    bool profile = false, winograd = false;
    arch_opts_t ao = {.dropout = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--profile")) { profile = true; continue; }
        if (!strcmp(a, "--winograd")) { winograd = true; continue; }
        if (!v) { fprintf(stderr, "bench_cpu_vs_torch: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--batch")) batch = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--warmup")) warmup = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--size")) size = atoi(v);
        else if (!strcmp(a, "--channels")) channels = atoi(v);
        else if (!strcmp(a, "--classes")) classes = atoi(v);
        else if (!strcmp(a, "--width")) ao.width = atof(v);
        else if (!strcmp(a, "--groups")) ao.groups = atoi(v);
        else if (!strcmp(a, "--dropout")) ao.dropout = atof(v);
        else if (!strcmp(a, "--stem")) ao.stem = !strcmp(v, "imagenet") ? ARCH_STEM_IMAGENET : ARCH_STEM_CIFAR;
        else { fprintf(stderr, "bench_cpu_vs_torch: unknown option %s\n", a); return 2; }
        i++;
    }
    if (batch < 1 || steps < 1 || warmup < 0 || size < 1) {
        fprintf(stderr, "bench_cpu_vs_torch: --batch, --steps and --size must be >= 1\n");
        return 2;
    }
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = threads, .deterministic = true,
                         .cpu_winograd = winograd};
    backend_t *be = backend_create(&bo, &e);
    ao.in_channels = channels;
    ao.num_classes = classes;
    net_t *n = be ? arch_build(model, &ao, &e) : NULL;
    if (!n || net_bind(n, be, batch, size, size, DT_F32, &e) < 0 || net_init(n, 0, &e) < 0) {
        fprintf(stderr, "bench_cpu_vs_torch: %s\n", e.msg);
        return e.code ? e.code : 1;
    }
    optim_opts_t oo = {.kind = OPTIM_SGD, .momentum = 0.9, .weight_decay = 5e-4};
    optim_t *o = optim_create(n, &oo, &e);
    size_t count = (size_t)batch * size * size * channels;
    float *img = malloc(count * sizeof(float));
    int32_t *lab = malloc((size_t)batch * sizeof(int32_t));
    double *times = malloc((size_t)steps * sizeof(double));
    if (!o || !img || !lab || !times) {
        fprintf(stderr, "bench_cpu_vs_torch: setup failed: %s\n", e.msg);
        return 1;
    }
    rng_t r = rng_make(1, RNG_STREAM_SYNTHETIC, 0, 0);
    for (size_t i = 0; i < count; i++) img[i] = (float)rng_normal(&r);
    for (int i = 0; i < batch; i++) lab[i] = (int32_t)rng_below(&r, (uint32_t)classes);
    if (net_upload_input(n, img, batch, &e) < 0) {
        fprintf(stderr, "bench_cpu_vs_torch: %s\n", e.msg);
        return 1;
    }
    prof_t prof;
    double prof_total = 0;
    for (int s = 0; s < warmup + steps; s++) {
        if (profile && s == warmup) prof_install(&prof, be);
        double t0 = now_s();
        net_loss_out_t lo;
        if (net_zero_grads(n, &e) < 0 || net_set_rng_key(n, 0, 0, (int64_t)s * batch, 1, &e) < 0 ||
            net_forward(n, net_input(n), batch, true, NULL, &e) < 0 ||
            net_loss(n, lab, 0.0f, 1.0f / batch, &lo, &e) < 0 || net_backward(n, NULL, &e) < 0 ||
            optim_step(o, 0.01, &e) < 0 || be->ops->sync(be) < 0) {
            fprintf(stderr, "bench_cpu_vs_torch: step %d: %s\n", s, e.msg);
            return 1;
        }
        double dt = now_s() - t0;
        if (s >= warmup) {
            times[s - warmup] = dt;
            prof_total += dt;
        }
    }
    qsort(times, (size_t)steps, sizeof(double), cmp_double);
    double med = times[steps / 2];
    printf("runner: %.1f img/s (median of %d steps, %.1f ms/step; %s batch %d %dx%dx%d, %d threads%s)\n",
           batch / med, steps, 1e3 * med, model, batch, channels, size, size, be->threads,
           winograd ? ", winograd" : "");
    if (profile && be->ops->libraries) {
        char libs[512];
        be->ops->libraries(be, libs, sizeof libs);
        printf("libraries: %s\n", libs);
    }
    if (profile) {
        prof_report(&prof, prof_total, steps);
        be->ops = prof.orig;
    }
    optim_free(o);
    net_free(n);
    backend_free(be);
    free(img);
    free(lab);
    free(times);
    return 0;
}
