/* dp.c: DataParallel in one process (dp.h): replica threads, replicate / scatter /
 * forward / loss / backward / reduce-to-replica-0 per micro-batch.
 *
 * Replica 0 runs on the caller's thread, replicas 1.. on their own threads, each driving
 * its own net and backend. torch's reduction is .grad += (g0 + g1 + ...), and so is this:
 * replica 0's previous gradient (earlier micro-batches) is set aside, replica 0 computes
 * into zeroed gradients like every replica, and the previous value is added last. Sums
 * run in replica order in fp32, so they are deterministic. Two ways of moving data:
 *
 * - CUDA replicas (every backend cuda; model/cuda/peer.cu), device to device: the caller
 *   copies replica 0's gradient aside on its device and peer-copies its parameters and
 *   buffers into each replica (then waits for those copies, since replica 0's forward
 *   writes its buffers next); after backward, each replica q = 1.. in turn is peer-copied
 *   into a staging array on replica 0's device and added into replica 0's gradient with
 *   the backend's add op, then the previous gradient is added and replica 0's stream is
 *   waited for (the next micro-batch zeroes the gradients those copies read).
 * - Otherwise (CPU backends; mixed kinds), through the host: parameters and buffers are
 *   downloaded from replica 0 once per micro-batch and uploaded by each replica;
 *   gradients are read directly (CPU backend) or downloaded (others) and summed on the
 *   host, each replica thread summing one slice of the parameter range.
 *
 * Inputs and labels come from the host either way: each replica uploads its chunk, and
 * keys its dropout with the rows of its chunk (dp_set_rng_key).
 *
 * Threads: OpenMP's team size (used by oneDNN inside the CPU backend) is a per-thread
 * setting, so each replica thread sets it to its backend's thread count before computing;
 * otherwise a replica thread would run with the process default and, since oneDNN's
 * reductions depend on the team size, produce different bits than the same backend on
 * the thread that created it.
 *
 * It does not: overlap the gradient copies with backward (DP waits per micro-batch), run
 * the optimizer, evaluate (use nets[0]), or support SyncBN.
 */
#include "comm/dp.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"

#ifdef RUNNER_HAVE_CUDA
#include "model/cuda/cuda_backend.h"
#endif

typedef struct replica_job {
    const float *images;
    const int32_t *labels;
    const float *targets;    /* soft targets (n x classes) or NULL */
    int classes;
    int start, count;
    float grad_scale, smoothing;
} replica_job_t;

typedef struct replica {
    struct dp *dp;
    int index;
    pthread_t thread;
    replica_job_t job;
    net_loss_out_t out;
    float *grads_host;       /* this replica's gradients on the host (NULL: CPU direct) */
    int status;
    err_t err;
    double compute_s;
} replica_t;

enum { PHASE_IDLE = 0, PHASE_COMPUTE, PHASE_REDUCE, PHASE_QUIT };

struct dp {
    net_t *const *nets;
    int world;
    dropout_key_t key;          /* dp_set_rng_key */
    bool key_set;
    int in_h, in_w, in_c;
    size_t n_params, n_buffers;
    replica_t *reps;
    float *params_host, *buffers_host, *prev;   /* replica 0's state on the host */
    float *sum_host;                            /* reduced gradients (non-CPU replica 0) */
    bool peer;                                  /* every replica cuda: device-to-device path */
    float *prev_dev, *stage_dev;                /* peer path: on replica 0's backend */
    /* dispatch: the caller bumps generation with a phase; workers run it and report */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int phase;
    uint64_t generation;
    int pending;
    int started;                                /* replica threads running (1..started) */
    dp_timing_t t;
};

void dp_chunk(int n, int world, int i, int *start, int *count) {
    int size = (n + world - 1) / world;   /* torch.chunk: ceil(n / world) per chunk */
    int s = i * size;
    *start = s < n ? s : n;
    *count = s < n ? (n - s < size ? n - s : size) : 0;
}

/* Makes the calling thread's OpenMP team size the backend's thread count (when OpenMP is
 * loaded at all: looked up at run time, as the CPU backend does). */
static void match_omp_threads(backend_t *be) {
    void (*set)(int) = NULL;
    void *sym = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (sym) memcpy(&set, &sym, sizeof set);
    if (set && be->threads > 0) set(be->threads);
}

/* Gradient pointer on the host for replica i (direct for CPU backends). */
static float *host_grads(dp_t *d, int i) {
    replica_t *r = &d->reps[i];
    return r->grads_host ? r->grads_host : net_grads(d->nets[i]);
}

