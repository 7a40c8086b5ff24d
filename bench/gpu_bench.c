/* gpu_bench.c: training throughput of the runner's CUDA backend on CIFAR-shaped synthetic
 * data, the runner side of bench/gpu_vs_torch.
 *
 * One process runs one configuration: a ResNet (CIFAR stem) built with resnet_build,
 * bound to a CUDA backend, trained with SGD (momentum 0.9, weight decay 5e-4) on one
 * fixed random batch, exactly the step the trainer runs: zero grads, forward (train),
 * loss (+ fp16 loss scaling), backward, unscale/check (fp16), optimizer step. After
 * --warmup steps (algorithm search, workspace growth) it times --steps steps with the
 * wall clock and a device sync at the end. Then, unless --graphs 0, it records the
 * micro-batch (forward, loss, backward) as a CUDA graph, as train.cuda_graphs does, and
 * times the same number of steps replaying it (zero grads, replay, unscale, optimizer
 * stay normal launches). It prints one JSON line:
 *   {"device": ..., "precision": ..., "batch": ..., "runner_img_per_s": ...,
 *    "step_ms": ..., "runner_graphs_img_per_s": ... (null if recording failed),
 *    "graphs_step_ms": ..., "model_tflops_per_s": 3 x forward FLOPs x the faster img/s,
 *    "mfu": that over the device's dense datasheet peak for the precision (null when the
 *    device is not in the table), "peak_tflops", "peak_memory_bytes": ..., "arch": ...}
 * Precisions: fp32 (no TF32), tf32 (fp32 with TF32 tensor cores), fp16 (AMP with loss
 * scaling), bf16 (AMP). Algorithms are not restricted to deterministic ones, as with
 * torch.backends.cudnn.benchmark.
 * --fusion LIST (issue 25): the CUDA backend's fusion options (train.cuda_fusion names,
 * comma-separated, or all / none); the line then also has "fusion" and the byte model's
 * prediction for the step (model/net_fusion.h): "nonconv_gb_model" (bytes of the
 * non-convolution kernels) and "conv_epilogue_gb_model" (what fused convs read besides).
 * --conv-host-us PASSES (issue 25): instead of training, host microseconds per
 * convolution call, the legacy API against the graph API: every conv layer of the net
 * (its shape, buffers per distinct shape) issued in order, PASSES times per direction
 * after two warm-up passes, timing only the issuing (the device is synchronized between
 * passes, so no queue fills); one JSON line per (api, direction):
 *   {"bench": "conv_host_us", "api": "legacy"|"graph", "dir": "fwd"|"bwd_data"|"bwd_filter",
 *    "host_us_per_call": ..., "calls": ..., "graph_calls": ..., ...}
 * (graph_calls: calls the graph API ran; the rest fell back to legacy).
 *
 * --predict: only the byte model for the configuration, no device needed: one JSON line
 * with the bytes per step of each category (net_traffic_names), their total, the conv
 * epilogues' reads, and how many nodes each fusion applies to.
 *
 * Usage: bench_gpu_bench [--arch resnet50] [--classes 100] [--batch 128]
 *                        [--precision fp32|tf32|fp16|bf16] [--warmup 15] [--steps 60]
 *                        [--device 0] [--graphs 1] [--fusion LIST] [--conv-host-us PASSES]
 *                        [--predict 1]
 * Not here: the PyTorch side and the results table (bench/gpu_vs_torch, .py).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/amp.h"
#include "model/backend.h"
#ifdef RUNNER_HAVE_CUDA
#include "model/cuda/cuda_backend.h"
#endif
#include "model/net.h"
#include "model/net_fusion.h"
#include "model/optim.h"
#include "model/resnet.h"
#include "util/clock.h"
#include "util/rng.h"

typedef struct bench_opts {
    const char *arch, *precision;
    int classes, batch, warmup, steps, device, graphs;
    unsigned fusion;    /* --fusion: BACKEND_FUSE_* */
    int conv_passes;    /* --conv-host-us: 0 = train */
    int predict;        /* --predict: the byte model only */
} bench_opts_t;

