/* test_cpu_norm.c: the CPU backend's batch norm phases (stats, apply with and without
 * relu / relu6 and residual, running-stat update, backward reduce + apply) against a
 * double-precision reference of torch.nn.BatchNorm2d in training mode, backward also
 * against central finite differences of that reference; AMP rounding of the outputs.
 *
 * Tolerances: outputs are O(1) and computed in fp32 from double statistics, so 2e-6
 * absolute + 1e-5 relative; gradients 2e-5 absolute + 1e-4 relative (finite differences
 * with h = 1e-4 have truncation error ~1e-8, far below that).
 */
#include "tests/cpu/cpu_test_util.h"

static backend_t *g_be;

#define M 300      /* rows: more than one 256-row reduction block */
#define C 5
#define EPS 1e-5

/* Reference forward in double: y = act(gamma * xhat + beta [+ z]) with batch stats. */
static void ref_bn(const double *x, const double *gamma, const double *beta, const double *z,
                   act_kind_t act, double *y, double *mean, double *var) {
    for (int j = 0; j < C; j++) {
        double s = 0, q = 0;
        for (int i = 0; i < M; i++) s += x[i * C + j];
        double mu = s / M;
        for (int i = 0; i < M; i++) q += (x[i * C + j] - mu) * (x[i * C + j] - mu);
        mean[j] = mu;
        var[j] = q / M;
        double inv = 1.0 / sqrt(var[j] + EPS);
        for (int i = 0; i < M; i++) {
            double v = gamma[j] * (x[i * C + j] - mu) * inv + beta[j] + (z ? z[i * C + j] : 0);
            v = act != ACT_NONE && v < 0 ? 0 : v;
            y[i * C + j] = act == ACT_RELU6 && v > 6 ? 6 : v;
        }
    }
}

typedef struct bn_ref_args {
    double *x, *gamma, *beta, *z, *g;
    act_kind_t act;
} bn_ref_args_t;

static double ref_loss(const bn_ref_args_t *a) {
    double y[M * C], mean[C], var[C], l = 0;
    ref_bn(a->x, a->gamma, a->beta, a->z, a->act, y, mean, var);
    for (int i = 0; i < M * C; i++) l += a->g[i] * y[i];
    return l;
}

/* Central differences of L = sum(g * y) for every element of v (length n). */
static int fd_check(const char *what, bn_ref_args_t *a, double *v, int n, const float *analytic) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double keep = v[i], h = 1e-4;
        v[i] = keep + h;
        double lp = ref_loss(a);
        v[i] = keep - h;
        double lm = ref_loss(a);
        v[i] = keep;
        double fd = (lp - lm) / (2 * h);
        if (!(fabs(analytic[i] - fd) <= 2e-5 + 1e-4 * fabs(fd))) {
            if (!bad)
                fprintf(stderr, "  %s[%d]: analytic %.9g, finite difference %.9g\n", what, i,
                        (double)analytic[i], fd);
            bad++;
        }
    }
    return bad;
}

static void to_d(const float *a, double *d, int n) { for (int i = 0; i < n; i++) d[i] = a[i]; }

