/* test_gpu_net.c: a whole net on the CUDA backend against the same net on the CPU
 * backend: resnet20 with the same seed, input and labels. This exercises every op the way
 * the net calls them (offsets into the flat arrays, in-place gradient sums, the half
 * parameter shadow).
 *
 * - fp32 (no TF32), one training forward + backward: loss, top-1, every parameter
 *   gradient and the updated BN running statistics agree to fp32 rounding.
 * - fp16 and bf16: the reference is the CPU's fp32 result. Rounding activations to half
 *   moves the gradients a long way from it (two correct CPU engines that differ only in
 *   summation order already differ by 0.08 / 0.19 in relative L2 on this fixture), so
 *   the GPU is held to HALF_RATIO (2) times the CPU emulation's own distance from the
 *   fp32 result, over all gradients and over the BN statistics, and per parameter tensor
 *   to TENSOR_RATIO (3) times it plus 4 units of half rounding (one tensor's rounding
 *   errors are a smaller sample, so they scatter more). Rounding as good as the
 *   emulation's passes; a wrong gradient does not: negating one layer's weight gradient
 *   (gpu_plant.h conv_dw_sign, 15% of the gradient's norm) stays within 2x over all
 *   gradients (the emulation is 12% / 33% from fp32 in fp16 / bf16) but is 35x the
 *   emulation's distance in its own tensor.
 * - Three SGD steps in fp32 (momentum, weight decay), teacher-forced: each step starts
 *   both sides from the CPU's state after the previous one (parameters, momentum, BN
 *   running statistics and counters, step count), so rounding cannot compound over steps;
 *   each step's parameter update and statistics are compared. Its conditioning is
 *   checked, not assumed: a ReLU whose input lies within rounding of 0 may switch on one
 *   side and not the other, and one switched mask moves a layer's gradient by ~1/sqrt(rows)
 *   (the first GPU run saw |x| = 1.3e-6 flip and the un-forced parameters diverge by
 *   1e-3). So every ReLU input of both sides is recomputed on the host; per layer the
 *   rounding distance sigma is the rms of the sides' differences, and the test fails
 *   (saying why) if any CPU ReLU input lies within RELU_SIGMAS (8) sigma of 0, or if a
 *   layer's sigma exceeds 1e-5 of its rms. The fixture is small (batch 2, 8 x 8 images,
 *   ~23,500 ReLU inputs a step) so that such a margin can hold at all, and its input
 *   (STEPS_INPUT_TAG 99) was chosen among tags 90..130 on the CPU dry run: its nearest
 *   ReLU input over the three steps lies 260 sigma from 0 (sigma <= 1.7e-6 x rms between
 *   oneDNN and GEMM), so rounding 30 times the CPU engines' still passes.
 * Skipped (77) without a GPU; RUNNER_GPU_TEST_DRYRUN=cpu runs it with a second CPU
 * backend as the "gpu" (gpu_test_util.h).
 */
#include "model/net.h"
#include "model/net_impl.h"
#include "model/optim.h"
#include "model/arch/resnet.h"
#include "tests/gpu/gpu_test_util.h"

enum { BATCH = 8, CLASSES = 10 };
enum { STEPS_BATCH = 2, STEPS_HW = 8, STEPS_INPUT_TAG = 99 };
static const double HALF_RATIO = 2.0, TENSOR_RATIO = 3.0;
static const double RELU_SIGMAS = 8.0;

typedef struct side {
    backend_t *be;
    net_t *net;
} side_t;

static side_t side_make(backend_t *be, dtype_t dt, int batch, int hw) {
    side_t s = {be, NULL};
    err_t e = {0};
    s.net = resnet_build("resnet20", 3, CLASSES, false, &e);
    if (!s.net || net_bind(s.net, be, batch, hw, hw, dt, &e) || net_init(s.net, 11, &e)) {
        fprintf(stderr, "net setup: %s\n", e.msg);
        exit(1);
    }
    return s;
}

#define NET_OK(what, call) do { err_t e_ = {0}; if ((call) || e_.code) { \
    fprintf(stderr, "%s: %s\n", what, e_.msg); exit(1); } } while (0)

