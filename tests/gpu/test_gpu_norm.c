/* test_gpu_norm.c: batch-norm ops of the CUDA backend against the CPU backend: statistics
 * (non-zero mean, to catch cancellation), apply with and without residual and relu,
 * running-stat update, and both backward phases (relu mask, dz, accumulation into dgamma
 * and dbeta), for channel counts that take the 4-wide, 2-wide and scalar kernel paths,
 * in fp32, fp16 and bf16; and again with the vec16 fusion option (16-byte accesses on
 * every channel count that is a multiple of 8: 8 lanes per row at 64 half channels, 3 at
 * 24, 5 at 40), and with the bn_wide_final option (the reductions' second pass with 32 x
 * 32 threads a block), on shapes up to the 1024 row splits of a 128 x 32 x 32 layer and
 * on splits that are not a multiple of 32; with bn_more_splits (at least 4 rows a thread:
 * 4x the row splits of the small layers); bn_fold_running's one op against the two
 * it replaces, bit for bit; and the launch geometry overrides of the BN sweep
 * (cuda_backend_bn_geometry), the reductions' one-pass form among them: the apply
 * kernels' bits unchanged under each, the reductions within 1e-5, and the CPU's results. Skipped (77) without a GPU.
 */
#include "tests/gpu/gpu_test_util.h"

/* Uploads the CPU side's values of src into a fresh twin (both sides equal). */
static twin_t twin_from_cpu(pair_t *p, const twin_t *src) {
    float *cv, *gv;
    twin_get(p, src, &cv, &gv);
    twin_t t = twin_new(p, src->n, src->dt, cv);
    free(cv);
    free(gv);
    return t;
}

static unsigned g_fusion;   /* the CUDA backend's fusion options (test_bn_vec16) */
static const cuda_bn_geom_t *g_geom;   /* the CUDA backend's BN geometry override (test_bn_geometry) */

