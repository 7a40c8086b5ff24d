/* test_shm.c: shared-memory collectives with 2 and 3 forked processes: exact sums,
 * averages (fp32, fp16, bf16) over several chunks, broadcast, all-gather, started
 * (asynchronous) all-reduces, comm_any, bit-identical results on every rank, and a
 * collective where one rank never arrives failing within the timeout naming it. */
#include "comm/comm.h"
#include "util/half.h"
#include "tests/comm/ranks.h"
#include "tests/test.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Rank r's input element i: varied magnitudes so summation order matters in fp32. */
static float input(int r, size_t i) {
    float base = (float)((i * 7919u + (size_t)r * 104729u) % 10007u) / 97.0f;
    return (i % 3 == 0 ? base * 1e-3f : base) * (r % 2 ? -1.0f : 1.0f) + (float)r * 0.1f;
}

/* The result every rank must produce, computed as shm does: ((x0 + x1) + x2) ... */
static float expected_sum(int world, size_t i) {
    float acc = input(0, i);
    for (int r = 1; r < world; r++) acc += input(r, i);
    return acc;
}

typedef int (*rank_fn)(comm_t *c, store_t *st);

typedef struct shm_job {
    int world;
    double timeout_s;
    rank_fn fn;
} shm_job_t;

/* One rank (a forked child): a shm comm (the job's timeout) over the store, then fn. */
static int shm_rank(int r, int port, void *ctx) {
    const shm_job_t *j = ctx;
    err_t ce = {0};
    store_t *st = store_connect("127.0.0.1", port, r, j->world, j->timeout_s, &ce);
    comm_t *c = st ? comm_shm_create(st, &ce) : NULL;
    if (!c) { fprintf(stderr, "rank %d: %s\n", r, ce.msg); return 100; }
    int rc = j->fn(c, st);
    comm_free(c);
    store_close(st);
    return rc;
}

/* Forks `world` ranks that each create a shm comm (timeout_s) and run fn (tests/comm/
 * ranks.h), and returns how many ranks exited non-zero. codes (optional) gets each exit
 * code. */
static int run_ranks(int world, double timeout_s, rank_fn fn, int *codes) {
    shm_job_t j = {world, timeout_s, fn};
    return ranks_run(world, shm_rank, &j, codes);
}

/* 700,001 floats: three chunks of the 1 MiB slots, the last one ragged. */
enum { N_BIG = 700001 };

static int rank_allreduce_f32(comm_t *c, store_t *st) {
    (void)st;
    int w = comm_world(c), r = comm_rank(c);
    float *x = malloc(N_BIG * sizeof *x);
    for (size_t i = 0; i < N_BIG; i++) x[i] = input(r, i);
    err_t e = {0};
    if (comm_allreduce(c, x, N_BIG, DT_F32, COMM_SUM, &e) < 0) { fprintf(stderr, "%s\n", e.msg); return 1; }
    for (size_t i = 0; i < N_BIG; i++) {
        float want = expected_sum(w, i);
        if (memcmp(&x[i], &want, 4)) {
            fprintf(stderr, "rank %d sum[%zu] = %.9g, expected %.9g\n", r, i, x[i], want);
            return 2;
        }
    }
    for (size_t i = 0; i < N_BIG; i++) x[i] = input(r, i);
    if (comm_allreduce(c, x, N_BIG, DT_F32, COMM_AVG, &e) < 0) return 3;
    for (size_t i = 0; i < N_BIG; i++) {
        float want = expected_sum(w, i) / (float)w;
        if (memcmp(&x[i], &want, 4)) {
            fprintf(stderr, "rank %d avg[%zu] = %.9g, expected %.9g\n", r, i, x[i], want);
            return 4;
        }
    }
    free(x);
    return 0;
}

static void test_allreduce_f32_2_and_3(void) {
    CHECK_INT(run_ranks(2, 20, rank_allreduce_f32, NULL), 0);
    CHECK_INT(run_ranks(3, 20, rank_allreduce_f32, NULL), 0);
}

/* Small integers: sums checked against literal values. */
static int rank_allreduce_literal(comm_t *c, store_t *st) {
    (void)st;
    int r = comm_rank(c);
    float x[4] = { 1.0f + r, 10.0f * (r + 1), -3.0f, 0.5f * r };
    err_t e = {0};
    if (comm_allreduce(c, x, 4, DT_F32, COMM_SUM, &e) < 0) return 1;
    /* world 3: 1+2+3, 10+20+30, -9, 0+0.5+1 */
    if (x[0] != 6.0f || x[1] != 60.0f || x[2] != -9.0f || x[3] != 1.5f) return 2;
    float y[2] = { 3.0f * r, 1.0f };
    if (comm_allreduce(c, y, 2, DT_F32, COMM_AVG, &e) < 0) return 3;
    if (y[0] != 3.0f || y[1] != 1.0f) return 4;   /* (0 + 3 + 6) / 3 */
    return 0;
}