/* Replica i's compute phase: take replica 0's parameters (i > 0), zero gradients, run
 * forward, loss and backward on its chunk, and bring gradients to the host. */
static int replica_compute(dp_t *d, int i) {
    replica_t *r = &d->reps[i];
    net_t *n = d->nets[i];
    backend_t *be = net_backend(n);
    err_t *e = &r->err;
    double t0 = now_s();
    memset(&r->out, 0, sizeof r->out);
    if (r->job.count == 0) return 0;
    if (i > 0 && !d->peer && (net_upload_params(n, d->params_host, e) < 0 ||
                              net_upload_buffers(n, d->buffers_host, e) < 0))
        return -1;
    if (net_zero_grads(n, e) < 0) return -1;
    if (d->key_set && net_set_rng_key(n, d->key.seed, d->key.epoch,
                                      d->key.first_sample + r->job.start * d->key.sample_stride,
                                      d->key.sample_stride, e) < 0)
        return -1;
    size_t sample = (size_t)d->in_h * (size_t)d->in_w * (size_t)d->in_c;
    if (net_upload_input(n, r->job.images + (size_t)r->job.start * sample, r->job.count, e) < 0 ||
        net_forward(n, net_input(n), r->job.count, true, NULL, e) < 0 ||
        (r->job.targets
             ? net_loss_soft(n, r->job.targets + (size_t)r->job.start * r->job.classes, r->job.grad_scale, &r->out, e)
             : net_loss(n, r->job.labels + r->job.start, r->job.smoothing, r->job.grad_scale, &r->out, e)) < 0 ||
        net_backward(n, NULL, e) < 0)
        return -1;
    if (r->grads_host && net_download_grads(n, r->grads_host, e) < 0) return -1;
    if (!r->grads_host && be->ops->sync && be->ops->sync(be) < 0) {
        *e = be->err;
        return -1;
    }
    r->compute_s = now_s() - t0;
    return 0;
}

/* Replica i's reduce phase: sums slice i of the parameter range over the replicas that
 * had data, in replica order, then adds replica 0's earlier gradient. */
static void replica_reduce(dp_t *d, int i) {
    size_t lo = d->n_params * (size_t)i / (size_t)d->world;
    size_t hi = d->n_params * (size_t)(i + 1) / (size_t)d->world;
    float *out = d->sum_host ? d->sum_host : net_grads(d->nets[0]);
    int used = 0;
    for (int q = 0; q < d->world; q++) used += d->reps[q].job.count > 0;
    for (size_t k = lo; k < hi; k++) {
        float acc = host_grads(d, 0)[k];
        for (int q = 1; q < used; q++) acc += host_grads(d, q)[k];
        out[k] = d->prev[k] + acc;
    }
}

static void *replica_main(void *arg) {
    replica_t *r = arg;
    dp_t *d = r->dp;
    uint64_t seen = 0;
    match_omp_threads(net_backend(d->nets[r->index]));
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (d->generation == seen) pthread_cond_wait(&d->cv, &d->mu);
        seen = d->generation;
        int phase = d->phase;
        pthread_mutex_unlock(&d->mu);
        if (phase == PHASE_QUIT) return NULL;
        if (phase == PHASE_COMPUTE) r->status = replica_compute(d, r->index);
        else replica_reduce(d, r->index);
        pthread_mutex_lock(&d->mu);
        if (--d->pending == 0) pthread_cond_broadcast(&d->cv);
    }
}

/* Runs phase on every replica (replica 0 on this thread) and waits for all. */
static void run_phase(dp_t *d, int phase) {
    pthread_mutex_lock(&d->mu);
    d->phase = phase;
    d->pending = d->world - 1;
    d->generation++;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    if (phase == PHASE_COMPUTE) d->reps[0].status = replica_compute(d, 0);
    else if (phase == PHASE_REDUCE) replica_reduce(d, 0);
    pthread_mutex_lock(&d->mu);
    while (d->pending > 0) pthread_cond_wait(&d->cv, &d->mu);
    pthread_mutex_unlock(&d->mu);
}

/* ---- the device-to-device path (every replica a cuda backend) ---- */

#ifdef RUNNER_HAVE_CUDA
/* Copies be's error into e (when given) and adds what failed; returns -1. */
static int be_fail(backend_t *be, err_t *e, const char *what) {
    if (e) *e = be->err;
    return err_wrap(e, "dp: %s", what);
}

/* Replicate: sets replica 0's gradient so far aside, then copies its parameters and
 * buffers into replicas 1.. and waits for those copies (replica 0's forward, which runs
 * next on another stream, updates the buffers they read). */
