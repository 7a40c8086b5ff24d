/* nccl.h: the NCCL communicator (comm_t of comm.h over GPU device memory), for one rank
 * per GPU on one or many hosts.
 *
 * Bootstrap: rank 0 calls ncclGetUniqueId and publishes it in the rendezvous store under
 * "nccl/<store_next_id>/id"; every rank reads it and calls ncclCommInitRank on the
 * device of its CUDA backend. Collectives run on a dedicated high-priority stream,
 * ordered after the work already queued on the backend's compute stream by a CUDA event
 * (no host synchronisation when starting), so DDP buckets overlap the rest of backward.
 * Waiting makes the compute stream wait on the operation's event and polls it from the
 * host with ncclCommGetAsyncError; an NCCL error or the comm's timeout
 * (parallel.timeout_s) aborts the communicator (ncclCommAbort) and fails with ERR_RUNTIME
 * naming this rank, the operation and its size, with the hint to set NCCL_DEBUG=INFO.
 * All-reduce averages with ncclAvg; fp16/bf16 buffers are reduced by NCCL in their own
 * type (as torch's fp16 compression hook does).
 *
 * It does not: pick devices (the backend's device is used), retry, or talk to the store
 * after creation (the trainer raises the store's failure flag on a fatal error).
 */
#ifndef RUNNER_COMM_NCCL_H
#define RUNNER_COMM_NCCL_H

#include <stddef.h>

#include "comm/comm.h"
#include "comm/store.h"
#include "model/backend.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the communicator of all store_world(st) ranks. be must be this rank's CUDA
 * backend; buffers given to the comm are its device memory. A non-CUDA backend is
 * ERR_INPUT ("parallel.backend: nccl needs device: cuda ..."). Free with comm_free
 * (before backend_free). */
comm_t *comm_nccl_create(store_t *st, backend_t *be, err_t *e);

/* The NCCL library version, "2.28.9". */
void comm_nccl_version(char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
