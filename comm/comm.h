/* comm.h: collectives over the ranks of one run (all-reduce, broadcast, all-gather,
 * barrier), behind a small vtable so that processes on one host (comm/shm.c, host memory)
 * and GPUs (comm/nccl.c, device memory) are used the same way.
 *
 * Ordering contract (as with NCCL and torch.distributed): every rank issues the same
 * collectives in the same order with the same sizes. All operations on one comm_t run in
 * the order they were issued: the blocking calls below are comm_start + comm_wait, and
 * started operations run one after another on the comm's own thread (or stream), so a
 * caller may start several all-reduces (DDP buckets) and keep computing.
 *
 * Buffers are host memory when comm_device_memory(c) is false (shm) and device memory of
 * the comm's GPU when it is true (nccl). Counts are elements, not bytes.
 *
 * Results are deterministic: the shm implementation sums rank 0 + rank 1 + ... in that
 * order for every element, so every rank gets bit-identical results, run after run.
 *
 * Failure: every wait is bounded by the comm's timeout (parallel.timeout_s); a timeout
 * fails with ERR_RUNTIME naming the ranks that never arrived. comm_abort raises a failure
 * flag that makes every rank's pending and later collectives fail at once.
 *
 * Typical use (worker of rank r, world w, after the store is up; see store.h):
 *     comm_t *c = comm_shm_create(store, &e);      // or comm_nccl_create (nccl.h)
 *     comm_broadcast(c, params, n * 4, 0, &e);     // bytes
 *     comm_allreduce(c, grads, n, DT_F32, COMM_AVG, &e);
 *     comm_free(c);
 */
#ifndef RUNNER_COMM_COMM_H
#define RUNNER_COMM_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/store.h"
#include "model/backend.h"   /* dtype_t */
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { COMM_SUM = 0, COMM_AVG = 1 } comm_op_t;   /* AVG: sum, then divide by world */

typedef struct comm comm_t;
typedef struct comm_work comm_work_t;   /* one started operation */

/* The vtable an implementation fills (one line per slot; optional slots may be NULL). All
 * slots are called on the comm's worker thread in issue order, except destroy. */
typedef struct comm_ops {
    const char *name;                                            /* "shm", "nccl" */
    void (*destroy)(comm_t *c);
    /* buf: count elements of dt (DT_F32, DT_F16, DT_BF16; 16-bit as 2-byte values);
     * sums in fp32, result rounded to dt */
    int (*allreduce)(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op, err_t *e);
    int (*broadcast)(comm_t *c, void *buf, size_t bytes, int root, err_t *e);
    /* recv holds world * bytes: rank j's send lands at recv + j * bytes */
    int (*allgather)(comm_t *c, const void *send, void *recv, size_t bytes, err_t *e);
    int (*barrier)(comm_t *c, err_t *e);
    /* (optional) asynchronous all-reduce that does not need the worker thread (nccl on
     * a stream); when set, comm_start_allreduce uses it and comm_wait calls wait. */
    int (*allreduce_async)(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op,
                           void **handle, err_t *e);
    int (*wait_async)(comm_t *c, void *handle, double *op_seconds, err_t *e);
        /* op_seconds: the operation's own run time where the transport measures it
         * (nccl: events around the collective), else < 0 */
    /* (optional) raise the failure flag so every rank stops waiting */
    void (*abort)(comm_t *c, const char *msg);
    /* (optional, nccl) Ordered collectives, for a step recorded as one CUDA graph: each
     * starts after the work queued so far on the compute stream of the comm's backend and
     * runs on the comm's own stream; the host waits for nothing, so the calls can be
     * recorded into a graph together with the ops around them. ordered_join makes the
     * compute stream's later work wait for every ordered collective issued before it.
     * Called on the caller's thread. */
    int (*allreduce_ordered)(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op, err_t *e);
    int (*broadcast_ordered)(comm_t *c, void *buf, size_t bytes, int root, err_t *e);
    int (*allgather_ordered)(comm_t *c, const void *send, void *recv, size_t bytes, err_t *e);
    int (*ordered_join)(comm_t *c, err_t *e);
    /* (optional, nccl) The watchdog of work the host does not wait for: mark notes the
     * point the compute stream has reached (after a recorded step); fence waits on the host
     * for every mark in order, each within the comm's timeout of the previous one, watching
     * for failures, and aborts the comm on a timeout (a peer died or hung inside a step). */
    int (*mark)(comm_t *c, err_t *e);
    int (*fence)(comm_t *c, err_t *e);
} comm_ops_t;