static int parse(int argc, char **argv, bench_opts_t *o) {
    *o = (bench_opts_t){"resnet50", "fp32", 100, 128, 15, 60, 0, 1, 0, 0, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "gpu_bench: %s needs a value\n", a); return -1; }
        if (!strcmp(a, "--arch")) o->arch = v;
        else if (!strcmp(a, "--precision")) o->precision = v;
        else if (!strcmp(a, "--classes")) o->classes = atoi(v);
        else if (!strcmp(a, "--batch")) o->batch = atoi(v);
        else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(a, "--steps")) o->steps = atoi(v);
        else if (!strcmp(a, "--device")) o->device = atoi(v);
        else if (!strcmp(a, "--graphs")) o->graphs = atoi(v);
        else if (!strcmp(a, "--conv-host-us")) o->conv_passes = atoi(v);
        else if (!strcmp(a, "--predict")) o->predict = atoi(v);
        else if (!strcmp(a, "--fusion")) {
            err_t e = {0};
            if (backend_fusion_parse(v, &o->fusion, &e)) { fprintf(stderr, "gpu_bench: --fusion: %s\n", e.msg); return -1; }
        }
        else { fprintf(stderr, "gpu_bench: unknown option %s\n", a); return -1; }
        i++;
    }
    if (strcmp(o->precision, "fp32") && strcmp(o->precision, "tf32") && strcmp(o->precision, "fp16") &&
        strcmp(o->precision, "bf16")) {
        fprintf(stderr, "gpu_bench: --precision must be fp32, tf32, fp16 or bf16\n");
        return -1;
    }
    if (o->batch < 1 || o->steps < 1 || o->warmup < 0 || o->classes < 2) {
        fprintf(stderr, "gpu_bench: --batch, --steps >= 1, --warmup >= 0, --classes >= 2\n");
        return -1;
    }
    return 0;
}

/* One training step as the trainer does it: labels already on the device, the loss
 * scale, overflow skip and step count handled there, nothing waited for. */
static int train_step(net_t *n, optim_t *opt, loss_scaler_t *ls, int batch, err_t *e) {
    if (net_zero_grads(n, e) || net_forward(n, net_input(n), batch, true, NULL, e) ||
        net_loss_async(n, NULL, 0.0f, 1.0f / (float)batch, optim_ctl(opt), NULL, NULL, e) ||
        net_backward(n, NULL, e) || loss_scaler_unscale(ls, net_grads(n), (int64_t)net_num_params(n), e) ||
        optim_step(opt, 0.1, e))
        return -1;
    return 0;
}

/* Records forward + loss + backward of the bound batch as a graph; NULL (with the reason
 * on stderr) when the backend cannot. */
static void *record_step(net_t *n, optim_t *opt, int batch) {
    backend_t *be = net_backend(n);
    err_t e = {0};
    void *g = NULL;
    if (!be->ops->graph_capture_begin || be->ops->graph_capture_begin(be)) {
        fprintf(stderr, "gpu_bench: no graph capture: %s\n", be->err.msg);
        return NULL;
    }
    int rc = net_forward(n, net_input(n), batch, true, NULL, &e) ||
             net_loss_async(n, NULL, 0.0f, 1.0f / (float)batch, optim_ctl(opt), NULL, NULL, &e) ||
             net_backward(n, NULL, &e);
    int end = be->ops->graph_capture_end(be, &g);
    if (rc || end || !g) {
        fprintf(stderr, "gpu_bench: recording failed: %s\n", e.code ? e.msg : be->err.msg);
        if (g) be->ops->graph_free(be, g);
        return NULL;
    }
    return g;
}

/* The trainer's step with the micro-batch replayed from g. */
static int graph_step(net_t *n, optim_t *opt, loss_scaler_t *ls, void *g, int batch, err_t *e) {
    backend_t *be = net_backend(n);
    if (net_zero_grads(n, e)) return -1;
    int r = be->ops->graph_launch(be, g);
    if (r != 0) return err_set(e, ERR_RUNTIME, "graph launch: %s", r > 0 ? "stale graph" : be->err.msg);
    net_graph_replayed(n, net_input(n), batch);
    if (loss_scaler_unscale(ls, net_grads(n), (int64_t)net_num_params(n), e) || optim_step(opt, 0.1, e)) return -1;
    return 0;
}

/* Dense peak of the device for the precision, TFLOP/s, from NVIDIA's datasheets (H100
 * SXM5 and H200 SXM: fp16/bf16 989.4, TF32 494.7, fp32 66.9; H100 PCIe: 756.5, 378.0,
 * 51.2); 0 for devices not in the table. */
