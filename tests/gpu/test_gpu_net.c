/* test_gpu_net.c: a whole net on the CUDA backend against the same net on the CPU
 * backend: resnet20 with the same seed, input and labels; the loss, top-1 count, every
 * parameter gradient and the updated BN running statistics after one training forward
 * and backward, in fp32 (no TF32), fp16 and bf16; then three SGD steps in fp32 and the
 * parameters after them. This exercises every op the way the net calls them (offsets
 * into the flat arrays, in-place gradient sums, the half parameter shadow).
 * Skipped (77) without a GPU.
 */
#include "model/net.h"
#include "model/optim.h"
#include "model/resnet.h"
#include "tests/gpu/gpu_test_util.h"

enum { BATCH = 8, CLASSES = 10 };

typedef struct side {
    backend_t *be;
    net_t *net;
} side_t;

static side_t side_make(backend_t *be, dtype_t dt) {
    side_t s = {be, NULL};
    err_t e = {0};
    s.net = resnet_build("resnet20", 3, CLASSES, false, &e);
    if (!s.net || net_bind(s.net, be, BATCH, 32, 32, dt, &e) || net_init(s.net, 11, &e)) {
        fprintf(stderr, "net setup: %s\n", e.msg);
        exit(1);
    }
    return s;
}

/* One forward + loss + backward on both sides; compares loss, hits, grads, buffers. */
static void check_step(dtype_t dt, double loss_tol, double grad_tol) {
    pair_t p = pair_make(true, false);
    side_t s[2] = {side_make(p.cpu, dt), side_make(p.gpu, dt)};
    size_t np = net_num_params(s[0].net), nb = net_num_buffers(s[0].net);
    float *img = hrand((int64_t)BATCH * 32 * 32 * 3, 91, -2.0f, 2.0f);
    int32_t labels[BATCH];
    for (int i = 0; i < BATCH; i++) labels[i] = (i * 7) % CLASSES;
    net_loss_out_t out[2];
    float *grads[2], *bufs[2];
    for (int i = 0; i < 2; i++) {
        err_t e = {0};
        net_t *n = s[i].net;
        grads[i] = hbuf((int64_t)np);
        bufs[i] = hbuf((int64_t)nb);
        if (net_upload_input(n, img, BATCH, &e) || net_zero_grads(n, &e) ||
            net_forward(n, net_input(n), BATCH, true, NULL, &e) ||
            net_loss(n, labels, 0.1f, 1.0f / BATCH, &out[i], &e) || net_backward(n, NULL, &e) ||
            net_download_grads(n, grads[i], &e) || net_download_buffers(n, bufs[i], &e)) {
            fprintf(stderr, "%s step: %s\n", i ? "gpu" : "cpu", e.msg);
            exit(1);
        }
    }
    CHECK_NEAR(out[1].loss_sum, out[0].loss_sum, 0.0, loss_tol);
    if (dt == DT_F32) CHECK_INT(out[1].correct1, out[0].correct1);
    double gl2 = vec_rel_l2(grads[1], grads[0], np), bl2 = vec_rel_l2(bufs[1], bufs[0], nb);
    fprintf(stderr, "  %s: loss cpu %.6f gpu %.6f, grads rel L2 %.3g, buffers rel L2 %.3g\n",
            dtype_names[dt], out[0].loss_sum, out[1].loss_sum, gl2, bl2);
    CHECK(gl2 <= grad_tol);
    CHECK(bl2 <= grad_tol);
    double gn = 0;
    for (size_t i = 0; i < np; i++) gn += fabs(grads[0][i]);
    CHECK(gn > 0.0);   /* a non-trivial gradient */
    for (int i = 0; i < 2; i++) {
        free(grads[i]);
        free(bufs[i]);
        net_free(s[i].net);
    }
    free(img);
    pair_free(&p);
}

static void test_step_fp32(void) { check_step(DT_F32, 1e-4, 1e-3); }
static void test_step_fp16(void) { check_step(DT_F16, 1e-2, 3e-2); }
static void test_step_bf16(void) { check_step(DT_BF16, 3e-2, 8e-2); }

/* Three SGD steps (momentum, weight decay) in fp32: parameters agree afterwards. */
static void test_three_sgd_steps(void) {
    pair_t p = pair_make(true, false);
    side_t s[2] = {side_make(p.cpu, DT_F32), side_make(p.gpu, DT_F32)};
    size_t np = net_num_params(s[0].net);
    float *img = hrand((int64_t)BATCH * 32 * 32 * 3, 92, -2.0f, 2.0f);
    int32_t labels[BATCH];
    for (int i = 0; i < BATCH; i++) labels[i] = (i * 3) % CLASSES;
    float *params[2];
    for (int i = 0; i < 2; i++) {
        err_t e = {0};
        net_t *n = s[i].net;
        optim_opts_t oo = {0};
        oo.kind = OPTIM_SGD;
        oo.momentum = 0.9;
        oo.weight_decay = 5e-4;
        optim_t *opt = optim_create(n, &oo, &e);
        if (!opt || net_upload_input(n, img, BATCH, &e)) { fprintf(stderr, "%s\n", e.msg); exit(1); }
        for (int step = 0; step < 3; step++) {
            net_loss_out_t out;
            if (net_zero_grads(n, &e) || net_forward(n, net_input(n), BATCH, true, NULL, &e) ||
                net_loss(n, labels, 0.0f, 1.0f / BATCH, &out, &e) || net_backward(n, NULL, &e) ||
                optim_step(opt, 0.05, &e)) {
                fprintf(stderr, "%s sgd step %d: %s\n", i ? "gpu" : "cpu", step, e.msg);
                exit(1);
            }
        }
        params[i] = hbuf((int64_t)np);
        if (net_download_params(n, params[i], &e)) { fprintf(stderr, "%s\n", e.msg); exit(1); }
        optim_free(opt);
    }
    double l2 = vec_rel_l2(params[1], params[0], np);
    fprintf(stderr, "  params after 3 steps: rel L2 %.3g\n", l2);
    CHECK(l2 <= 1e-4);
    for (int i = 0; i < 2; i++) {
        free(params[i]);
        net_free(s[i].net);
    }
    free(img);
    pair_free(&p);
}

int main(void) {
    gpu_or_skip();
    TEST_RUN(test_step_fp32);
    TEST_RUN(test_step_fp16);
    TEST_RUN(test_step_bf16);
    TEST_RUN(test_three_sgd_steps);
    return test_main_end();
}