static void check_bn(int64_t m, int c, dtype_t dt) {
    pair_t p = pair_make_fused(true, false, g_fusion);
    if (g_geom && p.gpu->kind == BACKEND_CUDA) CHECK_INT(cuda_backend_bn_geometry(p.gpu, g_geom), 0);
    double tol = dt_tol(dt);
    char what[128];
    float *hx = hrand(m * c, 11, -2.0f, 2.0f), *hz = hrand(m * c, 12, -1.0f, 1.0f);
    float *hdy = hrand(m * c, 13, -1.0f, 1.0f);
    for (int64_t i = 0; i < m * c; i++) hx[i] += 3.0f + (float)(i % c) * 0.01f;   /* |mean| > std */
    float *hg = hrand(c, 14, 0.5f, 1.5f), *hb = hrand(c, 15, -0.5f, 0.5f);
    float *hrm = hrand(c, 16, -0.1f, 0.1f), *hrv = hrand(c, 17, 0.9f, 1.1f);
    float *hdg = hrand(c, 18, -0.1f, 0.1f), *hdb = hrand(c, 19, -0.1f, 0.1f);
    twin_t x = twin_new(&p, m * c, dt, hx), z = twin_new(&p, m * c, dt, hz);
    twin_t y = twin_new(&p, m * c, dt, NULL), y2 = twin_new(&p, m * c, dt, NULL);
    twin_t mean = twin_new(&p, c, DT_F32, NULL), var = twin_new(&p, c, DT_F32, NULL);
    twin_t g = twin_new(&p, c, DT_F32, hg), b = twin_new(&p, c, DT_F32, hb);
    twin_t rm = twin_new(&p, c, DT_F32, hrm), rv = twin_new(&p, c, DT_F32, hrv);
    const float eps = 1e-5f;
    backend_t *bes[2] = {p.cpu, p.gpu};
    for (int i = 0; i < 2; i++) {
        backend_t *be = bes[i];
#define S(t) (i ? (t).g : (t).c)
        OK(be, be->ops->bn_stats(be, m, c, dt, S(x), (float *)S(mean), (float *)S(var)));
        OK(be, be->ops->bn_apply(be, m, c, dt, S(x), (float *)S(mean), (float *)S(var), (float *)S(g),
                                 (float *)S(b), eps, S(z), true, S(y)));
        OK(be, be->ops->bn_apply(be, m, c, dt, S(x), (float *)S(mean), (float *)S(var), (float *)S(g),
                                 (float *)S(b), eps, NULL, false, S(y2)));
        OK(be, be->ops->bn_update_running(be, c, (float *)S(mean), (float *)S(var), m, 0.1f,
                                          (float *)S(rm), (float *)S(rv)));
    }
    snprintf(what, sizeof what, "m%lld c%d %s bn_stats mean", (long long)m, c, dtype_names[dt]);
    CHECK_INT(twin_cmp(what, &p, &mean, 1e-4), 0);
    snprintf(what, sizeof what, "m%lld c%d %s bn_stats var", (long long)m, c, dtype_names[dt]);
    CHECK_INT(twin_cmp(what, &p, &var, 1e-4), 0);
    snprintf(what, sizeof what, "m%lld c%d %s bn_apply +z relu", (long long)m, c, dtype_names[dt]);
    CHECK_INT(twin_cmp(what, &p, &y, tol), 0);
    snprintf(what, sizeof what, "m%lld c%d %s bn_apply", (long long)m, c, dtype_names[dt]);
    CHECK_INT(twin_cmp(what, &p, &y2, tol), 0);
    snprintf(what, sizeof what, "m%lld c%d bn_update_running mean", (long long)m, c);
    CHECK_INT(twin_cmp(what, &p, &rm, 1e-4), 0);
    snprintf(what, sizeof what, "m%lld c%d bn_update_running var", (long long)m, c);
    CHECK_INT(twin_cmp(what, &p, &rv, 1e-4), 0);

    /* backward on identical inputs (the CPU's y, mean, var), so relu masks agree */
    twin_t yc = twin_from_cpu(&p, &y), mc = twin_from_cpu(&p, &mean), vc = twin_from_cpu(&p, &var);
    twin_t dy = twin_new(&p, m * c, dt, hdy), dx = twin_new(&p, m * c, dt, NULL), dz = twin_new(&p, m * c, dt, NULL);
    twin_t sdy = twin_new(&p, c, DT_F32, NULL), sdx = twin_new(&p, c, DT_F32, NULL);
    twin_t dg = twin_new(&p, c, DT_F32, hdg), db = twin_new(&p, c, DT_F32, hdb);
    for (int i = 0; i < 2; i++) {
        backend_t *be = bes[i];
        OK(be, be->ops->bn_bwd_reduce(be, m, c, dt, S(x), S(yc), ACT_RELU, S(dy), (float *)S(mc), (float *)S(vc), NULL,
                                      NULL, eps, (float *)S(sdy), (float *)S(sdx), (float *)S(dg), (float *)S(db)));
        OK(be, be->ops->bn_bwd_apply(be, m, c, dt, S(x), S(yc), ACT_RELU, S(dy), (float *)S(mc), (float *)S(vc),
                                     (float *)S(g), NULL, eps, (float *)S(sdy), (float *)S(sdx), m, S(dx), S(dz)));
#undef S
    }
    snprintf(what, sizeof what, "m%lld c%d %s bn_bwd_reduce sum_dy", (long long)m, c, dtype_names[dt]);
    CHECK_INT(twin_cmp(what, &p, &sdy, 1e-3), 0);
    snprintf(what, sizeof what, "m%lld c%d %s bn_bwd_reduce sum_dy_xhat", (long long)m, c, dtype_names[dt]);
    CHECK_INT(twin_cmp(what, &p, &sdx, 1e-3), 0);
    snprintf(what, sizeof what, "m%lld c%d %s dgamma (accumulated)", (long long)m, c, dtype_names[dt]);
    CHECK_INT(twin_cmp(what, &p, &dg, 1e-3), 0);
    snprintf(what, sizeof what, "m%lld c%d %s dbeta (accumulated)", (long long)m, c, dtype_names[dt]);
    CHECK_INT(twin_cmp(what, &p, &db, 1e-3), 0);
    snprintf(what, sizeof what, "m%lld c%d %s bn_bwd_apply dx", (long long)m, c, dtype_names[dt]);
    CHECK_INT(twin_cmp(what, &p, &dx, tol), 0);
    snprintf(what, sizeof what, "m%lld c%d %s bn_bwd_apply dz", (long long)m, c, dtype_names[dt]);
    CHECK_INT(twin_cmp(what, &p, &dz, 0.0), 0);

    twin_t *all[] = {&x, &z, &y, &y2, &mean, &var, &g, &b, &rm, &rv, &yc, &mc, &vc, &dy, &dx, &dz,
                     &sdy, &sdx, &dg, &db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) twin_free(&p, all[i]);
    free(hx); free(hz); free(hdy); free(hg); free(hb); free(hrm); free(hrv); free(hdg); free(hdb);
    pair_free(&p);
}

