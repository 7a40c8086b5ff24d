/* test_ddp_net.c: DDP wired into a real net on the CPU backend, 2 ranks over shm.
 * Without SyncBN: the net's grads_ready hook starts every bucket during backward, and the
 * averaged gradients equal, bit for bit, (g0 + g1) / 2 of the two ranks' gradients
 * computed locally. With SyncBN: the 2-rank run (4 samples each, loss mean over the local
 * batch, gradients averaged) reproduces the single-process run on all 8 samples:
 * gradients and BN running statistics agree to float rounding. */
#include "comm/ddp.h"
#include "model/net.h"
#include "util/rng.h"
#include "tests/comm/ranks.h"
#include "tests/test.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

enum { H = 6, W = 6, CIN = 3, CLASSES = 5, B = 8, WORLD = 2, LB = B / WORLD };

static net_t *small_net(backend_t *be, int max_batch, err_t *e) {
    net_t *n = net_create(CIN, e);
    if (!n) return NULL;
    int c1 = net_add_conv(n, "conv1", NET_INPUT, 8, 3, 1, 1, e);
    int b1 = net_add_bn(n, "bn1", NODE_BN_RELU, c1, -2 /* no shortcut */, false, e);
    int c2 = net_add_conv(n, "conv2", b1, 8, 3, 2, 1, e);
    int b2 = net_add_bn(n, "bn2", NODE_BN_RELU, c2, -2, false, e);
    int p = net_add_avgpool(n, b2, e);
    if (c1 < 0 || b1 < 0 || c2 < 0 || b2 < 0 || p < 0 || net_add_linear(n, "fc", p, CLASSES, e) < 0 ||
        net_bind(n, be, max_batch, H, W, DT_F32, e) < 0 || net_init(n, 5, e) < 0) {
        net_free(n);
        return NULL;
    }
    return n;
}

static float img[B * H * W * CIN];
static int32_t lab[B];

/* One training forward/loss/backward of samples [start, start + count). */
static int run_net(net_t *n, int start, int count, float grad_scale, const net_hooks_t *h,
                   err_t *e) {
    net_loss_out_t lo;
    if (net_zero_grads(n, e) < 0 || net_upload_input(n, img + start * H * W * CIN, count, e) < 0 ||
        net_forward(n, net_input(n), count, true, h, e) < 0 ||
        net_loss(n, lab + start, 0.0f, grad_scale, &lo, e) < 0)
        return -1;
    return net_backward(n, h, e);
}

/* Parameter tensor boundaries of n (forward order), for bucket assignment. */
static int param_offsets(net_t *n, int64_t *off) {
    int k = 0;
    for (int i = 0; i < net_num_tensors(n); i++) {
        const net_tensor_t *t = net_tensor(n, i);
        if (t->store == NET_STORE_PARAM) off[k++] = (int64_t)t->offset;
    }
    for (int i = 1; i < k; i++)   /* insertion sort: state_dict order is forward order anyway */
        for (int j = i; j > 0 && off[j - 1] > off[j]; j--) { int64_t x = off[j]; off[j] = off[j - 1]; off[j - 1] = x; }
    off[k] = (int64_t)net_num_params(n);
    return k;
}

