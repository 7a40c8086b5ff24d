/* train_graph.c: train.cuda_graphs in the trainer (train_internal.h): whole steps and
 * evaluation batches recorded once per shape with the backend's graph_* ops and replayed
 * with one launch.
 *
 * What is recorded is device work only (train_step.c device_segment, eval_device here):
 * every value the host changes from step to step reaches it through backend memory that
 * the host writes before the launch — the learning rate (step control), the EMA decay,
 * the epoch and the micro-batches' dataset indices and mixing draws (GPU data path), the
 * images, labels or soft targets (CPU loader) — and the step writes its numbers to the
 * fixed graph_rec, copied to the window's record after it. So a key (train_internal.h
 * graph_key_t: the segment's place in the step and the micro-batch sizes; an evaluation
 * batch's size) fixes everything a recording bakes in. A key's first run is a normal one
 * (a first run may search algorithms, grow workspaces or allocate, which a recording
 * cannot hold); its second is recorded and launched; later ones are launched. The host
 * state the recorded calls change — the BN num_batches_tracked counters — is put back
 * after recording and advanced by the recording's delta after every launch. A short last
 * batch is one more key, recorded in the second epoch and replayed from then on; nothing
 * is recorded again unless its memory moved (a stale graph, backend.h), which in single
 * mode re-records it.
 *
 * DDP (nccl; on the cpu backend shm through host tasks): the step's collectives go in
 * queue order (ddp_set_ordered), so the recording holds the bucket all-reduces, the BN
 * buffer broadcast and SyncBN, and a step is one launch on every rank. NCCL requires every
 * rank to record and replay the same collectives: keys are the same on every rank (same
 * micro-batch sizes), and after each recording the ranks agree (one all-reduce) on
 * whether every rank's succeeded; if one failed, all run without graphs. A DDP graph
 * found stale is an error (a rank cannot record alone). Evaluation has no collectives:
 * its recordings are each rank's own.
 * A recording that fails (an op the capture cannot hold) turns graphs off for the run,
 * with one console line, and the work runs normally.
 */
#include <stdlib.h>
#include <string.h>

#include "runner/train_internal.h"

static bool same_key(const graph_key_t *a, const graph_key_t *b) {
    return a->kind == b->kind && a->first == b->first && a->count == b->count && a->n_micro == b->n_micro &&
           a->n_last == b->n_last && a->bcast == b->bcast && a->batch == b->batch;
}

static graph_entry_t *entry_for(trainer_t *t, const graph_key_t *k, err_t *e) {
    for (int i = 0; i < t->n_gcache; i++)
        if (same_key(&t->gcache[i].key, k)) return &t->gcache[i];
    if (t->n_gcache == t->cap_gcache) {
        int cap = t->cap_gcache ? 2 * t->cap_gcache : 8;
        graph_entry_t *n = realloc(t->gcache, (size_t)cap * sizeof *n);
        if (!n) {
            err_set(e, ERR_RUNTIME, "out of memory");
            return NULL;
        }
        t->gcache = n;
        t->cap_gcache = cap;
    }
    int nc = net_num_counters(t->net);
    graph_entry_t *g = &t->gcache[t->n_gcache];
    *g = (graph_entry_t){.key = *k};
    if (!(g->delta = calloc((size_t)(nc ? nc : 1), sizeof *g->delta))) {
        err_set(e, ERR_RUNTIME, "out of memory");
        return NULL;
    }
    t->n_gcache++;
    return g;
}

/* After a launch: the host-side effects of the recorded calls. */
static void replayed(trainer_t *t, const graph_entry_t *g) {
    t->graph_launches++;
    int64_t *c = net_counters(t->net);
    for (int i = 0; i < net_num_counters(t->net); i++) c[i] += g->delta[i];
}

static void say(trainer_t *t, const char *line) {
    if (t->rank0) track_console(t->track, line);
    else trainer_note(t, "%s", line);
}

/* Records fn as g's graph and launches it; on a failed recording (any rank's, in DDP)
 * turns graphs off and runs fn normally. */
