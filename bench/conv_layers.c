/* conv_layers.c: per-layer benchmark of the CPU backend's convolutions and batch norm on
 * the distinct layer shapes of resnet20 (batch 128) and resnet18-CIFAR (batch 64), and
 * the grouped/depthwise ones of MobileNetV2-CIFAR and a reduced-width ResNeXt-29 (8x16d)
 * at batch 64 (MobileNetV2's BN fuses relu6).
 *
 * For each shape it times one training pass of the layer: conv forward + backward data
 * (not for the stem, whose input needs no gradient) + backward filter, and separately
 * BN+ReLU forward + backward on the conv output (bn_stats, bn_apply, bn_bwd_reduce,
 * bn_bwd_apply). Prints one line per layer with the minimum over --reps repetitions.
 * bench/conv_layers_torch.py runs the same shapes in PyTorch and drives this program
 * layer by layer (--layer i), alternating the two so both see the same machine load.
 *
 * Usage: bench_conv_layers [--layer i] [--reps n] [--threads t]
 *                          [--engine auto|gemm|dnnl|dnnl_blk|dnnl_wino]
 *                          [--clock wall|cpu] [--impl (each direction's kernel)]
 * Not here: whole-model timing (bench/cpu_vs_torch).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/backend.h"
#include "model/cpu/cpu_backend.h"

typedef struct layer {
    const char *net;
    int n, hw, c, k, r, stride, count;   /* count: how many convs of this shape the net has */
    int groups;                          /* 0/1: dense */
} layer_t;

static const layer_t layers[] = {
    {"resnet20", 128, 32, 3, 16, 3, 1, 1, 1},
    {"resnet20", 128, 32, 16, 16, 3, 1, 6, 1},
    {"resnet20", 128, 32, 16, 32, 3, 2, 1, 1},
    {"resnet20", 128, 32, 16, 32, 1, 2, 1, 1},
    {"resnet20", 128, 16, 32, 32, 3, 1, 5, 1},
    {"resnet20", 128, 16, 32, 64, 3, 2, 1, 1},
    {"resnet20", 128, 16, 32, 64, 1, 2, 1, 1},
    {"resnet20", 128, 8, 64, 64, 3, 1, 5, 1},
    {"resnet18", 64, 32, 3, 64, 3, 1, 1, 1},
    {"resnet18", 64, 32, 64, 64, 3, 1, 4, 1},
    {"resnet18", 64, 32, 64, 128, 3, 2, 1, 1},
    {"resnet18", 64, 32, 64, 128, 1, 2, 1, 1},
    {"resnet18", 64, 16, 128, 128, 3, 1, 3, 1},
    {"resnet18", 64, 16, 128, 256, 3, 2, 1, 1},
    {"resnet18", 64, 16, 128, 256, 1, 2, 1, 1},
    {"resnet18", 64, 8, 256, 256, 3, 1, 3, 1},
    {"resnet18", 64, 8, 256, 512, 3, 2, 1, 1},
    {"resnet18", 64, 8, 256, 512, 1, 2, 1, 1},
    {"resnet18", 64, 4, 512, 512, 3, 1, 3, 1},
    /* MobileNetV2-CIFAR (kuangliu's strides: stem and stage 2 at stride 1), depthwise 3x3 */
    {"mbv2", 64, 32, 32, 32, 3, 1, 1, 32},
    {"mbv2", 64, 32, 96, 96, 3, 1, 1, 96},
    {"mbv2", 64, 32, 144, 144, 3, 1, 1, 144},
    {"mbv2", 64, 32, 144, 144, 3, 2, 1, 144},
    {"mbv2", 64, 16, 192, 192, 3, 1, 2, 192},
    {"mbv2", 64, 16, 192, 192, 3, 2, 1, 192},
    {"mbv2", 64, 8, 384, 384, 3, 1, 4, 384},
    {"mbv2", 64, 8, 576, 576, 3, 1, 2, 576},
    {"mbv2", 64, 8, 576, 576, 3, 2, 1, 576},
    {"mbv2", 64, 4, 960, 960, 3, 1, 3, 960},
    /* ResNeXt-29 8x16d (reduced width), grouped 3x3 with 8 groups */
    {"resnext", 64, 32, 128, 128, 3, 1, 3, 8},
    {"resnext", 64, 32, 256, 256, 3, 2, 1, 8},
    {"resnext", 64, 16, 256, 256, 3, 1, 2, 8},
    {"resnext", 64, 16, 512, 512, 3, 2, 1, 8},
    {"resnext", 64, 8, 512, 512, 3, 1, 2, 8},
};
#define NNETS 4
static const char *const net_names[NNETS] = {"resnet20", "resnet18", "mbv2", "resnext"};
#define NLAYERS ((int)(sizeof layers / sizeof layers[0]))