/* One forward + loss + backward of the fixed batch; grads and buffers to the host. */
static net_loss_out_t run_step(net_t *n, const float *img, const int32_t *labels, float *grads, float *bufs) {
    net_loss_out_t out;
    err_t e = {0};
    if (net_upload_input(n, img, BATCH, &e) || net_zero_grads(n, &e) ||
        net_forward(n, net_input(n), BATCH, true, NULL, &e) ||
        net_loss(n, labels, 0.1f, 1.0f / BATCH, &out, &e) || net_backward(n, NULL, &e) ||
        net_download_grads(n, grads, &e) || net_download_buffers(n, bufs, &e)) {
        fprintf(stderr, "step: %s\n", e.msg);
        exit(1);
    }
    return out;
}

/* n nets on the fixed batch (image tag 91, labels 7i mod 10), each on its backend and
 * dtype: one step each, the results on the host. */
typedef struct runs {
    int n;
    side_t s[3];
    net_loss_out_t out[3];
    float *grads[3], *bufs[3];
    size_t np, nb;
} runs_t;

static void runs_do(runs_t *r, int n, backend_t *const *be, const dtype_t *dt) {
    float *img = hrand((int64_t)BATCH * 32 * 32 * 3, 91, -2.0f, 2.0f);
    int32_t labels[BATCH];
    for (int i = 0; i < BATCH; i++) labels[i] = (i * 7) % CLASSES;
    r->n = n;
    for (int i = 0; i < n; i++) {
        r->s[i] = side_make(be[i], dt[i], BATCH, 32);
        r->np = net_num_params(r->s[i].net);
        r->nb = net_num_buffers(r->s[i].net);
        r->grads[i] = hbuf((int64_t)r->np);
        r->bufs[i] = hbuf((int64_t)r->nb);
        r->out[i] = run_step(r->s[i].net, img, labels, r->grads[i], r->bufs[i]);
    }
    free(img);
}

static void runs_free(runs_t *r) {
    for (int i = 0; i < r->n; i++) {
        free(r->grads[i]);
        free(r->bufs[i]);
        net_free(r->s[i].net);
    }
}

/* fp32: the GPU against the CPU, to fp32 rounding. */
static void test_step_fp32(void) {
    pair_t p = pair_make(true, false);
    runs_t r;
    runs_do(&r, 2, (backend_t *[]){p.cpu, p.gpu}, (dtype_t[]){DT_F32, DT_F32});
    size_t np = r.np;
    double gl2 = vec_rel_l2(r.grads[1], r.grads[0], np), bl2 = vec_rel_l2(r.bufs[1], r.bufs[0], r.nb);
    fprintf(stderr, "  fp32: loss cpu %.6f gpu %.6f, grads rel L2 %.3g, buffers rel L2 %.3g\n", r.out[0].loss_sum,
            r.out[1].loss_sum, gl2, bl2);
    CHECK_NEAR(r.out[1].loss_sum, r.out[0].loss_sum, 0.0, 1e-4);
    CHECK_INT(r.out[1].correct1, r.out[0].correct1);
    CHECK(gl2 <= 1e-3);
    CHECK(bl2 <= 1e-3);
    double gn = 0;
    for (size_t i = 0; i < np; i++) gn += fabs(r.grads[0][i]);
    CHECK(gn > 0.0);   /* a non-trivial gradient */
    runs_free(&r);
    pair_free(&p);
}

/* Half precision: the GPU's distance to the CPU's fp32 result is at most HALF_RATIO x
 * the CPU emulation's (same dtype) distance to it, for the gradients and the BN
 * statistics; the loss within loss_tol of the emulation's. */
