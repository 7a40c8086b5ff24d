/* test_graph_replay.c: what train.cuda_graphs relies on, checked on the CPU with the cpu
 * backend's graph ops (model/cpu/cpu_graph.c, RUNNER_CPU_GRAPHS=1: op calls recorded with
 * their pointers and scalars, replayed later, as a CUDA stream capture records them).
 *  1. The recording table wraps every slot that does work: an op added to the cpu backend
 *     without a wrapper would run at once inside a capture instead of being recorded.
 *  2. A whole step — zero grads, forward, loss, backward, unscale and inf check, clipping,
 *     the optimizer with the schedule's learning rate read from the step control, the
 *     step-control update, the EMA with its decay read from backend memory — recorded once
 *     and replayed for later steps, with new images, labels, learning rates and decays
 *     written into the same buffers in between, computes exactly what running the calls
 *     again computes (resnet20 on 8x8 inputs, SGD and AdamW, fp32 and emulated fp16 with a
 *     dynamic loss scale whose growth interval passes during the replays): params, BN
 *     buffers, gradients, optimizer state, EMA, the step control and the record words, bit
 *     for bit. The recorded calls' counter updates, applied per replay, give the counters
 *     of the plain run.
 *  3. A learning rate passed by value into a recorded op is baked in: replayed at another
 *     step, the result differs (the defect the step control's lr prevents).
 *  4. What a capture cannot hold fails the recording (upload, download, sync, alloc) with
 *     the op named, capture_end discards it, and the backend works normally after.
 *  5. host_task: recorded, not run; run at each launch, in order with the ops.
 *  6. RUNNER_CPU_GRAPHS=stale: every 5th launch reports the graph stale and runs nothing.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "model/amp.h"
#include "model/cpu/cpu_backend.h"
#include "model/ema.h"
#include "model/net.h"
#include "model/optim.h"
#include "model/arch/resnet.h"
#include "util/rng.h"
#include "tests/model/cpu_graphs_be.h"
#include "tests/test.h"

static backend_t *make_be(const char *graphs) { return cpu_graphs_be(graphs); }

/* ---- 1. every working slot wrapped ---- */

static void every_slot_wrapped(void) {
    backend_t *plain = make_be(NULL), *rec = make_be("1");
    CHECK(plain->ops->graph_capture_begin == NULL);
    CHECK(rec->ops->graph_capture_begin != NULL && rec->ops->graph_launch != NULL);
    /* slots that do no work on backend memory keep the plain function */
    const size_t keep[] = {offsetof(backend_ops_t, name), offsetof(backend_ops_t, destroy),
                           offsetof(backend_ops_t, peak_memory), offsetof(backend_ops_t, conv_engine),
                           offsetof(backend_ops_t, libraries)};
    const unsigned char *a = (const unsigned char *)plain->ops, *b = (const unsigned char *)rec->ops;
    int unwrapped = 0, slots = 0;
    for (size_t off = 0; off + sizeof(void *) <= sizeof(backend_ops_t); off += sizeof(void *)) {
        void *pa, *pb;
        memcpy(&pa, a + off, sizeof pa);
        memcpy(&pb, b + off, sizeof pb);
        bool kept = false;
        for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++) kept |= keep[k] == off;
        if (!pa || kept) continue;
        slots++;
        if (pa == pb) {
            fprintf(stderr, "backend_ops_t slot at offset %zu is not wrapped by model/cpu/cpu_graph.c\n", off);
            unwrapped++;
        }
    }
    CHECK_INT(unwrapped, 0);
    CHECK(slots >= 35);
    backend_free(plain);
    backend_free(rec);
}

/* ---- 2. a whole step recorded == run ---- */

enum { B = 6, HW = 8, CLASSES = 5, STEPS = 4 };

typedef struct side {
    backend_t *be;
    net_t *net;
    optim_t *opt;
    loss_scaler_t ls;
    ema_t *ema;
    float *norm;          /* the step's record: gradient norm, loss sum, hits */
    float *loss;
    int32_t *hits;
} side_t;

