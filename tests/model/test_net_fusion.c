/* test_net_fusion.c: the parts of issue 25's fusions that need no GPU: the net's use of
 * the fused ops (the byte model is test_net_traffic.c).
 *
 * The net's use of the fused ops (net_run.c), on the CPU backend: its own
 * conv2d_bwd_data_accum, and test composites of conv2d_fwd_bn_stats and
 * conv2d_bwd_data_bn made of the CPU's unfused ops (the contract of backend.h), give the
 * same loss, gradients and BN buffers bit for bit as a table without the fused slots, in
 * fp32 and emulated bf16; the slots are called exactly on the nodes the eligibility
 * rules name (resnet20: 21 BN statistics, 9 backward reductions, 9 residual sums), and
 * never in an evaluation forward. The rules on the node kinds of issue 24 (a net with a
 * biased conv, BN + ReLU6, a depthwise conv, a plain BN and a BN add-ReLU): no statistics
 * fusion for a conv with a bias (its BN normalises conv + bias) or a grouped conv, no
 * backward-reduction fusion into a grouped conv or behind a ReLU6 BN (the CUDA graph
 * builds the ReLU mask only), the residual sum into a grouped conv's input still fused;
 * the same bits fused and unfused there too. bn_mask_bits: on the CPU the net's use of the
 * mask-bit ops (composites of the CPU's ops): the add-relu BNs' masks written in the
 * training forward only, read by both backward passes, the same bits as reading y, and
 * where the backend answers 1 the y path again. bn_dual_add: the net's use of the dual ops on the CPU:
 * the same bits as the two BNs' own ops (which caught a gradient slot the liveness plan
 * had shared with a still-live one, now planned from the add-relu BN's backward on),
 * refused and with the mask bits too. bn_persist: the net's use of the one-op BN passes
 * (composites of the CPU's separate ops): every BN but bn_dual_add's pairs and the
 * conv-statistics ones each way, the same bits, refused and with the mask bits too.
 */
#include <stdlib.h>
#include <string.h>

#include "model/cpu/cpu_backend.h"
#include "model/net.h"
#include "model/net_fusion.h"
#include "model/arch/resnet.h"
#include "util/rng.h"
#include "tests/mask_host.h"
#include "tests/model/fusion_nets.h"
#include "tests/test.h"

/* ---- the net's calls, on the CPU ---- */

static const backend_ops_t *g_cpu;   /* the CPU backend's own table */
static int g_stats, g_dbn, g_accum;  /* calls of each fused slot */
static bool g_mask;                  /* the composite dbn masks dx (else leaves it unmasked) */

static int c_accum(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w, void *dx) {
    g_accum++;
    return g_cpu->conv2d_bwd_data_accum(be, s, dt, dy, w, dx);
}

static int c_stats(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *w, void *y,
                   float *mean, float *var) {
    g_stats++;
    if (g_cpu->conv2d_fwd(be, s, dt, x, w, y)) return -1;
    return g_cpu->bn_stats(be, (int64_t)s->n * s->p * s->q, s->k, dt, y, mean, var);
}

static int c_dbn(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w, void *dx,
                 const void *bn_x, const void *relu_y, act_kind_t act, const float *mean, const float *var, float eps,
                 float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta) {
    g_dbn++;
    int64_t m = (int64_t)s->n * s->h * s->w;
    if (g_cpu->conv2d_bwd_data(be, s, dt, dy, w, dx)) return -1;
    if (g_mask && relu_y &&
        (act == ACT_RELU6 ? g_cpu->relu6_bwd(be, m * s->c, dt, relu_y, dx, dx)
                          : g_cpu->relu_bwd(be, m * s->c, dt, relu_y, dx, dx)))
        return -1;
    return g_cpu->bn_bwd_reduce(be, m, s->c, dt, bn_x, relu_y, act, dx, mean, var, NULL, NULL, eps, sum_dy,
                                sum_dy_xhat, dgamma, dbeta);
}

/* resnet20 */
static net_t *build_resnet20(err_t *e) { return resnet_build("resnet20", 3, 10, false, e); }

enum { B = 4, HW = 16 };

typedef struct result {
    float loss;
    float *grads, *bufs;
    size_t np, nb;
} result_t;