static void test_bn_fp32(void) {
    check_bn(4096, 64, DT_F32);
    check_bn(150, 24, DT_F32);
    check_bn(1000, 256, DT_F32);
}
static void test_bn_fp16(void) {
    check_bn(4096, 64, DT_F16);
    check_bn(150, 24, DT_F16);
    check_bn(1000, 256, DT_F16);
}
static void test_bn_bf16(void) {
    check_bn(4096, 64, DT_BF16);
    check_bn(1000, 256, DT_BF16);
}

/* check_bn of each (rows, channels) in fp32, fp16 and bf16 with the fusion options given */
static void check_bn_dtypes(unsigned fusion, const int (*shapes)[2], int n) {
    g_fusion = fusion;
    for (int d = 0; d < 3; d++)
        for (int i = 0; i < n; i++) check_bn(shapes[i][0], shapes[i][1], d == 0 ? DT_F32 : d == 1 ? DT_F16 : DT_BF16);
    g_fusion = 0;
}

static void test_bn_vec16(void) {
    static const int shapes[][2] = {{4096, 64}, {2048, 128}, {150, 24}, {333, 40}, {1000, 256}, {77, 8}};
    check_bn_dtypes(BACKEND_FUSE_VEC16, shapes, 6);
}

/* bn_wide_final: the same CPU comparisons; 131072 rows make the 1024 row splits (the most
 * bn_geom takes, 32 per thread of the wide pass), 2000 rows 16 splits (fewer than the 32
 * threads of a channel: most add nothing), 9000 rows 71 (not a multiple of 32), 3000 rows
 * x 200 channels leave a partial block of channels. */
static void test_bn_wide_final(void) {
    static const int shapes[][2] = {{131072, 64}, {2000, 256}, {9000, 128}, {3000, 200}, {150, 24}};
    check_bn_dtypes(BACKEND_FUSE_BN_WIDE_FINAL, shapes, 5);
    g_fusion = BACKEND_FUSE_BN_WIDE_FINAL | BACKEND_FUSE_VEC16;
    check_bn(131072, 64, DT_BF16);
    g_fusion = 0;
}

/* bn_more_splits: the same CPU comparisons on the shapes whose geometry it changes (the
 * batch-128 layers of 8 x 8 and 4 x 4: 256 and 128 row splits instead of 64 and 32; 32768
 * x 128: 1024 instead of 256, the most bn_geom takes), on a shape below one block step
 * and on one of 8 channels; with the wide second pass (as in all) and, on one shape,
 * with the default one. */
static void test_bn_more_splits(void) {
    static const int shapes[][2] = {{8192, 256}, {2048, 512}, {32768, 128}, {150, 24}, {77, 8}};
    check_bn_dtypes(BACKEND_FUSE_BN_MORE_SPLITS | BACKEND_FUSE_BN_WIDE_FINAL, shapes, 5);
    g_fusion = BACKEND_FUSE_BN_MORE_SPLITS;
    check_bn(8192, 256, DT_BF16);
    g_fusion = 0;
}

/* bn_fold_running: bn_stats_running on the GPU gives what bn_stats then
 * bn_update_running give on the same GPU, bit for bit (mean, var and the running
 * statistics), with the default and the wide final pass; and the CPU's two calls within
 * check_bn's tolerances. */