static void test_allreduce_literal_3(void) {
    CHECK_INT(run_ranks(3, 20, rank_allreduce_literal, NULL), 0);
}

/* fp16 / bf16: inputs rounded to 16 bits, summed in fp32, the sum rounded once. */
static int rank_allreduce_half(comm_t *c, store_t *st) {
    (void)st;
    int w = comm_world(c), r = comm_rank(c);
    enum { N = 600000 };   /* two chunks of 2-byte values */
    uint16_t *h = malloc(N * 2), *b = malloc(N * 2);
    for (size_t i = 0; i < N; i++) { h[i] = f32_to_f16(input(r, i)); b[i] = f32_to_bf16(input(r, i)); }
    err_t e = {0};
    if (comm_allreduce(c, h, N, DT_F16, COMM_SUM, &e) < 0) return 1;
    if (comm_allreduce(c, b, N, DT_BF16, COMM_AVG, &e) < 0) return 2;
    for (size_t i = 0; i < N; i++) {
        float sh = 0, sb = 0;
        for (int q = 0; q < w; q++) {
            sh = q ? sh + round_f16(input(q, i)) : round_f16(input(q, i));
            sb = q ? sb + round_bf16(input(q, i)) : round_bf16(input(q, i));
        }
        if (h[i] != f32_to_f16(sh)) return 3;
        if (b[i] != f32_to_bf16(sb / (float)w)) return 4;
    }
    /* 1 + 2^-10 (the fp16 after 1) on each rank: 2 + 2^-9 for world 2, exact in fp16 */
    uint16_t one = f32_to_f16(1.0009765625f);
    if (comm_allreduce(c, &one, 1, DT_F16, COMM_SUM, &e) < 0) return 5;
    if (w == 2 && f16_to_f32(one) != 2.001953125f) return 6;
    free(h);
    free(b);
    return 0;
}

static void test_allreduce_half(void) {
    CHECK_INT(run_ranks(2, 20, rank_allreduce_half, NULL), 0);
    CHECK_INT(run_ranks(3, 20, rank_allreduce_half, NULL), 0);
}

/* Broadcast 2.5 MB from rank 1, all-gather 1.5 MB per rank, a barrier, comm_any. */
static int rank_bcast_gather(comm_t *c, store_t *st) {
    (void)st;
    int w = comm_world(c), r = comm_rank(c);
    size_t nb = 2500000;
    unsigned char *b = malloc(nb);
    for (size_t i = 0; i < nb; i++) b[i] = r == 1 ? (unsigned char)(i * 31 + 7) : 0xEE;
    err_t e = {0};
    if (comm_broadcast(c, b, nb, 1, &e) < 0) return 1;
    for (size_t i = 0; i < nb; i++) if (b[i] != (unsigned char)(i * 31 + 7)) return 2;
    size_t ng = 1500000;
    unsigned char *send = malloc(ng), *recv = malloc(ng * (size_t)w);
    for (size_t i = 0; i < ng; i++) send[i] = (unsigned char)(i + 17u * (unsigned)r);
    if (comm_allgather(c, send, recv, ng, &e) < 0) return 3;
    for (int q = 0; q < w; q++)
        for (size_t i = 0; i < ng; i++)
            if (recv[(size_t)q * ng + i] != (unsigned char)(i + 17u * (unsigned)q)) return 4;
    if (comm_barrier(c, &e) < 0) return 5;
    int any = -1;
    if (comm_any(c, NULL, 0, &any, &e) < 0 || any != 0) return 6;
    if (comm_any(c, NULL, r == w - 1, &any, &e) < 0 || any != 1) return 7;
    free(b); free(send); free(recv);
    return 0;
}

static void test_broadcast_allgather(void) {
    CHECK_INT(run_ranks(2, 20, rank_bcast_gather, NULL), 0);
    CHECK_INT(run_ranks(3, 20, rank_bcast_gather, NULL), 0);
}