/* The common header of every communicator; implementations embed it first and fill it
 * with comm_base_init. The fields below the line are comm.c's own. */
struct comm {
    const comm_ops_t *ops;
    int rank, world;
    double timeout_s;
    bool device_memory;          /* buffers are device memory (nccl) */
    /* ---- private to comm.c ---- */
    struct comm_queue *queue;    /* the worker thread and its FIFO */
};

/* Fills the common header; called by implementations' create functions. */
void comm_base_init(comm_t *c, const comm_ops_t *ops, int rank, int world, double timeout_s,
                    bool device_memory);

/* Creates the shared-memory communicator for all store_world(s) ranks of the store (all
 * must be processes on this host). Rank 0 creates the segment and publishes its name in
 * the store; it is unlinked once every rank attached. timeout_s comes from the store. */
comm_t *comm_shm_create(store_t *s, err_t *e);

/* Stops the worker thread (after finishing queued work) and frees c. NULL is a no-op. */
void comm_free(comm_t *c);

static inline int comm_rank(const comm_t *c) { return c->rank; }
static inline int comm_world(const comm_t *c) { return c->world; }
static inline bool comm_device_memory(const comm_t *c) { return c->device_memory; }
const char *comm_name(const comm_t *c);

/* Blocking collectives (start + wait). */
int comm_allreduce(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op, err_t *e);
int comm_broadcast(comm_t *c, void *buf, size_t bytes, int root, err_t *e);
int comm_allgather(comm_t *c, const void *send, void *recv, size_t bytes, err_t *e);
int comm_barrier(comm_t *c, err_t *e);

/* Starts an all-reduce and returns at once; *w receives a handle that comm_wait must
 * consume (exactly once). buf must stay untouched until then. */
int comm_start_allreduce(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op,
                         comm_work_t **w, err_t *e);
/* Waits for w, frees it, and returns its status (with e filled on failure). If seconds
 * is non-NULL it receives how long the operation itself ran. */
int comm_wait(comm_t *c, comm_work_t *w, double *seconds, err_t *e);

/* Ordered collectives (comm_ops_t.allreduce_ordered ...): whether c has them, and the
 * calls; each fails with ERR_RUNTIME when c has none. comm_mark / comm_fence: the
 * watchdog of recorded steps; both do nothing (0) on a comm without it. */
bool comm_has_ordered(const comm_t *c);
int comm_allreduce_ordered(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op, err_t *e);
int comm_broadcast_ordered(comm_t *c, void *buf, size_t bytes, int root, err_t *e);
int comm_allgather_ordered(comm_t *c, const void *send, void *recv, size_t bytes, err_t *e);
int comm_ordered_join(comm_t *c, err_t *e);
int comm_mark(comm_t *c, err_t *e);
int comm_fence(comm_t *c, err_t *e);

/* Raises the failure flag (best effort) so other ranks' collectives fail now. */
void comm_abort(comm_t *c, const char *msg);

/* *any = 1 on every rank if any rank passed flag != 0, else 0 (an all-reduce of one
 * value). The trainer uses it each step so all ranks agree on stopping after SIGINT.
 * be is the backend whose memory a device-memory comm uses (NULL for host comms). */
int comm_any(comm_t *c, backend_t *be, int flag, int *any, err_t *e);

#ifdef __cplusplus
}
#endif
#endif
