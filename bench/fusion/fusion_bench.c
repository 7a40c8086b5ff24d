/* fusion_bench.c: bench_gpu_bench's --conv-host-us and --predict (contract in
 * fusion_bench.h). Not here: the training benchmark (bench/gpu_bench.c).
 */
#include "bench/fusion/fusion_bench.h"

#include <stdio.h>
#include <string.h>

#ifdef RUNNER_HAVE_CUDA
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

int fusion_bench_conv_host_us(const char *arch, int classes, int batch, const char *precision, int device,
                              int passes, dtype_t dt) {
    static const char *const DIRS[3] = {"fwd", "bwd_data", "bwd_filter"};
    char dev[256];
    backend_cuda_device_name(device, dev, sizeof dev);
    for (int api = 0; api < 2; api++) {
        err_t e = {0};
        backend_opts_t bo = {0};
        bo.kind = BACKEND_CUDA;
        bo.device = device;
        bo.allow_tf32 = strcmp(precision, "fp32") != 0;
        bo.cuda_fusion = api ? BACKEND_FUSE_GRAPH_CONV : 0;
        backend_t *be = backend_create(&bo, &e);
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
    char names[192];
    backend_fusion_format(fusion, names, sizeof names);
    printf("{\"bench\": \"byte_model\", \"arch\": \"%s\", \"precision\": \"%s\", \"batch\": %d, \"fusion\": \"%s\"",
           arch, precision, batch, names);
    for (int k = 0; k < NT_COUNT; k++) printf(", \"%s_gb\": %.4f", net_traffic_names[k], t.bytes[k] / 1e9);
    printf(", \"nonconv_gb\": %.4f, \"conv_epilogue_gb\": %.4f, \"fused_stats\": %d, \"fused_dbn\": %d, "
           "\"fused_accum\": %d, \"remasked\": %d}\n", t.total / 1e9, t.conv_epilogue / 1e9, t.fused_stats, t.fused_dbn,
           t.fused_accum, t.remasked);
    net_free(n);
    return 0;
}