/* One training step of the net build() makes (seed 5) on fixed data with the op table ops
 * (NULL: the CPU's own); then an evaluation forward. */
static result_t run_step(net_t *(*build)(err_t *), const backend_ops_t *ops, dtype_t dt) {
    result_t r = {0};
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 2};
    backend_t *be = cpu_backend_create(&bo, &e);
    CHECK(be != NULL);
    if (!be) return r;
    g_cpu = be->ops;
    if (ops) be->ops = ops;
    net_t *n = build(&e);
    CHECK(n != NULL);
    if (!n || net_bind(n, be, B, HW, HW, dt, &e) || net_init(n, 5, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        test_failures_++;
        net_free(n);
        backend_free(be);
        return r;
    }
    float *img = malloc(sizeof(float) * B * HW * HW * 3);
    rng_t g = rng_make(7, RNG_STREAM_MISC, 0, 0);
    for (int i = 0; i < B * HW * HW * 3; i++) img[i] = rng_uniform(&g) * 4.0f - 2.0f;
    int32_t labels[B] = {1, 7, 3, 3};
    net_loss_out_t out = {0};
    r.np = net_num_params(n);
    r.nb = net_num_buffers(n);
    r.grads = calloc(r.np, sizeof(float));
    r.bufs = calloc(r.nb, sizeof(float));
    if (net_upload_input(n, img, B, &e) || net_zero_grads(n, &e) || net_forward(n, net_input(n), B, true, NULL, &e) ||
        net_loss(n, labels, 0.1f, 1.0f / B, &out, &e) || net_backward(n, NULL, &e) ||
        net_download_grads(n, r.grads, &e) || net_download_buffers(n, r.bufs, &e)) {
        fprintf(stderr, "step: %s\n", e.msg);
        test_failures_++;
    }
    r.loss = (float)out.loss_sum;
    int before = g_stats;
    CHECK_INT(net_forward(n, net_input(n), B, false, NULL, &e), 0);
    CHECK_INT(g_stats, before);   /* evaluation uses the running statistics */
    free(img);
    net_free(n);
    backend_free(be);
    return r;
}

static void check_same(const result_t *a, const result_t *b) {
    CHECK(a->grads && b->grads && a->np == b->np && a->nb == b->nb);
    if (!a->grads || !b->grads) return;
    CHECK(memcmp(&a->loss, &b->loss, sizeof a->loss) == 0);
    CHECK(memcmp(a->grads, b->grads, a->np * sizeof(float)) == 0);
    CHECK(memcmp(a->bufs, b->bufs, a->nb * sizeof(float)) == 0);
    double s = 0;
    for (size_t i = 0; i < a->np; i++) s += a->grads[i] != 0.0f;
    CHECK(s > (double)a->np / 2);   /* a real gradient */
}

static void free_result(result_t *r) {
    free(r->grads);
    free(r->bufs);
}

/* *out = the CPU backend's op table (the composites below start from it); false when
 * no CPU backend could be made. */
static bool cpu_table(backend_ops_t *out) {
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 1};
    backend_t *tmp = cpu_backend_create(&bo, &e);
    CHECK(tmp != NULL);
    if (!tmp) return false;
    *out = *tmp->ops;
    backend_free(tmp);
    return true;
}

/* The net build() makes, trained one step with the CPU's table without fused slots, with
 * its own (the accumulate slot) and with the composites: the same bits; the composites
 * called stats / dbn / accum times, which the byte model's counts repeat. */