static side_t side_make(const char *graphs, dtype_t dt, optim_kind_t kind) {
    side_t s = {0};
    err_t e = {0};
    s.be = make_be(graphs);
    s.net = resnet_build("resnet20", 3, CLASSES, false, &e);
    optim_opts_t oo = {.kind = kind, .momentum = 0.9, .weight_decay = 5e-4, .beta1 = 0.9, .beta2 = 0.999,
                       .eps = 1e-8};
    ema_opts_t eo = {.decay = 0.99, .warmup = true, .warmup_gamma = 1.0, .warmup_power = 2.0 / 3.0};
    if (!s.net || net_bind(s.net, s.be, B, HW, HW, dt, &e) || net_init(s.net, 17, &e) ||
        !(s.opt = optim_create(s.net, &oo, &e)) || !(s.ema = ema_create(s.net, &eo, &e)) ||
        loss_scaler_init(&s.ls, s.be, optim_ctl(s.opt), dt, 1024.0, 2, &e) ||
        !(s.norm = s.be->ops->alloc(s.be, 4)) || !(s.loss = s.be->ops->alloc(s.be, 4)) ||
        !(s.hits = s.be->ops->alloc(s.be, 8))) {
        fprintf(stderr, "setup: %s\n", e.msg);
        exit(1);
    }
    return s;
}

static void side_free(side_t *s) {
    s->be->ops->release(s->be, s->norm);
    s->be->ops->release(s->be, s->loss);
    s->be->ops->release(s->be, s->hits);
    ema_free(s->ema);
    optim_free(s->opt);
    net_free(s->net);
    backend_free(s->be);
}

/* What the host writes before step k: images, labels, the learning rate, the EMA decay. */
static void host_inputs(side_t *s, int k) {
    err_t e = {0};
    float img[B * HW * HW * 3];
    int32_t lab[B];
    rng_t r = rng_make(99, RNG_STREAM_MISC, (uint64_t)k, 0);
    for (int i = 0; i < B * HW * HW * 3; i++) img[i] = rng_uniform(&r) * 2.0f - 1.0f;
    for (int i = 0; i < B; i++) lab[i] = (int32_t)rng_below(&r, CLASSES);
    CHECK_INT(net_upload_input(s->net, img, B, &e), 0);
    CHECK_INT(s->be->ops->upload(s->be, net_labels(s->net), lab, sizeof lab), 0);
    CHECK_INT(optim_set_lr(s->opt, 0.05 * (k + 1) / STEPS, &e), 0);   /* a warm-up */
    CHECK_INT(ema_prepare(s->ema, k + 1, &e), 0);
}

/* The step's device work: what the trainer records. */
static int device_step(side_t *s, err_t *e) {
    return net_zero_grads(s->net, e) || net_forward(s->net, net_input(s->net), B, true, NULL, e) ||
           net_loss_async(s->net, NULL, 0.1f, 1.0f / B, optim_ctl(s->opt), s->loss, s->hits, e) ||
           net_backward(s->net, NULL, e) ||
           loss_scaler_unscale(&s->ls, net_grads(s->net), (int64_t)net_num_params(s->net), e) ||
           optim_clip_grad_norm(s->opt, 2.0, s->norm, e) || optim_apply(s->opt, e) || ema_apply(s->ema, e);
}

static long diff_words(const void *a, const void *b, size_t n) {
    long bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp((const char *)a + 4 * i, (const char *)b + 4 * i, 4) != 0;
    return bad;
}

static void compare_sides(side_t *x, side_t *y) {
    err_t e = {0};
    size_t np = net_num_params(x->net), nb = net_num_buffers(x->net);
    float *pa = malloc(np * 4), *pb = malloc(np * 4), *ba = malloc(nb * 4), *bb = malloc(nb * 4);
    CHECK_INT(net_download_params(x->net, pa, &e), 0);
    CHECK_INT(net_download_params(y->net, pb, &e), 0);
    CHECK_INT(net_download_buffers(x->net, ba, &e), 0);
    CHECK_INT(net_download_buffers(y->net, bb, &e), 0);
    CHECK_INT(diff_words(pa, pb, np), 0);
    CHECK_INT(diff_words(ba, bb, nb), 0);
    CHECK_INT(diff_words(net_grads(x->net), net_grads(y->net), np), 0);
    for (int i = 0; i < optim_num_state(x->opt); i++)
        CHECK_INT(diff_words(optim_state(x->opt, i), optim_state(y->opt, i), np), 0);
    CHECK_INT(diff_words(ema_params(x->ema), ema_params(y->ema), np), 0);
    CHECK_INT(diff_words(ema_buffers(x->ema), ema_buffers(y->ema), nb), 0);
    CHECK(memcmp(optim_ctl(x->opt), optim_ctl(y->opt), sizeof(step_ctl_t)) == 0);
    CHECK(memcmp(net_counters(x->net), net_counters(y->net), (size_t)net_num_counters(x->net) * sizeof(int64_t)) == 0);
    CHECK(diff_words(x->norm, y->norm, 1) == 0 && diff_words(x->loss, y->loss, 1) == 0 &&
          diff_words(x->hits, y->hits, 2) == 0);
    free(pa); free(pb); free(ba); free(bb);
}