static double peak_tflops(const char *dev, const char *precision) {
    int col = !strcmp(precision, "fp32") ? 2 : !strcmp(precision, "tf32") ? 1 : 0;
    static const double sxm[3] = {989.4, 494.7, 66.9}, pcie[3] = {756.5, 378.0, 51.2};
    if (strstr(dev, "H100") && strstr(dev, "PCIe")) return pcie[col];
    if (strstr(dev, "H100") || strstr(dev, "H200")) return sxm[col];
    return 0;
}

/* Whether the graph API ran shape s in direction d on be (a build without CUDA has none). */
static bool ran_on_graph(backend_t *be, const conv_shape_t *s, int d) {
#ifdef RUNNER_HAVE_CUDA
    char eng[160];
    return cuda_conv_graph_engine(be, s, d, eng, sizeof eng) == 0;
#else
    (void)be; (void)s; (void)d;
    return false;
#endif
}

/* One conv call of direction d on buffers b (x, w, y, dw). */
static int conv_call(backend_t *be, int d, const conv_shape_t *s, dtype_t dt, void *const *b) {
    if (d == 0) return be->ops->conv2d_fwd(be, s, dt, b[0], b[1], b[2]);
    if (d == 1) return be->ops->conv2d_bwd_data(be, s, dt, b[2], b[1], b[0]);
    return be->ops->conv2d_bwd_filter(be, s, dt, b[0], b[2], (float *)b[3]);
}

enum { MAX_CONVS = 512 };

/* --conv-host-us: host microseconds per convolution call, legacy API (api 0) and graph
 * API (api 1), every conv layer of the net in order; one JSON line per (api, direction). */
static int conv_host_us(const bench_opts_t *o, dtype_t dt) {
    static const char *const DIRS[3] = {"fwd", "bwd_data", "bwd_filter"};
    char dev[256];
    backend_cuda_device_name(o->device, dev, sizeof dev);
    for (int api = 0; api < 2; api++) {
        err_t e = {0};
        backend_opts_t bo = {0};
        bo.kind = BACKEND_CUDA;
        bo.device = o->device;
        bo.allow_tf32 = strcmp(o->precision, "fp32") != 0;
        bo.cuda_fusion = api ? BACKEND_FUSE_GRAPH_CONV : 0;
        backend_t *be = backend_create(&bo, &e);
        net_t *n = be ? resnet_build(o->arch, 3, o->classes, false, &e) : NULL;
        if (!n || net_bind(n, be, o->batch, 32, 32, dt, &e)) {
            fprintf(stderr, "gpu_bench: %s\n", e.msg);
            net_free(n);
            backend_free(be);
            return 1;
        }
        static conv_shape_t layer[MAX_CONVS], uniq[MAX_CONVS];
        static int which[MAX_CONVS];
        static void *buf[MAX_CONVS][4];
        int nl = 0, nu = 0, rc = 0;
        for (int i = 0; i < net_num_nodes(n) && nl < MAX_CONVS; i++) {
            if (net_conv_geometry(n, i, o->batch, &layer[nl], NULL)) continue;
            int u = 0;
            while (u < nu && memcmp(&uniq[u], &layer[nl], sizeof uniq[u])) u++;
            if (u == nu) {
                const conv_shape_t *s = &layer[nl];
                size_t esz = backend_elem_size(be, dt);
                size_t bytes[4] = {(size_t)s->n * s->h * s->w * s->c * esz, (size_t)s->k * s->r * s->s * s->c * esz,
                                   (size_t)s->n * s->p * s->q * s->k * esz, (size_t)s->k * s->r * s->s * s->c * 4};
                for (int k = 0; k < 4; k++)
                    if (!(buf[u][k] = be->ops->alloc(be, bytes[k])) || be->ops->zero(be, buf[u][k], bytes[k])) rc = 1;
                uniq[nu++] = *s;
            }
            which[nl++] = u;
        }
        for (int d = 0; d < 3 && !rc; d++) {
            double issue = 0;
            for (int pass = 0; pass < 2 + o->conv_passes && !rc; pass++) {
                double t0 = now_s();
                for (int l = 0; l < nl && !rc; l++) rc = conv_call(be, d, &layer[l], dt, buf[which[l]]);
                if (pass >= 2) issue += now_s() - t0;
                if (be->ops->sync(be)) rc = 1;
            }
            int graph_calls = 0;
            for (int l = 0; l < nl; l++) graph_calls += ran_on_graph(be, &layer[l], d);
            if (!rc)
                printf("{\"bench\": \"conv_host_us\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, "
                       "\"arch\": \"%s\", \"api\": \"%s\", \"dir\": \"%s\", \"host_us_per_call\": %.2f, "
                       "\"calls\": %d, \"graph_calls\": %d}\n", dev, o->precision, o->batch, o->arch,
                       api ? "graph" : "legacy", DIRS[d], 1e6 * issue / ((double)o->conv_passes * nl),
                       o->conv_passes * nl, api ? graph_calls * o->conv_passes : 0);
        }
        if (rc) fprintf(stderr, "gpu_bench: conv calls failed: %s\n", be->err.msg);
        for (int u = 0; u < nu; u++)
            for (int k = 0; k < 4; k++) be->ops->release(be, buf[u][k]);
        net_free(n);
        backend_free(be);
        if (rc) return 1;
    }
    return 0;
}

