/* ddp_ordered.c: DDP's ordered mode (ddp.h ddp_set_ordered): the collectives of a step
 * issued in the backend's queue order with no host wait, so that the trainer can record a
 * whole DDP step (buckets, buffer broadcast, SyncBN) as one graph and replay it.
 *
 * Two transports give the same bits as the host-waiting path of ddp.c:
 *  - a comm with ordered collectives (nccl): the same all-reduce calls (same buffers, sizes,
 *    ops and compression kernels) on the comm's stream, joined into the compute stream by
 *    events before the gradients, statistics or buffers are read; SyncBN's statistics are
 *    all-gathered on the device and combined by the backend's bn_combine op (the host
 *    path's arithmetic, model/bn_combine.h), its gradient sums all-reduced as one packed
 *    array of 2c values as the host path does;
 *  - the cpu backend with a host comm (shm): each collective is a host_task of the backend,
 *    a closure that runs the host path (ddp.c's bucket steps, comm_broadcast, ...) when the
 *    backend reaches it; a recording stores the closure, so the closures are kept per
 *    collective site (bucket, buffer array, SyncBN buffer) for the life of the ddp_t.
 * Every rank issues the same calls in the same order, recorded or not (the trainer records
 * the same steps on every rank, which NCCL requires of captured collectives).
 * Not here: deciding what to record (runner/train_graph.c), the host path (ddp.c).
 */
#include <stdlib.h>
#include <string.h>

#include "comm/ddp_impl.h"

typedef enum { T_BUCKET, T_BCAST, T_ALLGATHER, T_ALLREDUCE } task_kind_t;

/* A host task's closure: one collective site. */
typedef struct ddp_task {
    ddp_t *d;
    task_kind_t kind;
    int bucket;          /* T_BUCKET */
    void *buf;           /* T_BCAST, T_ALLREDUCE: in place; T_ALLGATHER: receive */
    const void *send;    /* T_ALLGATHER */
    size_t n;            /* floats (T_BCAST, T_ALLREDUCE) or bytes per rank (T_ALLGATHER) */
} ddp_task_t;

static int be_err(ddp_t *d, err_t *e, const char *what) {
    if (e) {
        *e = d->be->err;
        if (!e->code) e->code = ERR_RUNTIME;
        err_wrap(e, "ddp: %s", what);
    }
    return -1;
}

/* The host path of one collective, run when the backend reaches the task. After a failure
 * the step is lost: later tasks of it do nothing (ddp_check reports the first failure,
 * and the trainer's abort makes the peers' waits end). */
static void run_task(void *ctx) {
    ddp_task_t *t = ctx;
    ddp_t *d = t->d;
    if (d->task_failed) return;
    err_t e = {0};
    int rc = 0;
    switch (t->kind) {
    case T_BUCKET:
        rc = ddp_start_bucket(d, t->bucket, false, &e);
        if (rc == 0) {
            comm_work_t *w = d->work[t->bucket];
            d->work[t->bucket] = NULL;
            rc = w ? comm_wait(d->comm, w, NULL, &e) : 0;
        }
        if (rc == 0) rc = ddp_finish_bucket(d, t->bucket, &e);
        break;
    case T_BCAST:
        rc = comm_broadcast(d->comm, t->buf, t->n * sizeof(float), 0, &e);
        break;
    case T_ALLGATHER:
        rc = comm_allgather(d->comm, t->send, t->buf, t->n, &e);
        break;
    case T_ALLREDUCE:
        rc = comm_allreduce(d->comm, t->buf, t->n, DT_F32, COMM_SUM, &e);
        break;
    }
    if (rc < 0) {
        d->task_failed = true;
        d->task_err = e;
        err_wrap(&d->task_err, "ddp collective in queue order");
    }
}

/* Enqueues the task of this site (made on first use, kept). */
static int issue(ddp_t *d, task_kind_t kind, int bucket, void *buf, const void *send, size_t n, err_t *e) {
    ddp_task_t *t = NULL;
    for (int i = 0; i < d->n_tasks && !t; i++) {
        ddp_task_t *c = d->tasks[i];
        if (c->kind == kind && c->bucket == bucket && c->buf == buf && c->send == send && c->n == n) t = c;
    }
    if (!t) {
        if (d->n_tasks == d->cap_tasks) {
            int cap = d->cap_tasks ? 2 * d->cap_tasks : 32;
            ddp_task_t **nt = realloc(d->tasks, (size_t)cap * sizeof *nt);
            if (!nt) return err_set(e, ERR_RUNTIME, "out of memory");
            d->tasks = nt;
            d->cap_tasks = cap;
        }
        if (!(t = calloc(1, sizeof *t))) return err_set(e, ERR_RUNTIME, "out of memory");
        *t = (ddp_task_t){d, kind, bucket, buf, send, n};
        d->tasks[d->n_tasks++] = t;
    }
    if (d->be->ops->host_task(d->be, run_task, t) < 0) return be_err(d, e, "queueing a host collective");
    return 0;
}

bool ddp_can_order(const comm_t *c, const backend_t *be) {
    if (comm_has_ordered(c)) return true;
    return !comm_device_memory(c) && be->kind == BACKEND_CPU && be->ops->host_task;
}