static void replay_equals_run(dtype_t dt, optim_kind_t kind) {
    side_t plain = side_make(NULL, dt, kind), rec = side_make("1", dt, kind);
    err_t e = {0};
    void *graph = NULL;
    int nc = net_num_counters(rec.net);
    int64_t before[128], delta[128];
    CHECK(nc <= 128);
    for (int k = 0; k < STEPS; k++) {
        host_inputs(&plain, k);
        CHECK_INT(device_step(&plain, &e), 0);
        CHECK_INT(optim_ctl(plain.opt)->growth_interval, dt == DT_F16 ? 2 : 0);

        host_inputs(&rec, k);
        if (k == 0) {   /* the first run of a shape runs normally */
            CHECK_INT(device_step(&rec, &e), 0);
            continue;
        }
        if (!graph) {   /* what train_graph.c does: record, put the counters back */
            memcpy(before, net_counters(rec.net), (size_t)nc * sizeof *before);
            step_ctl_t ctl_before = *optim_ctl(rec.opt);
            CHECK_INT(rec.be->ops->graph_capture_begin(rec.be), 0);
            CHECK_INT(device_step(&rec, &e), 0);
            CHECK_INT(rec.be->ops->graph_capture_end(rec.be, &graph), 0);
            CHECK(graph != NULL);
            if (!graph) break;
            /* it recorded, it did not run */
            CHECK(memcmp(&ctl_before, optim_ctl(rec.opt), sizeof ctl_before) == 0);
            for (int i = 0; i < nc; i++) {
                delta[i] = net_counters(rec.net)[i] - before[i];
                net_counters(rec.net)[i] = before[i];
            }
        }
        CHECK_INT(rec.be->ops->graph_launch(rec.be, graph), 0);
        for (int i = 0; i < nc; i++) net_counters(rec.net)[i] += delta[i];
    }
    for (int i = 0; i < nc; i++) CHECK_INT(net_counters(rec.net)[i], STEPS);
    compare_sides(&plain, &rec);
    /* fp16: the scale grew (growth interval 2) inside the replays, as in the plain run */
    if (dt == DT_F16) CHECK(optim_ctl(rec.opt)->loss_scale > 1024.0f);
    CHECK_INT(optim_ctl(rec.opt)->optim_steps, STEPS);
    rec.be->ops->graph_free(rec.be, graph);
    side_free(&plain);
    side_free(&rec);
}

static void sgd_fp32(void) { replay_equals_run(DT_F32, OPTIM_SGD); }
static void sgd_fp16(void) { replay_equals_run(DT_F16, OPTIM_SGD); }
static void adamw_fp32(void) { replay_equals_run(DT_F32, OPTIM_ADAMW); }

/* ---- 3. a learning rate by value is baked in ---- */

static void lr_by_value_is_baked(void) {
    backend_t *be = make_be("1");
    float p[4] = {1, 2, 3, 4}, q[4] = {1, 2, 3, 4}, g[4] = {0.5f, -0.5f, 0.25f, 1};
    step_ctl_t *ctl = be->ops->alloc(be, sizeof *ctl);
    *ctl = (step_ctl_t){.loss_scale = 1.0f, .lr = 0.1};
    void *by_value = NULL, *by_ctl = NULL;
    CHECK_INT(be->ops->graph_capture_begin(be), 0);
    CHECK_INT(be->ops->sgd_step(be, 4, p, g, NULL, 0.1, 0, 0, 0, false, ctl), 0);
    CHECK_INT(be->ops->graph_capture_end(be, &by_value), 0);
    CHECK_INT(be->ops->graph_capture_begin(be), 0);
    CHECK_INT(be->ops->sgd_step(be, 4, q, g, NULL, NAN, 0, 0, 0, false, ctl), 0);
    CHECK_INT(be->ops->graph_capture_end(be, &by_ctl), 0);
    CHECK(p[0] == 1.0f && q[0] == 1.0f);   /* recorded, not run */
    ctl->lr = 0.5;                          /* the next step's learning rate */
    CHECK_INT(be->ops->graph_launch(be, by_value), 0);
    CHECK_INT(be->ops->graph_launch(be, by_ctl), 0);
    CHECK(q[0] == 1.0f - 0.5f * 0.5f);      /* 0.75: this step's rate */
    CHECK(p[0] == 1.0f - 0.1f * 0.5f);      /* 0.95: the rate it was recorded with */
    be->ops->graph_free(be, by_value);
    be->ops->graph_free(be, by_ctl);
    be->ops->release(be, ctl);
    backend_free(be);
}

