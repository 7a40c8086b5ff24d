/* nccl.c: comm_t over NCCL (see nccl.h for the contract).
 *
 * Ordering without host synchronisation: starting an operation records the `ready` event
 * on the backend's compute stream and makes the NCCL stream wait for it, then enqueues the
 * collective and records the operation's own `done` event on the NCCL stream. Waiting
 * polls `done` from the host, checking ncclCommGetAsyncError and the deadline between
 * polls (yielding for the first 2 ms, then naps backing off from 10 us to 1 ms), and once
 * it completed makes the compute stream wait for it (a formality then, kept for the
 * stream-ordering contract; a failed or aborted collective never leaves the compute
 * stream blocked on its event). The only such host wait in a DDP step is at its end
 * (ddp_finish_step), after every bucket was enqueued; it is what lets a hung peer be
 * detected within parallel.timeout_s. A failure aborts the communicator once; every later
 * call fails at once with the first failure's message.
 *
 * Slots may run on the caller's thread or comm.c's worker thread (never both at once), so
 * each one first makes the backend's device current. Not here: the store protocol beyond
 * exchanging the unique id, SyncBN or bucket logic (ddp.c).
 *
 * Ordered collectives (comm.h allreduce_ordered ...) skip the host wait altogether: the
 * compute stream waits for them by an event (ordered_join), so a whole DDP step can be
 * recorded as one CUDA graph (NCCL supports stream capture; every rank records and
 * replays the same steps, as NCCL requires of captured collectives). Their watchdog is
 * mark/fence: an event per recorded step, polled like a collective's when the trainer
 * reads a window of steps back.
 */
#include "comm/nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/cuda/cuda_backend.h"
#include "util/clock.h"

typedef struct nccl_work {
    cudaEvent_t start, done;   /* around the collective on the NCCL stream (timing events) */
    bool timed;                /* start was recorded */
    const char *what;          /* "all-reduce", ... for messages */
    size_t bytes;
    struct nccl_work *next;    /* free list */
} nccl_work_t;

typedef struct nccl_comm {
    comm_t base;
    ncclComm_t nc;
    backend_t *be;
    int device;
    cudaStream_t compute;      /* the backend's stream */
    cudaStream_t stream;       /* NCCL's own */
    cudaEvent_t ready;
    cudaEvent_t joined;        /* ordered collectives: after the last one on `stream` */
    bool join_pending;         /* an ordered collective was issued since the last join */
    nccl_work_t *marks, *marks_tail;   /* mark: points of the compute stream, fence waits */
    float *scratch;            /* one device float for barrier */
    bool aborted;
    char abort_msg[2048];
    nccl_work_t *free_works;
} nccl_comm_t;

/* Length of the function name at the start of a stringified call. */
static int call_name_len(const char *call) { return (int)strcspn(call, "("); }

/* Aborts the communicator (once) and remembers why. */
static void abort_comm(nccl_comm_t *nc, const char *msg) {
    if (nc->aborted) return;
    nc->aborted = true;
    snprintf(nc->abort_msg, sizeof nc->abort_msg, "%s", msg);
    if (nc->nc) ncclCommAbort(nc->nc);
}

static int cuda_fail(nccl_comm_t *nc, const char *call, cudaError_t st, const char *file, int line,
                     err_t *e) {
    cudaGetLastError();
    return err_set(e, ERR_RUNTIME, "nccl comm rank %d: %.*s failed: %s at %s:%d", nc->base.rank,
                   call_name_len(call), call, cudaGetErrorString(st), file, line);
}

/* Records an NCCL failure of operation `what`, aborts the communicator, returns -1. */
static int nccl_fail(nccl_comm_t *nc, const char *what, ncclResult_t r, const char *file, int line,
                     err_t *e) {
    const char *detail = nc->nc && !nc->aborted ? ncclGetLastError(nc->nc) : "";
    err_set(e, ERR_RUNTIME, "NCCL %s failed on rank %d of %d: %s%s%s at %s:%d; set NCCL_DEBUG=INFO "
            "for details", what, nc->base.rank, nc->base.world,
            r == ncclInProgress ? "still in progress after parallel.timeout_s" : ncclGetErrorString(r),
            detail && *detail ? " - " : "", detail ? detail : "", file, line);
    abort_comm(nc, e ? e->msg : "NCCL failure");
    return -1;
}

