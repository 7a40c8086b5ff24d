/* test_gpu_bn_fusion.c: the CUDA backend's batch-norm fusion options (issue 25), node by
 * node, against the same backend's unfused ops and a backend without the option: each
 * promises the same bits, so every output is compared byte for byte, on inputs whose
 * outputs sit on the activation mask's edges. (test_gpu_fusion has the convolution
 * fusions and the whole resnet20 steps with these options.)
 *   bn_remask    one BN + ReLU and one BN + ReLU6 node in fp32, fp16 and bf16
 *                (remask_inputs): dx, sum_dy, sum_dy_xhat, dgamma, dbeta with the mask
 *                recomputed from x are the bits of the same backend reading y and of a
 *                backend without the option;
 *   bn_mask_bits one BN + add + ReLU / ReLU6 node at 256, 64 and 24 channels in fp32,
 *                fp16 and bf16 (mask_inputs): y, the bits (against the stored y's mask),
 *                dx, dz, sum_dy, sum_dy_xhat, dgamma, dbeta read from the bits are the
 *                bits of the same backend reading y and of a backend without the option;
 *                the shapes it refuses answer 1;
 *   bn_dual_add  one add-relu BN with a shortcut BN at 256, 64 and 24 channels, relu and
 *                relu6, reading y and the mask bits: y, dx, dx2, both BNs' sums and
 *                parameter gradients are the bits of the separate ops (same backend and
 *                one without the option);
 *   bn_persist   one BN node (no activation, ReLU, ReLU6, add + ReLU reading y or the
 *                mask bits) at 256, 64 and 24 channels, the one-op passes against the
 *                separate ops on the same backend, under bn_persist's grid and row-keeping
 *                overrides (several row blocks a block, rows read again), with vec16's
 *                narrow blocks too (64 and 24 half channels): the statistics,
 *                running statistics, y, the bits, dx, dz, both sums and the parameter
 *                gradients are the same bits; the refusals answer 1.
 * Under RUNNER_GPU_TEST_DRYRUN=cpu the mask-bit and dual ops are stand-ins made of the
 * CPU's ops (the ops' contract), so the checks run, and fail on planted defects, on the
 * CPU (gpu_dryrun.sh). Small shapes, no convolutions: compute-sanitizer runs all of it
 * in the device session. Skipped (77) without a GPU.
 */
#include "tests/gpu/gpu_test_util.h"
#include "tests/mask_host.h"

/* ---- bn_remask ---- */

enum { RM_M = 256, RM_C = 64, RM_IN = 6 };

/* Host inputs of one BN node (x, dy, mean, var, gamma, beta: the order of RM_IN) whose
 * outputs sit on the mask's edges. Channel k by k % 8, with x = 0 (group 4: d) and
 * mean = 0 in every 4th row (the "edge rows"), so the output there is beta (group 4:
 * d * scale + beta):
 *   0  beta 1e-8: fp16 stores it as 0 (masked), bf16 and fp32 keep it
 *   1  beta -1e-8: masked in every dtype
 *   2  beta 6: exactly 6, masked by relu6 (kept by relu)
 *   3  beta 5.999: 6 once rounded to fp16 or bf16 (masked by relu6), kept in fp32
 *   4  beta = -(d * scale) rounded to fp32, d the first of 1/16, -1/16, 2/16, ... (exact
 *      in every dtype) whose product's rounding error is positive and below 2^-25: the
 *      forward's fused multiply-add leaves that error (a few 1e-9) where a multiply then
 *      an add would give 0; fp16 stores it as 0, fp32 and bf16 keep it
 *   5  beta 0: y = 0, masked
 *   6, 7  random mean and beta; channel 63 has x = NaN in row 1 (relu masks, relu6
 *      passes it)
 * Other rows x in [-2, 2); gamma [0.4, 1), var [0.5, 2), dy [-1, 1). *pos: the group-4
 * channels that found such a d (the error is exact in double). */
static void remask_inputs(float *h[RM_IN], int *pos) {
    h[0] = hrand((int64_t)RM_M * RM_C, 61, -2.0f, 2.0f);
    h[1] = hrand((int64_t)RM_M * RM_C, 62, -1.0f, 1.0f);
    h[2] = hrand(RM_C, 63, -0.2f, 0.2f);
    h[3] = hrand(RM_C, 64, 0.5f, 2.0f);
    h[4] = hrand(RM_C, 65, 0.4f, 1.0f);
    h[5] = hrand(RM_C, 66, -1.0f, 1.0f);
    *pos = 0;
    for (int k = 0; k < RM_C; k++) {
        int grp = k % 8;
        if (grp >= 6) continue;
        h[2][k] = 0.0f;
        float sc = h[4][k] / sqrtf(h[3][k] + 1e-5f);   /* as the kernels' bn_scale: IEEE, no contraction */
        static const float BETA[6] = {1e-8f, -1e-8f, 6.0f, 5.999f, 0.0f, 0.0f};
        float d = 0.0f;
        h[5][k] = BETA[grp];
        for (int j = 2; j < 32 && grp == 4 && d == 0.0f; j++) {
            float dj = (float)(j / 2) / (j % 2 ? -16.0f : 16.0f), b = -(dj * sc);
            double err = (double)dj * sc + b;   /* exact: a 4-bit times a 24-bit significand */
            if (err > 0.0 && err < 0x1p-25) d = dj, h[5][k] = b, ++*pos;
        }
        for (int r = 0; r < RM_M; r += 4) h[0][(int64_t)r * RM_C + k] = d;
    }
    h[0][(int64_t)1 * RM_C + 63] = NAN;
}

/* The node on p's gpu side: bn_apply, then bn_bwd_reduce and bn_bwd_apply given beta or
 * not (NULL: read y), onto dgamma, dbeta holding values already. out gets dx, sum_dy,
 * sum_dy_xhat, dgamma, dbeta and y (caller frees); *remasked: cuda_backend_last_fused
 * after each backward op (both must agree; -1 on the CPU dry run). */