/* --predict: the byte model's line for the configuration. */
static int predict(const bench_opts_t *o, dtype_t dt) {
    err_t e = {0};
    net_t *n = resnet_build(o->arch, 3, o->classes, false, &e);
    net_traffic_t t;
    if (!n || net_traffic(n, o->batch, 32, 32, dt, false, o->fusion, &t, &e)) {
        fprintf(stderr, "gpu_bench: %s\n", e.msg);
        net_free(n);
        return 1;
    }
    char fusion[128];
    backend_fusion_format(o->fusion, fusion, sizeof fusion);
    printf("{\"bench\": \"byte_model\", \"arch\": \"%s\", \"precision\": \"%s\", \"batch\": %d, \"fusion\": \"%s\"",
           o->arch, o->precision, o->batch, fusion);
    for (int k = 0; k < NT_COUNT; k++) printf(", \"%s_gb\": %.4f", net_traffic_names[k], t.bytes[k] / 1e9);
    printf(", \"nonconv_gb\": %.4f, \"conv_epilogue_gb\": %.4f, \"fused_stats\": %d, \"fused_dbn\": %d, "
           "\"fused_accum\": %d}\n", t.total / 1e9, t.conv_epilogue / 1e9, t.fused_stats, t.fused_dbn, t.fused_accum);
    net_free(n);
    return 0;
}

