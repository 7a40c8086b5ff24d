/* test_ddp.c: DDP over a recording mock comm (bucket boundaries, all-reduce order as
 * ready_from decreases, no_sync) and over real shm ranks (2 and 3 processes: averaged
 * gradients bit-equal to the same arithmetic done here, grad accumulation, fp16/bf16
 * compression, initial and per-step broadcasts, SyncBN hooks), plus the SyncBN
 * statistics combination against the statistics of the concatenated batch. A minimal
 * host-memory backend stands in for the CPU backend. */
#include "comm/ddp.h"
#include "util/half.h"
#include "tests/comm/ranks.h"
#include "tests/test.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- a host-memory backend: just the memory slots ---- */
static void *hb_alloc(backend_t *be, size_t n) { (void)be; return calloc(1, n ? n : 1); }
static void hb_release(backend_t *be, void *p) { (void)be; free(p); }
static int hb_copy(backend_t *be, void *d, const void *s, size_t n) { (void)be; memcpy(d, s, n); return 0; }
static const backend_ops_t hb_ops = {
    .name = "host-test", .alloc = hb_alloc, .release = hb_release, .upload = hb_copy,
    .download = hb_copy, .copy = hb_copy,
};
static backend_t host_be = { .ops = &hb_ops, .kind = BACKEND_CPU };

/* ---- a mock comm of world 2 that records each all-reduce's buffer and count ---- */
typedef struct mock_comm {
    comm_t base;
    pthread_mutex_t mu;
    int n_calls;
    const void *bufs[64];
    size_t counts[64];
} mock_comm_t;

/* "All-reduce" as if the other rank held the same values: AVG leaves them, SUM doubles. */
static int mock_allreduce(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op, err_t *e) {
    (void)e;
    mock_comm_t *m = (mock_comm_t *)c;
    pthread_mutex_lock(&m->mu);
    if (m->n_calls < 64) { m->bufs[m->n_calls] = buf; m->counts[m->n_calls] = count; }
    m->n_calls++;
    pthread_mutex_unlock(&m->mu);
    if (dt == DT_F32 && op == COMM_SUM)
        for (size_t i = 0; i < count; i++) ((float *)buf)[i] *= 2;
    return 0;
}
static int mock_bcast(comm_t *c, void *b, size_t n, int r, err_t *e) { (void)c; (void)b; (void)n; (void)r; (void)e; return 0; }
static int mock_gather(comm_t *c, const void *s, void *r, size_t n, err_t *e) { (void)c; (void)s; (void)r; (void)n; (void)e; return 0; }
static int mock_barrier(comm_t *c, err_t *e) { (void)c; (void)e; return 0; }
static void mock_destroy(comm_t *c) { (void)c; }
static const comm_ops_t mock_ops = { .name = "mock", .destroy = mock_destroy,
    .allreduce = mock_allreduce, .broadcast = mock_bcast, .allgather = mock_gather,
    .barrier = mock_barrier };

/* Tensors of 100000, 300000, 50000, 200000, 262144 and 10 floats; first bucket cap
 * 0.25 MiB (65536 floats), later caps 1 MiB (262144 floats). From the end: {10, 262144}
 * reaches 65536 -> bucket 0; {200000, 50000, 300000} reaches 262144 -> bucket 1;
 * {100000} is what is left -> bucket 2. */
static const int64_t layout[7] = { 0, 100000, 400000, 450000, 650000, 912144, 912154 };