static void remask_node(pair_t *p, dtype_t dt, act_kind_t act, float *h[RM_IN], bool give_beta, float *out[6],
                        int *remasked) {
    const int64_t n = (int64_t)RM_M * RM_C;
    const float eps = 1e-5f;
    float *hdg = hrand(RM_C, 67, -0.1f, 0.1f), *hdb = hrand(RM_C, 68, -0.1f, 0.1f);
    twin_t x = twin_new(p, n, dt, h[0]), dy = twin_new(p, n, dt, h[1]), mean = twin_new(p, RM_C, DT_F32, h[2]);
    twin_t var = twin_new(p, RM_C, DT_F32, h[3]), ga = twin_new(p, RM_C, DT_F32, h[4]);
    twin_t bt = twin_new(p, RM_C, DT_F32, h[5]), y = twin_new(p, n, dt, NULL), dx = twin_new(p, n, dt, NULL);
    twin_t sdy = twin_new(p, RM_C, DT_F32, NULL), sdx = twin_new(p, RM_C, DT_F32, NULL);
    twin_t dg = twin_new(p, RM_C, DT_F32, hdg), db = twin_new(p, RM_C, DT_F32, hdb);
    backend_t *g = p->gpu;
    bool cuda = g->kind == BACKEND_CUDA;
    const float *beta = give_beta ? (const float *)bt.g : NULL;
    OK(g, g->ops->bn_apply(g, RM_M, RM_C, dt, x.g, (float *)mean.g, (float *)var.g, (float *)ga.g, (float *)bt.g,
                           eps, NULL, act, y.g));
    OK(g, g->ops->bn_bwd_reduce(g, RM_M, RM_C, dt, x.g, y.g, act, dy.g, (float *)mean.g, (float *)var.g,
                                (float *)ga.g, beta, eps, (float *)sdy.g, (float *)sdx.g, (float *)dg.g,
                                (float *)db.g));
    int r1 = cuda ? cuda_backend_last_fused(g) : -1;
    OK(g, g->ops->bn_bwd_apply(g, RM_M, RM_C, dt, x.g, y.g, act, dy.g, (float *)mean.g, (float *)var.g,
                               (float *)ga.g, beta, eps, (float *)sdy.g, (float *)sdx.g, RM_M, dx.g, NULL));
    int r2 = cuda ? cuda_backend_last_fused(g) : -1;
    CHECK_INT(r1, r2);
    *remasked = r1;
    twin_t *res[6] = {&dx, &sdy, &sdx, &dg, &db, &y};
    for (int i = 0; i < 6; i++) {
        float *c;
        twin_get(p, res[i], &c, &out[i]);
        free(c);
    }
    twin_t *all[] = {&x, &dy, &mean, &var, &ga, &bt, &y, &dx, &sdy, &sdx, &dg, &db};
    for (int i = 0; i < 12; i++) twin_free(p, all[i]);
    free(hdg);
    free(hdb);
}

/* Bit identity of the recomputed mask (and the forward's rounding the inputs rely on). A
 * remask that skipped the rounding to dt (planted: bn_remask_unrounded) keeps fp16's
 * edge rows of groups 0 and 4, where the stored y is 0: their dy enters sum_dy and dx,
 * and the comparison fails for fp16 (gpu_dryrun.sh shows it on the CPU); one computing
 * the output as a multiply then an add masks group 4's positive edge rows that fp32 and
 * bf16 keep. */
static void check_remask_node(dtype_t dt, act_kind_t act) {
    float *h[RM_IN], *fr[6], *fy[6], *fu[6];
    int pos, rr, ry, ru;
    remask_inputs(h, &pos);
    pair_t r = pair_make_fused(true, false, BACKEND_FUSE_BN_REMASK), u = pair_make(true, false);
    remask_node(&r, dt, act, h, true, fr, &rr);    /* recomputed */
    remask_node(&r, dt, act, h, false, fy, &ry);   /* the same backend reading y */
    remask_node(&u, dt, act, h, true, fu, &ru);    /* no bn_remask: beta ignored */
    bool cuda = r.gpu->kind == BACKEND_CUDA;
    if (cuda) {
        CHECK_INT(rr, 1);
        CHECK_INT(ry, 0);
        CHECK_INT(ru, 0);
    }
    static const char *const NAMES[5] = {"dx", "sum_dy", "sum_dy_xhat", "dgamma", "dbeta"};
    static const int64_t LEN[5] = {(int64_t)RM_M * RM_C, RM_C, RM_C, RM_C, RM_C};
    int same = 0;
    for (int i = 0; i < 5; i++) {
        bool a = !memcmp(fr[i], fy[i], (size_t)LEN[i] * 4), b = !memcmp(fr[i], fu[i], (size_t)LEN[i] * 4);
        if (!a || !b)
            fprintf(stderr, "  bn_remask %s %s: %s differs (from y: %s, unfused: %s)\n", dtype_names[dt],
                    act == ACT_RELU6 ? "relu6" : "relu", NAMES[i], a ? "same" : "DIFFERS", b ? "same" : "DIFFERS");
        same += a && b;
    }
    CHECK_INT(same, 5);
    CHECK(!memcmp(fr[5], fu[5], (size_t)RM_M * RM_C * 4));   /* the forward is the same */
    /* the edge rows hold what the comment of remask_inputs says (the forward's rounding) */
    int kept4 = 0, bad = 0;
    for (int k = 0; k < RM_C; k++)
        for (int row = 0; row < RM_M; row += 4) {
            float v = fr[5][(int64_t)row * RM_C + k];
            switch (k % 8) {
            case 0: bad += dt == DT_F16 ? v != 0.0f : !(v > 0.0f && v < 1e-7f); break;
            case 1: case 5: bad += v != 0.0f; break;
            case 2: bad += v != 6.0f; break;
            case 3: bad += act == ACT_RELU6 ? (dt == DT_F32 ? !(v > 5.99f && v < 6.0f) : v != 6.0f)
                                            : !(v > 5.99f && v <= 6.0f); break;
            case 4: kept4 += v > 0.0f && row == 0; bad += cuda && dt == DT_F16 && v != 0.0f; break;
            default: break;
            }
        }
    fprintf(stderr, "  bn_remask %s %s: %d of 5 outputs the same bits; group-4 channels kept %d (positive "
            "rounding error: %d); edge-row mismatches %d\n", dtype_names[dt], act == ACT_RELU6 ? "relu6" : "relu",
            same, kept4, pos, bad);
    CHECK_INT(bad, 0);
    CHECK_INT(pos, RM_C / 8);   /* every group-4 channel has a positive residue to keep */
    if (cuda) CHECK_INT(kept4, dt == DT_F16 ? 0 : pos);   /* the fused multiply-add's residue */
    for (int i = 0; i < 6; i++) {
        free(fr[i]); free(fy[i]); free(fu[i]);
    }
    for (int i = 0; i < RM_IN; i++) free(h[i]);
    pair_free(&r);
    pair_free(&u);
}

static void test_remask_node_fp32(void) { check_remask_node(DT_F32, ACT_RELU); check_remask_node(DT_F32, ACT_RELU6); }
static void test_remask_node_fp16(void) { check_remask_node(DT_F16, ACT_RELU); check_remask_node(DT_F16, ACT_RELU6); }
static void test_remask_node_bf16(void) { check_remask_node(DT_BF16, ACT_RELU); check_remask_node(DT_BF16, ACT_RELU6); }

/* ---- bn_mask_bits ---- */

enum { MB_M = 256, MB_IN = 8 };

/* Host inputs of one BN + add + ReLU node of c channels (x, z, dy, mean, var, gamma,
 * beta, dz's start: the order of MB_IN) with outputs on the mask's edges: in every 4th
 * row x = mean (mean rounded to dt, so xhat = 0 and the output is beta + z), and by
 * channel k % 4: 0 z = -beta rounded to dt (the output is beta's rounding residue, which
 * fp16 may store as 0), 1 beta 6 and z 0 (exactly 6: relu6 masks it), 2 beta 0 and z 0
 * (y = 0, masked), 3 random. Channel c - 1 has x = NaN in row 1 (relu masks, relu6
 * passes it). Other rows x in [-2, 2), z in [-1, 1). */
