/* train_bench.c: a trainer without a run around a caller's net and optimizer, stepping
 * with trainer_step itself (train_bench.h). What it fills of trainer_t is what
 * trainer_step, the device segment and train_graph.c read in single mode; the rest stays
 * zero (no data source: t->resident, no DDP/DP, EMA, mixup, tracking: t->track NULL, so
 * a failed recording's console line goes nowhere).
 */
#include <stdlib.h>
#include <string.h>

#include "runner/train_bench.h"
#include "runner/train_internal.h"

struct train_bench {
    trainer_t t;
    experiment_t x;   /* defaults: no label smoothing, no clipping, no EMA */
    plan_t p;
    train_env_t env;
    int32_t *rec;     /* backend memory: the step's record */
};

train_bench_t *train_bench_create(net_t *n, optim_t *o, int batch, dtype_t dt, bool graphs, uint64_t seed,
                                  err_t *e) {
    backend_t *be = net_backend(n);
    if (!be || batch < 1) {
        err_set(e, ERR_RUNTIME, "train_bench: the net is not bound, or batch %d < 1", batch);
        return NULL;
    }
    if (graphs && !be->ops->graph_capture_begin) {
        err_set(e, ERR_INPUT, "train_bench: the %s backend has no graph ops (cpu: RUNNER_CPU_GRAPHS=1)",
                be->kind == BACKEND_CUDA ? "cuda" : "cpu");
        return NULL;
    }
    train_bench_t *b = calloc(1, sizeof *b);
    if (!b) {
        err_set(e, ERR_RUNTIME, "out of memory");
        return NULL;
    }
    config_defaults(&b->x);
    b->x.seed = seed;
    b->x.train.label_smoothing = 0;
    b->x.optimizer.clip_grad_norm = 0;
    b->p.micro_batch = b->p.per_device_batch = b->p.global_batch = batch;
    b->p.grad_accum = 1;
    b->p.world_size = 1;
    snprintf(b->p.device, sizeof b->p.device, "%s", be->kind == BACKEND_CUDA ? "cuda" : "cpu");
    snprintf(b->p.mode, sizeof b->p.mode, "single");
    b->env.world_size = b->env.local_world_size = 1;
    trainer_t *t = &b->t;
    t->e = &b->x;
    t->p = &b->p;
    t->env = &b->env;
    t->rank0 = true;
    t->be = be;
    t->net = n;
    t->opt = o;
    t->act_dt = dt;
    t->train_opts.world_size = 1;
    t->resident = true;
    t->graphs = true;   /* trainer_graphs_setup allocates the recorded step's record */
    if (loss_scaler_init(&t->scaler, be, optim_ctl(o), dt, b->x.amp.init_scale, b->x.amp.growth_interval, e) ||
        trainer_graphs_setup(t, e))
        goto fail;
    t->graphs = graphs;
    if (!(b->rec = be->ops->alloc(be, (size_t)trainer_step_rec_words(1) * sizeof(int32_t))) ||
        (net_has_dropout(n) && !(t->rng_keys = be->ops->alloc(be, sizeof(dropout_key_t))))) {
        *e = be->err;
        goto fail;
    }
    return b;
fail:
    train_bench_free(b);
    return NULL;
}

int train_bench_step(train_bench_t *b, double lr, err_t *e) {
    pending_step_t ps;
    return trainer_step(&b->t, 1, lr, b->rec, &ps, e);
}

bool train_bench_graphs(const train_bench_t *b) { return b->t.graphs; }
int64_t train_bench_recordings(const train_bench_t *b) { return b->t.graph_recordings; }
int64_t train_bench_launches(const train_bench_t *b) { return b->t.graph_launches; }

int train_bench_last(train_bench_t *b, double *loss_sum, int64_t *correct, err_t *e) {
    int words = trainer_step_rec_words(1), head = trainer_step_rec_words(0);
    int32_t rec[16];
    backend_t *be = b->t.be;
    if (be->ops->download(be, rec, b->rec, (size_t)words * sizeof(int32_t))) {
        *e = be->err;
        return -1;
    }
    float l;
    memcpy(&l, &rec[head], sizeof l);
    *loss_sum = l;
    *correct = rec[head + 1];
    return 0;
}

void train_bench_free(train_bench_t *b) {
    if (!b) return;
    backend_t *be = b->t.be;
    trainer_graphs_free(&b->t);
    if (b->rec) be->ops->release(be, b->rec);
    if (b->t.rng_keys) be->ops->release(be, b->t.rng_keys);
    free(b);
}
