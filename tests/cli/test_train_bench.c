/* test_train_bench.c: the trainer's own step (trainer_step) driven in-process through
 * runner/train_bench.h, on the cpu backend's graph ops (RUNNER_CPU_GRAPHS=1: calls
 * recorded and replayed with CUDA's semantics), which is what bench_gpu_bench times and
 * what train.cuda_graphs records in a run:
 *  1. a net with dropout (tests/model/families_net.h: dropout on a map and on a 2-D
 *     tensor) stepped 5 times with graphs (the first step normal, the second recorded and
 *     launched, the rest launched) equals the same 5 steps without, bit for bit: params,
 *     gradients, momentum, BN buffers and counters, each step's loss and hits. Each step's
 *     dropout key goes into the trainer's key slot from the host (rng_key_slot) and the
 *     recorded work copies it into the net (net_set_rng_key_dev), so a replay draws the
 *     step's own masks; a key baked into the recording would repeat step 2's masks in
 *     steps 3..5 and differ from the plain run there.
 *  2. that the masks move in replays, seen directly: at lr 1e-30 (the weights stay put)
 *     every step trains on the same batch, so each step's loss differs only by its masks:
 *     the five losses are pairwise different with graphs on and equal to the plain run's;
 *     resnet20 (no dropout) at lr 1e-30 gives one loss five times (the control: nothing
 *     else moves the loss).
 *  3. train_bench_create refuses graphs on a backend without graph ops, saying how to get
 *     them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu/cpu_backend.h"
#include "model/net.h"
#include "model/optim.h"
#include "model/arch/resnet.h"
#include "runner/train_bench.h"
#include "tests/model/cpu_graphs_be.h"
#include "tests/model/families_net.h"
#include "tests/test.h"
#include "util/rng.h"

enum { B = 6, HW = 12, STEPS = 5 };

typedef struct side {
    backend_t *be;
    net_t *net;
    optim_t *opt;
    train_bench_t *tb;
    double loss[STEPS];
    int64_t hits[STEPS];
} side_t;

static backend_t *make_be(bool graphs) { return cpu_graphs_be(graphs ? "1" : NULL); }

/* A side: its own backend (with graph ops when graphs), the net (families with dropout,
 * or resnet20), SGD with momentum and weight decay, the same batch uploaded once. */
static side_t side_make(bool graphs, bool dropout) {
    side_t s = {0};
    err_t e = {0};
    s.be = make_be(graphs);
    s.net = dropout ? families_net(&e) : resnet_build("resnet20", 3, FAM_CLASSES, false, &e);
    optim_opts_t oo = {.kind = OPTIM_SGD, .momentum = 0.9, .weight_decay = 5e-4};
    if (!s.net || net_bind(s.net, s.be, B, HW, HW, DT_F32, &e) || net_init(s.net, 21, &e) ||
        !(s.opt = optim_create(s.net, &oo, &e)) || !(s.tb = train_bench_create(s.net, s.opt, B, DT_F32, graphs, 5, &e))) {
        fprintf(stderr, "setup: %s\n", e.msg);
        exit(1);
    }
    float img[B * HW * HW * 3];
    int32_t lab[B];
    rng_t r = rng_make(3, RNG_STREAM_MISC, 0, 0);
    for (int i = 0; i < B * HW * HW * 3; i++) img[i] = rng_uniform(&r) * 2.0f - 1.0f;
    for (int i = 0; i < B; i++) lab[i] = (int32_t)rng_below(&r, FAM_CLASSES);
    if (net_upload_input(s.net, img, B, &e) || s.be->ops->upload(s.be, net_labels(s.net), lab, sizeof lab)) {
        fprintf(stderr, "upload: %s\n", e.code ? e.msg : s.be->err.msg);
        exit(1);
    }
    return s;
}

static void side_steps(side_t *s, double lr) {
    err_t e = {0};
    for (int k = 0; k < STEPS; k++) {
        CHECK_INT(train_bench_step(s->tb, lr, &e), 0);
        CHECK_INT(train_bench_last(s->tb, &s->loss[k], &s->hits[k], &e), 0);
        if (e.code) fprintf(stderr, "step %d: %s\n", k + 1, e.msg);
    }
}