static void mask_inputs(int c, dtype_t dt, float *h[MB_IN]) {
    const int64_t n = (int64_t)MB_M * c;
    h[0] = hrand(n, 71, -2.0f, 2.0f);
    h[1] = hrand(n, 72, -1.0f, 1.0f);
    h[2] = hrand(n, 73, -1.0f, 1.0f);
    h[3] = hrand(c, 74, -0.2f, 0.2f);
    h[4] = hrand(c, 75, 0.5f, 2.0f);
    h[5] = hrand(c, 76, 0.4f, 1.0f);
    h[6] = hrand(c, 77, -1.0f, 1.0f);
    h[7] = hrand(n, 78, -1.0f, 1.0f);   /* unused: a dz target starts with garbage */
    for (int k = 0; k < c; k++) {
        h[3][k] = round_dt(h[3][k], dt);
        if (k % 4 == 1) h[6][k] = 6.0f;
        if (k % 4 == 2) h[6][k] = 0.0f;
        for (int r = 0; r < MB_M; r += 4) {
            h[0][(int64_t)r * c + k] = h[3][k];
            h[1][(int64_t)r * c + k] = k % 4 == 0 ? -round_dt(h[6][k], dt) : k % 4 == 3 ? h[1][(int64_t)r * c + k] : 0.0f;
        }
    }
    h[0][(int64_t)1 * c + c - 1] = NAN;
}


/* The CPU dry run's stand-ins for the mask ops (the cuda backend's contract, on the
 * "gpu" side's CPU ops; rounded floats, 4 bytes an element), so the checks below run on
 * the CPU too: the refusals as the cuda backend's, bits from the stored y, y made of the
 * bits for the backward ops (they use y for the mask only). */
static const backend_ops_t *g_dry;
/* RUNNER_GPU_TEST_PLANT in the stand-ins (gpu_plant.h's list): mask_bit_flip flips one bit
 * of every mask written; dual_dz_unmasked gives the shortcut's BN the unmasked dy */
static bool dry_plant(const char *name) {
    const char *v = getenv("RUNNER_GPU_TEST_PLANT");
    return v && !strcmp(v, name);
}
static int d_apply_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                        const float *var, const float *gamma, const float *beta, float eps, const void *z,
                        act_kind_t act, void *y, uint8_t *mask) {
    if (act == ACT_NONE || c % 8 || (uintptr_t)x % 32 || (uintptr_t)y % 32 || (z && (uintptr_t)z % 32)) return 1;
    if (g_dry->bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, z, act, y)) return -1;
    mask_from_y(mask, m * c, act, y);
    if (dry_plant("mask_bit_flip")) mask[(m * c) / 16] ^= 4;
    return 0;
}
static float *d_y_of_bits(int64_t m, int c, const uint8_t *mask) {
    float *r = hbuf(m * c);
    for (int64_t i = 0; i < m * c; i++) r[i] = mask_bit(mask, i) ? 1.0f : 0.0f;
    return r;
}
static int d_bred_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const float *gamma, float eps,
                       float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta, const uint8_t *mask) {
    (void)y;
    float *r = d_y_of_bits(m, c, mask);
    int rc = g_dry->bn_bwd_reduce(be, m, c, dt, x, r, act, dy, mean, var, gamma, NULL, eps, sum_dy, sum_dy_xhat,
                                  dgamma, dbeta);
    free(r);
    return rc;
}
static int d_bapp_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const float *gamma, float eps,
                       const float *sum_dy, const float *sum_dy_xhat, int64_t count, void *dx, void *dz,
                       const uint8_t *mask) {
    (void)y;
    float *r = d_y_of_bits(m, c, mask);
    int rc = g_dry->bn_bwd_apply(be, m, c, dt, x, r, act, dy, mean, var, gamma, NULL, eps, sum_dy, sum_dy_xhat, count,
                                 dx, dz);
    free(r);
    return rc;
}

/* The node's forward and both backward passes on be: with the mask bits (bits: the mask
 * ops, which must run) or reading y. out: y, dx, dz, sum_dy, sum_dy_xhat, dgamma, dbeta
 * (caller frees); *mask_out (bits only): the bits, host. */
static void mask_node(pair_t *p, dtype_t dt, act_kind_t act, int c, float *h[MB_IN], bool bits, float *out[7],
                      uint8_t **mask_out) {
    const int64_t n = (int64_t)MB_M * c;
    const float eps = 1e-5f;
    backend_t *g = p->gpu;
    float *hdg = hrand(c, 79, -0.1f, 0.1f), *hdb = hrand(c, 80, -0.1f, 0.1f);
    twin_t x = twin_new(p, n, dt, h[0]), z = twin_new(p, n, dt, h[1]), dy = twin_new(p, n, dt, h[2]);
    twin_t mean = twin_new(p, c, DT_F32, h[3]), var = twin_new(p, c, DT_F32, h[4]), ga = twin_new(p, c, DT_F32, h[5]);
    twin_t bt = twin_new(p, c, DT_F32, h[6]), y = twin_new(p, n, dt, NULL), dx = twin_new(p, n, dt, NULL);
    twin_t dz = twin_new(p, n, dt, h[7]), sdy = twin_new(p, c, DT_F32, NULL), sdx = twin_new(p, c, DT_F32, NULL);
    twin_t dg = twin_new(p, c, DT_F32, hdg), db = twin_new(p, c, DT_F32, hdb);
    size_t mbytes = (size_t)(n + 7) / 8;
    uint8_t *mask = bits ? (uint8_t *)g->ops->alloc(g, mbytes) : NULL;
    const float *fm = (const float *)mean.g, *fv = (const float *)var.g, *fg = (const float *)ga.g;
    if (bits) {
        CHECK_INT(g->ops->bn_apply_mask(g, MB_M, c, dt, x.g, fm, fv, fg, (float *)bt.g, eps, z.g, act, y.g, mask), 0);
        OK(g, g->ops->bn_bwd_reduce_mask(g, MB_M, c, dt, x.g, y.g, act, dy.g, fm, fv, fg, eps, (float *)sdy.g,
                                         (float *)sdx.g, (float *)dg.g, (float *)db.g, mask));
        if (g->kind == BACKEND_CUDA) CHECK_INT(cuda_backend_last_fused(g), 1);
        OK(g, g->ops->bn_bwd_apply_mask(g, MB_M, c, dt, x.g, y.g, act, dy.g, fm, fv, fg, eps, (float *)sdy.g,
                                        (float *)sdx.g, MB_M, dx.g, dz.g, mask));
        *mask_out = (uint8_t *)malloc(mbytes);
        OK(g, g->ops->download(g, *mask_out, mask, mbytes));
        g->ops->release(g, mask);
    } else {
        OK(g, g->ops->bn_apply(g, MB_M, c, dt, x.g, fm, fv, fg, (float *)bt.g, eps, z.g, act, y.g));
        OK(g, g->ops->bn_bwd_reduce(g, MB_M, c, dt, x.g, y.g, act, dy.g, fm, fv, fg, NULL, eps, (float *)sdy.g,
                                    (float *)sdx.g, (float *)dg.g, (float *)db.g));
        OK(g, g->ops->bn_bwd_apply(g, MB_M, c, dt, x.g, y.g, act, dy.g, fm, fv, fg, NULL, eps, (float *)sdy.g,
                                   (float *)sdx.g, MB_M, dx.g, dz.g));
    }
    twin_t *res[7] = {&y, &dx, &dz, &sdy, &sdx, &dg, &db};
    for (int i = 0; i < 7; i++) {
        float *cv;
        twin_get(p, res[i], &cv, &out[i]);
        free(cv);
    }
    twin_t *all[] = {&x, &z, &dy, &mean, &var, &ga, &bt, &y, &dx, &dz, &sdy, &sdx, &dg, &db};
    for (int i = 0; i < 14; i++) twin_free(p, all[i]);
    free(hdg);
    free(hdb);
}