/* Three started all-reduces of different sizes, waited in order, then a blocking one. */
static int rank_async(comm_t *c, store_t *st) {
    (void)st;
    int w = comm_world(c), r = comm_rank(c);
    size_t sizes[3] = { 300000, 17, 400000 };
    float *bufs[3];
    comm_work_t *work[3];
    err_t e = {0};
    for (int k = 0; k < 3; k++) {
        bufs[k] = malloc(sizes[k] * 4);
        for (size_t i = 0; i < sizes[k]; i++) bufs[k][i] = input(r, i + (size_t)k);
        if (comm_start_allreduce(c, bufs[k], sizes[k], DT_F32, COMM_AVG, &work[k], &e) < 0) return 1;
    }
    float x = (float)r;
    if (comm_allreduce(c, &x, 1, DT_F32, COMM_SUM, &e) < 0) return 2;  /* queued behind */
    if (x != (float)(w * (w - 1) / 2)) return 3;
    for (int k = 0; k < 3; k++) {
        double secs = -1;
        if (comm_wait(c, work[k], &secs, &e) < 0) return 4;
        if (secs < 0) return 5;
        for (size_t i = 0; i < sizes[k]; i++) {
            float want = expected_sum(w, i + (size_t)k) / (float)w;
            if (memcmp(&bufs[k][i], &want, 4)) return 6;
        }
        free(bufs[k]);
    }
    return 0;
}

static void test_async_allreduce(void) {
    CHECK_INT(run_ranks(2, 20, rank_async, NULL), 0);
    CHECK_INT(run_ranks(3, 20, rank_async, NULL), 0);
}

/* Rank 2 attaches but never joins the all-reduce: ranks 0 and 1 fail within the 1 s
 * timeout (plus slack) with a message naming rank 2. */
static int rank_missing(comm_t *c, store_t *st) {
    (void)st;
    if (comm_rank(c) == 2) { usleep(3000000); return 0; }
    float x[8] = {0};
    err_t e = {0};
    double t0 = now_s();
    int rc = comm_allreduce(c, x, 8, DT_F32, COMM_SUM, &e);
    double dt = now_s() - t0;
    if (rc != -1) return 1;
    if (dt > 2.5) return 2;
    if (!strstr(e.msg, "rank(s) 2 never arrived") && !strstr(e.msg, "never arrived")) {
        fprintf(stderr, "rank %d: %s\n", comm_rank(c), e.msg);
        return 3;
    }
    /* whichever rank timed out first names rank 2 itself; the other may be woken by the
     * failure flag, whose message carries the first one's */
    if (!strstr(e.msg, "2 never arrived")) { fprintf(stderr, "%s\n", e.msg); return 4; }
    return 0;
}

static void test_missing_rank_times_out(void) {
    double t0 = now_s();
    int codes[3] = { -1, -1, -1 };
    CHECK_INT(run_ranks(3, 1.0, rank_missing, codes), 0);
    CHECK_INT(codes[0], 0);
    CHECK_INT(codes[1], 0);
    CHECK(now_s() - t0 < 8.0);
}

/* Rank 1 attaches and exits (a zombie until the test reaps it): rank 0's all-reduce fails
 * within seconds, long before its 30 s timeout, naming rank 1 and its pid. */
static int rank_exits(comm_t *c, store_t *st) {
    (void)st;
    if (comm_rank(c) == 1) _exit(0);
    float x = 1;
    err_t e = {0};
    double t0 = now_s();
    int rc = comm_allreduce(c, &x, 1, DT_F32, COMM_SUM, &e);
    if (rc != -1 || now_s() - t0 > 5) return 1;
    if (!strstr(e.msg, "rank 1 (pid ") || !strstr(e.msg, "exited without joining")) {
        fprintf(stderr, "%s\n", e.msg);
        return 2;
    }
    return 0;
}

static void test_dead_rank_detected(void) {
    int codes[2] = { -1, -1 };
    double t0 = now_s();
    run_ranks(2, 30, rank_exits, codes);
    CHECK_INT(codes[0], 0);
    CHECK_INT(codes[1], 0);
    CHECK(now_s() - t0 < 10);
}

/* comm_abort on one rank makes the other's pending collective fail at once. */
static int rank_abort(comm_t *c, store_t *st) {
    (void)st;
    err_t e = {0};
    if (comm_rank(c) == 1) {
        usleep(200000);
        comm_abort(c, "out of memory in backward");
        return 0;
    }
    float x = 1;
    double t0 = now_s();
    int rc = comm_allreduce(c, &x, 1, DT_F32, COMM_SUM, &e);
    if (rc != -1 || now_s() - t0 > 5) return 1;
    if (!strstr(e.msg, "rank 1 failed: out of memory in backward")) {
        fprintf(stderr, "%s\n", e.msg);
        return 2;
    }
    return 0;
}

static void test_abort_wakes_others(void) {
    CHECK_INT(run_ranks(2, 30, rank_abort, NULL), 0);
}

int main(void) {
    TEST_RUN(test_allreduce_literal_3);
    TEST_RUN(test_allreduce_f32_2_and_3);
    TEST_RUN(test_allreduce_half);
    TEST_RUN(test_broadcast_allgather);
    TEST_RUN(test_async_allreduce);
    TEST_RUN(test_missing_rank_times_out);
    TEST_RUN(test_abort_wakes_others);
    TEST_RUN(test_dead_rank_detected);
    return test_main_end();
}