/* Wall-clock milliseconds, or process CPU milliseconds (all threads) with --clock cpu,
 * which on a machine shared with other jobs measures the work done rather than the
 * share of the cores this process happened to get. */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static conv_shape_t shape_of(const layer_t *l) {
    conv_shape_t s = {0};
    s.n = l->n; s.h = s.w = l->hw; s.c = l->c; s.k = l->k; s.r = s.s = l->r;
    s.stride = l->stride; s.pad = l->r / 2; s.groups = l->groups;
    s.p = (s.h + 2 * s.pad - s.r) / s.stride + 1;
    s.q = (s.w + 2 * s.pad - s.s) / s.stride + 1;
    return s;
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
}

/* Times one layer; returns 0 or -1 with the backend's error printed. */
static int bench_layer(backend_t *be, int li, int reps, double *conv_ms, double *bn_ms) {
    const backend_ops_t *ops = be->ops;
    conv_shape_t s = shape_of(&layers[li]);
    size_t nx = (size_t)s.n * s.h * s.w * s.c, nw = (size_t)s.k * s.r * s.s * s.c / conv_groups(&s);
    act_kind_t act = strcmp(layers[li].net, "mbv2") ? ACT_RELU : ACT_RELU6;
    size_t ny = (size_t)s.n * s.p * s.q * s.k;
    int64_t m = (int64_t)s.n * s.p * s.q;
    float *x = ops->alloc(be, nx * 4), *dx = ops->alloc(be, nx * 4), *w = ops->alloc(be, nw * 4);
    float *dw = ops->alloc(be, nw * 4), *y = ops->alloc(be, ny * 4), *dy = ops->alloc(be, ny * 4);
    float *z = ops->alloc(be, ny * 4), *dz = ops->alloc(be, ny * 4);
    float *bnp = ops->alloc(be, (size_t)s.k * 8 * 4);
    if (!x || !dx || !w || !dw || !y || !dy || !z || !dz || !bnp) {
        fprintf(stderr, "bench_conv_layers: %s\n", be->err.msg);
        return -1;
    }
    fill(x, nx, 1); fill(w, nw, 2); fill(dy, ny, 3);
    memset(dw, 0, nw * 4);
    float *gamma = bnp, *beta = bnp + s.k, *mean = bnp + 2 * s.k, *var = bnp + 3 * s.k;
    float *sdy = bnp + 4 * s.k, *sdx = bnp + 5 * s.k, *dg = bnp + 6 * s.k, *db = bnp + 7 * s.k;
    for (int j = 0; j < s.k; j++) { gamma[j] = 1; beta[j] = 0; dg[j] = db[j] = 0; }
    bool stem = s.c == 3;
    *conv_ms = *bn_ms = 1e30;
    for (int rep = -1; rep < reps; rep++) {     /* rep -1: warm-up (primitive creation) */
        double t0 = now_ms();
        int rc = ops->conv2d_fwd(be, &s, DT_F32, x, w, y);
        if (!rc && !stem) rc = ops->conv2d_bwd_data(be, &s, DT_F32, dy, w, dx);
        if (!rc) rc = ops->conv2d_bwd_filter(be, &s, DT_F32, x, dy, dw);
        double t1 = now_ms();
        if (!rc) rc = ops->bn_stats(be, m, s.k, DT_F32, y, mean, var);
        if (!rc) rc = ops->bn_apply(be, m, s.k, DT_F32, y, mean, var, gamma, beta, 1e-5f, NULL,
                                    act, z);
        if (!rc) rc = ops->bn_bwd_reduce(be, m, s.k, DT_F32, y, z, act, dy, mean, var, gamma,
                                         beta, 1e-5f, sdy, sdx, dg, db);
        if (!rc) rc = ops->bn_bwd_apply(be, m, s.k, DT_F32, y, z, act, dy, mean, var, gamma,
                                        beta, 1e-5f, sdy, sdx, m, dz, NULL);
        double t2 = now_ms();
        if (rc) {
            fprintf(stderr, "bench_conv_layers: %s\n", be->err.msg);
            return -1;
        }
        if (rep >= 0) {
            if (t1 - t0 < *conv_ms) *conv_ms = t1 - t0;
            if (t2 - t1 < *bn_ms) *bn_ms = t2 - t1;
        }
    }
    float *all[] = {x, dx, w, dw, y, dy, z, dz, bnp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ops->release(be, all[i]);
    return 0;
}

int main(int argc, char **argv) {
    int only = -1, reps = 5, threads = 0, engine = 0;
    bool impl = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--layer") && i + 1 < argc) only = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--impl")) impl = true;
        else if (!strcmp(argv[i], "--clock") && i + 1 < argc)
            bench_clock = !strcmp(argv[++i], "cpu") ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
        else if (!strcmp(argv[i], "--engine") && i + 1 < argc) {
            const char *v = argv[++i];
            engine = !strcmp(v, "gemm") ? 1 : !strcmp(v, "dnnl") ? 2 : !strcmp(v, "dnnl_blk") ? 3
                   : !strcmp(v, "dnnl_wino") ? 4 : 0;
        } else if (!strcmp(argv[i], "--list")) {
            printf("%d\n", NLAYERS);
            return 0;
        } else {
            fprintf(stderr, "usage: %s [--layer i] [--reps n] [--threads t] "
                    "[--engine auto|gemm|dnnl|dnnl_blk|dnnl_wino] [--clock wall|cpu] [--list] [--impl]\n",
                    argv[0]);
            return 2;
        }
    }
    if (only >= NLAYERS || reps < 1) {
        fprintf(stderr, "bench_conv_layers: --layer must be below %d and --reps >= 1\n", NLAYERS);
        return 2;
    }
    backend_opts_t o = {0};
    o.kind = BACKEND_CPU;
    o.threads = threads;
    err_t e = {0};
    backend_t *be = backend_create(&o, &e);
    if (!be) {
        fprintf(stderr, "bench_conv_layers: %s\n", e.msg);
        return 1;
    }
    cpu_backend_set_conv_engine(be, engine);
    double tot_conv[NNETS] = {0}, tot_bn[NNETS] = {0};
    printf("%-3s %-9s %-26s %5s %9s %10s %10s\n", "#", "net", "shape", "count", "engine",
           "conv_ms", "bn_ms");
    for (int li = 0; li < NLAYERS; li++) {
        if (only >= 0 && li != only) continue;
        const layer_t *l = &layers[li];
        conv_shape_t s = shape_of(l);
        double cm, bm;
        if (bench_layer(be, li, reps, &cm, &bm) != 0) return 1;
        char desc[64];
        int len = snprintf(desc, sizeof desc, "%dx%d %d->%d k%d s%d", l->hw, l->hw, l->c, l->k, l->r,
                           l->stride);
        if (l->groups > 1 && len > 0 && (size_t)len < sizeof desc)
            snprintf(desc + len, sizeof desc - (size_t)len, " g%d", l->groups);
        printf("%-3d %-9s %-26s %5d %9s %10.3f %10.3f\n", li, l->net, desc, l->count,
               cpu_backend_conv_engine(be, &s), cm, bm);
        for (int d = 0; impl && d < 3; d++) {
            char buf[128];
            if (be->ops->conv_engine(be, &s, d, buf, sizeof buf) == 0)
                printf("      %s: %s\n", d == 0 ? "fwd" : d == 1 ? "bwd_data" : "bwd_filter", buf);
        }
        int ni = 0;
        while (ni < NNETS - 1 && strcmp(net_names[ni], l->net)) ni++;
        tot_conv[ni] += cm * l->count;
        tot_bn[ni] += bm * l->count;
    }
    if (only < 0)
        for (int ni = 0; ni < NNETS; ni++)
            printf("total %s: conv %.1f ms, bn %.1f ms (weighted by count)\n", net_names[ni],
                   tot_conv[ni], tot_bn[ni]);
    backend_free(be);
    return 0;
}