/* The mask bits of a BN + add + ReLU / ReLU6 node: bn_apply_mask stores the y bn_apply
 * stores, and bit i is act_keeps of the stored y[i] (the edge rows of mask_inputs
 * included); both backward passes reading the bits give the bits of the same backend
 * reading y and of a backend without the option (dx, dz, sum_dy, sum_dy_xhat, dgamma,
 * dbeta). c = 256: 8 channels a thread in the backward too (one mask byte); 64 and 24
 * (half): 2 and 1 (bits picked out of bytes). Then the refusals: no activation, c not a
 * multiple of 8, y not aligned to 8 elements: 1, nothing run. */
static void check_mask_node(dtype_t dt, act_kind_t act, int c) {
    pair_t b = pair_make_fused(true, false, BACKEND_FUSE_BN_MASK_BITS), u = pair_make(true, false);
    static backend_ops_t dry;
    if (b.gpu->kind != BACKEND_CUDA) {   /* the CPU dry run: the stand-ins above */
        CHECK(b.gpu->ops->bn_apply_mask == NULL);
        g_dry = b.gpu->ops;
        dry = *b.gpu->ops;
        dry.bn_apply_mask = d_apply_mask;
        dry.bn_bwd_reduce_mask = d_bred_mask;
        dry.bn_bwd_apply_mask = d_bapp_mask;
        b.gpu->ops = &dry;
    }
    CHECK(b.gpu->ops->bn_apply_mask != NULL);
    float *h[MB_IN], *fb[7], *fy[7], *fu[7];
    uint8_t *mask = NULL;
    mask_inputs(c, dt, h);
    mask_node(&b, dt, act, c, h, true, fb, &mask);
    mask_node(&b, dt, act, c, h, false, fy, NULL);
    mask_node(&u, dt, act, c, h, false, fu, NULL);
    static const char *const NAMES[7] = {"y", "dx", "dz", "sum_dy", "sum_dy_xhat", "dgamma", "dbeta"};
    const int64_t n = (int64_t)MB_M * c;
    int same = 0;
    for (int i = 0; i < 7; i++) {
        size_t len = (size_t)(i < 3 ? n : c) * 4;
        bool a = !memcmp(fb[i], fy[i], len), d = !memcmp(fb[i], fu[i], len);
        if (!a || !d)
            fprintf(stderr, "  bn_mask_bits %s %s c %d: %s differs (reading y: %s, without the option: %s)\n",
                    dtype_names[dt], act == ACT_RELU6 ? "relu6" : "relu", c, NAMES[i], a ? "same" : "DIFFERS",
                    d ? "same" : "DIFFERS");
        same += a && d;
    }
    int wrong = 0, masked_edge = 0;
    for (int64_t i = 0; i < n; i++) {
        bool bit = mask_bit(mask, i);
        wrong += bit != mask_keeps(act, fb[0][i]);
        masked_edge += !bit && (i / c) % 4 == 0;
    }
    fprintf(stderr, "  bn_mask_bits %s %s c %d: %d of 7 outputs the same bits; %d bits differ from y's mask; "
            "%d edge-row elements masked\n", dtype_names[dt], act == ACT_RELU6 ? "relu6" : "relu", c, same, wrong,
            masked_edge);
    CHECK_INT(same, 7);
    CHECK_INT(wrong, 0);
    CHECK(masked_edge >= MB_M / 4 * (c / 4));   /* group 2 at least (y = 0) */
    /* refusals */
    backend_t *g = b.gpu;
    size_t esz = dt == DT_F32 || g->kind != BACKEND_CUDA ? 4 : 2;   /* the dry run stores floats */
    void *buf = g->ops->alloc(g, (size_t)(n + 16) * esz);
    uint8_t *mb = (uint8_t *)g->ops->alloc(g, (size_t)(n + 7) / 8);
    float *vec = (float *)g->ops->alloc(g, (size_t)c * 4 * 4);
    OK(g, g->ops->zero(g, buf, (size_t)(n + 16) * esz));
    OK(g, g->ops->zero(g, vec, (size_t)c * 16));
    float *one = hbuf(c);
    for (int k = 0; k < c; k++) one[k] = 1.0f;
    OK(g, g->ops->upload(g, vec + c, one, (size_t)c * 4));
    CHECK_INT(g->ops->bn_apply_mask(g, MB_M, c, dt, buf, vec, vec + c, vec + c, vec, 1e-5f, buf, ACT_NONE, buf, mb), 1);
    CHECK_INT(g->ops->bn_apply_mask(g, MB_M, 12, dt, buf, vec, vec + c, vec + c, vec, 1e-5f, buf, act, buf, mb), 1);
    CHECK_INT(g->ops->bn_apply_mask(g, MB_M, c, dt, buf, vec, vec + c, vec + c, vec, 1e-5f, buf, act,
                                    (char *)buf + esz, mb), 1);
    CHECK_INT(g->ops->bn_apply_mask(g, MB_M, c, dt, buf, vec, vec + c, vec + c, vec, 1e-5f, buf, act, buf, mb), 0);
    free(one);
    g->ops->release(g, buf);
    g->ops->release(g, mb);
    g->ops->release(g, vec);
    for (int i = 0; i < 7; i++) {
        free(fb[i]); free(fy[i]); free(fu[i]);
    }
    for (int i = 0; i < MB_IN; i++) free(h[i]);
    free(mask);
    if (b.gpu->ops == &dry) b.gpu->ops = g_dry;
    pair_free(&b);
    pair_free(&u);
}

static void check_mask_nodes(dtype_t dt) {
    static const int C[3] = {256, 64, 24};
    for (int i = 0; i < 3; i++) {
        check_mask_node(dt, ACT_RELU, C[i]);
        check_mask_node(dt, ACT_RELU6, C[i]);
    }
}
static void test_mask_bits_node_fp32(void) { check_mask_nodes(DT_F32); }
static void test_mask_bits_node_fp16(void) { check_mask_nodes(DT_F16); }
static void test_mask_bits_node_bf16(void) { check_mask_nodes(DT_BF16); }

/* ---- bn_dual_add ---- */

/* The dry run's stand-ins for the dual ops: the CPU's separate ops in the net's order. */
static int d_apply_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean, const float *var,
                        const float *gamma, const float *beta, const void *x2, const float *mean2, const float *var2,
                        const float *gamma2, const float *beta2, float eps, act_kind_t act, void *y, uint8_t *mask) {
    float *z = hbuf(m * c);
    int rc = g_dry->bn_apply(be, m, c, dt, x2, mean2, var2, gamma2, beta2, eps, NULL, ACT_NONE, z) ||
             g_dry->bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, z, act, y);
    free(z);
    if (rc) return -1;
    if (mask) mask_from_y(mask, m * c, act, y);
    return 0;
}
static int d_bred_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const void *x2, const float *mean2,
                       const float *var2, float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta,
                       float *sum_dy2, float *sum_dy_xhat2, float *dgamma2, float *dbeta2, const uint8_t *mask) {
    float *g = hbuf(m * c);
    for (int64_t i = 0; i < m * c; i++) {
        bool k = mask ? mask_bit(mask, i) : mask_keeps(act, ((const float *)y)[i]);
        g[i] = k || dry_plant("dual_dz_unmasked") ? ((const float *)dy)[i] : 0.0f;
    }
    int rc = g_dry->bn_bwd_reduce(be, m, c, dt, x, y, act, dy, mean, var, NULL, NULL, eps, sum_dy, sum_dy_xhat, dgamma,
                                  dbeta) ||
             g_dry->bn_bwd_reduce(be, m, c, dt, x2, NULL, ACT_NONE, g, mean2, var2, NULL, NULL, eps, sum_dy2,
                                  sum_dy_xhat2, dgamma2, dbeta2);
    free(g);
    return rc ? -1 : 0;
}
static int d_bapp_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const float *gamma, const void *x2,
                       const float *mean2, const float *var2, const float *gamma2, float eps, const float *sum_dy,
                       const float *sum_dy_xhat, int64_t count, const float *sum_dy2, const float *sum_dy_xhat2,
                       int64_t count2, void *dx, void *dx2, const uint8_t *mask) {
    (void)mask;
    float *g = hbuf(m * c);
    int rc = g_dry->bn_bwd_apply(be, m, c, dt, x, y, act, dy, mean, var, gamma, NULL, eps, sum_dy, sum_dy_xhat, count,
                                 dx, g) ||
             g_dry->bn_bwd_apply(be, m, c, dt, x2, NULL, ACT_NONE, g, mean2, var2, gamma2, NULL, eps, sum_dy2,
                                 sum_dy_xhat2, count2, dx2, NULL);
    free(g);
    return rc ? -1 : 0;
}

