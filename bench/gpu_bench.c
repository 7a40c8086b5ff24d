/* gpu_bench.c: training throughput of the runner's CUDA backend on CIFAR-shaped synthetic
 * data, the runner side of bench/gpu_vs_torch.
 *
 * One process runs one configuration: a ResNet (CIFAR stem) built with resnet_build,
 * bound to a CUDA backend, trained with SGD (momentum 0.9, weight decay 5e-4) on one
 * fixed random batch by the trainer's own step (runner/train_bench.h: trainer_step, the
 * learning rate written to the step control, then zero grads, forward (train), loss
 * (+ fp16 loss scaling), backward, unscale/check (fp16), the optimizer reading the rate
 * from device memory, the step-control update). After --warmup steps (algorithm search,
 * workspace growth) it times --steps steps with normal launches (train.cuda_graphs
 * false), wall clock with a device sync at the end. Then, unless --graphs 0, the same
 * trainer with graphs (train.cuda_graphs auto/true in single mode: the whole step
 * recorded on its second run and replayed with one launch from then on) takes 3 warm-up
 * steps (normal, recorded, launched) and --steps timed ones. It prints one JSON line:
 *   {"device": ..., "precision": ..., "batch": ..., "runner_img_per_s": the rate of the
 *    default configuration (train.cuda_graphs' default, config.c: the replayed step's
 *    rate where the default records and the recording worked, else normal launches'),
 *    "default_graphs": whether that is the replay's, "runner_normal_img_per_s",
 *    "step_ms": normal launches, "runner_graphs_img_per_s": ... (null if recording
 *    failed), "graphs_step_ms": ..., "graphs_scope": "step" (the whole step; the
 *    rows up to the H100 run of 2026-11-26 recorded forward + loss + backward only and
 *    lack the key), "graph_recordings", "graph_launches", "model_tflops_per_s": 3 x
 *    forward FLOPs x the faster img/s, "mfu": that over the device's dense datasheet
 *    peak for the precision (null when the device is not in the table), "peak_tflops",
 *    "peak_memory_bytes": ..., "arch": ..., "last_loss": the last timed step's mean
 *    loss}
 * Every line also has "host_ms": the host time to issue one normal step (from its start
 * until the last op returned, nothing waited for), "image_size" and "stem".
 * Precisions: fp32 (no TF32), tf32 (fp32 with TF32 tensor cores), fp16 (AMP with loss
 * scaling), bf16 (AMP). Algorithms are not restricted to deterministic ones, as with
 * torch.backends.cudnn.benchmark.
 * --fusion LIST (issue 25): the CUDA backend's fusion options (train.cuda_fusion names,
 * comma-separated, or all / none; default all, as the runner's train.cuda_fusion); the
 * line has "fusion" and the byte model's
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
 * --patterns RTC (issue 25): instead of training, the pattern probe: for each distinct conv
 * shape, what cuDNN offers on this device for fprop, fprop + genStats, the
 * scale-bias-ReLU prologue (ConvBNfprop's, with and without genStats), wgrad and the
 * prologue on wgrad (ConvBNwgrad's), and how fast (fusion_bench.h); RTC runtime-compiled
 * engines (~1 s each) are built and timed too; --deterministic 1 applies deterministic
 * mode's filters. JSON lines "conv_patterns", "conv_patterns_bn", "conv_patterns_total".
 *
 * --bn-sweep REPS (issue 25): instead of training, the BN geometry sweep: each BN row op
 * per distinct shape inside a CUDA graph, replayed REPS times, under the default launch
 * geometry and a grid of others (fusion_bench.h); JSON lines "bn_sweep", "bn_sweep_total".
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
 * With graphs (a CUDA backend, the recording worked), a second table after the timed
 * replays: the profiler's replayed mode, the step recorded once more with events as graph
 * nodes and replayed --profile-steps times, GPU time per op kind and shape inside the
 * replayed step ("replayed: ..." on stderr, "profile_replayed": {...} in the line; a
 * failure there is reported and leaves the rates).
 * --image-size 224 --stem imagenet: the ImageNet-shaped network (default: 32, cifar).
 * --versions: prints {device, driver, cuda, cudnn, nccl} of device 0 and exits.
 * --backend cpu: the same on the CPU backend (a dry run of the bench and of the
 * profiler's counting: no GPU times; graphs only under RUNNER_CPU_GRAPHS=1, the cpu
 * backend's recorder), for tests without a GPU.
 *
 * Usage: bench_gpu_bench [--arch resnet50] [--classes 100] [--batch 128]
 *                        [--precision fp32|tf32|fp16|bf16] [--warmup 15] [--steps 60]
 *                        [--device 0] [--graphs 1] [--profile 0] [--profile-steps 3]
 *                        [--image-size 32] [--stem cifar|imagenet] [--versions]
 *                        [--backend cuda|cpu] [--fusion LIST] [--conv-host-us PASSES]
 *                        [--predict 1] [--patterns RTC [--deterministic 1]] [--bn-sweep REPS]
 * Not here: the PyTorch side and the results table (bench/gpu_vs_torch, .py).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/amp.h"
#include "model/backend.h"
#include "model/net.h"
#include "model/net_fusion.h"
#include "model/optim.h"
#include "model/arch/resnet.h"
#include "runner/config.h"
#include "runner/train_bench.h"
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
    int patterns;       /* --patterns RTC: the pattern probe (-1: not asked) */
    int deterministic;  /* --deterministic: the probe's filters */
    int bn_sweep;       /* --bn-sweep REPS: the BN geometry sweep (0: not asked) */
} bench_opts_t;