static int peer_replicate(dp_t *d, err_t *e) {
    net_t *n0 = d->nets[0];
    backend_t *b0 = net_backend(n0);
    if (b0->ops->copy(b0, d->prev_dev, net_grads(n0), d->n_params * 4) < 0)
        return be_fail(b0, e, "setting replica 0's gradient aside");
    for (int i = 1; i < d->world; i++) {
        net_t *ni = d->nets[i];
        backend_t *bi = net_backend(ni);
        if (cuda_copy_peer(bi, net_params(ni), b0, net_params(n0), d->n_params * 4) < 0 ||
            cuda_copy_peer(bi, net_buffers(ni), b0, net_buffers(n0), d->n_buffers * 4) < 0)
            return be_fail(bi, e, "copying parameters and buffers to a replica");
    }
    for (int i = 1; i < d->world; i++) {
        backend_t *bi = net_backend(d->nets[i]);
        if (bi->ops->sync(bi) < 0) return be_fail(bi, e, "copying parameters and buffers to a replica");
    }
    return 0;
}

/* Reduce on replica 0's device: g0 += g1, += g2, ... over the replicas that had data (in
 * replica order, each through the staging array), then g0 = prev + g0, then a wait for
 * replica 0's stream (the copies read the other replicas' gradients). The replicas' own
 * streams are idle: replica_compute synchronised them. */
static int peer_reduce(dp_t *d, int used, err_t *e) {
    net_t *n0 = d->nets[0];
    backend_t *b0 = net_backend(n0);
    float *g0 = net_grads(n0);
    int64_t np = (int64_t)d->n_params;
    for (int q = 1; q < used; q++) {
        net_t *nq = d->nets[q];
        if (cuda_copy_peer(b0, d->stage_dev, net_backend(nq), net_grads(nq), d->n_params * 4) < 0 ||
            b0->ops->add(b0, np, DT_F32, g0, d->stage_dev, g0) < 0)
            return be_fail(b0, e, "summing the replicas' gradients");
    }
    if (b0->ops->add(b0, np, DT_F32, d->prev_dev, g0, g0) < 0 || b0->ops->sync(b0) < 0)
        return be_fail(b0, e, "summing the replicas' gradients");
    return 0;
}
#endif

dp_t *dp_create(net_t *const *nets, int world, int in_h, int in_w, err_t *e) {
    if (world < 1) { err_set(e, ERR_INPUT, "parallel.world_size must be >= 1 for dp"); return NULL; }
    size_t np = net_num_params(nets[0]), nb = net_num_buffers(nets[0]);
    for (int i = 1; i < world; i++)
        if (net_num_params(nets[i]) != np || net_num_buffers(nets[i]) != nb) {
            err_set(e, ERR_RUNTIME, "dp: replica %d is not the same net as replica 0", i);
            return NULL;
        }
    dp_t *d = calloc(1, sizeof *d);
    replica_t *reps = calloc((size_t)world, sizeof *reps);
    if (!d || !reps) { free(d); free(reps); err_set(e, ERR_RUNTIME, "out of memory"); return NULL; }
    d->nets = nets;
    d->world = world;
    d->in_h = in_h;
    d->in_w = in_w;
    d->in_c = net_in_channels(nets[0]);
    d->n_params = np;
    d->n_buffers = nb;
    d->reps = reps;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    for (int i = 0; i < world; i++) {
        reps[i].dp = d;
        reps[i].index = i;
    }
#ifdef RUNNER_HAVE_CUDA
    d->peer = true;
    for (int i = 0; i < world; i++) d->peer = d->peer && net_backend(nets[i])->kind == BACKEND_CUDA;
    if (d->peer) {
        backend_t *b0 = net_backend(nets[0]);
        if (!(d->prev_dev = b0->ops->alloc(b0, np * 4)) ||
            (world > 1 && !(d->stage_dev = b0->ops->alloc(b0, np * 4)))) {
            if (e) *e = b0->err;
            err_wrap(e, "dp: gradient buffers on replica 0's device");
            dp_free(d);
            return NULL;
        }
    }
#endif
    if (!d->peer) {
        bool ok = (d->params_host = malloc(np * 4 + 4)) && (d->buffers_host = malloc(nb * 4 + 4)) &&
                  (d->prev = malloc(np * 4 + 4));
        if (ok && net_backend(nets[0])->kind != BACKEND_CPU) ok = (d->sum_host = malloc(np * 4 + 4));
        for (int i = 0; i < world && ok; i++)
            if (net_backend(nets[i])->kind != BACKEND_CPU) ok = (reps[i].grads_host = malloc(np * 4 + 4));
        if (!ok) { err_set(e, ERR_RUNTIME, "out of memory (dp host buffers)"); dp_free(d); return NULL; }
    }
    for (int i = 1; i < world; i++) {
        if (pthread_create(&reps[i].thread, NULL, replica_main, &reps[i]) != 0) {
            err_set(e, ERR_RUNTIME, "dp: cannot start replica thread %d", i);
            dp_free(d);
            return NULL;
        }
        d->started = i;
    }
    return d;
}