/* ---- 4. what a capture cannot hold ---- */

static void host_transfers_fail_the_recording(void) {
    backend_t *be = make_be("1");
    float *x = be->ops->alloc(be, 64), h[4] = {1, 2, 3, 4};
    const char *what[4] = {"upload", "download", "sync", "alloc"};
    for (int k = 0; k < 4; k++) {
        void *g = (void *)1;
        CHECK_INT(be->ops->graph_capture_begin(be), 0);
        CHECK_INT(be->ops->zero(be, x, 16), 0);
        int rc = k == 0 ? be->ops->upload(be, x, h, 16)
               : k == 1 ? be->ops->download(be, h, x, 16)
               : k == 2 ? be->ops->sync(be)
                        : (be->ops->alloc(be, 16) ? 0 : -1);
        CHECK_INT(rc, -1);
        CHECK(strstr(be->err.msg, what[k]) != NULL);
        CHECK_INT(be->ops->graph_capture_end(be, &g), -1);
        CHECK(g == NULL);
    }
    /* usable afterwards: ops run at once again */
    CHECK_INT(be->ops->upload(be, x, h, 16), 0);
    float back[4] = {0};
    CHECK_INT(be->ops->download(be, back, x, 16), 0);
    CHECK(back[3] == 4.0f);
    be->ops->release(be, x);
    backend_free(be);
}

/* ---- 5. host tasks ---- */

typedef struct tally {
    float *x;       /* backend memory, read by the task */
    float seen[4];  /* what it saw at each run */
    int runs;
} tally_t;

static void tally_task(void *ctx) {
    tally_t *t = ctx;
    if (t->runs < 4) t->seen[t->runs] = t->x[0];
    t->runs++;
}

static void host_task_in_queue_order(void) {
    backend_t *be = make_be("1");
    tally_t t = {.x = be->ops->alloc(be, 64)};
    t.x[0] = 1.0f;
    void *g = NULL;
    CHECK_INT(be->ops->graph_capture_begin(be), 0);
    CHECK_INT(be->ops->scale(be, 1, t.x, 3.0f), 0);
    CHECK_INT(be->ops->host_task(be, tally_task, &t), 0);
    CHECK_INT(be->ops->graph_capture_end(be, &g), 0);
    CHECK_INT(t.runs, 0);
    CHECK_INT(be->ops->graph_launch(be, g), 0);
    CHECK_INT(be->ops->graph_launch(be, g), 0);
    CHECK_INT(t.runs, 2);
    CHECK(t.seen[0] == 3.0f && t.seen[1] == 9.0f);   /* after the scale of its own launch */
    be->ops->graph_free(be, g);
    be->ops->release(be, t.x);
    backend_free(be);
}

/* ---- 6. staleness simulated ---- */

static void stale_every_fifth_launch(void) {
    backend_t *be = make_be("stale");
    float *x = be->ops->alloc(be, 64);
    x[0] = 1.0f;
    void *g = NULL;
    CHECK_INT(be->ops->graph_capture_begin(be), 0);
    CHECK_INT(be->ops->scale(be, 1, x, 2.0f), 0);
    CHECK_INT(be->ops->graph_capture_end(be, &g), 0);
    int stale = 0;
    for (int i = 1; i <= 10; i++) {
        int r = be->ops->graph_launch(be, g);
        CHECK(r == 0 || r == 1);
        stale += r == 1;
        CHECK_INT(r == 1, i % 5 == 0);
    }
    CHECK_INT(stale, 2);
    CHECK(x[0] == 256.0f);   /* 8 launches ran, the stale ones did nothing */
    be->ops->graph_free(be, g);
    be->ops->release(be, x);
    backend_free(be);
}

int main(void) {
    TEST_RUN(every_slot_wrapped);
    TEST_RUN(sgd_fp32);
    TEST_RUN(sgd_fp16);
    TEST_RUN(adamw_fp32);
    TEST_RUN(lr_by_value_is_baked);
    TEST_RUN(host_transfers_fail_the_recording);
    TEST_RUN(host_task_in_queue_order);
    TEST_RUN(stale_every_fifth_launch);
    return test_main_end();
}