static int parse(int argc, char **argv, bench_opts_t *o) {
    *o = (bench_opts_t){"resnet50", "fp32", NULL, "cuda", 100, 128, 15, 60, 0, 1, 0, 3, 32, false, 0, 0, 0, -1, 0, 0};
    o->fusion = BACKEND_FUSE_ALL;   /* the runner's default, train.cuda_fusion [all] */
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
        else if (!strcmp(a, "--patterns")) o->patterns = atoi(v);
        else if (!strcmp(a, "--deterministic")) o->deterministic = atoi(v);
        else if (!strcmp(a, "--bn-sweep")) o->bn_sweep = atoi(v);
        else if (!strcmp(a, "--fusion")) {
            err_t e = {0};
            o->fusion = 0;   /* the list replaces the default */
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

#ifdef RUNNER_HAVE_CUDA
/* steps trainer steps, each waited for and its events collected */
static int prof_run(gpu_prof_t *p, train_bench_t *tb, int steps, err_t *e) {
    backend_t *be = gpu_prof_backend(p);
    for (int s = 0; s < steps; s++)
        if (train_bench_step(tb, 0.1, e) || (be->ops->sync(be) ? (*e = be->err, 1) : 0) || gpu_prof_collect(p, e))
            return -1;
    return 0;
}

/* The table per step to stderr and its JSON fragment into *json (malloc'd). */
static int prof_report(const gpu_prof_t *p, int steps, char **json, err_t *e) {
    gpu_prof_print(p, steps, stderr);
    size_t len = 0;
    FILE *f = open_memstream(json, &len);
    if (!f) return err_set(e, ERR_RUNTIME, "out of memory");
    gpu_prof_json(p, steps, f);
    fclose(f);
    return 0;
}
#endif

/* --profile: profile_steps steps with the op-kind profiler; the table and the conv
 * algorithms to stderr; prof_json / conv_json get the JSON fragments (malloc'd, or NULL). */
static int profile_steps(net_t *n, train_bench_t *tb, const bench_opts_t *o, char **prof_json, char **conv_json,
                         err_t *e) {
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
    gpu_prof_timing(p, true);
    int rc = prof_run(p, tb, o->profile_steps, e) || prof_report(p, o->profile_steps, prof_json, e) ? -1 : 0;
    gpu_prof_detach(p);
    return rc;
#else
    (void)tb; (void)prof_json;
    return err_set(e, ERR_INPUT, "--profile needs a build with CUDA");
#endif
}

/* --profile with graphs: the op kinds' GPU time inside the replayed step. A trainer of
 * its own records the step with the profiler in its replayed mode (events as graph nodes)
 * on its second step and launches it, then replays it profile_steps - 1 more times; each
 * replay's events are collected. The table goes to stderr, *json gets the fragment. */
static int profile_replayed(net_t *n, optim_t *opt, const bench_opts_t *o, dtype_t dt, char **json, err_t *e) {
#ifdef RUNNER_HAVE_CUDA
    backend_t *be = net_backend(n);
    gpu_prof_t *p = gpu_prof_attach(be, 500.0, e);
    if (!p) return -1;
    train_bench_t *tp = NULL;
    int rc = -1;
    if (gpu_prof_replayed(p, true, e) || !(tp = train_bench_create(n, opt, o->batch, dt, true, 0, e)) ||
        train_bench_step(tp, 0.1, e) || (be->ops->sync(be) ? (*e = be->err, 1) : 0))
        goto out;
    gpu_prof_reset(p);   /* the normal first step: nothing was recorded */
    if (prof_run(p, tp, o->profile_steps, e)) goto out;   /* the recording's own launch, then replays */
    if (!train_bench_graphs(tp) || gpu_prof_recorded_calls(p) == 0) {
        err_set(e, ERR_RUNTIME, "the replayed profile recorded no calls (the recording failed: %s)",
                be->err.msg[0] ? be->err.msg : "no graph");
        goto out;
    }
    rc = prof_report(p, o->profile_steps, json, e);
out:
    train_bench_free(tp);
    gpu_prof_detach(p);
    return rc;
#else
    (void)n; (void)opt; (void)o; (void)dt; (void)json;
    return err_set(e, ERR_INPUT, "--profile needs a build with CUDA");
#endif
}

/* warm steps, then steps timed by the wall clock until the last one's record is read back
 * (which waits for the device) into *secs; *issue_s: the host time issuing the timed
 * steps (nothing waited for inside one); *loss_sum: the last step's loss sum. */
static int timed_steps(train_bench_t *tb, int warm, int steps, double *issue_s, double *secs, double *loss_sum,
                       err_t *e) {
    for (int s = 0; s < warm; s++)
        if (train_bench_step(tb, 0.1, e)) return -1;
    double loss = 0;
    int64_t hits = 0;
    /* (train_bench_last waits for the device: the timed steps start with an empty queue) */
    if (warm > 0 && train_bench_last(tb, &loss, &hits, e)) return -1;
    *issue_s = 0;
    double t0 = now_s();
    for (int s = 0; s < steps; s++) {
        double ts = now_s();
        if (train_bench_step(tb, 0.1, e)) return -1;
        *issue_s += now_s() - ts;
    }
    if (train_bench_last(tb, &loss, &hits, e)) return -1;
    *secs = now_s() - t0;
    *loss_sum = loss;
    return 0;
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
    if (o.patterns >= 0)
        return fusion_bench_patterns(o.arch, o.classes, o.batch, o.precision, o.device, o.patterns, o.deterministic != 0,
                                     dt);
    if (o.bn_sweep > 0)
        return fusion_bench_bn_sweep(o.arch, o.classes, o.batch, o.precision, o.device, o.fusion, o.bn_sweep, dt);
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
    net_t *n = resnet_build_stem(o.arch, strcmp(o.stem, "imagenet") ? ARCH_STEM_CIFAR : ARCH_STEM_IMAGENET, 3,
                                 o.classes, false, &e);
    optim_t *opt = NULL;
    train_bench_t *tb = NULL, *tg = NULL;
    char *prof_json = NULL, *conv_json = NULL, *prof_graph_json = NULL;
    float *img = NULL;
    int32_t *labels = NULL;
    int rc = 1;
    if (!n || net_bind(n, be, o.batch, hw, hw, dt, &e) || net_init(n, 0, &e)) goto fail;
    optim_opts_t oo = {0};
    oo.kind = OPTIM_SGD;
    oo.momentum = 0.9;
    oo.weight_decay = 5e-4;
    if (!(opt = optim_create(n, &oo, &e))) goto fail;

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

    /* normal launches (train.cuda_graphs false) */
    double issue_s = 0, dt_s = 0, graph_s = -1, last_loss = NAN;
    if (!(tb = train_bench_create(n, opt, o.batch, dt, false, 0, &e)) ||
        timed_steps(tb, o.warmup, o.steps, &issue_s, &dt_s, &last_loss, &e))
        goto fail;
    if (o.profile && profile_steps(n, tb, &o, &prof_json, &conv_json, &e)) goto fail;
    /* the whole step recorded and replayed (train.cuda_graphs auto / true) */
    int64_t recordings = 0, launches = 0;
    if (o.graphs && be->ops->graph_capture_begin) {
        double unused;
        if (!(tg = train_bench_create(n, opt, o.batch, dt, true, 0, &e)) ||
            timed_steps(tg, 3, o.steps, &unused, &graph_s, &last_loss, &e))
            goto fail;
        recordings = train_bench_recordings(tg);
        launches = train_bench_launches(tg);
        if (!train_bench_graphs(tg)) {
            fprintf(stderr, "gpu_bench: recording the step failed (a run would go on without graphs): %s\n",
                    be->err.msg);
            graph_s = -1;
        }
    }
    /* the replayed profile: where the replayed step's GPU time goes (CUDA, graphs recorded) */
    if (o.profile && graph_s > 0 && be->kind == BACKEND_CUDA &&
        profile_replayed(n, opt, &o, dt, &prof_graph_json, &e)) {
        fprintf(stderr, "gpu_bench: the replayed profile failed: %s\n", e.msg);   /* the rates stand */
        e = (err_t){0};
    }
    /* the default configuration: train.cuda_graphs' default in single mode on this backend
     * (plan.c: auto and true record wherever the backend has graph ops) */
    experiment_t defaults;
    config_defaults(&defaults);
    bool default_graphs = defaults.train.cuda_graphs != GRAPHS_FALSE && be->ops->graph_capture_begin && graph_s > 0;
    char graphs_json[96] = "null, \"graphs_step_ms\": null";
    if (graph_s > 0)
        snprintf(graphs_json, sizeof graphs_json, "%.1f, \"graphs_step_ms\": %.3f",
                 (double)o.batch * o.steps / graph_s, graph_s * 1e3 / o.steps);

    char dev[256];
    if (be->kind == BACKEND_CUDA) backend_cuda_device_name(o.device, dev, sizeof dev);
    else snprintf(dev, sizeof dev, "cpu");
    /* model FLOPs: forward x 3 (backward data + weights), per image, at the best rate */
    double normal_img_s = (double)o.batch * o.steps / dt_s;
    double img_s = (double)o.batch * o.steps / (graph_s > 0 && graph_s < dt_s ? graph_s : dt_s);
    double default_img_s = default_graphs ? (double)o.batch * o.steps / graph_s : normal_img_s;
    double tflops = 3.0 * net_forward_flops(n, hw, hw) * img_s / 1e12, peak = peak_tflops(dev, o.precision);
    char mfu_json[160] = "null";
    if (peak > 0)
        snprintf(mfu_json, sizeof mfu_json, "%.4f, \"mfu_normal\": %.4f, \"peak_tflops\": %.1f", tflops / peak,
                 3.0 * net_forward_flops(n, hw, hw) * normal_img_s / 1e12 / peak, peak);
    char fusion[BACKEND_FUSION_NAMES_MAX];
    backend_fusion_format(o.fusion, fusion, sizeof fusion);
    net_traffic_t tr;
    if (net_traffic(n, o.batch, hw, hw, dt, false, o.fusion, &tr, &e)) tr.total = tr.conv_epilogue = 0;
    printf("{\"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, \"arch\": \"%s\", \"image_size\": %d, "
           "\"stem\": \"%s\", \"runner_img_per_s\": %.1f, \"default_graphs\": %s, \"runner_normal_img_per_s\": %.1f, "
           "\"step_ms\": %.3f, \"host_ms\": %.3f, \"runner_graphs_img_per_s\": %s, \"graphs_scope\": \"step\", "
           "\"graph_recordings\": %lld, \"graph_launches\": %lld, \"model_tflops_per_s\": %.1f, \"mfu\": %s, "
           "\"last_loss\": %.6g, \"peak_memory_bytes\": %zu%s%s%s%s%s%s, \"fusion\": \"%s\", \"nonconv_gb_model\": %.3f, "
           "\"conv_epilogue_gb_model\": %.3f}\n",
           dev, o.precision, o.batch, o.arch, hw, o.stem, default_img_s, default_graphs ? "true" : "false",
           normal_img_s, dt_s * 1e3 / o.steps, issue_s * 1e3 / o.steps, graphs_json, (long long)recordings,
           (long long)launches, tflops, mfu_json, last_loss / o.batch, be->ops->peak_memory(be),
           prof_json ? ", \"profile\": " : "", prof_json ? prof_json : "", conv_json ? ", \"conv_engines\": " : "",
           conv_json ? conv_json : "", prof_graph_json ? ", \"profile_replayed\": " : "",
           prof_graph_json ? prof_graph_json : "", fusion, tr.total / 1e9, tr.conv_epilogue / 1e9);
    if (be->notice[0]) fprintf(stderr, "gpu_bench: backend notice: %s\n", be->notice);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "gpu_bench: %s\n", e.msg[0] ? e.msg : be->err.msg);
    train_bench_free(tb);
    train_bench_free(tg);
    free(img);
    free(labels);
    free(prof_json);
    free(conv_json);
    free(prof_graph_json);
    optim_free(opt);
    net_free(n);
    backend_free(be);
    return rc;
}