/* Waits out an ncclInProgress. A non-blocking communicator (NCCL_COMM_BLOCKING=0 in the
 * environment) may return from a call before the operation is on the NCCL stream, so an
 * event recorded right after would not cover it, and a communicator still initialising
 * cannot be used. Polls ncclCommGetAsyncError until the state leaves ncclInProgress or
 * the comm's timeout passes (then ncclInProgress is returned). Blocking communicators
 * (the default) never return ncclInProgress: then this returns r at once. */
static ncclResult_t settle(nccl_comm_t *nc, ncclResult_t r) {
    if (r != ncclInProgress || !nc->nc) return r;
    double t0 = now_s();
    long nap_ns = 10000;
    for (;;) {
        ncclResult_t ae = ncclInProgress, q = ncclCommGetAsyncError(nc->nc, &ae);
        if (q != ncclSuccess) return q;
        if (ae != ncclInProgress) return ae;
        if (now_s() - t0 > nc->base.timeout_s) return ncclInProgress;
        struct timespec ts = {0, nap_ns};
        nanosleep(&ts, NULL);
        if (nap_ns < 1000000) nap_ns *= 2;
    }
}

/* The status of an NCCL call once settled; a call still in progress after the timeout
 * fails as ncclInProgress (its message then says so). */
#define CU(nc, x, e) do { cudaError_t s_ = (x); if (s_ != cudaSuccess) \
    return cuda_fail((nc), #x, s_, __FILE__, __LINE__, (e)); } while (0)
#define NC(nc, what, x, e) do { ncclResult_t r_ = settle((nc), (x)); if (r_ != ncclSuccess) \
    return nccl_fail((nc), (what), r_, __FILE__, __LINE__, (e)); } while (0)

/* Fails at once after an earlier abort; otherwise makes the device current and orders
 * the NCCL stream after the work queued so far on the compute stream. */
static int begin_op(nccl_comm_t *nc, err_t *e) {
    if (nc->aborted)
        return err_set(e, ERR_RUNTIME, "nccl comm rank %d was aborted earlier: %s", nc->base.rank,
                       nc->abort_msg);
    CU(nc, cudaSetDevice(nc->device), e);
    CU(nc, cudaEventRecord(nc->ready, nc->compute), e);
    CU(nc, cudaStreamWaitEvent(nc->stream, nc->ready, 0), e);
    return 0;
}

/* A work record with its event, from the free list or new; NULL with e set. */
static nccl_work_t *work_get(nccl_comm_t *nc, const char *what, size_t bytes, err_t *e) {
    nccl_work_t *w = nc->free_works;
    if (w) {
        nc->free_works = w->next;
    } else {
        w = calloc(1, sizeof *w);
        if (!w) {
            err_set(e, ERR_RUNTIME, "out of memory");
            return NULL;
        }
        cudaError_t st = cudaEventCreate(&w->done);
        if (st == cudaSuccess) {
            st = cudaEventCreate(&w->start);
            if (st != cudaSuccess) cudaEventDestroy(w->done);
        }
        if (st != cudaSuccess) {
            free(w);
            cuda_fail(nc, "cudaEventCreateWithFlags", st, __FILE__, __LINE__, e);
            return NULL;
        }
    }
    w->what = what;
    w->bytes = bytes;
    w->timed = false;
    w->next = NULL;
    return w;
}

static void work_put(nccl_comm_t *nc, nccl_work_t *w) {
    w->next = nc->free_works;
    nc->free_works = w;
}

/* Waits for w on the host (see the file comment), then returns it to the free list.
 * op_s (may be NULL): the collective's own run time on the NCCL stream from its events,
 * or -1 when w was not timed. */