static void check_fused_calls(net_t *(*build)(err_t *), dtype_t dt, bool mask, int stats, int dbn, int accum) {
    /* reference: the CPU's table without any fused slot */
    err_t e = {0};
    static backend_ops_t plain, fused;
    if (!cpu_table(&plain)) return;
    CHECK(plain.conv2d_bwd_data_accum != NULL);   /* the cpu backend has it */
    fused = plain;
    plain.conv2d_bwd_data_accum = NULL;
    fused.conv2d_bwd_data_accum = c_accum;
    fused.conv2d_fwd_bn_stats = c_stats;
    fused.conv2d_bwd_data_bn = c_dbn;
    g_mask = mask;
    g_stats = g_dbn = g_accum = 0;
    result_t ref = run_step(build, &plain, dt);
    CHECK(g_stats == 0 && g_dbn == 0 && g_accum == 0);
    result_t own = run_step(build, NULL, dt);   /* the CPU's own table: its accumulate slot */
    check_same(&ref, &own);
    result_t fu = run_step(build, &fused, dt);
    check_same(&ref, &fu);
    CHECK_INT(g_stats, stats);
    CHECK_INT(g_dbn, dbn);
    CHECK_INT(g_accum, accum);
    /* the byte model names the same nodes */
    net_t *n = build(&e);
    net_traffic_t t;
    CHECK_INT(net_traffic(n, B, HW, HW, dt, false, FUSE_BYTES, &t, &e), 0);
    CHECK_INT(t.fused_stats, stats);
    CHECK_INT(t.fused_dbn, dbn);
    CHECK_INT(t.fused_accum, accum);
    net_free(n);
    free_result(&ref);
    free_result(&own);
    free_result(&fu);
}

/* ---- the net's promise behind bn_remask ---- */

static int g_remask_calls, g_remask_same;   /* BN backward calls given beta; of them, y as recomputed */

/* y as bn_apply(x, mean, var, gamma, beta, eps, no z, act) writes it, into a new buffer
 * (NULL on failure); counts whether it equals the y the net passed, byte for byte. */
static void *recompute_y(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                         const float *mean, const float *var, const float *gamma, const float *beta, float eps) {
    size_t bytes = (size_t)m * c * 4;   /* the cpu backend stores every dtype as rounded floats */
    void *r = malloc(bytes);
    if (!r || g_cpu->bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, NULL, act, r)) {
        free(r);
        return NULL;
    }
    g_remask_calls++;
    g_remask_same += memcmp(r, y, bytes) == 0;
    return r;
}

/* The CPU's BN backward ops taking the mask from the recomputed y whenever the net says
 * they may (beta given), as the CUDA backend's bn_remask does from x. */
static int c_bred(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                  const void *dy, const float *mean, const float *var, const float *gamma, const float *beta,
                  float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta) {
    void *r = beta ? recompute_y(be, m, c, dt, x, y, act, mean, var, gamma, beta, eps) : NULL;
    if (beta && !r) return -1;
    int rc = g_cpu->bn_bwd_reduce(be, m, c, dt, x, r ? r : y, act, dy, mean, var, NULL, NULL, eps, sum_dy,
                                  sum_dy_xhat, dgamma, dbeta);
    free(r);
    return rc;
}
static int c_bapp(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                  const void *dy, const float *mean, const float *var, const float *gamma, const float *beta,
                  float eps, const float *sum_dy, const float *sum_dy_xhat, int64_t count, void *dx, void *dz) {
    CHECK(!(beta && dz));   /* never for a BN with a residual */
    void *r = beta ? recompute_y(be, m, c, dt, x, y, act, mean, var, gamma, beta, eps) : NULL;
    if (beta && !r) return -1;
    int rc = g_cpu->bn_bwd_apply(be, m, c, dt, x, r ? r : y, act, dy, mean, var, gamma, NULL, eps, sum_dy,
                                 sum_dy_xhat, count, dx, dz);
    free(r);
    return rc;
}

/* The net passes beta to the BN backward ops exactly for the BNs whose y it may take from
 * x (relu / relu6, no residual: the byte model's remasked nodes, a reduce and an apply
 * each), and there y is what bn_apply makes of x, mean, var, gamma, beta: recomputing it
 * gives y byte for byte, and the step the same bits. */
static void check_remask_promise(net_t *(*build)(err_t *), dtype_t dt, int remasked) {
    err_t e = {0};
    static backend_ops_t remask;
    if (!cpu_table(&remask)) return;
    remask.bn_bwd_reduce = c_bred;
    remask.bn_bwd_apply = c_bapp;
    g_remask_calls = g_remask_same = 0;
    result_t ref = run_step(build, NULL, dt);
    CHECK_INT(g_remask_calls, 0);
    result_t rm = run_step(build, &remask, dt);
    check_same(&ref, &rm);
    CHECK_INT(g_remask_calls, 2 * remasked);
    CHECK_INT(g_remask_same, 2 * remasked);
    net_t *n = build(&e);
    net_traffic_t t;
    CHECK_INT(net_traffic(n, B, HW, HW, dt, false, BACKEND_FUSE_BN_REMASK, &t, &e), 0);
    CHECK_INT(t.remasked, remasked);
    net_free(n);
    free_result(&ref);
    free_result(&rm);
}

