/* gpu_plant.h: planted defects for the GPU tests' own checks. A test that compares the
 * GPU with the CPU is only worth its GPU time if it fails when the GPU side is wrong;
 * RUNNER_GPU_TEST_PLANT=NAME replaces one op of the "gpu" side of every pair
 * (gpu_test_util.h pair_make) with a wrapper that calls the real op and then spoils its
 * result in one known way; NAME@both spoils both sides (a defect the two would share,
 * which only a check against an independent expectation can catch). With
 * RUNNER_GPU_TEST_DRYRUN=cpu this runs anywhere; tests/gpu/gpu_dryrun.sh runs the
 * defects and checks each fails the test it is meant for.
 *
 * Defects (NAME):
 *   xent_soft_tie_high   softmax_xent_soft counts a top-1 hit against the dominant label
 *                        with ties going to the HIGHER index (the contract: lower)
 *   xent_soft_drop_row   softmax_xent_soft leaves the last row out of the top-1 count
 *   conv_dw_sign         conv2d_bwd_filter adds the negated weight gradient, in the first
 *                        call for a 64 -> 64 channel shape (resnet20's layer3) only
 *   sgd_no_wd            sgd_step ignores weight decay
 *   bn_remask_unrounded  bn_bwd_reduce / bn_bwd_apply, when given beta (the mask may be
 *                        recomputed: bn_remask), take the activation's mask from the
 *                        forward's output computed in fp32 and NOT rounded to dt, the
 *                        defect bn_remask must not have (fp16 stores a tiny positive
 *                        output as 0, which masks)
 *   mask_bit_flip        (the CPU dry run's stand-ins of test_gpu_bn_fusion only) bn_apply_mask
 *                        flips one bit of the mask it writes
 *   dual_dz_unmasked     (the same) bn_bwd_reduce_dual sums the shortcut BN's gradient
 *                        from dy not masked by the ReLU
 *   persist_stats_order  (the same) bn_fwd_fused's last channel's mean one ulp off, as
 *                        another order of the sums would leave it
 * Works on either backend kind (reads and writes through download/upload). Test code only:
 * the wrapped tables live in static storage of the including program.
 * The CLI tests, whose GPU side is a runner process, plant their defects in that side's
 * experiment or data instead (test_gpu_cli_images: img_flip_off, img_label_swap,
 * img_grad_scale; gpu_dryrun.sh images).
 */
#ifndef RUNNER_TESTS_GPU_PLANT_H
#define RUNNER_TESTS_GPU_PLANT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "util/half.h"

typedef struct plant_side {
    const backend_ops_t *orig;   /* the side's real table */
    backend_ops_t ops;           /* the copy with one slot replaced */
    int fired;                   /* calls spoiled so far */
} plant_side_t;

static plant_side_t plant_sides_[2];

static inline plant_side_t *plant_of(backend_t *be) {
    for (int i = 0; i < 2; i++)
        if (be->ops == &plant_sides_[i].ops) return &plant_sides_[i];
    fprintf(stderr, "gpu_plant: a wrapped op called on an unwrapped backend\n");
    exit(1);
}

static inline void plant_io(backend_t *be, int rc, const char *what) {
    if (rc) { fprintf(stderr, "gpu_plant: %s: %s\n", what, be->err.msg); exit(1); }
}

/* Elements of dt as this backend stores them, read into floats. */
static inline float *plant_read(backend_t *be, const void *src, int64_t n, dtype_t dt) {
    float *v = (float *)calloc((size_t)(n ? n : 1), sizeof(float));
    bool half = dt != DT_F32 && be->kind == BACKEND_CUDA;
    if (!v) exit(1);
    if (!half) {
        plant_io(be, be->ops->download(be, v, src, (size_t)n * 4), "download");
        return v;
    }
    uint16_t *h = (uint16_t *)calloc((size_t)(n ? n : 1), 2);
    if (!h) exit(1);
    plant_io(be, be->ops->download(be, h, src, (size_t)n * 2), "download");
    for (int64_t i = 0; i < n; i++) v[i] = dt == DT_F16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
    free(h);
    return v;
}

/* Top-1 hits of the soft-target loss recounted on the host: the dominant label with ties
 * to the higher index (tie_high) or the contract's rule, all rows but the last (drop_last). */