static void check_step_half(dtype_t dt, double loss_tol) {
    pair_t p = pair_make(true, false);
    /* [0] CPU fp32 (the reference), [1] CPU in dt (the emulation), [2] GPU in dt */
    runs_t r;
    runs_do(&r, 3, (backend_t *[]){p.cpu, p.cpu, p.gpu}, (dtype_t[]){DT_F32, dt, dt});
    size_t np = r.np, nb = r.nb;
    float **grads = r.grads, **bufs = r.bufs;
    net_loss_out_t *out = r.out;
    double gc = vec_rel_l2(grads[1], grads[0], np), gg = vec_rel_l2(grads[2], grads[0], np);
    double bc = vec_rel_l2(bufs[1], bufs[0], nb), bg = vec_rel_l2(bufs[2], bufs[0], nb);
    fprintf(stderr, "  %s: loss fp32 %.6f cpu %.6f gpu %.6f; grads rel L2 to fp32: cpu %.3g gpu %.3g (%.2fx); "
            "buffers: cpu %.3g gpu %.3g (%.2fx); gpu vs cpu grads %.3g\n", dtype_names[dt], out[0].loss_sum,
            out[1].loss_sum, out[2].loss_sum, gc, gg, gc > 0 ? gg / gc : 0.0, bc, bg, bc > 0 ? bg / bc : 0.0,
            vec_rel_l2(grads[2], grads[1], np));
    /* per tensor: a defect confined to one layer hides in the whole gradient's norm */
    double unit = dt == DT_F16 ? 0x1p-11 : 0x1p-8, worst = 0;
    const char *worst_name = "";
    int over = 0;
    for (int t = 0; t < net_num_tensors(r.s[0].net); t++) {
        const net_tensor_t *nt = net_tensor(r.s[0].net, t);
        if (nt->store != NET_STORE_PARAM) continue;
        double c = vec_rel_l2(grads[1] + nt->offset, grads[0] + nt->offset, nt->numel);
        double g = vec_rel_l2(grads[2] + nt->offset, grads[0] + nt->offset, nt->numel);
        double ratio = g / (TENSOR_RATIO * c + 4 * unit);
        over += ratio > 1.0;
        if (ratio > worst) { worst = ratio; worst_name = nt->name; }
    }
    fprintf(stderr, "  %s: per tensor, the largest gpu distance is %.2f of its bound (%s)\n", dtype_names[dt], worst,
            worst_name);
    CHECK_INT(over, 0);
    CHECK(gc > 0.0 && bc > 0.0);   /* the emulation does round (else the bound is void) */
    CHECK(gg <= HALF_RATIO * gc);
    CHECK(bg <= HALF_RATIO * bc);
    CHECK_NEAR(out[2].loss_sum, out[1].loss_sum, 0.0, loss_tol);
    runs_free(&r);
    pair_free(&p);
}

static void test_step_fp16(void) { check_step_half(DT_F16, 1e-2); }
static void test_step_bf16(void) { check_step_half(DT_BF16, 3e-2); }

/* ---- the teacher-forced steps ---- */

/* The inputs of every ReLU of n's last training forward (fp32 net), recomputed on the
 * host from the stored tensors: bn_relu / bn_add_relu: gamma (x - mean) / sqrt(var + eps)
 * + beta [+ shortcut]; relu: its input. One array per ReLU node, in node order, with its
 * rms; returns the number of ReLU nodes (at most cap). */
typedef struct relu_in {
    int node;
    int64_t len;
    float *z;
    double rms;
} relu_in_t;

static float *dev_floats(backend_t *be, const void *src, int64_t n) {
    float *h = hbuf(n);
    OK(be, be->ops->download(be, h, src, (size_t)n * 4));
    return h;
}

static int relu_inputs(net_t *n, int batch, relu_in_t *out, int cap) {
    backend_t *be = net_backend(n);
    size_t np = net_num_params(n);
    float *params = hbuf((int64_t)np);
    NET_OK("params", net_download_params(n, params, &e_));
    int count = 0;
    for (int i = 0; i < n->n_nodes && count < cap; i++) {
        const node_t *d = &n->nodes[i];
        if (d->kind != NODE_BN_RELU && d->kind != NODE_BN_ADD_RELU && d->kind != NODE_RELU) continue;
        int64_t m = (int64_t)batch * d->h * d->w, len = m * d->c;
        const void *xin = d->in[0] == NET_INPUT ? n->input : n->nodes[d->in[0]].y;
        float *z = dev_floats(be, xin, len);
        if (d->kind != NODE_RELU) {
            float *mean = dev_floats(be, d->mean, d->c), *var = dev_floats(be, d->var, d->c);
            float *sc = d->kind == NODE_BN_ADD_RELU ? dev_floats(be, n->nodes[d->in[1]].y, len) : NULL;
            for (int64_t r = 0; r < m; r++)
                for (int c = 0; c < d->c; c++) {
                    int64_t k = r * d->c + c;
                    double v = ((double)z[k] - mean[c]) / sqrt((double)var[c] + NET_BN_EPS) * params[d->w_off + c] +
                               params[d->b_off + c];
                    z[k] = (float)(v + (sc ? sc[k] : 0.0));
                }
            free(mean);
            free(var);
            free(sc);
        }
        double ss = 0;
        for (int64_t k = 0; k < len; k++) ss += (double)z[k] * z[k];
        out[count++] = (relu_in_t){i, len, z, sqrt(ss / (double)len)};
    }
    free(params);
    return count;
}