/* One configuration: forward, statistics and all gradients. gamma in [g0, g0 + 1]. */
static void bn_case(act_kind_t act, bool residual, uint64_t seed, float g0) {
    bool relu = act != ACT_NONE;
    const backend_ops_t *ops = g_be->ops;
    static float x[M * C], z[M * C], g[M * C], y[M * C], dx[M * C], dz[M * C];
    float gamma[C], beta[C], mean[C], var[C], sdy[C], sdx[C], dgamma[C], dbeta[C];
    fill_uniform(x, M * C, seed, -1.5f, 2.5f);
    fill_uniform(z, M * C, seed + 1, -1, 1);
    fill_uniform(g, M * C, seed + 2, -1, 1);
    fill_uniform(gamma, C, seed + 3, g0, g0 + 1.0f);
    fill_uniform(beta, C, seed + 4, -0.5f, 0.5f);
    static double xd[M * C], zd[M * C], gd[M * C], yd[M * C];
    double gammad[C], betad[C], meand[C], vard[C];
    to_d(x, xd, M * C); to_d(z, zd, M * C); to_d(g, gd, M * C);
    to_d(gamma, gammad, C); to_d(beta, betad, C);
    ref_bn(xd, gammad, betad, residual ? zd : NULL, act, yd, meand, vard);

    CHECK_INT(ops->bn_stats(g_be, M, C, DT_F32, x, mean, var), 0);
    CHECK_INT(compare_arrays("mean", mean, meand, C, 1e-7, 1e-6), 0);
    CHECK_INT(compare_arrays("var", var, vard, C, 1e-7, 1e-6), 0);
    CHECK_INT(ops->bn_apply(g_be, M, C, DT_F32, x, mean, var, gamma, beta, (float)EPS,
                            residual ? z : NULL, act, y), 0);
    CHECK_INT(compare_arrays("y", y, yd, M * C, 2e-6, 1e-5), 0);
    if (act == ACT_RELU6) {   /* both clamps happen */
        int at0 = 0, at6 = 0;
        for (int i = 0; i < M * C; i++) {
            at0 += y[i] == 0.0f;
            at6 += y[i] == 6.0f;
        }
        CHECK(at0 > M * C / 20 && at6 > M * C / 50);
    }

    for (int j = 0; j < C; j++) { dgamma[j] = 0.25f; dbeta[j] = -0.5f; }   /* accumulate */
    CHECK_INT(ops->bn_bwd_reduce(g_be, M, C, DT_F32, x, relu ? y : NULL, act, g, mean, var, NULL,
                                 NULL, (float)EPS, sdy, sdx, dgamma, dbeta), 0);
    for (int j = 0; j < C; j++) {
        CHECK_NEAR(dgamma[j], 0.25 + sdx[j], 1e-6, 0);
        CHECK_NEAR(dbeta[j], -0.5 + sdy[j], 1e-6, 0);
        dgamma[j] -= 0.25f;
        dbeta[j] += 0.5f;
    }
    memset(dz, 0, sizeof dz);
    CHECK_INT(ops->bn_bwd_apply(g_be, M, C, DT_F32, x, relu ? y : NULL, act, g, mean, var, gamma,
                                NULL, (float)EPS, sdy, sdx, M, dx, residual ? dz : NULL), 0);
    bn_ref_args_t a = {xd, gammad, betad, residual ? zd : NULL, gd, act};
    CHECK_INT(fd_check("dx", &a, xd, M * C, dx), 0);
    CHECK_INT(fd_check("dgamma", &a, gammad, C, dgamma), 0);
    CHECK_INT(fd_check("dbeta", &a, betad, C, dbeta), 0);
    if (residual) CHECK_INT(fd_check("dz", &a, zd, M * C, dz), 0);
    if (test_failures_) fprintf(stderr, "  (act %d residual %d)\n", (int)act, residual);
}

static void test_bn_plain(void) { bn_case(ACT_NONE, false, 10, 0.5f); }
static void test_bn_relu(void) { bn_case(ACT_RELU, false, 20, 0.5f); }
static void test_bn_add_relu(void) { bn_case(ACT_RELU, true, 30, 0.5f); }
static void test_bn_add(void) { bn_case(ACT_NONE, true, 40, 0.5f); }
/* relu6 (MobileNetV2's bn_relu6): gamma in [4, 5] clamps outputs at both ends */
static void test_bn_relu6(void) { bn_case(ACT_RELU6, false, 70, 4.0f); }