static void test_bucket_boundaries(void) {
    mock_comm_t m = {0};
    pthread_mutex_init(&m.mu, NULL);
    comm_base_init(&m.base, &mock_ops, 0, 2, 10, false);
    float *g = calloc(912154, 4);
    err_t e = {0};
    ddp_opts_t o = { .bucket_mb = 1, .first_bucket_mb = 0.25 };
    ddp_t *d = ddp_create(&m.base, &host_be, g, 912154, layout, 6, &o, &e);
    CHECK(d != NULL);
    if (!d) return;
    CHECK_INT(ddp_bucket_count(d), 3);
    int64_t b, en;
    ddp_bucket_range(d, 0, &b, &en);
    CHECK_INT(b, 650000); CHECK_INT(en, 912154);
    ddp_bucket_range(d, 1, &b, &en);
    CHECK_INT(b, 100000); CHECK_INT(en, 650000);
    ddp_bucket_range(d, 2, &b, &en);
    CHECK_INT(b, 0); CHECK_INT(en, 100000);
    ddp_free(d);
    /* without tensor offsets: exact caps from the end, the last bucket smaller */
    d = ddp_create(&m.base, &host_be, g, 912154, NULL, 0, &o, &e);
    CHECK_INT(ddp_bucket_count(d), 5);
    ddp_bucket_range(d, 0, &b, &en);
    CHECK_INT(b, 912154 - 65536); CHECK_INT(en, 912154);
    ddp_bucket_range(d, 1, &b, &en);
    CHECK_INT(b, 912154 - 65536 - 262144);
    ddp_bucket_range(d, 4, &b, &en);
    CHECK_INT(b, 0); CHECK_INT(en, 912154 - 65536 - 3 * 262144);
    ddp_free(d);
    /* default caps (25 MiB, first 1 MiB) on the same layout: {10, 262144} then the rest */
    ddp_opts_t od = { .bucket_mb = 25 };
    d = ddp_create(&m.base, &host_be, g, 912154, layout, 6, &od, &e);
    CHECK_INT(ddp_bucket_count(d), 2);
    ddp_bucket_range(d, 0, &b, &en);
    CHECK_INT(b, 650000);
    ddp_free(d);
    free(g);
}

/* Buckets start exactly when ready_from passes their start, in order; finish starts
 * none twice; no_sync starts nothing. */
static void test_trigger_order(void) {
    mock_comm_t m = {0};
    pthread_mutex_init(&m.mu, NULL);
    comm_base_init(&m.base, &mock_ops, 0, 2, 10, false);
    float *g = calloc(912154, 4);
    for (int i = 0; i < 912154; i++) g[i] = (float)i;
    err_t e = {0};
    ddp_opts_t o = { .bucket_mb = 1, .first_bucket_mb = 0.25 };
    ddp_t *d = ddp_create(&m.base, &host_be, g, 912154, layout, 6, &o, &e);
    if (!d) { CHECK(d != NULL); return; }
    ddp_begin_backward(d);
    ddp_grads_ready(d, 912154);
    CHECK_INT(ddp_buckets_started(d), 0);
    ddp_grads_ready(d, 912144);     /* tensor 5 only: bucket 0 not complete */
    CHECK_INT(ddp_buckets_started(d), 0);
    ddp_grads_ready(d, 650000);     /* tensors 4, 5: bucket 0 */
    CHECK_INT(ddp_buckets_started(d), 1);
    ddp_grads_ready(d, 450000);
    CHECK_INT(ddp_buckets_started(d), 1);
    ddp_grads_ready(d, 100000);
    CHECK_INT(ddp_buckets_started(d), 2);
    ddp_grads_ready(d, 100000);     /* repeated: nothing new */
    CHECK_INT(ddp_buckets_started(d), 2);
    CHECK_INT(ddp_finish_step(d, &e), 0);
    CHECK_INT(m.n_calls, 3);
    CHECK(m.bufs[0] == g + 650000 && m.counts[0] == 262154);
    CHECK(m.bufs[1] == g + 100000 && m.counts[1] == 550000);
    CHECK(m.bufs[2] == g && m.counts[2] == 100000);
    CHECK_INT(ddp_buckets_started(d), 0);
    ddp_timing_t t;
    ddp_take_timing(d, &t);
    CHECK_INT(t.buckets, 3);
    CHECK(t.exposed_s >= 0 && t.allreduce_s >= 0);
    /* the mock's AVG leaves values as they were */
    CHECK(g[123456] == 123456.0f);
    /* no_sync: backward reports everything, nothing is all-reduced */
    ddp_set_sync(d, false);
    ddp_begin_backward(d);
    ddp_grads_ready(d, 0);
    CHECK_INT(ddp_finish_step(d, &e), 0);
    CHECK_INT(m.n_calls, 3);
    ddp_set_sync(d, true);
    ddp_free(d);
    free(g);
}