/* ---- the net's use of the mask-bit ops (bn_mask_bits) ---- */

static int g_mb_apply, g_mb_refused, g_mb_bwd, g_mb_same;   /* calls; refused; backward calls; bits == y's mask */
static bool g_mb_refuse;                                     /* the composite apply answers 1 (cannot) */


static int c_apply_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                        const float *var, const float *gamma, const float *beta, float eps, const void *z,
                        act_kind_t act, void *y, uint8_t *mask) {
    g_mb_apply++;
    CHECK(act != ACT_NONE && z != NULL);   /* the net asks for add-relu BNs only */
    if (g_mb_refuse) {
        g_mb_refused++;
        return 1;
    }
    if (g_cpu->bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, z, act, y)) return -1;
    mask_from_y(mask, m * c, act, y);
    return 0;
}

/* A y made of the bits (1 where kept, 0 where masked; both backward ops of the cpu
 * backend use y for the mask only), after checking the bits against the net's y. */
static float *y_of_bits(int64_t m, int c, const void *y, act_kind_t act, const uint8_t *mask) {
    float *r = malloc((size_t)(m * c) * sizeof(float));
    if (!r) return NULL;
    bool same = true;
    for (int64_t i = 0; i < m * c; i++) {
        bool bit = mask_bit(mask, i);
        r[i] = bit ? 1.0f : 0.0f;
        same = same && bit == mask_keeps(act, ((const float *)y)[i]);
    }
    g_mb_bwd++;
    g_mb_same += same;
    return r;
}

static int c_bred_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const float *gamma, float eps,
                       float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta, const uint8_t *mask) {
    float *r = y_of_bits(m, c, y, act, mask);
    int rc = r ? g_cpu->bn_bwd_reduce(be, m, c, dt, x, r, act, dy, mean, var, gamma, NULL, eps, sum_dy, sum_dy_xhat,
                                      dgamma, dbeta)
               : -1;
    free(r);
    return rc;
}

static int c_bapp_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const float *gamma, float eps,
                       const float *sum_dy, const float *sum_dy_xhat, int64_t count, void *dx, void *dz,
                       const uint8_t *mask) {
    float *r = y_of_bits(m, c, y, act, mask);
    int rc = r ? g_cpu->bn_bwd_apply(be, m, c, dt, x, r, act, dy, mean, var, gamma, NULL, eps, sum_dy, sum_dy_xhat,
                                     count, dx, dz)
               : -1;
    free(r);
    return rc;
}

/* The mask-bit composites into table o. */
static void install_mask_ops(backend_ops_t *o) {
    o->bn_apply_mask = c_apply_mask;
    o->bn_bwd_reduce_mask = c_bred_mask;
    o->bn_bwd_apply_mask = c_bapp_mask;
}

/* The net keeps the mask of exactly its add-relu BNs (add_relu of them: the byte model's
 * mask_bits) as bits in the training forward, never in the evaluation forward, reads
 * them in both backward passes, and the step gives the same bits as reading y; where the
 * backend answers 1 (cannot), the net reads y and the same bits come out again. */
static void check_mask_bits(net_t *(*build)(err_t *), dtype_t dt, int add_relu) {
    err_t e = {0};
    static backend_ops_t mb;
    if (!cpu_table(&mb)) return;
    CHECK(mb.bn_apply_mask == NULL);   /* a cuda option: the cpu backend reads y */
    install_mask_ops(&mb);
    result_t ref = run_step(build, NULL, dt);
    g_mb_apply = g_mb_refused = g_mb_bwd = g_mb_same = 0;
    g_mb_refuse = false;
    result_t bits = run_step(build, &mb, dt);
    check_same(&ref, &bits);
    CHECK_INT(g_mb_apply, add_relu);   /* the training forward's; none in the evaluation */
    CHECK_INT(g_mb_bwd, 2 * add_relu);
    CHECK_INT(g_mb_same, 2 * add_relu);
    g_mb_apply = g_mb_refused = g_mb_bwd = g_mb_same = 0;
    g_mb_refuse = true;
    result_t refused = run_step(build, &mb, dt);
    check_same(&ref, &refused);
    CHECK_INT(g_mb_refused, add_relu);
    CHECK_INT(g_mb_bwd, 0);
    g_mb_refuse = false;
    net_t *n = build(&e);
    net_traffic_t t;
    CHECK_INT(net_traffic(n, B, HW, HW, dt, false, BACKEND_FUSE_BN_MASK_BITS, &t, &e), 0);
    CHECK_INT(t.mask_bits, add_relu);
    net_free(n);
    free_result(&ref);
    free_result(&bits);
    free_result(&refused);
}