/* Running statistics: torch's momentum form with the unbiased variance. */
static void test_bn_running(void) {
    float mean[2] = {1.0f, -2.0f}, var[2] = {0.9f, 4.0f};
    float rm[2] = {0.5f, 0.0f}, rv[2] = {2.0f, 1.0f};
    CHECK_INT(g_be->ops->bn_update_running(g_be, 2, mean, var, 10, 0.1f, rm, rv), 0);
    CHECK_NEAR(rm[0], 0.1 * 1.0 + 0.9 * 0.5, 1e-7, 0);          /* 0.55 */
    CHECK_NEAR(rm[1], 0.1 * -2.0, 1e-7, 0);                      /* -0.2 */
    CHECK_NEAR(rv[0], 0.1 * 0.9 * 10 / 9 + 0.9 * 2.0, 1e-6, 0);  /* 1.9 */
    CHECK_NEAR(rv[1], 0.1 * 4.0 * 10 / 9 + 0.9 * 1.0, 1e-6, 0);  /* 1.3444... */
}

/* Statistics of a large constant-offset tensor stay accurate (no cancellation). */
static void test_bn_stats_offset(void) {
    int64_t m = 100000;
    float *x = falloc(m);
    for (int64_t i = 0; i < m; i++) x[i] = 1000.0f + (i % 2 ? 0.5f : -0.5f);
    float mean, var;
    CHECK_INT(g_be->ops->bn_stats(g_be, m, 1, DT_F32, x, &mean, &var), 0);
    CHECK_NEAR(mean, 1000.0, 1e-4, 0);
    CHECK_NEAR(var, 0.25, 1e-5, 0);
    free(x);
}

/* AMP: the half outputs are the fp32 outputs rounded once. */
static void test_bn_amp(void) {
    const backend_ops_t *ops = g_be->ops;
    static float x[M * C], z[M * C], g[M * C], y32[M * C], y16[M * C], dx32[M * C], dx16[M * C];
    float gamma[C], beta[C], mean[C], var[C], sdy[C], sdx[C], dg[C] = {0}, db[C] = {0};
    fill_uniform(x, M * C, 50, -2, 2);
    fill_uniform(z, M * C, 51, -1, 1);
    fill_uniform(g, M * C, 52, -1, 1);
    fill_uniform(gamma, C, 53, 0.5f, 1.5f);
    fill_uniform(beta, C, 54, -0.5f, 0.5f);
    round_all(x, M * C, DT_F16); round_all(z, M * C, DT_F16); round_all(g, M * C, DT_F16);
    for (int dti = 1; dti <= 2; dti++) {
        dtype_t dt = (dtype_t)dti;
        CHECK_INT(ops->bn_stats(g_be, M, C, dt, x, mean, var), 0);
        CHECK_INT(ops->bn_apply(g_be, M, C, DT_F32, x, mean, var, gamma, beta, 1e-5f, z, true,
                                y32), 0);
        CHECK_INT(ops->bn_apply(g_be, M, C, dt, x, mean, var, gamma, beta, 1e-5f, z, true,
                                y16), 0);
        round_all(y32, M * C, dt);
        CHECK(memcmp(y16, y32, sizeof y16) == 0);
        CHECK_INT(ops->bn_bwd_reduce(g_be, M, C, dt, x, y16, ACT_RELU, g, mean, var, NULL, NULL, 1e-5f, sdy, sdx, dg,
                                     db), 0);
        CHECK_INT(ops->bn_bwd_apply(g_be, M, C, DT_F32, x, y16, ACT_RELU, g, mean, var, gamma, NULL, 1e-5f, sdy,
                                    sdx, M, dx32, NULL), 0);
        CHECK_INT(ops->bn_bwd_apply(g_be, M, C, dt, x, y16, ACT_RELU, g, mean, var, gamma, NULL, 1e-5f, sdy,
                                    sdx, M, dx16, NULL), 0);
        int changed = 0;   /* rounding is visible: most fp32 values are not representable */
        for (int i = 0; i < M * C; i++) changed += dx16[i] != dx32[i];
        CHECK(changed > M * C / 2);
        round_all(dx32, M * C, dt);
        CHECK(memcmp(dx16, dx32, sizeof dx16) == 0);
    }
}