int main(int argc, char **argv) {
    bench_opts_t o;
    if (parse(argc, argv, &o)) return 2;
    err_t e = {0};
    dtype_t dt = !strcmp(o.precision, "fp16") ? DT_F16 : !strcmp(o.precision, "bf16") ? DT_BF16 : DT_F32;
    if (o.predict) return predict(&o, dt);
    if (o.conv_passes > 0) return conv_host_us(&o, dt);
    backend_opts_t bo = {0};
    bo.kind = BACKEND_CUDA;
    bo.device = o.device;
    bo.deterministic = false;
    bo.allow_tf32 = strcmp(o.precision, "fp32") != 0;
    bo.cuda_fusion = o.fusion;
    backend_t *be = backend_create(&bo, &e);
    if (!be) { fprintf(stderr, "gpu_bench: %s\n", e.msg); return e.code ? e.code : 1; }
    net_t *n = resnet_build(o.arch, 3, o.classes, false, &e);
    optim_t *opt = NULL;
    void *g = NULL;
    loss_scaler_t ls;
    memset(&ls, 0, sizeof ls);
    int rc = 1;
    if (!n || net_bind(n, be, o.batch, 32, 32, dt, &e) || net_init(n, 0, &e)) goto fail;
    optim_opts_t oo = {0};
    oo.kind = OPTIM_SGD;
    oo.momentum = 0.9;
    oo.weight_decay = 5e-4;
    if (!(opt = optim_create(n, &oo, &e))) goto fail;
    if (loss_scaler_init(&ls, be, optim_ctl(opt), dt, 65536.0, 2000, &e)) goto fail;

    size_t npix = (size_t)o.batch * 32 * 32 * 3;
    float *img = malloc(npix * sizeof(float));
    int32_t *labels = malloc((size_t)o.batch * sizeof(int32_t));
    if (!img || !labels) { fprintf(stderr, "gpu_bench: out of memory\n"); goto fail; }
    rng_t r = rng_make(1, RNG_STREAM_MISC, 0, 0);
    for (size_t i = 0; i < npix; i++) img[i] = rng_uniform(&r) * 4.0f - 2.0f;
    for (int i = 0; i < o.batch; i++) labels[i] = (int32_t)rng_below(&r, (uint32_t)o.classes);
    if (net_upload_input(n, img, o.batch, &e)) goto fail_free;
    if (be->ops->upload(be, net_labels(n), labels, (size_t)o.batch * sizeof(int32_t))) {
        e = be->err;
        goto fail_free;
    }

    for (int s = 0; s < o.warmup; s++)
        if (train_step(n, opt, &ls, o.batch, &e)) goto fail_free;
    if (be->ops->sync(be)) { e = be->err; goto fail_free; }
    double t0 = now_s();
    for (int s = 0; s < o.steps; s++)
        if (train_step(n, opt, &ls, o.batch, &e)) goto fail_free;
    if (be->ops->sync(be)) { e = be->err; goto fail_free; }
    double dt_s = now_s() - t0;
    double graph_s = -1;
    g = o.graphs ? record_step(n, opt, o.batch) : NULL;
    if (g) {
        for (int s = 0; s < 3; s++)
            if (graph_step(n, opt, &ls, g, o.batch, &e)) goto fail_free;
        if (be->ops->sync(be)) { e = be->err; goto fail_free; }
        t0 = now_s();
        for (int s = 0; s < o.steps; s++)
            if (graph_step(n, opt, &ls, g, o.batch, &e)) goto fail_free;
        if (be->ops->sync(be)) { e = be->err; goto fail_free; }
        graph_s = now_s() - t0;
    }
    char graphs_json[96] = "null, \"graphs_step_ms\": null";
    if (graph_s > 0)
        snprintf(graphs_json, sizeof graphs_json, "%.1f, \"graphs_step_ms\": %.3f",
                 (double)o.batch * o.steps / graph_s, graph_s * 1e3 / o.steps);

    char dev[256];
    backend_cuda_device_name(o.device, dev, sizeof dev);
    /* model FLOPs: forward x 3 (backward data + weights), per image, at the best rate */
    double img_s = (double)o.batch * o.steps / (graph_s > 0 && graph_s < dt_s ? graph_s : dt_s);
    double tflops = 3.0 * net_forward_flops(n, 32, 32) * img_s / 1e12, peak = peak_tflops(dev, o.precision);
    char mfu_json[128] = "null";
    if (peak > 0) snprintf(mfu_json, sizeof mfu_json, "%.4f, \"peak_tflops\": %.1f", tflops / peak, peak);
    char fusion[128];
    backend_fusion_format(o.fusion, fusion, sizeof fusion);
    net_traffic_t tr;
    if (net_traffic(n, o.batch, 32, 32, dt, false, o.fusion, &tr, &e)) tr.total = tr.conv_epilogue = 0;
    printf("{\"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, \"arch\": \"%s\", "
           "\"runner_img_per_s\": %.1f, \"step_ms\": %.3f, \"runner_graphs_img_per_s\": %s, "
           "\"model_tflops_per_s\": %.1f, \"mfu\": %s, \"peak_memory_bytes\": %zu, \"fusion\": \"%s\", "
           "\"nonconv_gb_model\": %.3f, \"conv_epilogue_gb_model\": %.3f}\n",
           dev, o.precision, o.batch, o.arch, (double)o.batch * o.steps / dt_s, dt_s * 1e3 / o.steps,
           graphs_json, tflops, mfu_json, be->ops->peak_memory(be), fusion, tr.total / 1e9, tr.conv_epilogue / 1e9);
    if (be->notice[0]) fprintf(stderr, "gpu_bench: backend notice: %s\n", be->notice);
    rc = 0;
fail_free:
    if (g) be->ops->graph_free(be, g);
    free(img);
    free(labels);
fail:
    if (rc) fprintf(stderr, "gpu_bench: %s\n", e.msg[0] ? e.msg : be->err.msg);
    optim_free(opt);
    net_free(n);
    backend_free(be);
    return rc;
}