static void check_fold(int64_t m, int c, dtype_t dt, unsigned extra) {
    pair_t p = pair_make_fused(true, false, BACKEND_FUSE_BN_FOLD_RUNNING | extra);
    if (p.gpu->kind != BACKEND_CUDA) {   /* RUNNER_GPU_TEST_DRYRUN=cpu: no such op on a cpu side */
        fprintf(stderr, "  dry run: bn_stats_running is the cuda backend's\n");
        pair_free(&p);
        return;
    }
    CHECK(p.gpu->ops->bn_stats_running != NULL);
    CHECK(p.cpu->ops->bn_stats_running == NULL);   /* the cpu backend runs the two ops */
    if (!p.gpu->ops->bn_stats_running) {
        pair_free(&p);
        return;
    }
    float *hx = hrand(m * c, 21, -2.0f, 2.0f), *hrm = hrand(c, 22, -0.1f, 0.1f), *hrv = hrand(c, 23, 0.9f, 1.1f);
    for (int64_t i = 0; i < m * c; i++) hx[i] += 3.0f;
    twin_t x = twin_new(&p, m * c, dt, hx);
    twin_t m1 = twin_new(&p, c, DT_F32, NULL), v1 = twin_new(&p, c, DT_F32, NULL);
    twin_t m2 = twin_new(&p, c, DT_F32, NULL), v2 = twin_new(&p, c, DT_F32, NULL);
    twin_t rm1 = twin_new(&p, c, DT_F32, hrm), rv1 = twin_new(&p, c, DT_F32, hrv);
    twin_t rm2 = twin_new(&p, c, DT_F32, hrm), rv2 = twin_new(&p, c, DT_F32, hrv);
    backend_t *g = p.gpu, *cpu = p.cpu;
    OK(g, g->ops->bn_stats(g, m, c, dt, x.g, (float *)m1.g, (float *)v1.g));
    OK(g, g->ops->bn_update_running(g, c, (float *)m1.g, (float *)v1.g, m, 0.1f, (float *)rm1.g, (float *)rv1.g));
    OK(g, g->ops->bn_stats_running(g, m, c, dt, x.g, (float *)m2.g, (float *)v2.g, m, 0.1f, (float *)rm2.g,
                                   (float *)rv2.g));
    OK(cpu, cpu->ops->bn_stats(cpu, m, c, dt, x.c, (float *)m2.c, (float *)v2.c));
    OK(cpu, cpu->ops->bn_update_running(cpu, c, (float *)m2.c, (float *)v2.c, m, 0.1f, (float *)rm2.c,
                                        (float *)rv2.c));
    const twin_t *one[4] = {&m1, &v1, &rm1, &rv1}, *two[4] = {&m2, &v2, &rm2, &rv2};
    static const char *const names[4] = {"mean", "var", "running mean", "running var"};
    for (int k = 0; k < 4; k++) {
        float *c1, *g1, *c2, *g2;
        twin_get(&p, one[k], &c1, &g1);
        twin_get(&p, two[k], &c2, &g2);
        int same = !memcmp(g1, g2, (size_t)c * sizeof(float));
        if (!same) fprintf(stderr, "  m%lld c%d %s %s: bn_stats_running differs from the two ops\n", (long long)m, c,
                           dtype_names[dt], names[k]);
        CHECK(same);
        free(c1); free(g1); free(c2); free(g2);
        char what[128];
        snprintf(what, sizeof what, "m%lld c%d %s bn_stats_running %s vs cpu", (long long)m, c, dtype_names[dt],
                 names[k]);
        CHECK_INT(twin_cmp(what, &p, two[k], 1e-4), 0);
    }
    twin_t *all[] = {&x, &m1, &v1, &m2, &v2, &rm1, &rv1, &rm2, &rv2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) twin_free(&p, all[i]);
    free(hx); free(hrm); free(hrv);
    pair_free(&p);
}

static void test_bn_fold_running(void) {
    check_fold(131072, 64, DT_BF16, 0);
    check_fold(9000, 128, DT_F32, 0);
    check_fold(3000, 200, DT_F16, 0);
    check_fold(131072, 64, DT_BF16, BACKEND_FUSE_BN_WIDE_FINAL);
    check_fold(150, 24, DT_F32, BACKEND_FUSE_BN_WIDE_FINAL);
    /* the rest of the BN ops with the option on (bn_stats and bn_update_running as before) */
    g_fusion = BACKEND_FUSE_BN_FOLD_RUNNING;
    check_bn(4096, 64, DT_F16);
    g_fusion = 0;
}