/* dx may overwrite dy (in-place backward): same bits as into a separate buffer. */
static void test_bn_bwd_in_place(void) {
    const backend_ops_t *ops = g_be->ops;
    static float x[M * C], y[M * C], g[M * C], dx[M * C], dz[M * C], inplace[M * C];
    float gamma[C], beta[C], mean[C], var[C], sdy[C], sdx[C], dg[C] = {0}, db[C] = {0};
    fill_uniform(x, M * C, 80, -2, 2);
    fill_uniform(g, M * C, 81, -1, 1);
    fill_uniform(gamma, C, 82, 0.5f, 1.5f);
    fill_uniform(beta, C, 83, -0.5f, 0.5f);
    CHECK_INT(ops->bn_stats(g_be, M, C, DT_F32, x, mean, var), 0);
    CHECK_INT(ops->bn_apply(g_be, M, C, DT_F32, x, mean, var, gamma, beta, 1e-5f, NULL, true,
                            y), 0);
    CHECK_INT(ops->bn_bwd_reduce(g_be, M, C, DT_F32, x, y, ACT_RELU, g, mean, var, NULL, NULL, 1e-5f, sdy, sdx, dg,
                                 db), 0);
    CHECK_INT(ops->bn_bwd_apply(g_be, M, C, DT_F32, x, y, ACT_RELU, g, mean, var, gamma, NULL, 1e-5f, sdy, sdx,
                                M, dx, dz), 0);
    memcpy(inplace, g, sizeof g);
    CHECK_INT(ops->bn_bwd_apply(g_be, M, C, DT_F32, x, y, ACT_RELU, inplace, mean, var, gamma, NULL, 1e-5f, sdy,
                                sdx, M, inplace, NULL), 0);
    CHECK(memcmp(inplace, dx, sizeof dx) == 0);
    int masked = 0;   /* dz is dy where y > 0, else 0 */
    for (int i = 0; i < M * C; i++) masked += dz[i] == (y[i] > 0 ? g[i] : 0.0f);
    CHECK_INT(masked, M * C);
}

/* Channel counts that take the 8-lane vector loops of the reductions (16: two groups, 40:
 * a full pass of four groups plus one, 21: two groups plus five scalar channels) on 1000
 * rows (a partial last block and a partial last float run) match a double reference:
 * statistics of offset data (mean 3) within 1e-6 relative, and the backward sums (masked
 * by relu, or by relu6 with gamma 4..5 so that both ends clamp) within 1e-4 absolute + 1e-5
 * relative (float runs of 16 rows, ~1e-6 each); relu6's outputs are clamped to [0, 6]. */