static void side_free(side_t *s) {
    train_bench_free(s->tb);
    optim_free(s->opt);
    net_free(s->net);
    backend_free(s->be);
}

static long diff_words(const void *a, const void *b, size_t n) {
    long bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp((const char *)a + 4 * i, (const char *)b + 4 * i, 4) != 0;
    return bad;
}

/* 1. */
static void dropout_replays_equal_plain_steps(void) {
    side_t plain = side_make(false, true), rec = side_make(true, true);
    CHECK(net_has_dropout(rec.net));
    side_steps(&plain, 0.05);
    side_steps(&rec, 0.05);
    CHECK(train_bench_graphs(rec.tb));
    CHECK_INT((int)train_bench_recordings(rec.tb), 1);
    CHECK_INT((int)train_bench_launches(rec.tb), STEPS - 1);
    CHECK_INT((int)train_bench_recordings(plain.tb), 0);
    size_t np = net_num_params(rec.net), nb = net_num_buffers(rec.net);
    err_t e = {0};
    float *pa = malloc(np * 4), *pb = malloc(np * 4), *ba = malloc((nb ? nb : 1) * 4), *bb = malloc((nb ? nb : 1) * 4);
    CHECK_INT(net_download_params(plain.net, pa, &e), 0);
    CHECK_INT(net_download_params(rec.net, pb, &e), 0);
    CHECK_INT(net_download_buffers(plain.net, ba, &e), 0);
    CHECK_INT(net_download_buffers(rec.net, bb, &e), 0);
    CHECK_INT(diff_words(pa, pb, np), 0);
    CHECK_INT(diff_words(ba, bb, nb), 0);
    CHECK_INT(diff_words(net_grads(plain.net), net_grads(rec.net), np), 0);
    for (int i = 0; i < optim_num_state(rec.opt); i++)
        CHECK_INT(diff_words(optim_state(plain.opt, i), optim_state(rec.opt, i), np), 0);
    CHECK(memcmp(net_counters(plain.net), net_counters(rec.net),
                 (size_t)net_num_counters(rec.net) * sizeof(int64_t)) == 0);
    for (int k = 0; k < STEPS; k++) {
        CHECK(plain.loss[k] == rec.loss[k]);
        CHECK_INT((int)plain.hits[k], (int)rec.hits[k]);
    }
    free(pa); free(pb); free(ba); free(bb);
    side_free(&plain);
    side_free(&rec);
}

/* 2. */
static void masks_move_in_replays(void) {
    side_t plain = side_make(false, true), rec = side_make(true, true), still = side_make(true, false);
    side_steps(&plain, 1e-30);
    side_steps(&rec, 1e-30);
    side_steps(&still, 1e-30);
    CHECK_INT((int)train_bench_launches(rec.tb), STEPS - 1);
    for (int k = 0; k < STEPS; k++) {
        fprintf(stderr, "  step %d: loss dropout %.9g (graphs) %.9g (plain), resnet20 %.9g\n", k + 1, rec.loss[k],
                plain.loss[k], still.loss[k]);
        CHECK(rec.loss[k] == plain.loss[k]);
        CHECK(still.loss[k] == still.loss[0]);
        for (int j = 0; j < k; j++) CHECK(rec.loss[k] != rec.loss[j]);
    }
    side_free(&plain);
    side_free(&rec);
    side_free(&still);
}

/* 3. */
static void graphs_need_graph_ops(void) {
    backend_t *be = make_be(false);
    err_t e = {0};
    net_t *n = resnet_build("resnet20", 3, FAM_CLASSES, false, &e);
    optim_opts_t oo = {.kind = OPTIM_SGD, .momentum = 0.9};
    optim_t *o = NULL;
    CHECK(n && !net_bind(n, be, B, HW, HW, DT_F32, &e) && !net_init(n, 1, &e) && (o = optim_create(n, &oo, &e)));
    CHECK(train_bench_create(n, o, B, DT_F32, true, 0, &e) == NULL);
    CHECK_CONTAINS(e.msg, "RUNNER_CPU_GRAPHS=1");
    optim_free(o);
    net_free(n);
    backend_free(be);
}

int main(void) {
    TEST_RUN(dropout_replays_equal_plain_steps);
    TEST_RUN(masks_move_in_replays);
    TEST_RUN(graphs_need_graph_ops);
    return test_main_end();
}