/* ---- the net's use of the dual ops (bn_dual_add) ---- */

static int g_du_apply, g_du_refused, g_du_bwd, g_du_bits;   /* calls; refused; backward calls; with bits */
static bool g_du_refuse;

/* The CPU's two bn_apply calls: z into a buffer of its own, then y with it (and the
 * bits as c_apply_mask writes them). */
static int c_apply_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean, const float *var,
                        const float *gamma, const float *beta, const void *x2, const float *mean2, const float *var2,
                        const float *gamma2, const float *beta2, float eps, act_kind_t act, void *y, uint8_t *mask) {
    g_du_apply++;
    if (g_du_refuse) {
        g_du_refused++;
        return 1;
    }
    float *z = malloc((size_t)(m * c) * sizeof(float));
    int rc = !z || g_cpu->bn_apply(be, m, c, dt, x2, mean2, var2, gamma2, beta2, eps, NULL, ACT_NONE, z) ||
             g_cpu->bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, z, act, y);
    free(z);
    if (rc) return -1;
    if (mask) {
        g_du_bits++;
        mask_from_y(mask, m * c, act, y);
    }
    return 0;
}

/* dz as the add-relu BN's bn_bwd_apply writes it: dy masked at y (or by the bits) */
static float *c_dz(int64_t m, int c, const void *y, act_kind_t act, const void *dy, const uint8_t *mask) {
    float *g = malloc((size_t)(m * c) * sizeof(float));
    if (!g) return NULL;
    for (int64_t i = 0; i < m * c; i++) {
        bool k = mask ? mask_bit(mask, i) : mask_keeps(act, ((const float *)y)[i]);
        g[i] = k ? ((const float *)dy)[i] : 0.0f;
    }
    return g;
}

static int c_bred_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const void *x2, const float *mean2,
                       const float *var2, float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta,
                       float *sum_dy2, float *sum_dy_xhat2, float *dgamma2, float *dbeta2, const uint8_t *mask) {
    g_du_bwd++;
    float *g = c_dz(m, c, y, act, dy, mask);
    int rc = !g || g_cpu->bn_bwd_reduce(be, m, c, dt, x, y, act, dy, mean, var, NULL, NULL, eps, sum_dy, sum_dy_xhat,
                                        dgamma, dbeta) ||
             g_cpu->bn_bwd_reduce(be, m, c, dt, x2, NULL, ACT_NONE, g, mean2, var2, NULL, NULL, eps, sum_dy2,
                                  sum_dy_xhat2, dgamma2, dbeta2);
    free(g);
    return rc ? -1 : 0;
}

static int c_bapp_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const float *gamma, const void *x2,
                       const float *mean2, const float *var2, const float *gamma2, float eps, const float *sum_dy,
                       const float *sum_dy_xhat, int64_t count, const float *sum_dy2, const float *sum_dy_xhat2,
                       int64_t count2, void *dx, void *dx2, const uint8_t *mask) {
    g_du_bwd++;
    float *g = malloc((size_t)(m * c) * sizeof(float));
    int rc = !g || g_cpu->bn_bwd_apply(be, m, c, dt, x, y, act, dy, mean, var, gamma, NULL, eps, sum_dy, sum_dy_xhat,
                                       count, dx, g) ||
             g_cpu->bn_bwd_apply(be, m, c, dt, x2, NULL, ACT_NONE, g, mean2, var2, gamma2, NULL, eps, sum_dy2,
                                 sum_dy_xhat2, count2, dx2, NULL);
    if (!rc && mask) {   /* the bits give the mask y gave */
        float *h = c_dz(m, c, y, act, dy, mask), *k = c_dz(m, c, y, act, dy, NULL);
        CHECK(h && k && !memcmp(h, k, (size_t)(m * c) * sizeof(float)));
        free(h);
        free(k);
    }
    free(g);
    return rc ? -1 : 0;
}