static int work_wait(nccl_comm_t *nc, nccl_work_t *w, double *op_s, err_t *e) {
    if (op_s) *op_s = -1;
    int rc = 0;
    double t0 = now_s();
    long nap_ns = 10000;
    cudaError_t st = cudaSetDevice(nc->device);
    if (st != cudaSuccess) {
        rc = cuda_fail(nc, "cudaSetDevice", st, __FILE__, __LINE__, e);
        work_put(nc, w);
        return rc;
    }
    for (;;) {
        st = cudaEventQuery(w->done);
        if (st == cudaSuccess) {
            float ms = 0;
            if (op_s && w->timed && cudaEventElapsedTime(&ms, w->start, w->done) == cudaSuccess)
                *op_s = ms * 1e-3;
            cudaGetLastError();
            /* the compute stream waits only for a collective that finished: one that
             * failed or timed out (and was aborted) must not leave the compute stream
             * blocked on its event, or the rank could not even shut down */
            st = cudaStreamWaitEvent(nc->compute, w->done, 0);
            if (st != cudaSuccess) rc = cuda_fail(nc, "cudaStreamWaitEvent", st, __FILE__, __LINE__, e);
            break;
        }
        if (st == cudaErrorNotReady) cudaGetLastError();   /* not an error; keep it out of later checks */
        if (st != cudaErrorNotReady) {
            rc = cuda_fail(nc, "cudaEventQuery", st, __FILE__, __LINE__, e);
            abort_comm(nc, e ? e->msg : "cudaEventQuery failed");
            break;
        }
        if (nc->aborted) {
            rc = err_set(e, ERR_RUNTIME, "nccl comm rank %d was aborted: %s", nc->base.rank, nc->abort_msg);
            break;
        }
        ncclResult_t ae = ncclSuccess, r = ncclCommGetAsyncError(nc->nc, &ae);
        if (r != ncclSuccess) { rc = nccl_fail(nc, w->what, r, __FILE__, __LINE__, e); break; }
        if (ae != ncclSuccess && ae != ncclInProgress) {
            rc = nccl_fail(nc, w->what, ae, __FILE__, __LINE__, e);
            break;
        }
        double waited = now_s() - t0;
        if (waited > nc->base.timeout_s) {
            char size[48] = "";
            if (w->bytes) snprintf(size, sizeof size, " of %zu bytes", w->bytes);
            rc = err_set(e, ERR_RUNTIME, "NCCL %s%s on rank %d of %d did not finish within "
                         "%.0f s (parallel.timeout_s): another rank died, hung or issued different "
                         "collectives; set NCCL_DEBUG=INFO for details", w->what, size,
                         nc->base.rank, nc->base.world, nc->base.timeout_s);
            abort_comm(nc, e ? e->msg : "timeout");
            break;
        }
        /* the end-of-backward wait is usually short: yield for the first 2 ms, so the
         * step goes on within microseconds of the collective finishing, then back off
         * to 1 ms naps for waits that are long (a slow or hung peer) */
        if (waited < 2e-3) {
            sched_yield();
        } else {
            struct timespec ts = {0, nap_ns};
            nanosleep(&ts, NULL);
            if (nap_ns < 1000000) nap_ns *= 2;
        }
    }
    work_put(nc, w);
    return rc;
}

static ncclDataType_t nccl_type(dtype_t dt) {
    return dt == DT_F16 ? ncclFloat16 : (dt == DT_BF16 ? ncclBfloat16 : ncclFloat32);
}

static size_t dt_bytes(dtype_t dt) { return dt == DT_F32 ? 4 : 2; }

/* After enqueueing w's collective (result r): records w's `done` event on the NCCL
 * stream. On a failure of either, w goes back to the free list and the failure is
 * reported (naming w->what). */
static int work_enqueued(nccl_comm_t *nc, nccl_work_t *w, ncclResult_t r, err_t *e) {
    if (r != ncclSuccess) {
        work_put(nc, w);
        return nccl_fail(nc, w->what, r, __FILE__, __LINE__, e);
    }
    cudaError_t st = cudaEventRecord(w->done, nc->stream);
    if (st != cudaSuccess) {
        work_put(nc, w);
        return cuda_fail(nc, "cudaEventRecord", st, __FILE__, __LINE__, e);
    }
    return 0;
}

