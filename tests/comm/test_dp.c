/* test_dp.c: DataParallel in one process on the CPU backend: torch's chunk sizes, and a
 * 3-replica micro-batch of 7 (chunks 3, 3, 1) whose gradients equal, bit for bit, the
 * sum in replica order of the gradients of the three chunks computed one by one on a
 * single net with the loss scaled by 1/7, accumulated onto the previous micro-batch's;
 * BN running stats are replica 0's (chunk 0 only); loss and hit counts are summed. The
 * net has a dropout layer: dp_set_rng_key gives replica i the masks of rows
 * first + start_i of the micro-batch, as the single net keyed chunk by chunk draws. */
#include "comm/dp.h"
#include "util/rng.h"
#include "tests/test.h"

#include <stdlib.h>

static void test_chunks(void) {
    int s, c;
    int cases[][4] = { /* n, world, replica, expected count */
        { 7, 3, 0, 3 }, { 7, 3, 1, 3 }, { 7, 3, 2, 1 }, { 10, 4, 2, 3 }, { 10, 4, 3, 1 },
        { 6, 4, 2, 2 }, { 6, 4, 3, 0 }, { 2, 3, 1, 1 }, { 2, 3, 2, 0 }, { 8, 2, 1, 4 } };
    int starts[] = { 0, 3, 6, 6, 9, 4, 6, 1, 2, 4 };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dp_chunk(cases[k][0], cases[k][1], cases[k][2], &s, &c);
        CHECK_INT(c, cases[k][3]);
        CHECK_INT(s, starts[k]);
    }
}

enum { H = 6, W = 6, CIN = 3, CLASSES = 5, WORLD = 3, N = 7 };

/* conv -> bn_relu -> dropout -> conv -> bn_add_relu(+ first block) -> avgpool -> fc */
static net_t *small_net(backend_t *be, int max_batch, err_t *e) {
    net_t *n = net_create(CIN, e);
    if (!n) return NULL;
    int c1 = net_add_conv(n, "conv1", NET_INPUT, 8, 3, 1, 1, e);
    int b1 = net_add_bn(n, "bn1", NODE_BN_RELU, c1, -2 /* no shortcut */, false, e);
    int dr = net_add_dropout(n, b1, 0.2, e);
    int c2 = net_add_conv(n, "conv2", dr, 8, 3, 1, 1, e);
    int b2 = net_add_bn(n, "bn2", NODE_BN_ADD_RELU, c2, b1, false, e);
    int p = net_add_avgpool(n, b2, e);
    if (c1 < 0 || b1 < 0 || c2 < 0 || b2 < 0 || p < 0 || net_add_linear(n, "fc", p, CLASSES, e) < 0 || net_bind(n, be, max_batch, H, W, DT_F32, e) < 0) {
        net_free(n);
        return NULL;
    }
    return n;
}

static void fill_batch(float *img, int32_t *lab, uint64_t seed) {
    rng_t r = rng_make(seed, RNG_STREAM_MISC, 0, 0);
    for (int i = 0; i < N * H * W * CIN; i++) img[i] = rng_uniform(&r) * 2.0f - 1.0f;
    for (int i = 0; i < N; i++) lab[i] = (int32_t)rng_below(&r, CLASSES);
}