/* The net applies each projection shortcut's BN inside its add-relu BN (dual of them),
 * in the training forward only, with one reduce and one apply call backward, and the step
 * gives the same bits as the two BNs' own ops; the shortcut's own backward is skipped
 * (no gradient reaches its output). Refused (1), the net runs the two BNs as before:
 * the same bits again. With the mask-bit composites too, the dual ops get the bits. */
static void check_dual(net_t *(*build)(err_t *), dtype_t dt, int dual) {
    err_t e = {0};
    static backend_ops_t du, dumb;
    if (!cpu_table(&du)) return;
    CHECK(du.bn_apply_dual == NULL);   /* a cuda option */
    du.bn_apply_dual = c_apply_dual;
    du.bn_bwd_reduce_dual = c_bred_dual;
    du.bn_bwd_apply_dual = c_bapp_dual;
    dumb = du;
    install_mask_ops(&dumb);
    result_t ref = run_step(build, NULL, dt);
    g_du_apply = g_du_refused = g_du_bwd = g_du_bits = 0;
    g_du_refuse = false;
    result_t r1 = run_step(build, &du, dt);
    check_same(&ref, &r1);
    CHECK_INT(g_du_apply, dual);   /* the training forward's; not the evaluation's */
    CHECK_INT(g_du_bwd, 2 * dual);
    CHECK_INT(g_du_bits, 0);
    g_du_apply = g_du_refused = g_du_bwd = 0;
    g_du_refuse = true;
    result_t r2 = run_step(build, &du, dt);
    check_same(&ref, &r2);
    CHECK_INT(g_du_refused, dual);
    CHECK_INT(g_du_bwd, 0);
    g_du_refuse = false;
    g_du_apply = g_du_bwd = g_du_bits = 0;
    g_mb_apply = g_mb_bwd = 0;
    g_mb_refuse = false;
    result_t r3 = run_step(build, &dumb, dt);
    check_same(&ref, &r3);
    CHECK_INT(g_du_bits, dual);    /* the dual nodes' bits come from bn_apply_dual */
    CHECK_INT(g_du_bwd, 2 * dual);
    net_t *n = build(&e);
    net_traffic_t t;
    CHECK_INT(net_traffic(n, B, HW, HW, dt, false, BACKEND_FUSE_BN_DUAL_ADD, &t, &e), 0);
    CHECK_INT(t.dual, dual);
    net_free(n);
    free_result(&ref);
    free_result(&r1);
    free_result(&r2);
    free_result(&r3);
}

/* ---- the net's use of the one-op BN passes (bn_persist) ---- */

static int g_pf_fwd, g_pf_bwd, g_pf_refused, g_pf_masked;   /* calls each way; refused; given mask bits */
static bool g_pf_refuse;

/* The CPU's separate ops in the order the net calls them: bn_stats, the running update,
 * bn_apply (with the bits as c_apply_mask writes them when mask is given). */
static int c_fwd_fused(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean, float *var,
                       int64_t count, float momentum, float *run_mean, float *run_var, const float *gamma,
                       const float *beta, float eps, const void *z, act_kind_t act, void *y, uint8_t *mask) {
    g_pf_fwd++;
    CHECK(run_mean != NULL && run_var != NULL && count == m);
    if (g_pf_refuse) {
        g_pf_refused++;
        return 1;
    }
    if (g_cpu->bn_stats(be, m, c, dt, x, mean, var) ||
        g_cpu->bn_update_running(be, c, mean, var, count, momentum, run_mean, run_var) ||
        g_cpu->bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, z, act, y))
        return -1;
    if (mask) {
        g_pf_masked++;
        mask_from_y(mask, m * c, act, y);
    }
    return 0;
}