/* Enqueues an all-reduce and returns its work record in *out. */
static int start_allreduce(nccl_comm_t *nc, void *buf, size_t count, dtype_t dt, comm_op_t op,
                           nccl_work_t **out, err_t *e) {
    *out = NULL;
    if (dt != DT_F32 && dt != DT_F16 && dt != DT_BF16)
        return err_set(e, ERR_RUNTIME, "nccl all-reduce: unsupported dtype %d", (int)dt);
    if (begin_op(nc, e) < 0) return -1;
    nccl_work_t *w = work_get(nc, "all-reduce", count * dt_bytes(dt), e);
    if (!w) return -1;
    /* when the NCCL stream gets here: after `ready` and after earlier collectives */
    w->timed = cudaEventRecord(w->start, nc->stream) == cudaSuccess;
    ncclResult_t r = settle(nc, ncclAllReduce(buf, buf, count, nccl_type(dt),
                                              op == COMM_AVG ? ncclAvg : ncclSum, nc->nc, nc->stream));
    if (work_enqueued(nc, w, r, e) < 0) return -1;
    *out = w;
    return 0;
}

static int op_allreduce_async(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op,
                              void **handle, err_t *e) {
    nccl_work_t *w;
    if (start_allreduce((nccl_comm_t *)c, buf, count, dt, op, &w, e) < 0) return -1;
    *handle = w;
    return 0;
}

static int op_wait_async(comm_t *c, void *handle, double *op_seconds, err_t *e) {
    return work_wait((nccl_comm_t *)c, (nccl_work_t *)handle, op_seconds, e);
}

static int op_allreduce(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op, err_t *e) {
    nccl_work_t *w;
    if (start_allreduce((nccl_comm_t *)c, buf, count, dt, op, &w, e) < 0) return -1;
    return work_wait((nccl_comm_t *)c, w, NULL, e);
}

static int op_broadcast(comm_t *c, void *buf, size_t bytes, int root, err_t *e) {
    nccl_comm_t *nc = (nccl_comm_t *)c;
    if (begin_op(nc, e) < 0) return -1;
    nccl_work_t *w = work_get(nc, "broadcast", bytes, e);
    if (!w) return -1;
    ncclResult_t r = settle(nc, ncclBroadcast(buf, buf, bytes, ncclUint8, root, nc->nc, nc->stream));
    if (work_enqueued(nc, w, r, e) < 0) return -1;
    return work_wait(nc, w, NULL, e);
}

static int op_allgather(comm_t *c, const void *send, void *recv, size_t bytes, err_t *e) {
    nccl_comm_t *nc = (nccl_comm_t *)c;
    if (begin_op(nc, e) < 0) return -1;
    nccl_work_t *w = work_get(nc, "all-gather", bytes * (size_t)c->world, e);
    if (!w) return -1;
    ncclResult_t r = settle(nc, ncclAllGather(send, recv, bytes, ncclUint8, nc->nc, nc->stream));
    if (work_enqueued(nc, w, r, e) < 0) return -1;
    return work_wait(nc, w, NULL, e);
}

/* A barrier is an all-reduce of one device float, waited for on the host. */
static int op_barrier(comm_t *c, err_t *e) {
    nccl_comm_t *nc = (nccl_comm_t *)c;
    nccl_work_t *w;
    if (start_allreduce(nc, nc->scratch, 1, DT_F32, COMM_SUM, &w, e) < 0) return -1;
    w->what = "barrier";
    return work_wait(nc, w, NULL, e);
}

/* ---- ordered collectives (a step recorded as one CUDA graph) ----
 * begin_op forks the NCCL stream from the compute stream (an event), the collective goes on
 * the NCCL stream, and `joined` is recorded after it; ordered_join makes the compute stream
 * wait for `joined`. Inside a stream capture the event record/wait pairs become the graph's
 * edges, so the collectives overlap the kernels around them as they do without a graph.
 * Nothing here polls or waits on the host. */