/* The conditioning of one step (see the top). Per ReLU layer, the rounding distance
 * sigma is the rms of the two sides' differences in its inputs. Fails (returns the
 * number of failed checks, with a message) when a CPU ReLU input lies within
 * RELU_SIGMAS x sigma of 0, where rounding could switch it, or when a layer's sigma
 * exceeds 1e-5 x its rms (the sides do not agree to fp32 rounding at all). Prints the
 * nearest input in units of sigma and how many ReLUs did switch. */
static int check_conditioning(net_t *cpu, net_t *gpu, int batch, int step) {
    enum { CAP = 64 };
    relu_in_t rc[CAP], rg[CAP];
    int nc = relu_inputs(cpu, batch, rc, CAP), ng = relu_inputs(gpu, batch, rg, CAP);
    double worst = INFINITY, sig_max = 0;
    int64_t near = 0, total = 0, flips = 0;
    int worst_node = -1;
    for (int l = 0; l < nc && l < ng; l++) {
        double ss = 0;
        for (int64_t k = 0; k < rc[l].len; k++) {
            double d = (double)rg[l].z[k] - rc[l].z[k];
            ss += d * d;
        }
        double sigma = sqrt(ss / (double)rc[l].len);
        if (sigma / rc[l].rms > sig_max) sig_max = sigma / rc[l].rms;
        for (int64_t k = 0; k < rc[l].len; k++) {
            double a = fabs(rc[l].z[k]) / (sigma > 0 ? sigma : 1e-30);
            if (a < worst) { worst = a; worst_node = rc[l].node; }
            near += a < RELU_SIGMAS;
            flips += (rc[l].z[k] > 0) != (rg[l].z[k] > 0);
        }
        total += rc[l].len;
        free(rc[l].z);
        free(rg[l].z);
    }
    fprintf(stderr, "  step %d: %lld ReLU inputs, nearest to 0 at %.3g sigma (node %d), sigma <= %.3g x rms, "
            "%lld switched\n", step, (long long)total, worst, worst_node, sig_max, (long long)flips);
    int bad = 0;
    if (nc != ng || near > 0) {
        fprintf(stderr, "  step %d: the fixture is ill-conditioned: %lld ReLU inputs within %g x the rounding "
                "distance of 0 (choose another STEPS_INPUT_TAG)\n", step, (long long)near, RELU_SIGMAS);
        bad++;
    }
    if (!(sig_max <= 1e-5)) {
        fprintf(stderr, "  step %d: the sides' ReLU inputs differ by %.3g x rms, not fp32 rounding\n", step, sig_max);
        bad++;
    }
    return bad;
}

/* The whole state an SGD step reads, on the host. */
typedef struct sgd_state {
    float *params, *momentum, *buffers;
    int64_t *counters, steps;
} sgd_state_t;

static void state_get(net_t *n, optim_t *o, sgd_state_t *st) {
    size_t np = net_num_params(n), nb = net_num_buffers(n);
    int nc = net_num_counters(n);
    st->params = hbuf((int64_t)np);
    st->momentum = hbuf((int64_t)np);
    st->buffers = hbuf((int64_t)nb);
    st->counters = (int64_t *)calloc((size_t)nc + 1, sizeof(int64_t));
    NET_OK("download params", net_download_params(n, st->params, &e_));
    NET_OK("download buffers", net_download_buffers(n, st->buffers, &e_));
    NET_OK("optimizer steps", optim_steps(o, &st->steps, &e_));
    backend_t *be = net_backend(n);
    OK(be, be->ops->download(be, st->momentum, optim_state(o, 0), np * 4));
    memcpy(st->counters, net_counters(n), (size_t)nc * sizeof(int64_t));
}