/* cuda_backend_bn_geometry (bench_gpu_bench --bn-sweep's overrides): under each override
 * the apply kernels' outputs (y with and without the residual, dx, dz) are the default
 * geometry's bits, and the reductions' (mean, var, sum_dy, sum_dy_xhat) agree with the
 * default's within 1e-5 of the vector's largest value (another fixed order of the same
 * sums; a row counted twice or missed moves a sum by a whole term); once more against the
 * CPU (check_bn) under the most different override. */
static const cuda_bn_geom_t GEOMS[] = {{4, 0, 0, 0, 0, 0}, {32, 0, 0, 0, 0, 0}, {0, 32, 0, 0, 0, 0}, {0, 4, 0, 0, 0, 0}, {0, 0, 2, 0, 0, 0},
                                       {4, 16, 4, 0, 0, 0}, {8, 0, 1, 0, 0, 0}, {0, 0, 0, 1, 0, 0}, {4, 16, 4, 1, 0, 0}, {64, 0, 0, 1, 0, 0}};
enum { NGEOMS = (int)(sizeof GEOMS / sizeof GEOMS[0]) };

/* the GPU's outputs of the six ops on one input, under geometry gi (-1: the default) */
static void geom_run(pair_t *p, int gi, int64_t m, int c, dtype_t dt, twin_t *t, float **out) {
    backend_t *g = p->gpu;
    CHECK_INT(cuda_backend_bn_geometry(g, gi < 0 ? NULL : &GEOMS[gi]), 0);
    float *mean = (float *)t[3].g, *var = (float *)t[4].g, *gam = (float *)t[5].g, *bet = (float *)t[6].g;
    /* every output zeroed first: one left unwritten (a one-pass ticket not reset by the
     * call before, say) then differs from the default's */
    static const int outs[8] = {7, 8, 9, 10, 11, 12, 15, 16};
    for (int k = 0; k < 8; k++)
        OK(g, g->ops->zero(g, t[outs[k]].g, (size_t)t[outs[k]].n * backend_elem_size(g, t[outs[k]].dt)));
    OK(g, g->ops->bn_stats(g, m, c, dt, t[0].g, (float *)t[7].g, (float *)t[8].g));
    OK(g, g->ops->bn_apply(g, m, c, dt, t[0].g, mean, var, gam, bet, 1e-5f, t[1].g, ACT_RELU, t[9].g));
    OK(g, g->ops->bn_apply(g, m, c, dt, t[0].g, mean, var, gam, bet, 1e-5f, NULL, ACT_RELU, t[10].g));
    OK(g, g->ops->bn_bwd_reduce(g, m, c, dt, t[0].g, t[9].g, ACT_RELU, t[2].g, mean, var, NULL, NULL, 1e-5f,
                                (float *)t[11].g, (float *)t[12].g, (float *)t[13].g, (float *)t[14].g));
    OK(g, g->ops->bn_bwd_apply(g, m, c, dt, t[0].g, t[9].g, ACT_RELU, t[2].g, mean, var, gam, NULL, 1e-5f,
                               (float *)t[11].g, (float *)t[12].g, m, t[15].g, t[16].g));
    /* outputs: 0 mean, 1 var, 2 y (+z), 3 y, 4 sum_dy, 5 sum_dy_xhat, 6 dx, 7 dz */
    for (int k = 0; k < 8; k++) {
        float *cv;
        twin_get(p, &t[outs[k]], &cv, &out[k]);
        free(cv);
    }
    cuda_backend_bn_geometry(g, NULL);
}