enum { DU_OUT = 11 };

/* The add-relu BN with a shortcut BN on be: fused (the dual ops, with the mask bits when
 * bits) or as the net runs them without the option (bn_apply of z, of y; the add-relu
 * BN's backward writing dz; the shortcut's backward on dz). out: y, dx, dx2, then sum_dy,
 * sum_dy_xhat, dgamma, dbeta of each (caller frees). */
static void dual_node(pair_t *p, dtype_t dt, act_kind_t act, int c, float *h[MB_IN], float *h2[4], bool fused,
                      bool bits, float *out[DU_OUT]) {
    const int64_t n = (int64_t)MB_M * c;
    const float eps = 1e-5f;
    backend_t *g = p->gpu;
    twin_t x = twin_new(p, n, dt, h[0]), x2 = twin_new(p, n, dt, h[1]), dy = twin_new(p, n, dt, h[2]);
    twin_t mean = twin_new(p, c, DT_F32, h[3]), var = twin_new(p, c, DT_F32, h[4]), ga = twin_new(p, c, DT_F32, h[5]);
    twin_t bt = twin_new(p, c, DT_F32, h[6]), mean2 = twin_new(p, c, DT_F32, h2[0]), var2 = twin_new(p, c, DT_F32, h2[1]);
    twin_t ga2 = twin_new(p, c, DT_F32, h2[2]), bt2 = twin_new(p, c, DT_F32, h2[3]);
    twin_t y = twin_new(p, n, dt, NULL), z = twin_new(p, n, dt, NULL), dx = twin_new(p, n, dt, NULL);
    twin_t dx2 = twin_new(p, n, dt, NULL), dz = twin_new(p, n, dt, h[7]);
    twin_t s1 = twin_new(p, c, DT_F32, NULL), s2 = twin_new(p, c, DT_F32, NULL), dg = twin_new(p, c, DT_F32, h[5]);
    twin_t db = twin_new(p, c, DT_F32, h[6]), t1 = twin_new(p, c, DT_F32, NULL), t2 = twin_new(p, c, DT_F32, NULL);
    twin_t dg2 = twin_new(p, c, DT_F32, h2[2]), db2 = twin_new(p, c, DT_F32, h2[3]);
    const float *fm = (const float *)mean.g, *fv = (const float *)var.g, *fg = (const float *)ga.g;
    const float *fm2 = (const float *)mean2.g, *fv2 = (const float *)var2.g, *fg2 = (const float *)ga2.g;
    uint8_t *mask = bits ? (uint8_t *)g->ops->alloc(g, (size_t)(n + 7) / 8) : NULL;
    if (fused) {
        CHECK_INT(g->ops->bn_apply_dual(g, MB_M, c, dt, x.g, fm, fv, fg, (float *)bt.g, x2.g, fm2, fv2, fg2,
                                        (float *)bt2.g, eps, act, y.g, mask), 0);
        OK(g, g->ops->bn_bwd_reduce_dual(g, MB_M, c, dt, x.g, y.g, act, dy.g, fm, fv, x2.g, fm2, fv2, eps,
                                         (float *)s1.g, (float *)s2.g, (float *)dg.g, (float *)db.g, (float *)t1.g,
                                         (float *)t2.g, (float *)dg2.g, (float *)db2.g, mask));
        OK(g, g->ops->bn_bwd_apply_dual(g, MB_M, c, dt, x.g, y.g, act, dy.g, fm, fv, fg, x2.g, fm2, fv2, fg2, eps,
                                        (float *)s1.g, (float *)s2.g, MB_M, (float *)t1.g, (float *)t2.g, MB_M, dx.g,
                                        dx2.g, mask));
    } else {
        OK(g, g->ops->bn_apply(g, MB_M, c, dt, x2.g, fm2, fv2, fg2, (float *)bt2.g, eps, NULL, ACT_NONE, z.g));
        OK(g, g->ops->bn_apply(g, MB_M, c, dt, x.g, fm, fv, fg, (float *)bt.g, eps, z.g, act, y.g));
        OK(g, g->ops->bn_bwd_reduce(g, MB_M, c, dt, x.g, y.g, act, dy.g, fm, fv, fg, NULL, eps, (float *)s1.g,
                                    (float *)s2.g, (float *)dg.g, (float *)db.g));
        OK(g, g->ops->bn_bwd_apply(g, MB_M, c, dt, x.g, y.g, act, dy.g, fm, fv, fg, NULL, eps, (float *)s1.g,
                                   (float *)s2.g, MB_M, dx.g, dz.g));
        OK(g, g->ops->bn_bwd_reduce(g, MB_M, c, dt, x2.g, NULL, ACT_NONE, dz.g, fm2, fv2, fg2, NULL, eps,
                                    (float *)t1.g, (float *)t2.g, (float *)dg2.g, (float *)db2.g));
        OK(g, g->ops->bn_bwd_apply(g, MB_M, c, dt, x2.g, NULL, ACT_NONE, dz.g, fm2, fv2, fg2, NULL, eps,
                                   (float *)t1.g, (float *)t2.g, MB_M, dx2.g, NULL));
    }
    if (mask) g->ops->release(g, mask);
    twin_t *res[DU_OUT] = {&y, &dx, &dx2, &s1, &s2, &dg, &db, &t1, &t2, &dg2, &db2};
    for (int i = 0; i < DU_OUT; i++) {
        float *cv;
        twin_get(p, res[i], &cv, &out[i]);
        free(cv);
    }
    twin_t *all[] = {&x, &x2, &dy, &mean, &var, &ga, &bt, &mean2, &var2, &ga2, &bt2, &y, &z, &dx, &dx2, &dz,
                     &s1, &s2, &dg, &db, &t1, &t2, &dg2, &db2};
    for (int i = 0; i < 24; i++) twin_free(p, all[i]);
}

/* A shortcut BN applied inside its add-relu BN: y, dx, dx2 and both BNs' sums and
 * parameter gradients are the bits of the separate ops, on the same backend and on one
 * without the option, reading y and (bits) the mask bits; c as check_mask_node's. The
 * shortcut's inputs: x2 in [-2, 2), its statistics and affine random. */