/* bn_bwd_reduce then bn_bwd_apply (with the mask bits: from a y made of them). */
static int c_bwd_fused(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const float *gamma, const float *beta,
                       float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta, int64_t count,
                       void *dx, void *dz, const uint8_t *mask) {
    g_pf_bwd++;
    CHECK(dx != NULL);
    if (g_pf_refuse) {
        g_pf_refused++;
        return 1;
    }
    float *r = mask ? y_of_bits(m, c, y, act, mask) : NULL;
    const void *yy = mask ? (const void *)r : y;
    const float *bb = mask ? NULL : beta;
    int rc = (mask && !r) ||
             g_cpu->bn_bwd_reduce(be, m, c, dt, x, yy, act, dy, mean, var, gamma, bb, eps, sum_dy, sum_dy_xhat,
                                  dgamma, dbeta) ||
             g_cpu->bn_bwd_apply(be, m, c, dt, x, yy, act, dy, mean, var, gamma, bb, eps, sum_dy, sum_dy_xhat,
                                 count, dx, dz)
                 ? -1
                 : 0;
    free(r);
    return rc;
}

/* The net runs each BN's passes through the one-op slots where the backend has them
 * (bns of them each way in the training forward and backward, none in evaluation) and the
 * step gives the same bits as the separate ops; refused (1), the separate ops, the same
 * bits again. With the mask-bit ops the add-relu BNs' bits come from bn_fwd_fused
 * (add_relu of them); with the dual ops the dual pairs (2 * dual BNs) keep theirs; with
 * the fused statistics of the convolution (conv2d_fwd_bn_stats) every BN that follows a
 * conv runs its separate ops forward. */
static void check_persist(net_t *(*build)(err_t *), dtype_t dt, int bns, int add_relu, int dual) {
    static backend_ops_t pf, pfm, pfd, pfs;
    if (!cpu_table(&pf)) return;
    CHECK(pf.bn_fwd_fused == NULL && pf.bn_bwd_fused == NULL);   /* a cuda option */
    pf.bn_fwd_fused = c_fwd_fused;
    pf.bn_bwd_fused = c_bwd_fused;
    pfm = pf;
    install_mask_ops(&pfm);
    pfd = pf;
    pfd.bn_apply_dual = c_apply_dual;
    pfd.bn_bwd_reduce_dual = c_bred_dual;
    pfd.bn_bwd_apply_dual = c_bapp_dual;
    pfs = pf;
    pfs.conv2d_fwd_bn_stats = c_stats;
    result_t ref = run_step(build, NULL, dt);
    g_pf_fwd = g_pf_bwd = g_pf_refused = g_pf_masked = 0;
    g_pf_refuse = false;
    result_t r1 = run_step(build, &pf, dt);
    check_same(&ref, &r1);
    CHECK_INT(g_pf_fwd, bns);   /* the training forward's; not the evaluation's */
    CHECK_INT(g_pf_bwd, bns);
    CHECK_INT(g_pf_masked, 0);
    g_pf_fwd = g_pf_bwd = 0;
    g_pf_refuse = true;
    result_t r2 = run_step(build, &pf, dt);
    check_same(&ref, &r2);
    CHECK_INT(g_pf_refused, 2 * bns);
    g_pf_refuse = false;
    g_pf_fwd = g_pf_bwd = g_pf_masked = 0;
    g_mb_apply = g_mb_bwd = g_mb_same = 0;
    g_mb_refuse = false;
    result_t r3 = run_step(build, &pfm, dt);
    check_same(&ref, &r3);
    CHECK_INT(g_pf_fwd, bns);
    CHECK_INT(g_pf_masked, add_relu);
    CHECK_INT(g_mb_apply, 0);                 /* the bits from bn_fwd_fused */
    CHECK_INT(g_mb_bwd, add_relu);            /* c_bwd_fused read them once each */
    CHECK_INT(g_mb_same, add_relu);
    g_pf_fwd = g_pf_bwd = 0;
    g_du_apply = g_du_bwd = 0;
    g_du_refuse = false;
    result_t r4 = run_step(build, &pfd, dt);
    check_same(&ref, &r4);
    CHECK_INT(g_du_apply, dual);
    CHECK_INT(g_pf_fwd, bns - 2 * dual);
    CHECK_INT(g_pf_bwd, bns - 2 * dual);
    g_pf_fwd = g_pf_bwd = 0;
    g_stats = 0;
    g_mask = false;
    result_t r5 = run_step(build, &pfs, dt);
    check_same(&ref, &r5);
    CHECK_INT(g_pf_fwd, bns - g_stats);
    CHECK(g_stats > 0);
    CHECK_INT(g_pf_bwd, bns);
    free_result(&ref);
    free_result(&r1);
    free_result(&r2);
    free_result(&r3);
    free_result(&r4);
    free_result(&r5);
}