static int rank_main(int rank, int port, bool sync_bn) {
    err_t e = {0};
    store_t *st = store_connect("127.0.0.1", port, rank, WORLD, 20, &e);
    comm_t *c = st ? comm_shm_create(st, &e) : NULL;
    if (!c) return 10;
    backend_opts_t bo = { .kind = BACKEND_CPU, .threads = 1 };
    backend_t *be = backend_create(&bo, &e), *be_ref = backend_create(&bo, &e);
    net_t *n = be ? small_net(be, LB, &e) : NULL, *ref = be_ref ? small_net(be_ref, B, &e) : NULL;
    if (!n || !ref) { fprintf(stderr, "%s\n", e.msg); return 11; }
    size_t np = net_num_params(n), nb = net_num_buffers(n);
    int64_t off[64];
    int nt = param_offsets(n, off);
    ddp_opts_t o = { .bucket_mb = 0.0005, .first_bucket_mb = 0.0001, .sync_bn = sync_bn };
    ddp_t *d = ddp_create(c, be, net_grads(n), (int64_t)np, off, nt, &o, &e);
    if (!d) { fprintf(stderr, "%s\n", e.msg); return 12; }
    if (ddp_bucket_count(d) < 3) return 13;
    if (ddp_broadcast_initial(d, net_params(n), (int64_t)np, net_buffers(n), (int64_t)nb, &e) < 0) return 14;
    net_hooks_t h = { .ctx = d, .grads_ready = ddp_grads_ready };
    if (sync_bn) { h.bn_sync_stats = ddp_bn_sync_stats; h.bn_sync_grads = ddp_bn_sync_grads; }
    ddp_begin_backward(d);
    if (run_net(n, rank * LB, LB, 1.0f / LB, &h, &e) < 0) {
        fprintf(stderr, "rank %d: %s / %s\n", rank, e.msg, ddp_last_error(d)->msg);
        return 15;
    }
    if (ddp_buckets_started(d) != ddp_bucket_count(d)) return 16;   /* all during backward */
    if (ddp_finish_step(d, &e) < 0) { fprintf(stderr, "%s\n", e.msg); return 17; }
    float *got = malloc(np * 4), *want = calloc(np, 4), *g = malloc(np * 4);
    memcpy(got, net_grads(n), np * 4);
    int rc = 0;
    if (!sync_bn) {
        /* (g0 + g1) / 2, each rank's gradient computed here on the reference net */
        for (int q = 0; q < WORLD; q++) {
            if (run_net(ref, q * LB, LB, 1.0f / LB, NULL, &e) < 0) return 18;
            memcpy(g, net_grads(ref), np * 4);
            for (size_t k = 0; k < np; k++) want[k] = q ? want[k] + g[k] : g[k];
        }
        for (size_t k = 0; k < np; k++) {
            want[k] /= 2.0f;
            if (memcmp(&want[k], &got[k], 4)) { fprintf(stderr, "g[%zu] %.9g vs %.9g\n", k, got[k], want[k]); rc = 19; break; }
        }
    } else {
        /* the whole batch on one net: SyncBN makes the statistics and gradients the same */
        if (run_net(ref, 0, B, 1.0f / B, NULL, &e) < 0) return 20;
        for (size_t k = 0; k < np && !rc; k++)
            if (fabsf(got[k] - net_grads(ref)[k]) > 2e-5f + 1e-3f * fabsf(net_grads(ref)[k])) {
                fprintf(stderr, "syncbn g[%zu] %.9g vs %.9g\n", k, got[k], net_grads(ref)[k]);
                rc = 21;
            }
        for (size_t k = 0; k < nb && !rc; k++)
            if (fabsf(net_buffers(n)[k] - net_buffers(ref)[k]) > 1e-5f + 1e-5f * fabsf(net_buffers(ref)[k])) {
                fprintf(stderr, "syncbn buffer[%zu] %.9g vs %.9g\n", k, net_buffers(n)[k], net_buffers(ref)[k]);
                rc = 22;
            }
    }
    ddp_free(d);
    net_free(n); net_free(ref);
    backend_free(be); backend_free(be_ref);
    comm_free(c);
    store_close(st);
    free(got); free(want); free(g);
    return rc;
}

static int net_rank(int r, int port, void *ctx) { return rank_main(r, port, *(bool *)ctx); }

static int run_world(bool sync_bn) { return ranks_run(WORLD, net_rank, &sync_bn, NULL); }

static void test_ddp_net_average(void) { CHECK_INT(run_world(false), 0); }
static void test_ddp_net_syncbn_equals_full_batch(void) { CHECK_INT(run_world(true), 0); }

int main(void) {
    rng_t r = rng_make(3, RNG_STREAM_MISC, 1, 0);
    for (int i = 0; i < B * H * W * CIN; i++) img[i] = rng_uniform(&r) * 2.0f - 1.0f;
    for (int i = 0; i < B; i++) lab[i] = (int32_t)rng_below(&r, CLASSES);
    TEST_RUN(test_ddp_net_average);
    TEST_RUN(test_ddp_net_syncbn_equals_full_batch);
    return test_main_end();
}