static void check_dual_node(dtype_t dt, act_kind_t act, int c, bool bits) {
    unsigned opt = BACKEND_FUSE_BN_DUAL_ADD | (bits ? BACKEND_FUSE_BN_MASK_BITS : 0);
    pair_t b = pair_make_fused(true, false, opt), u = pair_make(true, false);
    static backend_ops_t dry;
    if (b.gpu->kind != BACKEND_CUDA) {   /* the CPU dry run: the stand-ins */
        g_dry = b.gpu->ops;
        dry = *b.gpu->ops;
        dry.bn_apply_dual = d_apply_dual;
        dry.bn_bwd_reduce_dual = d_bred_dual;
        dry.bn_bwd_apply_dual = d_bapp_dual;
        b.gpu->ops = &dry;
    }
    CHECK(b.gpu->ops->bn_apply_dual != NULL);
    float *h[MB_IN], *h2[4], *ff[DU_OUT], *fs[DU_OUT], *fu[DU_OUT];
    mask_inputs(c, dt, h);
    free(h[1]);
    h[1] = hrand((int64_t)MB_M * c, 81, -2.0f, 2.0f);   /* x2 (mask_inputs' z slot) */
    h2[0] = hrand(c, 82, -0.2f, 0.2f);
    h2[1] = hrand(c, 83, 0.5f, 2.0f);
    h2[2] = hrand(c, 84, 0.4f, 1.0f);
    h2[3] = hrand(c, 85, -1.0f, 1.0f);
    dual_node(&b, dt, act, c, h, h2, true, bits, ff);
    dual_node(&b, dt, act, c, h, h2, false, false, fs);
    dual_node(&u, dt, act, c, h, h2, false, false, fu);
    static const char *const NAMES[DU_OUT] = {"y", "dx", "dx2", "sum_dy", "sum_dy_xhat", "dgamma", "dbeta",
                                              "sum_dy2", "sum_dy_xhat2", "dgamma2", "dbeta2"};
    const int64_t n = (int64_t)MB_M * c;
    int same = 0;
    for (int i = 0; i < DU_OUT; i++) {
        size_t len = (size_t)(i < 3 ? n : c) * 4;
        bool a = !memcmp(ff[i], fs[i], len), d = !memcmp(ff[i], fu[i], len);
        if (!a || !d)
            fprintf(stderr, "  bn_dual_add %s %s c %d%s: %s differs (separate ops: %s, without the option: %s)\n",
                    dtype_names[dt], act == ACT_RELU6 ? "relu6" : "relu", c, bits ? " bits" : "", NAMES[i],
                    a ? "same" : "DIFFERS", d ? "same" : "DIFFERS");
        same += a && d;
    }
    fprintf(stderr, "  bn_dual_add %s %s c %d%s: %d of %d outputs the same bits\n", dtype_names[dt],
            act == ACT_RELU6 ? "relu6" : "relu", c, bits ? " with bits" : "", same, DU_OUT);
    CHECK_INT(same, DU_OUT);
    for (int i = 0; i < DU_OUT; i++) {
        free(ff[i]); free(fs[i]); free(fu[i]);
    }
    for (int i = 0; i < MB_IN; i++) free(h[i]);
    for (int i = 0; i < 4; i++) free(h2[i]);
    if (b.gpu->ops == &dry) b.gpu->ops = g_dry;
    pair_free(&b);
    pair_free(&u);
}

static void check_dual_nodes(dtype_t dt) {
    static const int C[3] = {256, 64, 24};
    for (int i = 0; i < 3; i++) {
        check_dual_node(dt, ACT_RELU, C[i], false);
        check_dual_node(dt, ACT_RELU6, C[i], i == 0);
    }
    check_dual_node(dt, ACT_RELU, 256, true);
}
static void test_dual_node_fp32(void) { check_dual_nodes(DT_F32); }
static void test_dual_node_fp16(void) { check_dual_nodes(DT_F16); }
static void test_dual_node_bf16(void) { check_dual_nodes(DT_BF16); }

/* ---- bn_persist ---- */

/* The dry run's stand-ins for the one-op passes: the separate ops in the net's order, with
 * the cuda backend's refusals (an output overlapping an input; the bits without an
 * activation). */
static int d_fwd_fused(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean, float *var,
                       int64_t count, float momentum, float *run_mean, float *run_var, const float *gamma,
                       const float *beta, float eps, const void *z, act_kind_t act, void *y, uint8_t *mask) {
    if (y == x || (z && y == z) || (mask && act == ACT_NONE)) return 1;
    if (g_dry->bn_stats(be, m, c, dt, x, mean, var) ||
        (run_mean && g_dry->bn_update_running(be, c, mean, var, count, momentum, run_mean, run_var)) ||
        g_dry->bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, z, act, y))
        return -1;
    if (mask) mask_from_y(mask, m * c, act, y);
    if (dry_plant("persist_stats_order")) mean[c - 1] = nextafterf(mean[c - 1], 1e30f);
    return 0;
}
static int d_bwd_fused(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                       const void *dy, const float *mean, const float *var, const float *gamma, const float *beta,
                       float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta, int64_t count,
                       void *dx, void *dz, const uint8_t *mask) {
    if (dx == dy || dx == x || (dz && (dz == dy || dz == x))) return 1;
    float *r = mask ? d_y_of_bits(m, c, mask) : NULL;
    const void *yy = mask ? (const void *)r : y;
    const float *bb = mask ? NULL : beta;
    int rc = g_dry->bn_bwd_reduce(be, m, c, dt, x, yy, act, dy, mean, var, gamma, bb, eps, sum_dy, sum_dy_xhat,
                                  dgamma, dbeta) ||
             g_dry->bn_bwd_apply(be, m, c, dt, x, yy, act, dy, mean, var, gamma, bb, eps, sum_dy, sum_dy_xhat, count,
                                 dx, dz);
    free(r);
    return rc ? -1 : 0;
}

enum { PS_OUT = 11 };

/* Host inputs of one BN node of m rows x c channels: x, z, dy, gamma, beta, run_mean,
 * run_var, dz's start (the order of MB_IN). The statistics come from x, so the mask's
 * edges are made by z: z = -beta (rounded to dt) in every 4th row of channels k % 4 ==
 * 0, where the add leaves beta's rounding residue; channels k % 4 == 2 sit at an offset
 * of 100 (the statistics' shift by the first row matters there). */
static void persist_inputs(int64_t m, int c, dtype_t dt, float *h[MB_IN]) {
    const int64_t n = m * c;
    h[0] = hrand(n, 91, -2.0f, 2.0f);
    h[1] = hrand(n, 92, -1.0f, 1.0f);
    h[2] = hrand(n, 93, -1.0f, 1.0f);
    h[3] = hrand(c, 94, 0.4f, 1.0f);
    h[4] = hrand(c, 95, -1.0f, 1.0f);
    h[5] = hrand(c, 96, -0.5f, 0.5f);
    h[6] = hrand(c, 97, 0.5f, 2.0f);
    h[7] = hrand(n, 98, -1.0f, 1.0f);   /* a dz target starts with garbage */
    for (int k = 0; k < c; k++)
        for (int64_t r = 0; r < m; r++) {
            if (k % 4 == 0 && r % 4 == 0) h[1][r * c + k] = -round_dt(h[4][k], dt);
            if (k % 4 == 2) h[0][r * c + k] = round_dt(h[0][r * c + k] * 0.25f + 100.0f, dt);
        }
}