static void test_dp_matches_chunked_reference(void) {
    err_t e = {0};
    backend_opts_t bo = { .kind = BACKEND_CPU, .threads = 1 };
    backend_t *bes[WORLD + 1];
    net_t *nets[WORLD], *ref;
    for (int i = 0; i <= WORLD; i++) bes[i] = backend_create(&bo, &e);
    for (int i = 0; i < WORLD; i++) nets[i] = small_net(bes[i], 3, &e);
    ref = small_net(bes[WORLD], N, &e);
    CHECK(ref && nets[0] && nets[1] && nets[2]);
    if (!ref || !nets[0] || !nets[1] || !nets[2]) { fprintf(stderr, "%s\n", e.msg); return; }
    CHECK_INT(net_init(nets[0], 11, &e), 0);
    CHECK_INT(net_init(ref, 11, &e), 0);
    size_t np = net_num_params(ref), nb = net_num_buffers(ref);
    float *want = calloc(np, 4), *got = calloc(np, 4), *g = calloc(np, 4);
    float *buf0 = calloc(nb, 4), *want_buf = calloc(nb, 4), *got_buf = calloc(nb, 4);
    net_download_buffers(ref, buf0, &e);
    dp_t *d = dp_create(nets, WORLD, H, W, &e);
    CHECK(d != NULL);
    if (!d) return;
    net_zero_grads(nets[0], &e);
    float img[N * H * W * CIN];
    int32_t lab[N];
    for (int mb = 0; mb < 2; mb++) {
        fill_batch(img, lab, 100 + (uint64_t)mb);
        net_loss_out_t out;
        dp_set_rng_key(d, 9, 1, 10 * mb, 1);
        CHECK_INT(dp_forward_backward(d, img, lab, NULL, N, N, 0.1f, 1.0f, &out, &e), 0);
        /* reference: chunk by chunk on one net, summed in replica order */
        float *sum = calloc(np, 4);
        double loss = 0;
        int64_t c1 = 0, c5 = 0;
        int starts[WORLD] = { 0, 3, 6 }, counts[WORLD] = { 3, 3, 1 };
        for (int q = 0; q < WORLD; q++) {
            net_loss_out_t lo;
            net_zero_grads(ref, &e);
            net_upload_buffers(ref, mb == 0 ? buf0 : want_buf, &e);
            CHECK_INT(net_upload_input(ref, img + starts[q] * H * W * CIN, counts[q], &e), 0);
            CHECK_INT(net_set_rng_key(ref, 9, 1, 10 * mb + starts[q], 1, &e), 0);
            CHECK_INT(net_forward(ref, net_input(ref), counts[q], true, NULL, &e), 0);
            CHECK_INT(net_loss(ref, lab + starts[q], 0.1f, 1.0f / N, &lo, &e), 0);
            CHECK_INT(net_backward(ref, NULL, &e), 0);
            net_download_grads(ref, g, &e);
            for (size_t k = 0; k < np; k++) sum[k] = q ? sum[k] + g[k] : g[k];
            loss += lo.loss_sum;
            c1 += lo.correct1;
            c5 += lo.correct5;
            if (q == 0) net_download_buffers(ref, got_buf, &e);  /* replica 0's update */
        }
        memcpy(want_buf, got_buf, nb * 4);
        for (size_t k = 0; k < np; k++) want[k] = want[k] + sum[k];
        free(sum);
        CHECK_INT(net_download_grads(nets[0], got, &e), 0);
        size_t bad = 0;
        for (size_t k = 0; k < np; k++) bad += memcmp(&want[k], &got[k], 4) != 0;
        CHECK_INT(bad, 0);

        CHECK_INT(net_download_buffers(nets[0], got_buf, &e), 0);
        CHECK_INT(memcmp(got_buf, want_buf, nb * 4), 0);
        CHECK(out.loss_sum == loss);
        CHECK_INT(out.correct1, c1);
        CHECK_INT(out.correct5, c5);
        CHECK(out.loss_sum > 0);
    }
    CHECK_INT(net_counters(nets[0])[0], 2);   /* replica 0 ran two training forwards */
    dp_timing_t t;
    dp_take_timing(d, &t);
    CHECK(t.compute_s > 0);
    dp_free(d);
    for (int i = 0; i < WORLD; i++) net_free(nets[i]);
    net_free(ref);
    for (int i = 0; i <= WORLD; i++) backend_free(bes[i]);
    free(want); free(got); free(g); free(buf0); free(want_buf); free(got_buf);
}

int main(void) {
    TEST_RUN(test_chunks);
    TEST_RUN(test_dp_matches_chunked_reference);
    return test_main_end();
}
