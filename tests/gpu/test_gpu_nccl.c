/* test_gpu_nccl.c: the NCCL communicator through the comm.h interface: one rank on GPU 0
 * (sum, avg, fp16 buffers, broadcast, all-gather, barrier, started all-reduces waited in
 * order, and ordering against the backend's stream without host syncs), and, with two or
 * more GPUs, two forked ranks whose all-reduce gives 1 + 2 on both. A non-CUDA backend is
 * an input error. Skipped (77) without a GPU.
 */
#include <sys/wait.h>
#include <unistd.h>

#include "comm/nccl.h"
#include "tests/gpu/gpu_test_util.h"

static backend_t *gpu_backend(int device) {
    backend_opts_t o = {0};
    o.kind = BACKEND_CUDA;
    o.device = device;
    err_t e = {0};
    backend_t *be = cuda_backend_create(&o, &e);
    if (!be) { fprintf(stderr, "cuda_backend_create: %s\n", e.msg); exit(1); }
    return be;
}

static void test_single_rank(void) {
    err_t e = {0};
    store_server_t *srv = store_server_start("127.0.0.1", 0, &e);
    CHECK(srv != NULL);
    if (!srv) { fprintf(stderr, "%s\n", e.msg); return; }
    store_t *st = store_connect("127.0.0.1", store_server_port(srv), 0, 1, 30, &e);
    CHECK(st != NULL);
    backend_t *be = gpu_backend(0);
    comm_t *c = comm_nccl_create(st, be, &e);
    if (!c) fprintf(stderr, "comm_nccl_create: %s\n", e.msg);
    CHECK(c != NULL);
    if (c) {
        CHECK_STR(comm_name(c), "nccl");
        CHECK(comm_device_memory(c));
        const int n = 1000;
        float h[1000], out[1000];
        for (int i = 0; i < n; i++) h[i] = (float)i * 0.5f;
        float *d = (float *)be->ops->alloc(be, n * 4);
        OK(be, be->ops->upload(be, d, h, n * 4));
        /* a kernel queued before the all-reduce must be seen by it: scale by 2 first */
        OK(be, be->ops->scale(be, n, d, 2.0f));
        CHECK_INT(comm_allreduce(c, d, n, DT_F32, COMM_SUM, &e), 0);
        OK(be, be->ops->scale(be, n, d, 0.5f));   /* and the kernel after it sees its result */
        OK(be, be->ops->download(be, out, d, n * 4));
        CHECK(memcmp(out, h, sizeof h) == 0);
        CHECK_INT(comm_allreduce(c, d, n, DT_F32, COMM_AVG, &e), 0);
        OK(be, be->ops->download(be, out, d, n * 4));
        CHECK(memcmp(out, h, sizeof h) == 0);
        /* two started all-reduces, waited in order */
        comm_work_t *w1 = NULL, *w2 = NULL;
        CHECK_INT(comm_start_allreduce(c, d, n / 2, DT_F32, COMM_SUM, &w1, &e), 0);
        CHECK_INT(comm_start_allreduce(c, d + n / 2, n / 2, DT_F32, COMM_AVG, &w2, &e), 0);
        double secs = -1;
        CHECK_INT(comm_wait(c, w1, &secs, &e), 0);
        CHECK(secs >= 0);
        CHECK_INT(comm_wait(c, w2, NULL, &e), 0);
        OK(be, be->ops->download(be, out, d, n * 4));
        CHECK(memcmp(out, h, sizeof h) == 0);
        /* fp16 buffer */
        uint16_t hh[8], oh[8];
        for (int i = 0; i < 8; i++) hh[i] = f32_to_f16((float)i - 3.5f);
        void *dh = be->ops->alloc(be, sizeof hh);
        OK(be, be->ops->upload(be, dh, hh, sizeof hh));
        CHECK_INT(comm_allreduce(c, dh, 8, DT_F16, COMM_SUM, &e), 0);
        OK(be, be->ops->download(be, oh, dh, sizeof oh));
        CHECK(memcmp(oh, hh, sizeof hh) == 0);
        /* broadcast, all-gather, barrier, comm_any */
        CHECK_INT(comm_broadcast(c, d, n * 4, 0, &e), 0);
        float *g = (float *)be->ops->alloc(be, n * 4);
        CHECK_INT(comm_allgather(c, d, g, n * 4, &e), 0);
        OK(be, be->ops->download(be, out, g, n * 4));
        CHECK(memcmp(out, h, sizeof h) == 0);
        CHECK_INT(comm_barrier(c, &e), 0);
        int any = -1;
        CHECK_INT(comm_any(c, be, 1, &any, &e), 0);
        CHECK_INT(any, 1);
        be->ops->release(be, d);
        be->ops->release(be, dh);
        be->ops->release(be, g);
        comm_free(c);
    }
    backend_free(be);
    store_close(st);
    store_server_stop(srv);
}

