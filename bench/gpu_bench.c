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
 * Every line also has "host_ms": the host time to issue one step (from its start until the
 * last op returned, nothing waited for), "image_size" and "stem".
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
 * --profile 1: after the timed steps, --profile-steps more steps run with the op-kind
 * profiler (bench/gpu_prof: GPU time per op kind from events behind a head start, host
 * time per op kind, bytes each kind must move, FLOPs); the table and the convolution
 * algorithms chosen (conv_engine, per shape and direction) go to stderr, and the line
 * gets "profile": {...} and "conv_engines": [...]. Profiled steps are not in the rates.
 * --image-size 224 --stem imagenet: the ImageNet-shaped network (default: 32, cifar).
 * --versions: prints {device, driver, cuda, cudnn, nccl} of device 0 and exits.
 * --backend cpu: the same on the CPU backend (a dry run of the bench and of the
 * profiler's counting: no GPU times, no graphs), for tests without a GPU.
 *
 * Usage: bench_gpu_bench [--arch resnet50] [--classes 100] [--batch 128]
 *                        [--precision fp32|tf32|fp16|bf16] [--warmup 15] [--steps 60]
 *                        [--device 0] [--graphs 1] [--profile 0] [--profile-steps 3]
 *                        [--image-size 32] [--stem cifar|imagenet] [--versions]
 *                        [--backend cuda|cpu] [--fusion LIST] [--conv-host-us PASSES]
 *                        [--predict 1]
 * Not here: the PyTorch side and the results table (bench/gpu_vs_torch, .py).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/amp.h"
#include "model/backend.h"
#include "model/net.h"
#include "model/net_fusion.h"
#include "model/optim.h"
#include "model/resnet.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/rng.h"
#include "bench/fusion/fusion_bench.h"
#ifdef RUNNER_HAVE_CUDA
#include "bench/gpu_prof/gpu_prof.h"
#endif

typedef struct bench_opts {
    const char *arch, *precision, *stem, *backend;
    int classes, batch, warmup, steps, device, graphs, profile, profile_steps, image_size;
    bool versions;
    unsigned fusion;    /* --fusion: BACKEND_FUSE_* */
    int conv_passes;    /* --conv-host-us: 0 = train */
    int predict;        /* --predict: the byte model only */
} bench_opts_t;

static int parse(int argc, char **argv, bench_opts_t *o) {
    *o = (bench_opts_t){"resnet50", "fp32", NULL, "cuda", 100, 128, 15, 60, 0, 1, 0, 3, 32, false, 0, 0, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--versions")) { o->versions = true; continue; }
        if (!v) { fprintf(stderr, "gpu_bench: %s needs a value\n", a); return -1; }
        if (!strcmp(a, "--arch")) o->arch = v;
        else if (!strcmp(a, "--precision")) o->precision = v;
        else if (!strcmp(a, "--classes")) o->classes = atoi(v);
        else if (!strcmp(a, "--batch")) o->batch = atoi(v);
        else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(a, "--steps")) o->steps = atoi(v);
        else if (!strcmp(a, "--device")) o->device = atoi(v);
        else if (!strcmp(a, "--graphs")) o->graphs = atoi(v);
        else if (!strcmp(a, "--profile")) o->profile = atoi(v);
        else if (!strcmp(a, "--profile-steps")) o->profile_steps = atoi(v);
        else if (!strcmp(a, "--image-size")) o->image_size = atoi(v);
        else if (!strcmp(a, "--stem")) o->stem = v;
        else if (!strcmp(a, "--backend")) o->backend = v;
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
    if (o->batch < 1 || o->steps < 1 || o->warmup < 0 || o->classes < 2 || o->image_size < 8 ||
        o->profile_steps < 1) {
        fprintf(stderr, "gpu_bench: --batch, --steps, --profile-steps >= 1, --warmup >= 0, --classes >= 2, "
                "--image-size >= 8\n");
        return -1;
    }
    if (strcmp(o->backend, "cuda") && strcmp(o->backend, "cpu")) {
        fprintf(stderr, "gpu_bench: --backend must be cuda or cpu\n");
        return -1;
    }
    if (!o->stem) o->stem = o->image_size > 64 ? "imagenet" : "cifar";   /* model.stem: auto */
    if (strcmp(o->stem, "cifar") && strcmp(o->stem, "imagenet")) {
        fprintf(stderr, "gpu_bench: --stem must be cifar or imagenet\n");
        return -1;
    }
    return 0;
}

/* {device, driver, cuda, cudnn, nccl} of device 0, from the backend's version string
 * ("driver 13.0, runtime 13.0, cuDNN 9.19.0, cuBLASLt 13.0.0, NCCL 2.28.3"). */
static void print_versions(void) {
    char dev[256], v[512];
    backend_cuda_device_name(0, dev, sizeof dev);
    backend_cuda_versions(v, sizeof v);
    static const char *const keys[][2] = {{"driver", "driver "}, {"cuda", "runtime "}, {"cudnn", "cuDNN "},
                                          {"nccl", "NCCL "}};
    printf("{\"device\": \"%s\", \"versions\": \"%s\"", dev, v);
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const char *at = strstr(v, keys[k][1]);
        char val[64] = "";
        if (at) sscanf(at + strlen(keys[k][1]), "%63[^,]", val);
        printf(", \"%s\": %s%s%s", keys[k][0], at ? "\"" : "", at ? val : "null", at ? "\"" : "");
    }
    printf("}\n");
}