static inline int32_t plant_top1(const float *z, const float *t, int n, int classes, bool tie_high,
                                 bool drop_last) {
    int32_t hits = 0;
    for (int i = 0; i < n - (drop_last ? 1 : 0); i++) {
        const float *zi = z + (int64_t)i * classes, *ti = t + (int64_t)i * classes;
        int y = 0, rank = 0;
        for (int j = 1; j < classes; j++)
            if (ti[j] > ti[y] || (tie_high && ti[j] == ti[y])) y = j;
        for (int j = 0; j < classes; j++) rank += zi[j] > zi[y] || (zi[j] == zi[y] && j < y);
        hits += rank == 0;
    }
    return hits;
}

static inline int plant_xent_soft(backend_t *be, int n, int classes, dtype_t dt, const void *logits,
                                  const float *targets, float grad_scale, const step_ctl_t *ctl, void *dlogits,
                                  float *loss_sum, int32_t *correct) {
    plant_side_t *ps = plant_of(be);
    int rc = ps->orig->softmax_xent_soft(be, n, classes, dt, logits, targets, grad_scale, ctl, dlogits, loss_sum,
                                         correct);
    if (rc) return rc;
    const char *name = getenv("RUNNER_GPU_TEST_PLANT");
    float *z = plant_read(be, logits, (int64_t)n * classes, dt);
    float *t = plant_read(be, targets, (int64_t)n * classes, DT_F32);
    int32_t c[2];
    plant_io(be, be->ops->download(be, c, correct, sizeof c), "download");
    c[0] = plant_top1(z, t, n, classes, !strncmp(name, "xent_soft_tie_high", 18),
                      !strncmp(name, "xent_soft_drop_row", 18));
    plant_io(be, be->ops->upload(be, correct, c, sizeof c), "upload");
    ps->fired++;
    free(z);
    free(t);
    return 0;
}

static inline int plant_conv_dw(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *dy,
                                float *dw) {
    plant_side_t *ps = plant_of(be);
    if (ps->fired || s->c != 64 || s->k != 64) return ps->orig->conv2d_bwd_filter(be, s, dt, x, dy, dw);
    int64_t nw = (int64_t)s->k * s->r * s->s * s->c;
    float *before = plant_read(be, dw, nw, DT_F32);
    int rc = ps->orig->conv2d_bwd_filter(be, s, dt, x, dy, dw);
    if (rc) return rc;
    float *after = plant_read(be, dw, nw, DT_F32);
    for (int64_t i = 0; i < nw; i++) after[i] = before[i] - (after[i] - before[i]);
    plant_io(be, be->ops->upload(be, dw, after, (size_t)nw * 4), "upload");
    ps->fired++;
    free(before);
    free(after);
    return 0;
}

static inline int plant_sgd(backend_t *be, int64_t n, float *p, const float *g, float *buf, double lr,
                            double momentum, double dampening, double weight_decay, bool nesterov,
                            const step_ctl_t *ctl) {
    plant_side_t *ps = plant_of(be);
    ps->fired += weight_decay != 0.0;
    return ps->orig->sgd_step(be, n, p, g, buf, lr, momentum, dampening, 0.0, nesterov, ctl);
}

/* bn_remask_unrounded: the mask of act over bn_apply(x, ..., beta, eps) run in fp32 on x
 * (no rounding of the output to dt), as a tensor of dt holding 1 (kept) or 0 (masked),
 * which the wrapped op then reads as y. The caller releases it. */