void dp_free(dp_t *d) {
    if (!d) return;
    if (d->started > 0) {
        pthread_mutex_lock(&d->mu);
        d->phase = PHASE_QUIT;
        d->generation++;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        for (int i = 1; i <= d->started; i++) pthread_join(d->reps[i].thread, NULL);
    }
    for (int i = 0; i < d->world; i++) free(d->reps[i].grads_host);
    if (d->prev_dev || d->stage_dev) {
        backend_t *b0 = net_backend(d->nets[0]);
        b0->ops->release(b0, d->prev_dev);
        b0->ops->release(b0, d->stage_dev);
    }
    free(d->reps);
    free(d->params_host);
    free(d->buffers_host);
    free(d->prev);
    free(d->sum_host);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}

int dp_forward_backward(dp_t *d, const float *images, const int32_t *labels, const float *targets, int n,
                        int global_batch, float smoothing, float loss_scale,
                        net_loss_out_t *out, err_t *e) {
    net_t *n0 = d->nets[0];
    int chunk = (n + d->world - 1) / d->world;
    if (n < 1 || chunk > net_max_batch(n0))
        return err_set(e, ERR_RUNTIME, "dp: micro-batch of %d needs %d per replica, more than "
                       "the %d the nets were bound for", n, chunk, net_max_batch(n0));
    match_omp_threads(net_backend(n0));
    double t0 = now_s();
    /* replicate: replica 0's parameters and buffers to the replicas (peer copies, or the
     * host), its earlier gradient set aside */
#ifdef RUNNER_HAVE_CUDA
    if (d->peer && peer_replicate(d, e) < 0) return -1;
#endif
    if (!d->peer && (net_download_params(n0, d->params_host, e) < 0 ||
                     net_download_buffers(n0, d->buffers_host, e) < 0 ||
                     net_download_grads(n0, d->prev, e) < 0))
        return -1;
    double t1 = now_s();
    for (int i = 0; i < d->world; i++) {
        replica_job_t *j = &d->reps[i].job;
        dp_chunk(n, d->world, i, &j->start, &j->count);
        j->images = images;
        j->labels = labels;
        j->targets = targets;
        j->classes = net_num_classes(n0);
        j->grad_scale = loss_scale / (float)global_batch;
        j->smoothing = smoothing;
        d->reps[i].compute_s = 0;
    }
    run_phase(d, PHASE_COMPUTE);
    double t2 = now_s();
    for (int i = 0; i < d->world; i++)
        if (d->reps[i].status < 0) {
            if (e) *e = d->reps[i].err;
            return err_wrap(e, "dp replica %d", i);
        }
#ifdef RUNNER_HAVE_CUDA
    if (d->peer) {
        int used = 0;
        for (int q = 0; q < d->world; q++) used += d->reps[q].job.count > 0;
        if (peer_reduce(d, used, e) < 0) return -1;
    }
#endif
    if (!d->peer) {
        run_phase(d, PHASE_REDUCE);
        if (d->sum_host) {
            backend_t *be = net_backend(n0);
            if (be->ops->upload(be, net_grads(n0), d->sum_host, d->n_params * 4) < 0) {
                if (e) *e = be->err;
                return -1;
            }
        }
    }
    double t3 = now_s();
    memset(out, 0, sizeof *out);
    for (int i = 0; i < d->world; i++) {
        out->loss_sum += d->reps[i].out.loss_sum;
        out->correct1 += d->reps[i].out.correct1;
        out->correct5 += d->reps[i].out.correct5;
    }
    d->t.replicate_s += t1 - t0;
    d->t.compute_s += t2 - t1;
    d->t.reduce_s += t3 - t2;
    return 0;
}

void dp_take_timing(dp_t *d, dp_timing_t *t) {
    *t = d->t;
    memset(&d->t, 0, sizeof d->t);
}

void dp_set_rng_key(dp_t *d, uint64_t seed, uint64_t epoch, int64_t first_sample, int64_t sample_stride) {
    d->key = (dropout_key_t){.seed = seed, .epoch = epoch, .first_sample = first_sample,
                             .sample_stride = sample_stride};
    d->key_set = true;
}