/* One BN node's training forward and backward on p's gpu side: fused (bn_fwd_fused,
 * bn_bwd_fused, which must run) or the separate ops as the net runs them. kind: 0 BN, 1
 * BN + ReLU and 2 BN + ReLU6 (beta given to the backward: bn_remask's recompute where
 * the option is on), 3 BN + add + ReLU (z, dz; bits: the mask bits). out: mean, var,
 * run_mean, run_var, y, dx, dz, sum_dy, sum_dy_xhat, dgamma, dbeta (caller frees); with
 * bits *mask_out the bits (host). */
static void persist_node(pair_t *p, dtype_t dt, int kind, int64_t m, int c, float *h[MB_IN], bool fused, bool bits,
                         float *out[PS_OUT], uint8_t **mask_out) {
    const int64_t n = m * c;
    const float eps = 1e-5f, mom = 0.1f;
    static const act_kind_t ACT[4] = {ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU};
    act_kind_t act = ACT[kind];
    backend_t *g = p->gpu;
    float *hdg = hrand(c, 99, -0.1f, 0.1f), *hdb = hrand(c, 100, -0.1f, 0.1f);
    twin_t x = twin_new(p, n, dt, h[0]), z = twin_new(p, n, dt, h[1]), dy = twin_new(p, n, dt, h[2]);
    twin_t ga = twin_new(p, c, DT_F32, h[3]), bt = twin_new(p, c, DT_F32, h[4]), rm = twin_new(p, c, DT_F32, h[5]);
    twin_t rv = twin_new(p, c, DT_F32, h[6]), mean = twin_new(p, c, DT_F32, NULL), var = twin_new(p, c, DT_F32, NULL);
    twin_t y = twin_new(p, n, dt, NULL), dx = twin_new(p, n, dt, NULL), dz = twin_new(p, n, dt, h[7]);
    twin_t sdy = twin_new(p, c, DT_F32, NULL), sdx = twin_new(p, c, DT_F32, NULL);
    twin_t dg = twin_new(p, c, DT_F32, hdg), db = twin_new(p, c, DT_F32, hdb);
    size_t mbytes = (size_t)(n + 7) / 8;
    uint8_t *mask = bits ? (uint8_t *)g->ops->alloc(g, mbytes) : NULL;
    float *fm = (float *)mean.g, *fv = (float *)var.g, *fg = (float *)ga.g, *fb = (float *)bt.g;
    const void *zz = kind == 3 ? z.g : NULL;
    void *dzz = kind == 3 ? dz.g : NULL;
    const void *yy = kind == 0 ? NULL : y.g;
    const float *rbeta = kind == 1 || kind == 2 ? fb : NULL;   /* as the net: y and no residual */
    int rf = 1;
    if (fused) {
        rf = g->ops->bn_fwd_fused(g, m, c, dt, x.g, fm, fv, m, mom, (float *)rm.g, (float *)rv.g, fg, fb, eps, zz, act,
                                  y.g, mask);
        /* (the bits at every vector width: below 8 channels a thread, the threads of a
         * byte put theirs together over warp shuffles) */
        CHECK_INT(rf, 0);
        if (g->kind == BACKEND_CUDA) CHECK_INT(cuda_backend_last_fused(g), 1);
    }
    if (rf == 1) {
        if (g->ops->bn_stats_running) {
            OK(g, g->ops->bn_stats_running(g, m, c, dt, x.g, fm, fv, m, mom, (float *)rm.g, (float *)rv.g));
        } else {
            OK(g, g->ops->bn_stats(g, m, c, dt, x.g, fm, fv));
            OK(g, g->ops->bn_update_running(g, c, fm, fv, m, mom, (float *)rm.g, (float *)rv.g));
        }
        if (bits)
            CHECK_INT(g->ops->bn_apply_mask(g, m, c, dt, x.g, fm, fv, fg, fb, eps, zz, act, y.g, mask), 0);
        else
            OK(g, g->ops->bn_apply(g, m, c, dt, x.g, fm, fv, fg, fb, eps, zz, act, y.g));
    }
    if (fused) {
        CHECK_INT(g->ops->bn_bwd_fused(g, m, c, dt, x.g, yy, act, dy.g, fm, fv, fg, rbeta, eps, (float *)sdy.g,
                                       (float *)sdx.g, (float *)dg.g, (float *)db.g, m, dx.g, dzz, mask), 0);
        if (g->kind == BACKEND_CUDA) CHECK_INT(cuda_backend_last_fused(g), 1);
    } else {
        if (bits) {
            OK(g, g->ops->bn_bwd_reduce_mask(g, m, c, dt, x.g, y.g, act, dy.g, fm, fv, fg, eps, (float *)sdy.g,
                                             (float *)sdx.g, (float *)dg.g, (float *)db.g, mask));
            OK(g, g->ops->bn_bwd_apply_mask(g, m, c, dt, x.g, y.g, act, dy.g, fm, fv, fg, eps, (float *)sdy.g,
                                            (float *)sdx.g, m, dx.g, dzz, mask));
        } else {
            OK(g, g->ops->bn_bwd_reduce(g, m, c, dt, x.g, yy, act, dy.g, fm, fv, fg, rbeta, eps, (float *)sdy.g,
                                        (float *)sdx.g, (float *)dg.g, (float *)db.g));
            OK(g, g->ops->bn_bwd_apply(g, m, c, dt, x.g, yy, act, dy.g, fm, fv, fg, rbeta, eps, (float *)sdy.g,
                                       (float *)sdx.g, m, dx.g, dzz));
        }
    }
    if (bits) {
        *mask_out = (uint8_t *)malloc(mbytes);
        OK(g, g->ops->download(g, *mask_out, mask, mbytes));
        g->ops->release(g, mask);
    }
    twin_t *res[PS_OUT] = {&mean, &var, &rm, &rv, &y, &dx, &dz, &sdy, &sdx, &dg, &db};
    for (int i = 0; i < PS_OUT; i++) {
        float *cv;
        twin_get(p, res[i], &cv, &out[i]);
        free(cv);
    }
    twin_t *all[] = {&x, &z, &dy, &ga, &bt, &rm, &rv, &mean, &var, &y, &dx, &dz, &sdy, &sdx, &dg, &db};
    for (int i = 0; i < 16; i++) twin_free(p, all[i]);
    free(hdg);
    free(hdb);
}

/* bn_persist's override of the grid and the rows kept (cuda_bn_geom_t): none, few blocks
 * and few rows kept (several row blocks a block; most rows read again), no row kept, and
 * 4 rows a thread in the row kernels (more row blocks) on 2 blocks. */
static const cuda_bn_geom_t PS_GEOMS[4] = {
    {0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 3, 2}, {0, 0, 0, 0, 5, -1}, {4, 0, 0, 0, 2, 0}};

/* The node's passes fused and by the separate ops on one backend with the options
 * fusion (bn_persist among them), under geometry override gi: every output the same
 * bits, and the bits too; the outputs real (dx mostly nonzero, some of y masked). */
