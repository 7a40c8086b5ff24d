/* bench_shm.c: shm all-reduce time and bandwidth for 2 (or argv[1]) ranks at 1, 4, 25 and
 * 100 MB of fp32, median of several repetitions. Not a test (prints a Markdown table for
 * bench/results/comm.md). Usage: bench_shm [world] */
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int world = argc > 1 ? atoi(argv[1]) : 2;
    err_t e = {0};
    store_server_t *srv = store_server_start("127.0.0.1", 0, &e);
    if (!srv) { fprintf(stderr, "%s\n", e.msg); return 1; }
    int port = store_server_port(srv);
    static const double mbs[4] = { 1, 4, 25, 100 };
    static const int reps[4] = { 30, 20, 10, 6 };
    pid_t kids[16];
    for (int r = 0; r < world; r++) {
        kids[r] = fork();
        if (kids[r] != 0) continue;
        store_t *st = store_connect("127.0.0.1", port, r, world, 60, &e);
        comm_t *c = st ? comm_shm_create(st, &e) : NULL;
        if (!c) { fprintf(stderr, "%s\n", e.msg); _exit(1); }
        if (r == 0)
            printf("| size (MB) | median time (ms) | min time (ms) | algbw (GB/s) | busbw (GB/s) |\n"
                   "|---:|---:|---:|---:|---:|\n");
        for (int k = 0; k < 4; k++) {
            size_t n = (size_t)(mbs[k] * 1e6 / 4);
            float *x = malloc(n * 4);
            for (size_t i = 0; i < n; i++) x[i] = (float)(i % 1000) * 1e-3f;
            double t[64];
            for (int i = -2; i < reps[k]; i++) {
                comm_barrier(c, &e);
                double t0 = now_s();
                if (comm_allreduce(c, x, n, DT_F32, COMM_AVG, &e) < 0) { fprintf(stderr, "%s\n", e.msg); _exit(2); }
                if (i >= 0) t[i] = now_s() - t0;
            }
            /* every rank's slowest view is what a step sees: take rank 0's */
            qsort(t, (size_t)reps[k], sizeof t[0], cmp_d);
            double med = t[reps[k] / 2], bytes = (double)n * 4;
            if (r == 0)
                printf("| %g | %.2f | %.2f | %.2f | %.2f |\n", mbs[k], med * 1e3, t[0] * 1e3,
                       bytes / med / 1e9, bytes / med / 1e9 * 2.0 * (world - 1) / world);
            fflush(stdout);
            free(x);
        }
        comm_free(c);
        store_close(st);
        _exit(0);
    }
    int bad = 0;
    for (int r = 0; r < world; r++) {
        int s;
        waitpid(kids[r], &s, 0);
        bad |= !WIFEXITED(s) || WEXITSTATUS(s);
    }
    store_server_stop(srv);
    return bad;
}