static inline void *plant_unrounded_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, act_kind_t act,
                                         const float *mean, const float *var, const float *gamma, const float *beta,
                                         float eps) {
    const backend_ops_t *o = plant_of(be)->orig;
    int64_t n = m * c;
    size_t esz = dt != DT_F32 && be->kind == BACKEND_CUDA ? 2 : 4;
    float *v = plant_read(be, x, n, dt);
    void *x32 = o->alloc(be, (size_t)n * 4), *y32 = o->alloc(be, (size_t)n * 4), *mask = o->alloc(be, (size_t)n * esz);
    uint16_t *h = (uint16_t *)calloc((size_t)(n ? n : 1), 2);
    if (!x32 || !y32 || !mask || !h) exit(1);
    plant_io(be, o->upload(be, x32, v, (size_t)n * 4), "upload");
    plant_io(be, o->bn_apply(be, m, c, DT_F32, x32, mean, var, gamma, beta, eps, NULL, act, y32), "bn_apply");
    free(v);
    v = plant_read(be, y32, n, DT_F32);
    for (int64_t i = 0; i < n; i++) {
        bool keep = act == ACT_RELU6 ? !(v[i] <= 0.0f || v[i] >= 6.0f) : v[i] > 0.0f;
        v[i] = keep ? 1.0f : 0.0f;
        h[i] = dt == DT_BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
    }
    plant_io(be, o->upload(be, mask, esz == 2 ? (const void *)h : (const void *)v, (size_t)n * esz), "upload");
    o->release(be, x32);
    o->release(be, y32);
    free(v);
    free(h);
    return mask;
}

static inline int plant_bn_bred(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                                act_kind_t act, const void *dy, const float *mean, const float *var,
                                const float *gamma, const float *beta, float eps, float *sum_dy,
                                float *sum_dy_xhat, float *dgamma, float *dbeta) {
    plant_side_t *ps = plant_of(be);
    void *mask = beta ? plant_unrounded_mask(be, m, c, dt, x, act, mean, var, gamma, beta, eps) : NULL;
    int rc = ps->orig->bn_bwd_reduce(be, m, c, dt, x, mask ? mask : y, act, dy, mean, var, NULL, NULL, eps, sum_dy,
                                     sum_dy_xhat, dgamma, dbeta);
    if (mask) ps->orig->release(be, mask);
    ps->fired += mask != NULL;
    return rc;
}

static inline int plant_bn_bapp(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                                act_kind_t act, const void *dy, const float *mean, const float *var,
                                const float *gamma, const float *beta, float eps, const float *sum_dy,
                                const float *sum_dy_xhat, int64_t count, void *dx, void *dz) {
    plant_side_t *ps = plant_of(be);
    void *mask = beta ? plant_unrounded_mask(be, m, c, dt, x, act, mean, var, gamma, beta, eps) : NULL;
    int rc = ps->orig->bn_bwd_apply(be, m, c, dt, x, mask ? mask : y, act, dy, mean, var, gamma, NULL, eps, sum_dy,
                                    sum_dy_xhat, count, dx, dz);
    if (mask) ps->orig->release(be, mask);
    ps->fired += mask != NULL;
    return rc;
}

/* Wraps side i's backend when RUNNER_GPU_TEST_PLANT names a defect for it. */
static inline void plant_side(backend_t *be, int i, const char *name) {
    plant_side_t *ps = &plant_sides_[i];
    ps->orig = be->ops;
    ps->ops = *be->ops;
    ps->fired = 0;
    if (!strncmp(name, "xent_soft_", 10)) ps->ops.softmax_xent_soft = plant_xent_soft;
    else if (!strncmp(name, "conv_dw_sign", 12)) ps->ops.conv2d_bwd_filter = plant_conv_dw;
    else if (!strncmp(name, "sgd_no_wd", 9)) ps->ops.sgd_step = plant_sgd;
    else if (!strncmp(name, "bn_remask_unrounded", 19)) {
        ps->ops.bn_bwd_reduce = plant_bn_bred;
        ps->ops.bn_bwd_apply = plant_bn_bapp;
    }
    else if (!strcmp(name, "mask_bit_flip") || !strcmp(name, "dual_dz_unmasked") ||
             !strcmp(name, "persist_stats_order")) {
        /* planted by test_gpu_bn_fusion's dry-run stand-ins themselves (they replace the
         * side's table after this) */
    }
    else { fprintf(stderr, "gpu_plant: unknown defect %s\n", name); exit(2); }
    be->ops = &ps->ops;
    fprintf(stderr, "  planted defect %s on the %s side\n", name, i ? "gpu" : "cpu");
}

/* Called by pair_make: plants RUNNER_GPU_TEST_PLANT (if set) on gpu, or on both. */
static inline void gpu_plant(backend_t *cpu, backend_t *gpu) {
    const char *name = getenv("RUNNER_GPU_TEST_PLANT");
    if (!name || !*name) return;
    plant_side(gpu, 1, name);
    if (strstr(name, "@both")) plant_side(cpu, 0, name);
}

#endif