/* One training step as the trainer does it: labels already on the device, the loss
 * scale, overflow skip and step count handled there, nothing waited for. */
static int train_step(net_t *n, optim_t *opt, loss_scaler_t *ls, int batch, err_t *e) {
    if (net_zero_grads(n, e) || net_set_rng_key(n, 0, 0, 0, 1, e) || net_forward(n, net_input(n), batch, true, NULL, e) ||
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
    if (net_set_rng_key(n, 0, 0, 0, 1, &e)) {
        fprintf(stderr, "gpu_bench: %s\n", e.msg);
        return NULL;
    }
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
    if (net_zero_grads(n, e) || net_set_rng_key(n, 0, 0, 0, 1, e)) return -1;
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

/* --profile: profile_steps steps with the op-kind profiler; the table and the conv
 * algorithms to stderr; prof_json / conv_json get the JSON fragments (malloc'd, or NULL). */
static int profile_steps(net_t *n, optim_t *opt, loss_scaler_t *ls, const bench_opts_t *o, char **prof_json,
                         char **conv_json, err_t *e) {
    size_t len = 0;
    FILE *f = open_memstream(conv_json, &len);
    if (!f) return err_set(e, ERR_RUNTIME, "out of memory");
    jw_t w;
    jw_init(&w, f, false);
    net_write_conv_engines(n, o->batch, &w);
    fclose(f);
    fprintf(stderr, "convolution algorithms (conv_engine, batch %d), per distinct shape:\n", o->batch);
    backend_t *be = net_backend(n);
    for (int i = 0; i < net_num_nodes(n) && be->ops->conv_engine; i++) {
        conv_shape_t s, t;
        const char *name;
        char buf[512];
        int first = 1;
        if (net_conv_geometry(n, i, o->batch, &s, &name)) continue;
        for (int j = 0; j < i && first; j++)
            first = net_conv_geometry(n, j, o->batch, &t, NULL) || memcmp(&s, &t, sizeof s);
        if (!first) continue;
        fprintf(stderr, "  %s (%dx%dx%d -> %d, %dx%d stride %d):\n", name, s.h, s.w, s.c, s.k, s.r, s.s, s.stride);
        for (int d = 0; d < 3; d++)
            if (be->ops->conv_engine(be, &s, d, buf, sizeof buf) == 0) fprintf(stderr, "    %s\n", buf);
    }
#ifdef RUNNER_HAVE_CUDA
    gpu_prof_t *p = gpu_prof_attach(be, 500.0, e);
    if (!p) return -1;
    int rc = -1;
    gpu_prof_timing(p, true);
    for (int s = 0; s < o->profile_steps; s++)
        if (train_step(n, opt, ls, o->batch, e) || (be->ops->sync(be) ? (*e = be->err, 1) : 0) ||
            gpu_prof_collect(p, e))
            goto out;
    gpu_prof_print(p, o->profile_steps, stderr);
    f = open_memstream(prof_json, &len);
    if (!f) { err_set(e, ERR_RUNTIME, "out of memory"); goto out; }
    gpu_prof_json(p, o->profile_steps, f);
    fclose(f);
    rc = 0;
out:
    gpu_prof_detach(p);
    return rc;
#else
    (void)opt; (void)ls; (void)prof_json;
    return err_set(e, ERR_INPUT, "--profile needs a build with CUDA");
#endif
}

int main(int argc, char **argv) {
    bench_opts_t o;
    if (parse(argc, argv, &o)) return 2;
    if (o.versions) {
        print_versions();
        return 0;
    }
    err_t e = {0};
    dtype_t dt = !strcmp(o.precision, "fp16") ? DT_F16 : !strcmp(o.precision, "bf16") ? DT_BF16 : DT_F32;
    if (o.predict) return fusion_bench_predict(o.arch, o.classes, o.batch, o.precision, o.fusion, dt);
    if (o.conv_passes > 0)
        return fusion_bench_conv_host_us(o.arch, o.classes, o.batch, o.precision, o.device, o.conv_passes, dt);
    backend_opts_t bo = {0};
    bo.kind = strcmp(o.backend, "cpu") ? BACKEND_CUDA : BACKEND_CPU;
    bo.device = o.device;
    bo.deterministic = false;
    bo.allow_tf32 = strcmp(o.precision, "fp32") != 0;
    bo.cuda_fusion = o.fusion;
    backend_t *be = backend_create(&bo, &e);
    if (!be) { fprintf(stderr, "gpu_bench: %s\n", e.msg); return e.code ? e.code : 1; }
    int hw = o.image_size;
    net_t *n = resnet_build_stem(o.arch, strcmp(o.stem, "imagenet") ? RESNET_STEM_CIFAR : RESNET_STEM_IMAGENET, 3,
                                 o.classes, false, &e);
    optim_t *opt = NULL;
    void *g = NULL;
    char *prof_json = NULL, *conv_json = NULL;
    float *img = NULL;
    int32_t *labels = NULL;
    loss_scaler_t ls;
    memset(&ls, 0, sizeof ls);
    int rc = 1;
    if (!n || net_bind(n, be, o.batch, hw, hw, dt, &e) || net_init(n, 0, &e)) goto fail;
    optim_opts_t oo = {0};
    oo.kind = OPTIM_SGD;
    oo.momentum = 0.9;
    oo.weight_decay = 5e-4;
    if (!(opt = optim_create(n, &oo, &e))) goto fail;
    if (loss_scaler_init(&ls, be, optim_ctl(opt), dt, 65536.0, 2000, &e)) goto fail;

    size_t npix = (size_t)o.batch * hw * hw * 3;
    img = malloc(npix * sizeof(float));
    labels = malloc((size_t)o.batch * sizeof(int32_t));
    if (!img || !labels) { err_set(&e, ERR_RUNTIME, "out of memory"); goto fail; }
    rng_t r = rng_make(1, RNG_STREAM_MISC, 0, 0);
    for (size_t i = 0; i < npix; i++) img[i] = rng_uniform(&r) * 4.0f - 2.0f;
    for (int i = 0; i < o.batch; i++) labels[i] = (int32_t)rng_below(&r, (uint32_t)o.classes);
    if (net_upload_input(n, img, o.batch, &e)) goto fail;
    if (be->ops->upload(be, net_labels(n), labels, (size_t)o.batch * sizeof(int32_t))) {
        e = be->err;
        goto fail;
    }

    for (int s = 0; s < o.warmup; s++)
        if (train_step(n, opt, &ls, o.batch, &e)) goto fail;
    if (be->ops->sync(be)) { e = be->err; goto fail; }
    double issue_s = 0;   /* host time issuing the steps (nothing waited for inside one) */
    double t0 = now_s();
    for (int s = 0; s < o.steps; s++) {
        double ts = now_s();
        if (train_step(n, opt, &ls, o.batch, &e)) goto fail;
        issue_s += now_s() - ts;
    }
    if (be->ops->sync(be)) { e = be->err; goto fail; }
    double dt_s = now_s() - t0;
    if (o.profile && profile_steps(n, opt, &ls, &o, &prof_json, &conv_json, &e)) goto fail;
    double graph_s = -1;
    g = o.graphs && be->ops->graph_capture_begin ? record_step(n, opt, o.batch) : NULL;
    if (g) {
        for (int s = 0; s < 3; s++)
            if (graph_step(n, opt, &ls, g, o.batch, &e)) goto fail;
        if (be->ops->sync(be)) { e = be->err; goto fail; }
        t0 = now_s();
        for (int s = 0; s < o.steps; s++)
            if (graph_step(n, opt, &ls, g, o.batch, &e)) goto fail;
        if (be->ops->sync(be)) { e = be->err; goto fail; }
        graph_s = now_s() - t0;
    }
    char graphs_json[96] = "null, \"graphs_step_ms\": null";
    if (graph_s > 0)
        snprintf(graphs_json, sizeof graphs_json, "%.1f, \"graphs_step_ms\": %.3f",
                 (double)o.batch * o.steps / graph_s, graph_s * 1e3 / o.steps);

    char dev[256];
    if (be->kind == BACKEND_CUDA) backend_cuda_device_name(o.device, dev, sizeof dev);
    else snprintf(dev, sizeof dev, "cpu");
    /* model FLOPs: forward x 3 (backward data + weights), per image, at the best rate */
    double img_s = (double)o.batch * o.steps / (graph_s > 0 && graph_s < dt_s ? graph_s : dt_s);
    double tflops = 3.0 * net_forward_flops(n, hw, hw) * img_s / 1e12, peak = peak_tflops(dev, o.precision);
    char mfu_json[160] = "null";
    if (peak > 0)
        snprintf(mfu_json, sizeof mfu_json, "%.4f, \"mfu_normal\": %.4f, \"peak_tflops\": %.1f", tflops / peak,
                 3.0 * net_forward_flops(n, hw, hw) * o.batch * o.steps / dt_s / 1e12 / peak, peak);
    char fusion[128];
    backend_fusion_format(o.fusion, fusion, sizeof fusion);
    net_traffic_t tr;
    if (net_traffic(n, o.batch, hw, hw, dt, false, o.fusion, &tr, &e)) tr.total = tr.conv_epilogue = 0;
    printf("{\"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, \"arch\": \"%s\", \"image_size\": %d, "
           "\"stem\": \"%s\", \"runner_img_per_s\": %.1f, \"step_ms\": %.3f, \"host_ms\": %.3f, "
           "\"runner_graphs_img_per_s\": %s, \"model_tflops_per_s\": %.1f, \"mfu\": %s, "
           "\"peak_memory_bytes\": %zu%s%s%s%s, \"fusion\": \"%s\", \"nonconv_gb_model\": %.3f, "
           "\"conv_epilogue_gb_model\": %.3f}\n",
           dev, o.precision, o.batch, o.arch, hw, o.stem, (double)o.batch * o.steps / dt_s, dt_s * 1e3 / o.steps,
           issue_s * 1e3 / o.steps, graphs_json, tflops, mfu_json, be->ops->peak_memory(be),
           prof_json ? ", \"profile\": " : "", prof_json ? prof_json : "", conv_json ? ", \"conv_engines\": " : "",
           conv_json ? conv_json : "", fusion, tr.total / 1e9, tr.conv_epilogue / 1e9);
    if (be->notice[0]) fprintf(stderr, "gpu_bench: backend notice: %s\n", be->notice);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "gpu_bench: %s\n", e.msg[0] ? e.msg : be->err.msg);
    if (g) be->ops->graph_free(be, g);
    free(img);
    free(labels);
    free(prof_json);
    free(conv_json);
    optim_free(opt);
    net_free(n);
    backend_free(be);
    return rc;
}