static int ordered_issued(nccl_comm_t *nc, const char *what, ncclResult_t r, err_t *e) {
    r = settle(nc, r);
    if (r != ncclSuccess) return nccl_fail(nc, what, r, __FILE__, __LINE__, e);
    CU(nc, cudaEventRecord(nc->joined, nc->stream), e);
    nc->join_pending = true;
    return 0;
}

static int op_allreduce_ordered(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op, err_t *e) {
    nccl_comm_t *nc = (nccl_comm_t *)c;
    if (dt != DT_F32 && dt != DT_F16 && dt != DT_BF16)
        return err_set(e, ERR_RUNTIME, "nccl all-reduce: unsupported dtype %d", (int)dt);
    if (begin_op(nc, e) < 0) return -1;
    return ordered_issued(nc, "all-reduce",
                          ncclAllReduce(buf, buf, count, nccl_type(dt), op == COMM_AVG ? ncclAvg : ncclSum, nc->nc,
                                        nc->stream), e);
}

static int op_broadcast_ordered(comm_t *c, void *buf, size_t bytes, int root, err_t *e) {
    nccl_comm_t *nc = (nccl_comm_t *)c;
    if (begin_op(nc, e) < 0) return -1;
    return ordered_issued(nc, "broadcast", ncclBroadcast(buf, buf, bytes, ncclUint8, root, nc->nc, nc->stream), e);
}

static int op_allgather_ordered(comm_t *c, const void *send, void *recv, size_t bytes, err_t *e) {
    nccl_comm_t *nc = (nccl_comm_t *)c;
    if (begin_op(nc, e) < 0) return -1;
    return ordered_issued(nc, "all-gather", ncclAllGather(send, recv, bytes, ncclUint8, nc->nc, nc->stream), e);
}

static int op_ordered_join(comm_t *c, err_t *e) {
    nccl_comm_t *nc = (nccl_comm_t *)c;
    if (!nc->join_pending) return 0;
    CU(nc, cudaSetDevice(nc->device), e);
    CU(nc, cudaStreamWaitEvent(nc->compute, nc->joined, 0), e);
    nc->join_pending = false;
    return 0;
}

static int op_mark(comm_t *c, err_t *e) {
    nccl_comm_t *nc = (nccl_comm_t *)c;
    CU(nc, cudaSetDevice(nc->device), e);
    nccl_work_t *w = work_get(nc, "recorded step (its collectives)", 0, e);
    if (!w) return -1;
    cudaError_t st = cudaEventRecord(w->done, nc->compute);
    if (st != cudaSuccess) {
        work_put(nc, w);
        return cuda_fail(nc, "cudaEventRecord", st, __FILE__, __LINE__, e);
    }
    if (nc->marks_tail) nc->marks_tail->next = w;
    else nc->marks = w;
    nc->marks_tail = w;
    return 0;
}

static int op_fence(comm_t *c, err_t *e) {
    nccl_comm_t *nc = (nccl_comm_t *)c;
    int rc = 0;
    while (nc->marks) {
        nccl_work_t *w = nc->marks;
        nc->marks = w->next;
        if (!nc->marks) nc->marks_tail = NULL;
        w->next = NULL;
        if (rc == 0) rc = work_wait(nc, w, NULL, e);   /* returns w to the free list */
        else work_put(nc, w);
    }
    return rc;
}

static void op_abort(comm_t *c, const char *msg) {
    nccl_comm_t *nc = (nccl_comm_t *)c;
    cudaSetDevice(nc->device);
    abort_comm(nc, msg ? msg : "aborted");
}

static void op_destroy(comm_t *c) {
    nccl_comm_t *nc = (nccl_comm_t *)c;
    if (!nc) return;
    cudaSetDevice(nc->device);
    if (nc->nc && !nc->aborted) {
        if (nc->stream) cudaStreamSynchronize(nc->stream);
        ncclCommDestroy(nc->nc);
    }
    while (nc->marks) {
        nccl_work_t *w = nc->marks;
        nc->marks = w->next;
        work_put(nc, w);
    }
    while (nc->free_works) {
        nccl_work_t *w = nc->free_works;
        nc->free_works = w->next;
        cudaEventDestroy(w->done);
        cudaEventDestroy(w->start);
        free(w);
    }
    if (nc->ready) cudaEventDestroy(nc->ready);
    if (nc->joined) cudaEventDestroy(nc->joined);
    if (nc->stream) cudaStreamDestroy(nc->stream);
    if (nc->scratch && nc->be) nc->be->ops->release(nc->be, nc->scratch);
    free(nc);
}