static void test_bn_vector_channels(void) {
    const backend_ops_t *ops = g_be->ops;
    const int cs[3] = {16, 40, 21};
    const int64_t m = 1000;
    for (int ci = 0; ci < 6; ci++) {
        int c = cs[ci % 3];
        act_kind_t act = ci < 3 ? ACT_RELU : ACT_RELU6;
        float *x = falloc(m * c), *y = falloc(m * c), *g = falloc(m * c);
        fill_uniform(x, m * c, 90 + ci, 1, 5);
        fill_uniform(g, m * c, 95 + ci, -1, 1);
        float gamma[40], beta[40], mean[40], var[40], sdy[40], sdx[40], dg[40] = {0},
              db[40] = {0};
        fill_uniform(gamma, c, 98, act == ACT_RELU6 ? 4.0f : 0.5f, act == ACT_RELU6 ? 5.0f : 1.5f);
        fill_uniform(beta, c, 99, -0.5f, 0.5f);
        CHECK_INT(ops->bn_stats(g_be, m, c, DT_F32, x, mean, var), 0);
        CHECK_INT(ops->bn_apply(g_be, m, c, DT_F32, x, mean, var, gamma, beta, 1e-5f, NULL, act,
                                y), 0);
        CHECK_INT(ops->bn_bwd_reduce(g_be, m, c, DT_F32, x, y, act, g, mean, var, NULL, NULL, 1e-5f, sdy, sdx, dg,
                                     db), 0);
        int64_t clamped = 0;
        for (int64_t i = 0; i < m * c; i++) {
            CHECK(y[i] >= 0.0f && (act != ACT_RELU6 || y[i] <= 6.0f));
            clamped += y[i] == 6.0f;
        }
        if (act == ACT_RELU6) CHECK(clamped > m * c / 50);
        for (int j = 0; j < c; j++) {
            double s = 0, q = 0, sd = 0, sq = 0;
            for (int64_t i = 0; i < m; i++) s += x[i * c + j];
            double mu = s / (double)m;
            for (int64_t i = 0; i < m; i++) q += (x[i * c + j] - mu) * (x[i * c + j] - mu);
            double v = q / (double)m, inv = 1.0 / sqrt(v + 1e-5);
            for (int64_t i = 0; i < m; i++) {
                double yv = y[i * c + j];
                double d = yv > 0 && (act != ACT_RELU6 || yv < 6) ? g[i * c + j] : 0;
                sd += d;
                sq += d * (x[i * c + j] - mu) * inv;
            }
            CHECK_NEAR(mean[j], mu, 0, 1e-6);
            CHECK_NEAR(var[j], v, 0, 1e-5);
            CHECK_NEAR(sdy[j], sd, 1e-4, 1e-5);
            CHECK_NEAR(sdx[j], sq, 1e-4, 1e-5);
            CHECK(db[j] == sdy[j] && dg[j] == sdx[j]);
        }
        free(x);
        free(y);
        free(g);
    }
}

/* The same call gives the same bits on 1 and 2 threads (fixed reduction blocks). */
static void test_bn_thread_independent(void) {
    backend_t *one = make_cpu(1);
    int64_t m = 5000;
    int c = 16;
    float *x = falloc(m * c);
    fill_uniform(x, m * c, 60, -3, 3);
    float m1[16], v1[16], m2[16], v2[16];
    CHECK_INT(one->ops->bn_stats(one, m, c, DT_F32, x, m1, v1), 0);
    CHECK_INT(g_be->ops->bn_stats(g_be, m, c, DT_F32, x, m2, v2), 0);
    CHECK(memcmp(m1, m2, sizeof m1) == 0);
    CHECK(memcmp(v1, v2, sizeof v1) == 0);
    float *g = falloc(m * c);   /* the backward sums too (x stands in for y: relu mask) */
    fill_uniform(g, m * c, 61, -1, 1);
    float s1[16], q1[16], s2[16], q2[16], dg[16] = {0}, db[16] = {0};
    CHECK_INT(one->ops->bn_bwd_reduce(one, m, c, DT_F32, x, x, ACT_RELU, g, m1, v1, NULL, NULL, 1e-5f, s1, q1, dg,
                                      db), 0);
    CHECK_INT(g_be->ops->bn_bwd_reduce(g_be, m, c, DT_F32, x, x, ACT_RELU, g, m1, v1, NULL, NULL, 1e-5f, s2, q2, dg,
                                       db), 0);
    CHECK(memcmp(s1, s2, sizeof s1) == 0);
    CHECK(memcmp(q1, q2, sizeof q1) == 0);
    free(g);
    backend_free(one);
    free(x);
}

int main(void) {
    g_be = make_cpu(2);
    TEST_RUN(test_bn_plain);
    TEST_RUN(test_bn_relu);
    TEST_RUN(test_bn_add_relu);
    TEST_RUN(test_bn_add);
    TEST_RUN(test_bn_relu6);
    TEST_RUN(test_bn_running);
    TEST_RUN(test_bn_stats_offset);
    TEST_RUN(test_bn_amp);
    TEST_RUN(test_bn_bwd_in_place);
    TEST_RUN(test_bn_vector_channels);
    TEST_RUN(test_bn_thread_independent);
    backend_free(g_be);
    return test_main_end();
}