/* resnet20: 21 BNs, 9 add-relu, 2 projection shortcuts; the mixed net: 5 BNs, 1 add-relu */
static void test_persist(void) {
    check_persist(build_resnet20, DT_F32, 21, 9, 2);
    check_persist(build_resnet20, DT_BF16, 21, 9, 2);
    check_persist(build_mixed, DT_F32, 5, 1, 0);
    check_persist(build_mixed, DT_BF16, 5, 1, 0);
}

/* resnet20: the first blocks of stages 2 and 3 have a projection shortcut (1x1 conv +
 * BN); the mixed net's shortcut is bn3, which c4 reads too: none */
static void test_dual(void) {
    check_dual(build_resnet20, DT_F32, 2);
    check_dual(build_resnet20, DT_BF16, 2);
    check_dual(build_mixed, DT_F32, 0);
}

/* resnet20: bn2 of each of the 9 blocks adds the shortcut; the mixed net: bn5 */
static void test_mask_bits(void) {
    check_mask_bits(build_resnet20, DT_F32, 9);
    check_mask_bits(build_resnet20, DT_BF16, 9);
    check_mask_bits(build_mixed, DT_F32, 1);
    check_mask_bits(build_mixed, DT_BF16, 1);
}

/* resnet20: the stem's bn1 and bn1 of the 9 blocks (the bn2s add the shortcut); the mixed
 * net: bn1 (relu), bn2 (relu6), bn3 (relu) */
static void test_remask_promise(void) {
    check_remask_promise(build_resnet20, DT_F32, 10);
    check_remask_promise(build_resnet20, DT_BF16, 10);
    check_remask_promise(build_mixed, DT_F32, 3);
    check_remask_promise(build_mixed, DT_BF16, 3);
}

/* resnet20: every BN follows its conv (21), bn1 -> conv2 of each of the 9 blocks, each
 * block input summed into by conv1 (or downsample.0) */
static void test_fused_calls_fp32(void) { check_fused_calls(build_resnet20, DT_F32, false, 21, 9, 9); }
static void test_fused_calls_bf16_masked(void) { check_fused_calls(build_resnet20, DT_BF16, true, 21, 9, 9); }

/* the eligibility rules on the issue-24 node kinds, node by node, then the same bits */
static void test_fused_rules_new_kinds(void) {
    err_t e = {0};
    net_t *n = build_mixed(&e);
    CHECK(n != NULL);
    if (!n) {
        fprintf(stderr, "build: %s\n", e.msg);
        return;
    }
    /* nodes: c1 0, bn1 1, c2 2, bn2 3, c3 4, bn3 5, c4 6, bn4 7, c5 8, bn5 9 */
    static const int stats_bn[5] = {-1, 3, 5, -1, 9}, dbn_bn[5] = {-1, 1, -1, -1, 7};
    for (int k = 0; k < 5; k++) {
        CHECK_INT(net_fused_stats_bn(n, 2 * k), stats_bn[k]);
        CHECK_INT(net_fused_dbn_bn(n, 2 * k), dbn_bn[k]);
    }
    CHECK_INT(net_fused_stats_bn(n, 1), -1);   /* not a conv */
    CHECK_INT(net_consumers(n, 5), 2);         /* bn3: c4 and bn5's shortcut */
    net_free(n);
    check_fused_calls(build_mixed, DT_F32, false, 3, 2, 1);
    check_fused_calls(build_mixed, DT_BF16, true, 3, 2, 1);
}

int main(void) {
    TEST_RUN(test_fused_calls_fp32);
    TEST_RUN(test_fused_calls_bf16_masked);
    TEST_RUN(test_fused_rules_new_kinds);
    TEST_RUN(test_remask_promise);
    TEST_RUN(test_mask_bits);
    TEST_RUN(test_dual);
    TEST_RUN(test_persist);
    return test_main_end();
}