/* ---- real shm ranks ---- */
static float grad_of(int r, int micro, size_t i) {
    float base = (float)((i * 2654435761u + (size_t)r * 97u + (size_t)micro * 7u) % 100003u) / 1000.0f;
    return (i % 5 == 0 ? base * 1e-4f : base) * ((r + (int)i) % 2 ? -1.0f : 1.0f);
}

typedef int (*rank_fn)(comm_t *c);

typedef struct ddp_job {
    int world;
    rank_fn fn;
} ddp_job_t;

/* One rank (a forked child): a shm comm over the store at port, then the job's fn. */
static int ddp_rank(int r, int port, void *ctx) {
    const ddp_job_t *j = ctx;
    err_t ce = {0};
    store_t *st = store_connect("127.0.0.1", port, r, j->world, 20, &ce);
    comm_t *c = st ? comm_shm_create(st, &ce) : NULL;
    if (!c) {
        fprintf(stderr, "rank %d: %s\n", r, ce.msg);
        return 100;
    }
    int rc = j->fn(c);
    comm_free(c);
    store_close(st);
    return rc;
}

static int run_ranks(int world, rank_fn fn) {
    ddp_job_t j = {world, fn};
    return ranks_run(world, ddp_rank, &j, NULL);
}

enum { NG = 912154 };

/* Simulates a backward that reports readiness tensor by tensor from the end. */
static void fake_backward(ddp_t *d, float *g, int r, int micro) {
    ddp_begin_backward(d);
    for (int t = 5; t >= 0; t--) {
        for (int64_t i = layout[t]; i < layout[t + 1]; i++) g[i] += grad_of(r, micro, (size_t)i);
        ddp_grads_ready(d, (size_t)layout[t]);
    }
}

/* Two micro-batches (the first under no_sync), then averaged: bit-equal to
 * ((a0 + a1) + a2) / world with a_r = g_r(micro 0) + g_r(micro 1). */
static int rank_average(comm_t *c) {
    int w = comm_world(c), r = comm_rank(c);
    float *g = calloc(NG, 4);
    err_t e = {0};
    ddp_opts_t o = { .bucket_mb = 1, .first_bucket_mb = 0.25 };
    ddp_t *d = ddp_create(c, &host_be, g, NG, layout, 6, &o, &e);
    if (!d) return 1;
    for (int step = 0; step < 2; step++) {
        memset(g, 0, NG * 4);
        ddp_set_sync(d, false);
        fake_backward(d, g, r, 0);
        if (ddp_finish_step(d, &e) < 0) return 2;
        for (size_t i = 0; i < 1000; i++) if (g[i] != grad_of(r, 0, i)) return 3;  /* local */
        ddp_set_sync(d, true);
        fake_backward(d, g, r, 1);
        if (ddp_finish_step(d, &e) < 0) { fprintf(stderr, "%s\n", e.msg); return 4; }
        for (size_t i = 0; i < NG; i++) {
            float acc = 0;
            for (int q = 0; q < w; q++) {
                float a = 0.0f + grad_of(q, 0, i);
                a += grad_of(q, 1, i);
                acc = q ? acc + a : a;
            }
            acc /= (float)w;
            if (memcmp(&acc, &g[i], 4)) {
                fprintf(stderr, "rank %d g[%zu] = %.9g, expected %.9g\n", r, i, g[i], acc);
                return 5;
            }
        }
    }
    ddp_timing_t t;
    ddp_take_timing(d, &t);
    if (t.buckets != 6 || t.allreduce_s <= 0) return 6;
    ddp_free(d);
    free(g);
    return 0;
}

