/* test_conv_graph_desc.c: the cuDNN graph API descriptors of model/cuda/conv_graph.cu,
 * built and finalized without a GPU (cuDNN checks every attribute's name, type and count,
 * and each tensor's and operation's consistency at finalize, on the host): every graph
 * kind (plain fprop / dgrad / wgrad, dgrad with beta = 1, fprop + genStats, dgrad [+ dReLU]
 * + the two BN sums, the scale-bias-ReLU prologue on fprop [+ genStats] and on wgrad, wgrad
 * into an fp32 gradient with beta = 1) for every conv of ResNet-50 (CIFAR stem, batch 128) and a 3-channel
 * stride-2 stem on an odd size, in fp32, fp16 and bf16, deterministic and not; a shape
 * whose output size contradicts its input is refused, and so is a grouped one (the
 * graph kinds build dense convolutions; the legacy API runs grouped ones). What needs a device (the operation
 * graph with its handle, heuristics, plans) is test_gpu_fusion's. Runs in every CUDA
 * build; label unit.
 */
#include <stdlib.h>

#include "model/backend.h"
#include "model/cpu/cpu_backend.h"
#include "model/cuda/cuda_backend.h"
#include "model/net.h"
#include "model/arch/resnet.h"
#include "tests/test.h"

static void test_every_kind_builds(void) {
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 1};
    backend_t *cpu = cpu_backend_create(&bo, &e);
    net_t *n = resnet_build("resnet50", 3, 100, false, &e);
    CHECK(cpu != NULL && n != NULL);
    if (!cpu || !n || net_bind(n, cpu, 1, 32, 32, DT_F32, &e)) {   /* batch 1: geometry only */
        fprintf(stderr, "setup: %s\n", e.msg);
        test_failures_++;
        net_free(n);
        backend_free(cpu);
        return;
    }
    CHECK_INT(cuda_conv_graph_kinds(), 11);
    int built = 0, convs = 0;
    for (int i = 0; i < net_num_nodes(n); i++) {
        conv_shape_t s;
        if (net_conv_geometry(n, i, 128, &s, NULL)) continue;
        convs++;
        for (int kind = 0; kind < cuda_conv_graph_kinds(); kind++)
            for (int d = 0; d < 3; d++) {
                dtype_t dt = d == 0 ? DT_F32 : d == 1 ? DT_F16 : DT_BF16;
                char why[256];
                int rc = cuda_conv_graph_describe(kind, &s, dt, kind % 2 == 0, why, sizeof why);
                if (rc) fprintf(stderr, "  %s %s c%d k%d r%d s%d: %s\n", cuda_conv_graph_kind_name(kind),
                                dtype_names[dt], s.c, s.k, s.r, s.stride, why);
                CHECK_INT(rc, 0);
                built += rc == 0;
            }
    }
    CHECK_INT(convs, 53);
    CHECK_INT(built, 53 * 11 * 3);
    printf("  %d graphs built (53 convs x 11 kinds x 3 dtypes)\n", built);
    net_free(n);
    backend_free(cpu);
}

/* The 3-channel stem, odd sizes, what the helpers report, and a refused shape. */
static void test_stem_and_names(void) {
    conv_shape_t s = {4, 31, 31, 3, 16, 3, 3, 2, 1, 16, 16, 1};
    char why[256];
    for (int kind = 0; kind < cuda_conv_graph_kinds(); kind++) {
        CHECK_INT(cuda_conv_graph_describe(kind, &s, DT_BF16, true, why, sizeof why), 0);
        if (kind == 0) CHECK_STR(why, "1 operations");
        if (kind == 4) CHECK_STR(why, "2 operations");   /* conv + genStats */
        if (kind == 6) CHECK_STR(why, "6 operations");   /* dgrad, dReLU, sum, sub, mul, sum */
        if (kind == 7) CHECK_STR(why, "4 operations");   /* mul, add, ReLU, conv */
        if (kind == 8) CHECK_STR(why, "5 operations");   /* mul, add, ReLU, conv, genStats */
        if (kind == 9) CHECK_STR(why, "4 operations");   /* mul, add, ReLU, wgrad */
        if (kind == 10) CHECK_STR(why, "1 operations");  /* wgrad into fp32, beta 1 */
    }
    CHECK_STR(cuda_conv_graph_kind_name(4), "fprop_stats");
    CHECK_STR(cuda_conv_graph_kind_name(8), "sbr_fprop_stats");
    CHECK_STR(cuda_conv_graph_kind_name(10), "wgrad_f32");
    CHECK(cuda_conv_graph_kind_name(11) == NULL);
    CHECK_INT(cuda_conv_graph_describe(11, &s, DT_BF16, true, why, sizeof why), -1);
    CHECK_STR(why, "graph kind 11 does not exist");
    conv_shape_t bad = s;
    bad.p = bad.q = 17;   /* (31 + 2 - 3) / 2 + 1 = 16 */
    int rc = cuda_conv_graph_describe(0, &bad, DT_BF16, false, why, sizeof why);
    printf("  output 17x17 for a 16x16 conv: %s\n", why);
    CHECK_INT(rc, -1);
    conv_shape_t dw = {4, 16, 16, 32, 32, 3, 3, 1, 1, 16, 16, 32};   /* depthwise */
    for (int kind = 0; kind < cuda_conv_graph_kinds(); kind++) {
        CHECK_INT(cuda_conv_graph_describe(kind, &dw, DT_F16, false, why, sizeof why), -1);
        CHECK_CONTAINS(why, "a grouped convolution (groups 32: the legacy API runs it)");
    }
    dw.groups = 1;   /* the same shape dense builds */
    CHECK_INT(cuda_conv_graph_describe(0, &dw, DT_F16, false, why, sizeof why), 0);
}

int main(void) {
    TEST_RUN(test_every_kind_builds);
    TEST_RUN(test_stem_and_names);
    return test_main_end();
}