int ddp_set_ordered(ddp_t *d, int64_t bn_floats, err_t *e) {
    if (d->ordered) return 0;
    if (!ddp_can_order(d->comm, d->be))
        return err_set(e, ERR_RUNTIME, "ddp: collectives in queue order need parallel.backend nccl (or, on the "
                       "cpu backend, shm); %s with the %s backend has none", comm_name(d->comm), d->be->ops->name);
    d->host_tasks = !comm_has_ordered(d->comm);
    if (d->o.sync_bn) {
        if (!d->be->ops->bn_combine)
            return err_set(e, ERR_RUNTIME, "ddp: the %s backend has no bn_combine op for SyncBN", d->be->ops->name);
        size_t per = (size_t)(bn_floats > 0 ? bn_floats : 1) * sizeof(float);
        if (!(d->gather = d->be->ops->alloc(d->be, per * (size_t)d->comm->world)) ||
            !(d->gather_send = d->be->ops->alloc(d->be, per)))
            return be_err(d, e, "allocating the SyncBN all-gather buffers");
        d->bn_floats = bn_floats;
    }
    d->ordered = true;
    return 0;
}

bool ddp_is_ordered(const ddp_t *d) { return d->ordered; }

int ddp_check(ddp_t *d, err_t *e) {
    if (!d->task_failed) return 0;
    if (e) *e = d->task_err;
    d->task_failed = false;
    return -1;
}

void ddp_ordered_free(ddp_t *d) {
    for (int i = 0; i < d->n_tasks; i++) free(d->tasks[i]);
    free(d->tasks);
    if (d->gather) d->be->ops->release(d->be, d->gather);
    if (d->gather_send) d->be->ops->release(d->be, d->gather_send);
}

int ddp_ordered_start_bucket(ddp_t *d, int i, err_t *e) {
    if (d->host_tasks) return issue(d, T_BUCKET, i, NULL, NULL, 0, e);
    return ddp_start_bucket(d, i, true, e);
}

int ddp_ordered_finish(ddp_t *d, err_t *e) {
    ddp_grads_ready(d, 0);   /* buckets whose gradients were never reported */
    int rc = 0;
    if (d->failed) {
        if (e) *e = d->err;
        rc = -1;
    } else if (!d->host_tasks) {
        /* the compute stream waits for the all-reduces, then widens compressed buckets */
        rc = comm_ordered_join(d->comm, e);
        for (int i = 0; i < d->n_buckets && rc == 0; i++) rc = ddp_finish_bucket(d, i, e);
    }
    d->failed = false;
    d->next = 0;
    return rc < 0 ? err_wrap(e, "ddp gradient all-reduce") : 0;
}

int ddp_ordered_bcast(ddp_t *d, float *p, int64_t n, err_t *e) {
    if (n <= 0 || !p) return 0;
    if (d->host_tasks) return issue(d, T_BCAST, -1, p, NULL, (size_t)n, e);
    if (comm_broadcast_ordered(d->comm, p, (size_t)n * sizeof(float), 0, e) < 0) return -1;
    return comm_ordered_join(d->comm, e);
}

/* SyncBN statistics: every rank holds `local_count` rows (DDP's micro-batches have the same
 * size on every rank), so the counts need no exchange. */
int ddp_ordered_bn_stats(ddp_t *d, int c, float *mean, float *var, int64_t local_count, int64_t *global_count) {
    const backend_ops_t *o = d->be->ops;
    if (2 * (int64_t)c > d->bn_floats)
        return err_set(&d->err, ERR_RUNTIME, "ddp: SyncBN layer of %d channels over the %lld floats planned", c,
                       (long long)d->bn_floats);
    *global_count = local_count * d->comm->world;
    const float *send = mean;
    size_t bytes = (size_t)c * sizeof(float);
    if (var != mean + c) {   /* the net keeps them side by side; else pack them */
        if (o->copy(d->be, d->gather_send, mean, bytes) < 0 || o->copy(d->be, d->gather_send + c, var, bytes) < 0)
            return be_err(d, &d->err, "SyncBN packing");
        send = d->gather_send;
    }
    if (d->host_tasks) {
        if (issue(d, T_ALLGATHER, -1, d->gather, send, 2 * bytes, &d->err) < 0) return -1;
    } else if (comm_allgather_ordered(d->comm, send, d->gather, 2 * bytes, &d->err) < 0 ||
               comm_ordered_join(d->comm, &d->err) < 0) {
        return -1;
    }
    if (o->bn_combine(d->be, d->comm->world, c, d->gather, local_count, mean, var) < 0)
        return be_err(d, &d->err, "SyncBN combine");
    return 0;
}

/* SyncBN gradient sums: packed into one array of 2c values and all-reduced at once, as the
 * host path does (the same all-reduce, the same bits). */
int ddp_ordered_bn_grads(ddp_t *d, int c, float *sum_dy, float *sum_dy_xhat) {
    const backend_ops_t *o = d->be->ops;
    if (2 * (int64_t)c > d->bn_floats)
        return err_set(&d->err, ERR_RUNTIME, "ddp: SyncBN layer of %d channels over the %lld floats planned", c,
                       (long long)d->bn_floats);
    float *pack = d->gather_send;
    size_t bytes = (size_t)c * sizeof(float);
    if (o->copy(d->be, pack, sum_dy, bytes) < 0 || o->copy(d->be, pack + c, sum_dy_xhat, bytes) < 0)
        return be_err(d, &d->err, "SyncBN packing");
    if (d->host_tasks) {
        if (issue(d, T_ALLREDUCE, -1, pack, NULL, 2 * (size_t)c, &d->err) < 0) return -1;
    } else if (comm_allreduce_ordered(d->comm, pack, 2 * (size_t)c, DT_F32, COMM_SUM, &d->err) < 0 ||
               comm_ordered_join(d->comm, &d->err) < 0) {
        return -1;
    }
    if (o->copy(d->be, sum_dy, pack, bytes) < 0 || o->copy(d->be, sum_dy_xhat, pack + c, bytes) < 0)
        return be_err(d, &d->err, "SyncBN unpacking");
    return 0;
}