static void check_geometry(int64_t m, int c, dtype_t dt) {
    pair_t p = pair_make_fused(true, false, 0);
    if (p.gpu->kind != BACKEND_CUDA) {   /* RUNNER_GPU_TEST_DRYRUN=cpu: the overrides are the cuda backend's */
        fprintf(stderr, "  dry run: cuda_backend_bn_geometry is the cuda backend's\n");
        pair_free(&p);
        return;
    }
    float *hx = hrand(m * c, 31, -2.0f, 2.0f), *hz = hrand(m * c, 32, -1.0f, 1.0f), *hdy = hrand(m * c, 33, -1, 1);
    for (int64_t i = 0; i < m * c; i++) hx[i] += 2.0f + (float)(i % c) * 0.01f;
    float *hmv = hrand(4 * (int64_t)c, 34, 0.5f, 1.5f);   /* fixed mean, var, gamma, beta for the apply passes */
    twin_t t[17];
    t[0] = twin_new(&p, m * c, dt, hx);
    t[1] = twin_new(&p, m * c, dt, hz);
    t[2] = twin_new(&p, m * c, dt, hdy);
    for (int k = 0; k < 4; k++) t[3 + k] = twin_new(&p, c, DT_F32, hmv + k * c);
    for (int k = 7; k < 17; k++) {
        bool chan = k == 7 || k == 8 || (k >= 11 && k <= 14);
        t[k] = twin_new(&p, chan ? c : m * c, chan ? DT_F32 : dt, NULL);
    }
    static const char *const names[8] = {"mean", "var", "y (+z)", "y", "sum_dy", "sum_dy_xhat", "dx", "dz"};
    float *ref[8], *got[8];
    geom_run(&p, -1, m, c, dt, t, ref);
    for (int gi = 0; gi < NGEOMS; gi++) {
        geom_run(&p, gi, m, c, dt, t, got);
        for (int k = 0; k < 8; k++) {
            int64_t n = (k < 2 || k == 4 || k == 5) ? c : m * c;
            bool exact = !(k < 2 || k == 4 || k == 5);
            int64_t bad = 0;
            double worst = 0, scale = 0;   /* reductions: relative to the vector's largest |sum| */
            for (int64_t i = 0; i < n && !exact; i++) scale = fmax(scale, fabs((double)ref[k][i]));
            for (int64_t i = 0; i < n; i++) {
                if (exact) {
                    bad += memcmp(&ref[k][i], &got[k][i], sizeof(float)) != 0;
                } else {
                    double rel = fabs((double)got[k][i] - ref[k][i]) / (scale > 0 ? scale : 1.0);
                    if (rel > worst) worst = rel;
                    bad += rel > 1e-5;
                }
            }
            if (bad)
                fprintf(stderr, "  m%lld c%d %s geometry (%d,%d,%d) %s: %lld of %lld differ (worst rel %.3g)\n",
                        (long long)m, c, dtype_names[dt], GEOMS[gi].rows_min, GEOMS[gi].blocks_per_sm,
                        GEOMS[gi].v_max, names[k], (long long)bad, (long long)n, worst);
            CHECK(bad == 0);
            free(got[k]);
        }
    }
    for (int k = 0; k < 8; k++) free(ref[k]);
    for (int k = 0; k < 17; k++) twin_free(&p, &t[k]);
    free(hx); free(hz); free(hdy); free(hmv);
    pair_free(&p);
}

static void test_bn_geometry(void) {
    check_geometry(8192, 256, DT_BF16);
    check_geometry(2048, 512, DT_F16);
    check_geometry(32768, 64, DT_BF16);
    check_geometry(150, 24, DT_F32);
    /* against the CPU under the override farthest from the default (4 rows, 4-wide, 16 per
     * SM, one pass) */
    pair_t p = pair_make_fused(true, false, 0);
    bool cuda = p.gpu->kind == BACKEND_CUDA;
    pair_free(&p);
    if (!cuda) return;
    g_geom = &GEOMS[8];
    check_bn(8192, 256, DT_BF16);
    check_bn(3000, 200, DT_F16);
    g_geom = NULL;
    /* the bn_one_pass option: one pass on the layers of at most 64 row splits (these two),
     * two passes on the rest (the third) */
    g_fusion = BACKEND_FUSE_BN_ONE_PASS;
    check_bn(8192, 256, DT_BF16);
    check_bn(2048, 512, DT_F16);
    check_bn(131072, 64, DT_BF16);
    /* bn_apply_tune: the apply kernels' grid rows timed at each shape's first call */
    g_fusion = BACKEND_FUSE_BN_APPLY_TUNE;
    check_bn(8192, 256, DT_BF16);
    check_bn(2048, 512, DT_F16);
    check_bn(150, 24, DT_F32);
    g_fusion = 0;
}

int main(void) {
    gpu_or_skip();
    TEST_RUN(test_bn_geometry);
    TEST_RUN(test_bn_fold_running);
    TEST_RUN(test_bn_wide_final);
    TEST_RUN(test_bn_more_splits);
    TEST_RUN(test_bn_vec16);
    TEST_RUN(test_bn_fp32);
    TEST_RUN(test_bn_fp16);
    TEST_RUN(test_bn_bf16);
    return test_main_end();
}