static int record(trainer_t *t, graph_entry_t *g, int (*fn)(trainer_t *, void *, err_t *), void *arg,
                  bool collective, err_t *e) {
    backend_t *be = t->be;
    int nc = net_num_counters(t->net);
    int64_t *counters = net_counters(t->net), *before = malloc((size_t)(nc ? nc : 1) * sizeof *before);
    if (!before) return err_set(e, ERR_RUNTIME, "out of memory");
    if (nc) memcpy(before, counters, (size_t)nc * sizeof *before);   /* a net without BN: NULL */
    err_t ce = {0};
    void *graph = NULL;
    int rc = be->ops->graph_capture_begin(be);
    if (rc == 0) {
        rc = fn(t, arg, &ce);
        int end = be->ops->graph_capture_end(be, &graph);
        if (!rc) rc = end;
    }
    /* the recorded calls ran on the host only: their counter updates are the replay's */
    for (int i = 0; i < nc; i++) {
        g->delta[i] = counters[i] - before[i];
        counters[i] = before[i];
    }
    free(before);
    bool mine = rc == 0 && graph != NULL, all = mine;
    if (collective) {
        float failed = mine ? 0.0f : 1.0f;
        if (trainer_allreduce_small(t, &failed, 1, e)) {
            if (graph) be->ops->graph_free(be, graph);
            return -1;
        }
        all = failed == 0.0f;
    }
    if (!all) {
        if (graph) be->ops->graph_free(be, graph);
        char line[sizeof ce.msg + 160];
        if (mine)
            snprintf(line, sizeof line, "train.cuda_graphs: recording a step failed on another rank; every rank "
                     "runs without graphs");
        else
            snprintf(line, sizeof line, "train.cuda_graphs: recording a %s failed, running without graphs: %s",
                     g->key.kind == GRAPH_EVAL ? "evaluation batch" : "step", ce.code ? ce.msg : be->err.msg);
        say(t, line);
        t->graphs = false;
        return fn(t, arg, e);
    }
    g->graph = graph;
    t->graph_recordings++;
    int r = be->ops->graph_launch(be, graph);
    if (r < 0) {
        *e = be->err;
        return -1;
    }
    if (r == 1) return err_set(e, ERR_RUNTIME, "train.cuda_graphs: a recording went stale before its first launch");
    replayed(t, g);
    return 0;
}

int trainer_graph_run(trainer_t *t, const graph_key_t *k, int (*fn)(trainer_t *t, void *arg, err_t *e), void *arg,
                      err_t *e) {
    if (!t->graphs) return fn(t, arg, e);
    backend_t *be = t->be;
    bool collective = t->ddp && k->kind == GRAPH_TRAIN;
    graph_entry_t *g = entry_for(t, k, e);
    if (!g) return -1;
    if (g->graph) {
        int r = be->ops->graph_launch(be, g->graph);
        if (r < 0) {
            *e = be->err;
            return -1;
        }
        if (r == 0) {
            replayed(t, g);
            return 0;
        }
        /* stale: memory it uses was reallocated since it was recorded */
        be->ops->graph_free(be, g->graph);
        g->graph = NULL;
        if (collective)
            return err_set(e, ERR_RUNTIME, "train.cuda_graphs: a rank cannot record a DDP step again alone, and "
                           "memory rank %d's recording uses was reallocated (a workspace grew after the shapes "
                           "were planned); set train.cuda_graphs: false", t->env->rank);
        return record(t, g, fn, arg, false, e);
    }
    if (g->runs++ == 0) return fn(t, arg, e);
    return record(t, g, fn, arg, collective, e);
}

int trainer_graphs_setup(trainer_t *t, err_t *e) {
    backend_t *be = t->be;
    if (!(t->eval_out = be->ops->alloc(be, 4 * sizeof(int32_t)))) {
        *e = be->err;
        return -1;
    }
    if (!t->graphs) return 0;
    size_t words = (size_t)trainer_step_rec_words(t->p->grad_accum);
    if (!(t->graph_rec = be->ops->alloc(be, words * sizeof(int32_t)))) {
        *e = be->err;
        return -1;
    }
    /* DDP: the step's collectives in queue order, so that a recording holds them */
    return t->ddp ? ddp_set_ordered(t->ddp, (int64_t)net_num_buffers(t->net), e) : 0;
}

void trainer_graphs_free(trainer_t *t) {
    backend_t *be = t->be;
    for (int i = 0; i < t->n_gcache; i++) {
        if (t->gcache[i].graph) be->ops->graph_free(be, t->gcache[i].graph);
        free(t->gcache[i].delta);
    }
    free(t->gcache);
    t->gcache = NULL;
    t->n_gcache = t->cap_gcache = 0;
    if (t->graph_rec) be->ops->release(be, t->graph_rec);
    if (t->eval_out) be->ops->release(be, t->eval_out);
    t->graph_rec = NULL;
    t->eval_out = NULL;
}

static int eval_device(trainer_t *t, void *arg, err_t *e) {
    int n = *(const int *)arg;
    net_t *net = t->net;
    if (net_forward(net, net_input(net), n, false, NULL, e)) return -1;
    return net_loss_async(net, NULL, (float)t->e->train.label_smoothing, 0.0f, NULL, t->eval_out,
                          (int32_t *)t->eval_out + 1, e);
}

int trainer_eval_batch(trainer_t *t, int n, net_loss_out_t *out, err_t *e) {
    graph_key_t k = {.kind = GRAPH_EVAL, .batch = n};
    if (trainer_graph_run(t, &k, eval_device, &n, e)) return -1;
    int32_t words[3];
    backend_t *be = t->be;
    if (be->ops->download(be, words, t->eval_out, sizeof words)) {
        *e = be->err;
        return -1;
    }
    float loss;
    memcpy(&loss, &words[0], sizeof loss);
    out->loss_sum = loss;
    out->correct1 = words[1];
    out->correct5 = words[2];
    return 0;
}