static void test_average_shm(void) {
    CHECK_INT(run_ranks(2, rank_average), 0);
    CHECK_INT(run_ranks(3, rank_average), 0);
}

/* fp16 / bf16 compression: each rank rounds g / world, the sum is rounded once. */
static int rank_compressed(comm_t *c) {
    int w = comm_world(c), r = comm_rank(c);
    for (int kind = 0; kind < 2; kind++) {
        dtype_t dt = kind ? DT_BF16 : DT_F16;
        float *g = calloc(NG, 4);
        err_t e = {0};
        ddp_opts_t o = { .bucket_mb = 1, .first_bucket_mb = 0.25, .compression = dt };
        ddp_t *d = ddp_create(c, &host_be, g, NG, layout, 6, &o, &e);
        if (!d) return 1;
        fake_backward(d, g, r, 0);
        if (ddp_finish_step(d, &e) < 0) return 2;
        for (size_t i = 0; i < NG; i++) {
            float acc = 0;
            for (int q = 0; q < w; q++) {
                float v = grad_of(q, 0, i) * (1.0f / (float)w);
                v = dt == DT_F16 ? round_f16(v) : round_bf16(v);
                acc = q ? acc + v : v;
            }
            acc = dt == DT_F16 ? round_f16(acc) : round_bf16(acc);
            if (memcmp(&acc, &g[i], 4)) return 3;
        }
        ddp_free(d);
        free(g);
    }
    return 0;
}

static void test_compression_shm(void) {
    CHECK_INT(run_ranks(2, rank_compressed), 0);
    CHECK_INT(run_ranks(3, rank_compressed), 0);
}

/* Parameters and buffers end equal to rank 0's; buffers not broadcast under sync_bn. */
static int rank_broadcasts(comm_t *c) {
    int r = comm_rank(c);
    float g[8] = {0}, p[5], b[3];
    for (int i = 0; i < 5; i++) p[i] = (float)(i + 10 * r);
    for (int i = 0; i < 3; i++) b[i] = (float)(i - 100 * r);
    err_t e = {0};
    ddp_opts_t o = { .bucket_mb = 25 };
    ddp_t *d = ddp_create(c, &host_be, g, 8, NULL, 0, &o, &e);
    if (!d || ddp_broadcast_initial(d, p, 5, b, 3, &e) < 0) return 1;
    for (int i = 0; i < 5; i++) if (p[i] != (float)i) return 2;
    for (int i = 0; i < 3; i++) if (b[i] != (float)i) return 3;
    b[0] = 7.0f + (float)r;
    if (ddp_sync_buffers(d, b, 3, &e) < 0 || b[0] != 7.0f) {
        fprintf(stderr, "rank %d: sync_buffers: b[0] %g: %s\n", r, b[0], e.msg);
        return 4;
    }
    ddp_free(d);
    ddp_opts_t os = { .bucket_mb = 25, .sync_bn = true };
    d = ddp_create(c, &host_be, g, 8, NULL, 0, &os, &e);
    b[0] = 7.0f + (float)r;
    if (ddp_sync_buffers(d, b, 3, &e) < 0 || b[0] != 7.0f + (float)r) return 5;
    ddp_free(d);
    return 0;
}

static void test_broadcasts_shm(void) {
    CHECK_INT(run_ranks(3, rank_broadcasts), 0);
}

/* Rank r holds rows of x_r(row, ch) = r * 3 + row * 0.5 + ch with rows = 4 + 2r: the
 * hook returns the mean and biased variance of all rows of all ranks. */
static double xval(int r, int row, int ch) { return r * 3.0 + row * 0.5 + ch + (row % 3) * 0.25; }