/* Rank r of 2 on GPU r: all-reduce of (r + 1) gives 3 everywhere; exits 0 on success. */
static int two_rank_child(int rank, int port) {
    err_t e = {0};
    store_t *st = store_connect("127.0.0.1", port, rank, 2, 60, &e);
    if (!st) { fprintf(stderr, "rank %d: %s\n", rank, e.msg); return 1; }
    backend_t *be = gpu_backend(rank);
    comm_t *c = comm_nccl_create(st, be, &e);
    if (!c) { fprintf(stderr, "rank %d: %s\n", rank, e.msg); return 1; }
    float v[64], out[64];
    for (int i = 0; i < 64; i++) v[i] = (float)(rank + 1);
    float *d = (float *)be->ops->alloc(be, sizeof v);
    if (be->ops->upload(be, d, v, sizeof v)) return 1;
    if (comm_allreduce(c, d, 64, DT_F32, COMM_SUM, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    if (be->ops->download(be, out, d, sizeof out)) return 1;
    int bad = 0;
    for (int i = 0; i < 64; i++) bad += out[i] != 3.0f;
    if (comm_allreduce(c, d, 64, DT_F32, COMM_AVG, &e)) return 1;
    if (be->ops->download(be, out, d, sizeof out)) return 1;
    for (int i = 0; i < 64; i++) bad += out[i] != 3.0f;
    be->ops->release(be, d);
    comm_free(c);
    backend_free(be);
    store_close(st);
    return bad ? 2 : 0;
}

static void test_two_ranks(void) {
    if (cuda_device_count() < 2) {
        fprintf(stderr, "  (one GPU: two-rank case not run)\n");
        return;
    }
    err_t e = {0};
    store_server_t *srv = store_server_start("127.0.0.1", 0, &e);
    CHECK(srv != NULL);
    if (!srv) return;
    int port = store_server_port(srv);
    pid_t kids[2];
    /* children exec this program afresh: a process that initialised CUDA must not fork
     * and keep using it */
    for (int r = 0; r < 2; r++) {
        kids[r] = fork();
        if (kids[r] == 0) {
            char rs[16], ps[16];
            snprintf(rs, sizeof rs, "%d", r);
            snprintf(ps, sizeof ps, "%d", port);
            execl("/proc/self/exe", "test_gpu_nccl", "--child", rs, ps, (char *)NULL);
            _exit(127);
        }
    }
    for (int r = 0; r < 2; r++) {
        int status = 0;
        waitpid(kids[r], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    store_server_stop(srv);
}

static void test_cpu_backend_rejected(void) {
    backend_opts_t o = {0};
    o.kind = BACKEND_CPU;
    err_t e = {0};
    backend_t *cpu = cpu_backend_create(&o, &e);
    CHECK(comm_nccl_create(NULL, cpu, &e) == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "nccl needs device: cuda");
    backend_free(cpu);
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--child")) return two_rank_child(atoi(argv[2]), atoi(argv[3]));
    gpu_or_skip();
    TEST_RUN(test_cpu_backend_rejected);
    TEST_RUN(test_single_rank);
    TEST_RUN(test_two_ranks);
    return test_main_end();
}
