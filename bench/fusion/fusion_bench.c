/* fusion_bench.c: bench_gpu_bench's --conv-host-us and --predict (contract in
 * fusion_bench.h). Not here: the training benchmark (bench/gpu_bench.c).
 */
#include "bench/fusion/fusion_bench.h"

#include <stdio.h>
#include <string.h>

#ifdef RUNNER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "model/cuda/cuda_backend.h"
#endif
#include "model/net.h"
#include "model/net_fusion.h"
#include "model/arch/resnet.h"
#include "util/clock.h"

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

backend_t *fusion_bench_backend(int device, const char *precision, unsigned fusion, bool deterministic, char *dev,
                                size_t len, err_t *e) {
    backend_cuda_device_name(device, dev, len);
    backend_opts_t bo = {0};
    bo.kind = BACKEND_CUDA;
    bo.device = device;
    bo.deterministic = deterministic;
    bo.allow_tf32 = strcmp(precision, "fp32") != 0;
    bo.cuda_fusion = fusion;
    return backend_create(&bo, e);
}

int fusion_bench_conv_host_us(const char *arch, int classes, int batch, const char *precision, int device,
                              int passes, dtype_t dt) {
    static const char *const DIRS[3] = {"fwd", "bwd_data", "bwd_filter"};
    char dev[256];
    for (int api = 0; api < 2; api++) {
        err_t e = {0};
        backend_t *be = fusion_bench_backend(device, precision, api ? BACKEND_FUSE_GRAPH_CONV : 0, false, dev,
                                             sizeof dev, &e);
        net_t *n = be ? resnet_build(arch, 3, classes, false, &e) : NULL;
        if (!n || net_bind(n, be, batch, 32, 32, dt, &e)) {
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
            if (net_conv_geometry(n, i, batch, &layer[nl], NULL)) continue;
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
            for (int pass = 0; pass < 2 + passes && !rc; pass++) {
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
                       "\"calls\": %d, \"graph_calls\": %d}\n", dev, precision, batch, arch,
                       api ? "graph" : "legacy", DIRS[d], 1e6 * issue / ((double)passes * nl),
                       passes * nl, api ? graph_calls * passes : 0);
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

int fusion_bench_predict(const char *arch, int classes, int batch, const char *precision, unsigned fusion,
                         dtype_t dt) {
    err_t e = {0};
    net_t *n = resnet_build(arch, 3, classes, false, &e);
    net_traffic_t t;
    if (!n || net_traffic(n, batch, 32, 32, dt, false, fusion, &t, &e)) {
        fprintf(stderr, "gpu_bench: %s\n", e.msg);
        net_free(n);
        return 1;
    }
    char names[BACKEND_FUSION_NAMES_MAX];
    backend_fusion_format(fusion, names, sizeof names);
    printf("{\"bench\": \"byte_model\", \"arch\": \"%s\", \"precision\": \"%s\", \"batch\": %d, \"fusion\": \"%s\"",
           arch, precision, batch, names);
    for (int k = 0; k < NT_COUNT; k++) printf(", \"%s_gb\": %.4f", net_traffic_names[k], t.bytes[k] / 1e9);
    printf(", \"nonconv_gb\": %.4f, \"conv_epilogue_gb\": %.4f, \"fused_stats\": %d, \"fused_dbn\": %d, "
           "\"fused_accum\": %d, \"remasked\": %d, \"mask_bits\": %d, \"dual\": %d}\n", t.total / 1e9,
           t.conv_epilogue / 1e9, t.fused_stats, t.fused_dbn, t.fused_accum, t.remasked, t.mask_bits, t.dual);
    net_free(n);
    return 0;
}


/* ---- the pattern probe ---- */

#ifdef RUNNER_HAVE_CUDA
/* ms per call of a BN op on be's stream (one warm-up, 10 calls, events); -1 on failure */
static float time_bn(backend_t *be, int which, int64_t m, int c, dtype_t dt, void *x, void *y, float *v) {
    cudaStream_t st = (cudaStream_t)cuda_backend_stream(be);
    cudaEvent_t a, z;
    float ms = -1.0f;
    if (cudaEventCreate(&a) != cudaSuccess) return -1.0f;
    if (cudaEventCreate(&z) != cudaSuccess) {
        cudaEventDestroy(a);
        return -1.0f;
    }
    int rc = 0;
    for (int i = 0; i < 11 && !rc; i++) {
        if (i == 1) cudaEventRecord(a, st);
        rc = which == 0 ? be->ops->bn_apply(be, m, c, dt, x, v, v + c, v + 2 * c, v + 3 * c, 1e-5f, NULL, ACT_RELU, y)
                        : be->ops->bn_stats(be, m, c, dt, x, v, v + c);
    }
    cudaEventRecord(z, st);
    if (!rc && cudaEventSynchronize(z) == cudaSuccess && cudaEventElapsedTime(&ms, a, z) == cudaSuccess) ms /= 10.0f;
    else ms = -1.0f;
    cudaEventDestroy(a);
    cudaEventDestroy(z);
    return ms;
}
#endif

enum { PK_FPROP, PK_FPROP_STATS, PK_SBR_FPROP, PK_SBR_FPROP_STATS, PK_WGRAD, PK_SBR_WGRAD, PK_WGRAD_F32, PK_COUNT };

int fusion_bench_patterns(const char *arch, int classes, int batch, const char *precision, int device, int rtc_budget,
                          bool deterministic, dtype_t dt) {
#ifndef RUNNER_HAVE_CUDA
    (void)arch; (void)classes; (void)batch; (void)precision; (void)device; (void)rtc_budget; (void)deterministic;
    (void)dt;
    fprintf(stderr, "gpu_bench: --patterns needs a CUDA build\n");
    return 1;
#else
    /* graph kinds of conv_graph.cuh in PK_ order (by name: the enum is the backend's) */
    static const char *const KIND_NAMES[PK_COUNT] = {"fprop", "fprop_stats", "sbr_fprop", "sbr_fprop_stats", "wgrad",
                                                     "sbr_wgrad", "wgrad_f32"};
    int kinds[PK_COUNT];
    for (int k = 0; k < PK_COUNT; k++) {
        kinds[k] = -1;
        for (int g = 0; g < cuda_conv_graph_kinds(); g++)
            if (!strcmp(cuda_conv_graph_kind_name(g), KIND_NAMES[k])) kinds[k] = g;
        if (kinds[k] < 0) {
            fprintf(stderr, "gpu_bench: no graph kind %s in this build\n", KIND_NAMES[k]);
            return 1;
        }
    }
    char dev[256];
    err_t e = {0};
    backend_t *be = fusion_bench_backend(device, precision, BACKEND_FUSE_ALL, deterministic, dev, sizeof dev, &e);
    net_t *n = be ? resnet_build(arch, 3, classes, false, &e) : NULL;
    if (!n || net_bind(n, be, 1, 32, 32, dt, &e)) {   /* batch 1: the geometry only */
        fprintf(stderr, "gpu_bench: %s\n", e.msg);
        net_free(n);
        backend_free(be);
        return 1;
    }
    static conv_shape_t uniq[MAX_CONVS];
    static int layers[MAX_CONVS], sbr[MAX_CONVS], order[MAX_CONVS];
    int nu = 0;
    for (int i = 0; i < net_num_nodes(n); i++) {
        conv_shape_t s;
        if (net_conv_geometry(n, i, batch, &s, NULL)) continue;
        int u = 0;
        while (u < nu && memcmp(&uniq[u], &s, sizeof s)) u++;
        if (u == nu) {
            if (nu == MAX_CONVS) break;
            uniq[nu] = s;
            layers[nu] = sbr[nu] = 0;
            nu++;
        }
        layers[u]++;
        /* the prologue applies where the input is a BN + ReLU read by this conv alone */
        int b = net_fused_dbn_bn(n, i);
        sbr[u] += b >= 0 && net_node_kind(n, b) == NODE_BN_RELU;
    }
    /* biggest share of the step first: layers x FLOPs */
    for (int u = 0; u < nu; u++) order[u] = u;
    for (int a = 1; a < nu; a++)
        for (int b = a; b > 0; b--) {
            const conv_shape_t *x = &uniq[order[b]], *y = &uniq[order[b - 1]];
            double fx = (double)layers[order[b]] * x->p * x->q * x->k * x->r * x->s * x->c;
            double fy = (double)layers[order[b - 1]] * y->p * y->q * y->k * y->r * y->s * y->c;
            if (fx <= fy) break;
            int t = order[b]; order[b] = order[b - 1]; order[b - 1] = t;
        }
    int rc = 0, budget = rtc_budget;
    double unfused_total = 0, fused_total = 0, fprop_total = 0, first_total = 0, best_total = 0;
    int counted = 0;
    for (int oi = 0; oi < nu && !rc; oi++) {
        int u = order[oi];
        const conv_shape_t *s = &uniq[u];
        char shape[96];
        snprintf(shape, sizeof shape, "%dx%d c%d k%d s%d %dx%d", s->r, s->s, s->c, s->k, s->stride, s->h, s->w);
        float ms[PK_COUNT];
        for (int k = 0; k < PK_COUNT && !rc; k++) {
            bool sbr_kind = k == PK_SBR_FPROP || k == PK_SBR_FPROP_STATS || k == PK_SBR_WGRAD;
            bool rtc = budget > 0 && (sbr_kind || k == PK_FPROP_STATS || k == PK_WGRAD_F32);
            cuda_graph_probe_t r;
            if (cuda_conv_graph_probe(be, kinds[k], s, dt, rtc, &r)) {
                fprintf(stderr, "gpu_bench: probe %s %s: %s\n", KIND_NAMES[k], shape, be->err.msg);
                rc = 1;
                break;
            }
            if (rtc && r.rtc_engine[0]) budget--;
            ms[k] = r.pre_ms >= 0 && (r.rtc_ms < 0 || r.pre_ms <= r.rtc_ms) ? r.pre_ms : r.rtc_ms;
            printf("{\"bench\": \"conv_patterns\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, "
                   "\"arch\": \"%s\", \"deterministic\": %s, \"shape\": \"%s\", \"layers\": %d, \"sbr_layers\": %d, "
                   "\"kind\": \"%s\", \"configs\": %d, \"usable\": %d, \"runtime\": %d, \"pre_ms\": %.4f, "
                   "\"first_ms\": %.4f, \"pre_engine\": \"%s\", \"rtc_ms\": %.4f, \"rtc_engine\": \"%s\", "
                   "\"why\": \"%s\"}\n",
                   dev, precision, batch, arch, deterministic ? "true" : "false", shape, layers[u], sbr[u],
                   KIND_NAMES[k], r.configs, r.usable, r.runtime, r.pre_ms, r.first_ms, r.pre_engine, r.rtc_ms,
                   r.rtc_engine, r.why);
            if (r.first_ms >= 0 && r.pre_ms >= 0 && (k == PK_FPROP || k == PK_WGRAD)) {
                first_total += layers[u] * r.first_ms;
                best_total += layers[u] * r.pre_ms;
            }
            fflush(stdout);
        }
        if (rc) break;
        /* the unfused BN ops around the conv: bn_apply of its input, bn_stats of its output */
        size_t esz = backend_elem_size(be, dt);
        int64_t m_in = (int64_t)s->n * s->h * s->w, m_out = (int64_t)s->n * s->p * s->q;
        int cmax = s->c > s->k ? s->c : s->k;
        void *x = be->ops->alloc(be, (size_t)m_in * s->c * esz), *y = be->ops->alloc(be, (size_t)m_in * s->c * esz);
        void *o = be->ops->alloc(be, (size_t)m_out * s->k * esz);
        float *v = (float *)be->ops->alloc(be, (size_t)cmax * 4 * sizeof(float));
        float ap = -1, st = -1;
        if (x && y && o && v && !be->ops->zero(be, x, (size_t)m_in * s->c * esz) &&
            !be->ops->zero(be, o, (size_t)m_out * s->k * esz) && !be->ops->zero(be, v, (size_t)cmax * 16)) {
            ap = time_bn(be, 0, m_in, s->c, dt, x, y, v);
            st = time_bn(be, 1, m_out, s->k, dt, o, NULL, v);
        }
        be->ops->release(be, x); be->ops->release(be, y); be->ops->release(be, o); be->ops->release(be, v);
        printf("{\"bench\": \"conv_patterns_bn\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, "
               "\"shape\": \"%s\", \"layers\": %d, \"sbr_layers\": %d, \"bn_apply_in_ms\": %.4f, "
               "\"bn_stats_out_ms\": %.4f}\n", dev, precision, batch, shape, layers[u], sbr[u], ap, st);
        if (sbr[u] && ap >= 0 && st >= 0 && ms[PK_FPROP] >= 0 && ms[PK_SBR_FPROP_STATS] >= 0) {
            unfused_total += sbr[u] * (ap + ms[PK_FPROP] + st);
            fused_total += sbr[u] * ms[PK_SBR_FPROP_STATS];
            fprop_total += sbr[u] * ms[PK_FPROP];
            counted += sbr[u];
        }
    }
    if (!rc)
        printf("{\"bench\": \"conv_patterns_total\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, "
               "\"arch\": \"%s\", \"deterministic\": %s, \"sbr_layers_counted\": %d, \"unfused_ms\": %.4f, "
               "\"fused_ms\": %.4f, \"fprop_ms\": %.4f, \"fprop_wgrad_first_ms\": %.4f, "
               "\"fprop_wgrad_best_ms\": %.4f, \"rtc_budget_left\": %d}\n",
               dev, precision, batch, arch, deterministic ? "true" : "false", counted, unfused_total, fused_total,
               fprop_total, first_total, best_total, budget);
    net_free(n);
    backend_free(be);
    return rc;
#endif
}