static void state_put(net_t *n, optim_t *o, const sgd_state_t *st) {
    size_t np = net_num_params(n);
    NET_OK("upload params", net_upload_params(n, st->params, &e_));
    NET_OK("upload buffers", net_upload_buffers(n, st->buffers, &e_));
    NET_OK("optimizer steps", optim_set_steps(o, st->steps, &e_));
    backend_t *be = net_backend(n);
    OK(be, be->ops->upload(be, optim_state(o, 0), st->momentum, np * 4));
    memcpy(net_counters(n), st->counters, (size_t)net_num_counters(n) * sizeof(int64_t));
}

static void state_free(sgd_state_t *st) {
    free(st->params);
    free(st->momentum);
    free(st->buffers);
    free(st->counters);
}

/* Three SGD steps (momentum 0.9, weight decay 5e-4, lr 0.05) in fp32, teacher-forced:
 * per step, the update (parameters after - before) and the BN running statistics agree
 * to 1e-4 in relative L2 (measured fp32 gradient difference: 1.6e-6), and the step is
 * well conditioned (check_conditioning). */
static void test_three_sgd_steps(void) {
    pair_t p = pair_make(true, false);
    const int b = STEPS_BATCH, hw = STEPS_HW;
    side_t s[2] = {side_make(p.cpu, DT_F32, b, hw), side_make(p.gpu, DT_F32, b, hw)};
    size_t np = net_num_params(s[0].net), nb = net_num_buffers(s[0].net);
    float *img = hrand((int64_t)b * hw * hw * 3, STEPS_INPUT_TAG, -2.0f, 2.0f);
    int32_t labels[STEPS_BATCH];
    for (int i = 0; i < b; i++) labels[i] = (i * 3) % CLASSES;
    optim_t *opt[2];
    for (int i = 0; i < 2; i++) {
        err_t e = {0};
        optim_opts_t oo = {0};
        oo.kind = OPTIM_SGD;
        oo.momentum = 0.9;
        oo.weight_decay = 5e-4;
        opt[i] = optim_create(s[i].net, &oo, &e);
        if (!opt[i] || net_upload_input(s[i].net, img, b, &e)) { fprintf(stderr, "%s\n", e.msg); exit(1); }
    }
    float *after[2] = {hbuf((int64_t)np), hbuf((int64_t)np)}, *bufs[2] = {hbuf((int64_t)nb), hbuf((int64_t)nb)};
    float *upd[2] = {hbuf((int64_t)np), hbuf((int64_t)np)};
    for (int step = 0; step < 3; step++) {
        sgd_state_t start;
        state_get(s[0].net, opt[0], &start);   /* the teacher: the CPU's state */
        state_put(s[1].net, opt[1], &start);
        for (int i = 0; i < 2; i++) {
            err_t e = {0};
            net_t *n = s[i].net;
            net_loss_out_t out;
            if (net_zero_grads(n, &e) || net_forward(n, net_input(n), b, true, NULL, &e) ||
                net_loss(n, labels, 0.0f, 1.0f / b, &out, &e)) {
                fprintf(stderr, "%s sgd step %d: %s\n", i ? "gpu" : "cpu", step, e.msg);
                exit(1);
            }
        }
        test_failures_ += check_conditioning(s[0].net, s[1].net, b, step);
        for (int i = 0; i < 2; i++) {
            err_t e = {0};
            if (net_backward(s[i].net, NULL, &e) || optim_step(opt[i], 0.05, &e) ||
                net_download_params(s[i].net, after[i], &e) || net_download_buffers(s[i].net, bufs[i], &e)) {
                fprintf(stderr, "%s sgd step %d: %s\n", i ? "gpu" : "cpu", step, e.msg);
                exit(1);
            }
            for (size_t k = 0; k < np; k++) upd[i][k] = after[i][k] - start.params[k];
        }
        double ul2 = vec_rel_l2(upd[1], upd[0], np), bl2 = vec_rel_l2(bufs[1], bufs[0], nb);
        fprintf(stderr, "  step %d: update rel L2 %.3g, BN statistics rel L2 %.3g\n", step, ul2, bl2);
        CHECK(ul2 <= 1e-4);
        CHECK(bl2 <= 1e-5);
        state_free(&start);
    }
    for (int i = 0; i < 2; i++) {
        free(after[i]);
        free(bufs[i]);
        free(upd[i]);
        optim_free(opt[i]);
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