static const comm_ops_t nccl_ops = {
    .name = "nccl",
    .destroy = op_destroy,
    .allreduce = op_allreduce,
    .broadcast = op_broadcast,
    .allgather = op_allgather,
    .barrier = op_barrier,
    .allreduce_async = op_allreduce_async,
    .wait_async = op_wait_async,
    .abort = op_abort,
    .allreduce_ordered = op_allreduce_ordered,
    .broadcast_ordered = op_broadcast_ordered,
    .allgather_ordered = op_allgather_ordered,
    .ordered_join = op_ordered_join,
    .mark = op_mark,
    .fence = op_fence,
};

/* Exchanges the unique id through the store (rank 0 creates it). */
static int exchange_id(nccl_comm_t *nc, store_t *st, ncclUniqueId *id, err_t *e) {
    char key[64];
    snprintf(key, sizeof key, "nccl/%d/id", store_next_id(st));
    if (nc->base.rank == 0) {
        NC(nc, "ncclGetUniqueId", ncclGetUniqueId(id), e);
        return store_set(st, key, id, sizeof *id, e);
    }
    size_t len = 0;
    if (store_get(st, key, id, sizeof *id, &len, -1, e) < 0) return -1;
    if (len != sizeof *id)
        return err_set(e, ERR_RUNTIME, "nccl: store key %s holds %zu bytes, expected an NCCL id of %zu "
                       "(mixed runner versions?)", key, len, sizeof *id);
    return 0;
}

/* Fills nc after the header: streams, events, scratch, the communicator. */
static int nccl_setup(nccl_comm_t *nc, store_t *st, err_t *e) {
    int lo = 0, hi = 0;
    CU(nc, cudaSetDevice(nc->device), e);
    CU(nc, cudaDeviceGetStreamPriorityRange(&lo, &hi), e);
    CU(nc, cudaStreamCreateWithPriority(&nc->stream, cudaStreamNonBlocking, hi), e);
    CU(nc, cudaEventCreateWithFlags(&nc->ready, cudaEventDisableTiming), e);
    CU(nc, cudaEventCreateWithFlags(&nc->joined, cudaEventDisableTiming), e);
    nc->scratch = (float *)nc->be->ops->alloc(nc->be, 256);
    if (!nc->scratch) {
        if (e) *e = nc->be->err;
        return -1;
    }
    ncclUniqueId id;
    if (exchange_id(nc, st, &id, e) < 0) return -1;
    NC(nc, "communicator init (ncclCommInitRank)",
       ncclCommInitRank(&nc->nc, nc->base.world, id, nc->base.rank), e);
    return 0;
}

comm_t *comm_nccl_create(store_t *st, backend_t *be, err_t *e) {
    if (!be || be->kind != BACKEND_CUDA) {
        err_set(e, ERR_INPUT, "parallel.backend: nccl needs device: cuda (this rank's backend is %s); "
                "use parallel.backend: shm or auto on cpu", be ? be->ops->name : "missing");
        return NULL;
    }
    nccl_comm_t *nc = calloc(1, sizeof *nc);
    if (!nc) {
        err_set(e, ERR_RUNTIME, "out of memory");
        return NULL;
    }
    comm_base_init(&nc->base, &nccl_ops, store_rank(st), store_world(st), store_timeout(st), true);
    nc->be = be;
    nc->device = be->device;
    nc->compute = (cudaStream_t)cuda_backend_stream(be);
    if (nccl_setup(nc, st, e) < 0) {
        if (!nc->nc) nc->aborted = true;   /* nothing to destroy when init failed */
        op_destroy(&nc->base);
        return NULL;
    }
    return &nc->base;
}

void comm_nccl_version(char *buf, size_t len) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) v = 0;
    snprintf(buf, len, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
}