static void check_persist_node(dtype_t dt, int kind, bool bits, int64_t m, int c, unsigned fusion, int gi) {
    pair_t b = pair_make_fused(true, false, fusion);
    static backend_ops_t dry;
    if (b.gpu->kind != BACKEND_CUDA) {
        CHECK(b.gpu->ops->bn_fwd_fused == NULL);
        g_dry = b.gpu->ops;
        dry = *b.gpu->ops;
        dry.bn_fwd_fused = d_fwd_fused;
        dry.bn_bwd_fused = d_bwd_fused;
        dry.bn_apply_mask = d_apply_mask;
        dry.bn_bwd_reduce_mask = d_bred_mask;
        dry.bn_bwd_apply_mask = d_bapp_mask;
        b.gpu->ops = &dry;
    } else {
        CHECK_INT(cuda_backend_bn_geometry(b.gpu, &PS_GEOMS[gi]), 0);
    }
    CHECK(b.gpu->ops->bn_fwd_fused != NULL && b.gpu->ops->bn_bwd_fused != NULL);
    float *h[MB_IN], *ff[PS_OUT], *fs[PS_OUT];
    uint8_t *mf = NULL, *ms = NULL;
    persist_inputs(m, c, dt, h);
    persist_node(&b, dt, kind, m, c, h, true, bits, ff, &mf);
    persist_node(&b, dt, kind, m, c, h, false, bits, fs, &ms);
    static const char *const NAMES[PS_OUT] = {"mean", "var", "run_mean", "run_var", "y", "dx", "dz",
                                              "sum_dy", "sum_dy_xhat", "dgamma", "dbeta"};
    const int64_t n = m * c;
    int same = 0, nonzero = 0, masked = 0;
    for (int i = 0; i < PS_OUT; i++) {
        size_t len = (size_t)(i >= 4 && i <= 6 ? n : c) * 4;
        bool eq = !memcmp(ff[i], fs[i], len);
        if (!eq)
            fprintf(stderr, "  bn_persist %s kind %d%s m %lld c %d geometry %d: %s differs\n", dtype_names[dt], kind,
                    bits ? " bits" : "", (long long)m, c, gi, NAMES[i]);
        same += eq;
    }
    bool bits_same = !bits || !memcmp(mf, ms, (size_t)(n + 7) / 8);
    for (int64_t i = 0; i < n; i++) {
        nonzero += ff[5][i] != 0.0f;
        masked += kind > 0 && ff[4][i] == 0.0f;
    }
    CHECK_INT(same, PS_OUT);
    CHECK(bits_same);
    CHECK(nonzero > n / 4);
    if (kind > 0) CHECK(masked > n / 8);
    for (int i = 0; i < PS_OUT; i++) {
        free(ff[i]);
        free(fs[i]);
    }
    for (int i = 0; i < MB_IN; i++) free(h[i]);
    free(mf);
    free(ms);
    if (b.gpu->ops == &dry) b.gpu->ops = g_dry;
    pair_free(&b);
}

/* The refusals: y over x, dx over dy, the mask bits without an activation: 1, nothing
 * written (then the separate ops run). */
static void check_persist_refusals(dtype_t dt) {
    pair_t b = pair_make_fused(true, false, BACKEND_FUSE_BN_PERSIST);
    static backend_ops_t dry;
    if (b.gpu->kind != BACKEND_CUDA) {
        g_dry = b.gpu->ops;
        dry = *b.gpu->ops;
        dry.bn_fwd_fused = d_fwd_fused;
        dry.bn_bwd_fused = d_bwd_fused;
        b.gpu->ops = &dry;
    }
    backend_t *g = b.gpu;
    const int64_t m = 64;
    const int c = 64, n = 64 * 64;
    size_t esz = dt == DT_F32 || g->kind != BACKEND_CUDA ? 4 : 2;
    void *buf = g->ops->alloc(g, (size_t)n * esz), *buf2 = g->ops->alloc(g, (size_t)n * esz);
    uint8_t *mb = (uint8_t *)g->ops->alloc(g, (size_t)n / 8);
    float *vec = (float *)g->ops->alloc(g, (size_t)c * 8 * 4);
    OK(g, g->ops->zero(g, buf, (size_t)n * esz));
    OK(g, g->ops->zero(g, vec, (size_t)c * 32));
    CHECK_INT(g->ops->bn_fwd_fused(g, m, c, dt, buf, vec, vec + c, m, 0.1f, NULL, NULL, vec + 2 * c, vec + 3 * c, 1e-5f,
                                   NULL, ACT_RELU, buf, NULL), 1);
    CHECK_INT(g->ops->bn_fwd_fused(g, m, c, dt, buf, vec, vec + c, m, 0.1f, NULL, NULL, vec + 2 * c, vec + 3 * c, 1e-5f,
                                   NULL, ACT_NONE, buf2, mb), 1);
    CHECK_INT(g->ops->bn_bwd_fused(g, m, c, dt, buf, buf2, ACT_RELU, buf2, vec, vec + c, vec + 2 * c, NULL, 1e-5f,
                                   vec + 4 * c, vec + 5 * c, NULL, NULL, m, buf2, NULL, NULL), 1);
    g->ops->release(g, buf);
    g->ops->release(g, buf2);
    g->ops->release(g, mb);
    g->ops->release(g, vec);
    if (g->ops == &dry) g->ops = g_dry;
    pair_free(&b);
}

static void check_persist_nodes(dtype_t dt) {
    static const int64_t M[3] = {1024, 1024, 512};
    static const int C[3] = {256, 64, 24};
    const unsigned base = BACKEND_FUSE_BN_PERSIST | BACKEND_FUSE_BN_MASK_BITS;
    const unsigned all = base | BACKEND_FUSE_BN_REMASK | BACKEND_FUSE_BN_WIDE_FINAL | BACKEND_FUSE_BN_FOLD_RUNNING;
    for (int s = 0; s < 3; s++)
        for (int kind = 0; kind < 5; kind++) {
            int k = kind < 4 ? kind : 3;
            bool bits = kind == 4;
            check_persist_node(dt, k, bits, M[s], C[s], base, 1);
            check_persist_node(dt, k, bits, M[s], C[s], all, 0);
            check_persist_node(dt, k, bits, M[s], C[s], all, 2);
            check_persist_node(dt, k, bits, M[s], C[s], all, 3);
            /* vec16's narrow blocks (64 half channels: 8 lanes x 32 rows; 24: 3 x 85) */
            if (dt != DT_F32 && C[s] < 256) {
                check_persist_node(dt, k, bits, M[s], C[s], all | BACKEND_FUSE_VEC16, 1);
                check_persist_node(dt, k, bits, M[s], C[s], all | BACKEND_FUSE_VEC16, 3);
            }
        }
    check_persist_refusals(dt);
}
static void test_persist_node_fp32(void) { check_persist_nodes(DT_F32); }
static void test_persist_node_fp16(void) { check_persist_nodes(DT_F16); }
static void test_persist_node_bf16(void) { check_persist_nodes(DT_BF16); }

int main(void) {
    gpu_or_skip();
    TEST_RUN(test_remask_node_fp32);
    TEST_RUN(test_remask_node_fp16);
    TEST_RUN(test_remask_node_bf16);
    TEST_RUN(test_mask_bits_node_fp32);
    TEST_RUN(test_mask_bits_node_fp16);
    TEST_RUN(test_mask_bits_node_bf16);
    TEST_RUN(test_dual_node_fp32);
    TEST_RUN(test_dual_node_fp16);
    TEST_RUN(test_dual_node_bf16);
    TEST_RUN(test_persist_node_fp32);
    TEST_RUN(test_persist_node_fp16);
    TEST_RUN(test_persist_node_bf16);
    return test_main_end();
}