static int rank_syncbn(comm_t *c) {
    int w = comm_world(c), r = comm_rank(c);
    enum { C = 3 };
    int rows = 4 + 2 * r;
    float mean[C], var[C];
    for (int ch = 0; ch < C; ch++) {
        double s = 0, s2 = 0;
        for (int i = 0; i < rows; i++) s += xval(r, i, ch);
        double m = s / rows;
        for (int i = 0; i < rows; i++) s2 += (xval(r, i, ch) - m) * (xval(r, i, ch) - m);
        mean[ch] = (float)m;
        var[ch] = (float)(s2 / rows);
    }
    float g[4] = {0};
    err_t e = {0};
    ddp_opts_t o = { .bucket_mb = 25, .sync_bn = true };
    ddp_t *d = ddp_create(c, &host_be, g, 4, NULL, 0, &o, &e);
    int64_t total = 0;
    if (ddp_bn_sync_stats(d, C, mean, var, rows, &total) < 0) return 1;
    int64_t want_total = 0;
    for (int q = 0; q < w; q++) want_total += 4 + 2 * q;
    if (total != want_total) return 2;
    for (int ch = 0; ch < C; ch++) {
        double s = 0, s2 = 0;
        for (int q = 0; q < w; q++) for (int i = 0; i < 4 + 2 * q; i++) s += xval(q, i, ch);
        double m = s / (double)total;
        for (int q = 0; q < w; q++)
            for (int i = 0; i < 4 + 2 * q; i++) s2 += (xval(q, i, ch) - m) * (xval(q, i, ch) - m);
        double v = s2 / (double)total;
        if (fabs(mean[ch] - m) > 1e-5 * fabs(m) + 1e-6 || fabs(var[ch] - v) > 1e-5 * v + 1e-6) {
            fprintf(stderr, "ch %d: mean %.9g vs %.9g, var %.9g vs %.9g\n", ch, mean[ch], m, var[ch], v);
            return 3;
        }
    }
    float sdy[C], sdx[C];
    for (int ch = 0; ch < C; ch++) { sdy[ch] = (float)(r + 1) * (ch + 1); sdx[ch] = -0.5f * (float)r; }
    if (ddp_bn_sync_grads(d, C, sdy, sdx) < 0) return 4;
    float tri = (float)(w * (w + 1) / 2);
    for (int ch = 0; ch < C; ch++)
        if (sdy[ch] != tri * (float)(ch + 1) || sdx[ch] != -0.5f * (float)(w * (w - 1) / 2)) return 5;
    ddp_free(d);
    return 0;
}

static void test_syncbn_shm(void) {
    CHECK_INT(run_ranks(2, rank_syncbn), 0);
    CHECK_INT(run_ranks(3, rank_syncbn), 0);
}

/* The combination itself, with a rank contributing nothing, against literal values:
 * ranks {1, 2, 3} (mean 2, var 2/3) and {5, 7} (mean 6, var 1) -> all five values
 * {1, 2, 3, 5, 7}: mean 3.6, biased var 4.64. */
static void test_combine_literal(void) {
    int64_t counts[3] = { 3, 0, 2 };
    float means[3] = { 2.0f, 123.0f, 6.0f }, vars[3] = { 2.0f / 3.0f, 55.0f, 1.0f };
    float m, v;
    CHECK_INT(ddp_combine_bn_stats(3, 1, counts, means, vars, &m, &v), 5);
    CHECK_NEAR(m, 3.6, 1e-6, 0);
    CHECK_NEAR(v, 4.64, 1e-6, 0);
}

int main(void) {
    TEST_RUN(test_bucket_boundaries);
    TEST_RUN(test_trigger_order);
    TEST_RUN(test_combine_literal);
    TEST_RUN(test_average_shm);
    TEST_RUN(test_compression_shm);
    TEST_RUN(test_broadcasts_shm);
    TEST_RUN(test_syncbn_shm);
    return test_main_end();
}
