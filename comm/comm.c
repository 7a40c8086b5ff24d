/* comm.c: the implementation-independent part of comm.h: the per-comm worker thread that
 * runs started operations in issue order, the blocking wrappers, timing, comm_any.
 *
 * A blocking call made while nothing is queued runs inline on the caller's thread (no
 * hand-off latency); otherwise it is queued behind the started work and waited for, so
 * every operation on a comm runs in issue order on every rank. Implementations' slots
 * may therefore be called from the caller's thread or from the worker thread, but never
 * from two threads at once.
 *
 * It does not: implement any collective itself (shm.c, nccl.c do).
 */
#include "comm/comm.h"
#include "util/clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { W_ALLREDUCE, W_BROADCAST, W_ALLGATHER, W_BARRIER } work_kind_t;

struct comm_work {
    work_kind_t kind;
    void *buf;
    const void *send;
    size_t count;          /* elements (allreduce) or bytes */
    dtype_t dt;
    comm_op_t op;
    int root;
    void *async_handle;    /* set when the implementation's own async slot ran it */
    bool is_async;
    bool done;
    int status;
    double seconds;
    err_t err;
    struct comm_work *next;
};

struct comm_queue {
    pthread_t thread;
    bool started;
    bool stopping;
    bool busy;             /* an operation is running (worker or inline) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    comm_work_t *head, *tail;
};

void comm_base_init(comm_t *c, const comm_ops_t *ops, int rank, int world, double timeout_s,
                    bool device_memory) {
    c->ops = ops;
    c->rank = rank;
    c->world = world;
    c->timeout_s = timeout_s > 0 ? timeout_s : 300;
    c->device_memory = device_memory;
    c->queue = NULL;
}

const char *comm_name(const comm_t *c) { return c->ops->name; }

/* Runs one operation through the vtable, recording its status, error and duration. */
static void run_work(comm_t *c, comm_work_t *w) {
    double t0 = now_s();
    err_clear(&w->err);
    switch (w->kind) {
    case W_ALLREDUCE:
        w->status = c->ops->allreduce(c, w->buf, w->count, w->dt, w->op, &w->err);
        break;
    case W_BROADCAST:
        w->status = c->ops->broadcast(c, w->buf, w->count, w->root, &w->err);
        break;
    case W_ALLGATHER:
        w->status = c->ops->allgather(c, w->send, w->buf, w->count, &w->err);
        break;
    case W_BARRIER:
        w->status = c->ops->barrier(c, &w->err);
        break;
    }
    w->seconds = now_s() - t0;
}

/* The worker thread: runs queued work in FIFO order until stopping and drained. */
static void *worker_main(void *arg) {
    comm_t *c = arg;
    struct comm_queue *q = c->queue;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while ((!q->head || q->busy) && !q->stopping) pthread_cond_wait(&q->cv, &q->mu);
        while (q->head && q->busy) pthread_cond_wait(&q->cv, &q->mu);  /* inline op running */
        if (!q->head) break;
        comm_work_t *w = q->head;
        q->busy = true;
        pthread_mutex_unlock(&q->mu);
        run_work(c, w);
        pthread_mutex_lock(&q->mu);
        q->head = w->next;
        if (!q->head) q->tail = NULL;
        w->done = true;
        q->busy = false;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* Creates the queue (not yet the thread) on first use. */
static int ensure_queue(comm_t *c, err_t *e) {
    if (c->queue) return 0;
    struct comm_queue *q = calloc(1, sizeof *q);
    if (!q) return err_set(e, ERR_RUNTIME, "out of memory");
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    c->queue = q;
    return 0;
}

/* Queues w (starting the worker thread if needed). */
static int enqueue(comm_t *c, comm_work_t *w, err_t *e) {
    struct comm_queue *q = c->queue;
    pthread_mutex_lock(&q->mu);
    if (!q->started) {
        if (pthread_create(&q->thread, NULL, worker_main, c) != 0) {
            pthread_mutex_unlock(&q->mu);
            return err_set(e, ERR_RUNTIME, "comm: cannot start the communication thread");
        }
        q->started = true;
    }
    w->next = NULL;
    if (q->tail) q->tail->next = w; else q->head = w;
    q->tail = w;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

/* Runs w now if the queue is idle, else queues it and waits; returns its status. */
static int run_blocking(comm_t *c, comm_work_t *w, err_t *e) {
    if (ensure_queue(c, e) < 0) return -1;
    struct comm_queue *q = c->queue;
    pthread_mutex_lock(&q->mu);
    if (!q->head && !q->busy) {
        q->busy = true;
        pthread_mutex_unlock(&q->mu);
        run_work(c, w);
        pthread_mutex_lock(&q->mu);
        q->busy = false;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
    } else {
        pthread_mutex_unlock(&q->mu);
        if (enqueue(c, w, e) < 0) return -1;
        pthread_mutex_lock(&q->mu);
        while (!w->done) pthread_cond_wait(&q->cv, &q->mu);
        pthread_mutex_unlock(&q->mu);
    }
    if (w->status < 0 && e) *e = w->err;
    return w->status < 0 ? -1 : 0;
}

int comm_allreduce(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op, err_t *e) {
    comm_work_t w = { .kind = W_ALLREDUCE, .buf = buf, .count = count, .dt = dt, .op = op };
    return run_blocking(c, &w, e);
}

int comm_broadcast(comm_t *c, void *buf, size_t bytes, int root, err_t *e) {
    if (root < 0 || root >= c->world)
        return err_set(e, ERR_RUNTIME, "comm: broadcast root %d outside world %d", root, c->world);
    comm_work_t w = { .kind = W_BROADCAST, .buf = buf, .count = bytes, .root = root };
    return run_blocking(c, &w, e);
}

int comm_allgather(comm_t *c, const void *send, void *recv, size_t bytes, err_t *e) {
    comm_work_t w = { .kind = W_ALLGATHER, .buf = recv, .send = send, .count = bytes };
    return run_blocking(c, &w, e);
}

int comm_barrier(comm_t *c, err_t *e) {
    comm_work_t w = { .kind = W_BARRIER };
    return run_blocking(c, &w, e);
}

int comm_start_allreduce(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op,
                         comm_work_t **out, err_t *e) {
    *out = NULL;
    if (ensure_queue(c, e) < 0) return -1;
    comm_work_t *w = calloc(1, sizeof *w);
    if (!w) return err_set(e, ERR_RUNTIME, "out of memory");
    w->kind = W_ALLREDUCE;
    w->buf = buf;
    w->count = count;
    w->dt = dt;
    w->op = op;
    if (c->ops->allreduce_async) {
        w->is_async = true;
        w->seconds = now_s();   /* start time until comm_wait */
        if (c->ops->allreduce_async(c, buf, count, dt, op, &w->async_handle, e) < 0) {
            free(w);
            return -1;
        }
    } else if (enqueue(c, w, e) < 0) {
        free(w);
        return -1;
    }
    *out = w;
    return 0;
}

int comm_wait(comm_t *c, comm_work_t *w, double *seconds, err_t *e) {
    int rc;
    if (w->is_async) {
        double op_s = -1;
        rc = c->ops->wait_async(c, w->async_handle, &op_s, e);
        /* the collective's own time when measured, else start-to-return on the host */
        if (seconds) *seconds = op_s >= 0 ? op_s : now_s() - w->seconds;
    } else {
        struct comm_queue *q = c->queue;
        pthread_mutex_lock(&q->mu);
        while (!w->done) pthread_cond_wait(&q->cv, &q->mu);
        pthread_mutex_unlock(&q->mu);
        rc = w->status < 0 ? -1 : 0;
        if (rc < 0 && e) *e = w->err;
        if (seconds) *seconds = w->seconds;
    }
    free(w);
    return rc;
}

bool comm_has_ordered(const comm_t *c) {
    const comm_ops_t *o = c->ops;
    return o->allreduce_ordered && o->broadcast_ordered && o->allgather_ordered && o->ordered_join;
}

static int no_ordered(const comm_t *c, err_t *e) {
    return err_set(e, ERR_RUNTIME, "comm %s has no ordered collectives", c->ops->name);
}

int comm_allreduce_ordered(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op, err_t *e) {
    return c->ops->allreduce_ordered ? c->ops->allreduce_ordered(c, buf, count, dt, op, e) : no_ordered(c, e);
}

int comm_broadcast_ordered(comm_t *c, void *buf, size_t bytes, int root, err_t *e) {
    return c->ops->broadcast_ordered ? c->ops->broadcast_ordered(c, buf, bytes, root, e) : no_ordered(c, e);
}

int comm_allgather_ordered(comm_t *c, const void *send, void *recv, size_t bytes, err_t *e) {
    return c->ops->allgather_ordered ? c->ops->allgather_ordered(c, send, recv, bytes, e) : no_ordered(c, e);
}

int comm_ordered_join(comm_t *c, err_t *e) {
    return c->ops->ordered_join ? c->ops->ordered_join(c, e) : no_ordered(c, e);
}

int comm_mark(comm_t *c, err_t *e) { return c->ops->mark ? c->ops->mark(c, e) : 0; }

int comm_fence(comm_t *c, err_t *e) { return c->ops->fence ? c->ops->fence(c, e) : 0; }

void comm_abort(comm_t *c, const char *msg) {
    if (c && c->ops->abort) c->ops->abort(c, msg);
}

int comm_any(comm_t *c, backend_t *be, int flag, int *any, err_t *e) {
    float v = flag ? 1.0f : 0.0f;
    if (!c->device_memory) {
        if (comm_allreduce(c, &v, 1, DT_F32, COMM_SUM, e) < 0) return -1;
    } else {
        if (!be) return err_set(e, ERR_RUNTIME, "comm_any: a device comm needs a backend");
        float *d = be->ops->alloc(be, 256);
        if (!d) { if (e) *e = be->err; return -1; }
        int rc = be->ops->upload(be, d, &v, 4);
        if (rc == 0) rc = comm_allreduce(c, d, 1, DT_F32, COMM_SUM, e);
        else if (e) *e = be->err;
        if (rc == 0 && be->ops->download(be, &v, d, 4) < 0) { rc = -1; if (e) *e = be->err; }
        be->ops->release(be, d);
        if (rc < 0) return -1;
    }
    *any = v > 0.5f;
    return 0;
}

void comm_free(comm_t *c) {
    if (!c) return;
    struct comm_queue *q = c->queue;
    if (q) {
        pthread_mutex_lock(&q->mu);
        q->stopping = true;
        pthread_cond_broadcast(&q->cv);
        bool started = q->started;
        pthread_mutex_unlock(&q->mu);
        if (started) pthread_join(q->thread, NULL);
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->cv);
        free(q);
        c->queue = NULL;
    }
    c->ops->destroy(c);
}
