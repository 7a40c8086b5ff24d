/* ddp.h: DistributedDataParallel semantics over a comm_t (PyTorch DDP, one process per
 * rank): parameters and buffers broadcast from rank 0 at start; gradients all-reduced in
 * buckets while backward is still running; gradients averaged over the world; BN running
 * stats broadcast from rank 0 every step unless SyncBN; SyncBN statistics hooks.
 *
 * Buckets are contiguous slices of the flat gradient array taken from its END (backward
 * produces the last parameters' gradients first). Bucket 0 holds the last tensors up to
 * first_bucket_mb (1 MiB, PyTorch's first-bucket cap), later buckets up to bucket_mb;
 * like PyTorch, a bucket is closed after the tensor that makes it reach its cap, and
 * never splits a tensor (when tensor offsets are given). A bucket's all-reduce starts on
 * the comm's thread as soon as every gradient in it is final (ddp_grads_ready).
 *
 * Averaging: sum over ranks in rank order, then divide by world (for world a power of two
 * this equals PyTorch's divide-then-sum bit for bit). With grad compression fp16/bf16
 * the bucket is divided by world, rounded to 16 bits, summed in fp32 and rounded to 16
 * bits, then widened back (PyTorch's fp16_compress_hook).
 *
 * It does not: own the parameters, run the optimizer, or decide when to skip sync (the
 * trainer calls ddp_set_sync for gradient accumulation).
 *
 * Call sequence per run and per optimizer step (rank r; every rank does the same):
 *     ddp_t *d = ddp_create(comm, be, grads, n_params, offsets, n_tensors, &opts, &e);
 *     ddp_broadcast_initial(d, params, n_params, buffers, n_buffers, &e);   // once
 *     net hooks: grads_ready = ddp_grads_ready, ctx = d;
 *                with sync_bn also bn_sync_stats = ddp_bn_sync_stats, bn_sync_grads = ...
 *     per optimizer step:
 *         zero grads
 *         ddp_sync_buffers(d, buffers, n_buffers, &e);   // no-op under sync_bn
 *         for each micro-batch m of grad_accum:
 *             ddp_set_sync(d, m == grad_accum - 1);
 *             ddp_begin_backward(d);
 *             forward (hooks); net_loss with grad_scale = loss_scale / (global_batch /
 *                 world): each rank's loss is the mean over ITS share of the batch, and
 *                 the all-reduce averages over ranks (PyTorch DDP semantics; with
 *                 1 / global_batch the gradients would come out world times too small);
 *             backward (hooks: calls ddp_grads_ready as gradients become final)
 *             ddp_finish_step(d, &e);   // waits for all buckets; no-op when not syncing
 *         (AMP: unscale / check finite AFTER ddp_finish_step, so every rank sees the same)
 *         optimizer step
 *         ddp_take_timing(d, &t);   // exposed comm seconds + all-reduce seconds, for steps.csv
 *         (ddp_last_timeline: when each bucket became ready, started and finished)
 * On a failure path call ddp_abort(d, msg) so the other ranks stop waiting. ddp_free.
 */
#ifndef RUNNER_COMM_DDP_H
#define RUNNER_COMM_DDP_H

#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/backend.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_opts {
    double bucket_mb;         /* parallel.bucket_mb (25); MiB of fp32 gradients per bucket */
    double first_bucket_mb;   /* 1 (0 = 1) */
    dtype_t compression;      /* DT_F32 = none, DT_F16, DT_BF16 */
    bool sync_bn;             /* parallel.sync_bn: no per-step buffer broadcast */
} ddp_opts_t;

typedef struct ddp ddp_t;

/* Timing of the last step(s) since the previous ddp_take_timing. */
typedef struct ddp_timing {
    double exposed_s;     /* time spent inside ddp_finish_step and ddp_sync_buffers (not hidden) */
    double allreduce_s;   /* total time the bucket all-reduces ran (overlapped or not) */
    int buckets;          /* buckets all-reduced */
} ddp_timing_t;

/* Creates the DDP state for the gradient array grads (n_params fp32 values in backend
 * memory of be). tensor_offsets (n_tensors + 1 increasing offsets, first 0, last
 * n_params) tell where parameter tensors start so buckets never split one; NULL splits
 * purely by size. The comm and backend are borrowed, not owned. */
ddp_t *ddp_create(comm_t *comm, backend_t *be, float *grads, int64_t n_params,
                  const int64_t *tensor_offsets, int n_tensors, const ddp_opts_t *opts,
                  err_t *e);
void ddp_free(ddp_t *d);   /* waits for any bucket still in flight first. NULL ok */

/* Buckets, in the order they are all-reduced: bucket i is grads[begin, end). */
int ddp_bucket_count(const ddp_t *d);
void ddp_bucket_range(const ddp_t *d, int i, int64_t *begin, int64_t *end);
/* Buckets whose all-reduce was started in the current backward (0 after finish). */
int ddp_buckets_started(const ddp_t *d);
/* The bucket assignment ddp_create makes, without a comm or backend (for benchmarks and
 * models): buckets of the n_params gradient array with the given tensor offsets (NULL:
 * split purely by size) and caps in MiB (<= 0: the defaults 1 and 25). Writes bucket i
 * = [begin[i], end[i]) in all-reduce order when begin / end are non-NULL (room for
 * n_tensors + 1 entries with offsets, n_params / cap + 2 without) and returns the count. */
int ddp_plan_buckets(int64_t n_params, const int64_t *tensor_offsets, int n_tensors,
                     double first_bucket_mb, double bucket_mb, int64_t *begin, int64_t *end);

/* The timeline of the last synchronised step that ddp_finish_step completed, on the host
 * clock, in seconds since that step's ddp_begin_backward (the trainer calls it before the
 * forward; a benchmark may call it just before net_backward). With a GPU backend the
 * host runs ahead of the device: "ready" is when backward had QUEUED the bucket's last
 * gradient kernels, not when they ran. */
typedef struct ddp_bucket_time {
    double ready_s;     /* ddp_grads_ready found every gradient of the bucket final */
    double started_s;   /* its all-reduce was handed to the comm (after staging / compression) */
    double op_s;        /* the operation's time as comm_wait reports it (shm: how long it ran
                           on the comm thread; nccl: from its start until its wait returned) */
    double done_s;      /* ddp_finish_step's wait for it returned */
} ddp_bucket_time_t;
typedef struct ddp_step_times {
    double finish_enter_s;   /* ddp_finish_step was entered (backward had returned) */
    double finish_exit_s;    /* ddp_finish_step returned */
    int buckets;             /* = ddp_bucket_count */
} ddp_step_times_t;
/* Copies the last completed step's times into *step and buckets[0 .. ddp_bucket_count)
 * (either may be NULL). Returns -1 (nothing written) before the first such step. */
int ddp_last_timeline(const ddp_t *d, ddp_step_times_t *step, ddp_bucket_time_t *buckets);

/* Broadcasts params (n_params) and buffers (n_buffers, may be 0/NULL) from rank 0. */
int ddp_broadcast_initial(ddp_t *d, float *params, int64_t n_params, float *buffers,
                          int64_t n_buffers, err_t *e);
/* Broadcasts buffers (BN running stats) from rank 0 unless opts.sync_bn. */
int ddp_sync_buffers(ddp_t *d, float *buffers, int64_t n_buffers, err_t *e);

/* false: the coming backward only accumulates locally (no_sync). Default true. */
void ddp_set_sync(ddp_t *d, bool sync);
/* Resets the bucket state before a backward pass. */
void ddp_begin_backward(ddp_t *d);
/* The net's grads_ready hook (net_hooks_t.grads_ready, ctx = the ddp_t): every gradient
 * at offset >= ready_from is final. Starts the all-reduce of each bucket now complete,
 * in bucket order. An error is kept and reported by ddp_finish_step. */
void ddp_grads_ready(void *ddp, size_t ready_from);
/* Starts any bucket not yet started, waits for all, and leaves averaged gradients in
 * grads. No-op when sync is off. */
int ddp_finish_step(ddp_t *d, err_t *e);
/* Returns and resets the accumulated timing. */
void ddp_take_timing(ddp_t *d, ddp_timing_t *t);
/* Raises the comm's failure flag so other ranks' waits end now. */
void ddp_abort(ddp_t *d, const char *msg);

/* SyncBN hooks (ctx = the ddp_t). mean/var: c channels of backend memory, this rank's
 * batch mean and biased variance over local_count rows; replaced by the statistics of the
 * union of all ranks' batches (PyTorch batch_norm_gather_stats_with_counts);
 * *global_count receives the total row count. */
int ddp_bn_sync_stats(void *ctx, int c, float *mean, float *var, int64_t local_count,
                      int64_t *global_count);
/* All-reduce-sums sum_dy and sum_dy_xhat (c channels each, backend memory). */
int ddp_bn_sync_grads(void *ctx, int c, float *sum_dy, float *sum_dy_xhat);
/* The last error of a hook (the hooks return -1 without an err_t: after net_forward or
 * net_backward fails under SyncBN, this says why). */
const err_t *ddp_last_error(const ddp_t *d);

/* Ordered mode, for steps recorded as one graph (runner/train_graph.c): from the call on,
 * every collective of a step — the buckets started by ddp_grads_ready, ddp_finish_step,
 * ddp_sync_buffers and the SyncBN hooks — is issued in the backend's queue order and
 * nothing waits on the host: through the comm's ordered collectives (nccl; the compute
 * stream waits for them by events, SyncBN's statistics are all-gathered and combined by the
 * backend's bn_combine op), or, on the cpu backend with a host comm (shm), through the
 * backend's host_task op, which runs the host path in queue order. The results are the
 * same bits as without it. bn_floats: an upper bound of 2 x the channels of any BN layer
 * (net_num_buffers). ddp_can_order: whether (comm, backend) allow it (not shm with a GPU:
 * a host collective between a GPU's kernels cannot be recorded). ddp_timing stays zero in
 * this mode. Failures of host tasks show at ddp_check, after the step. */
bool ddp_can_order(const comm_t *c, const backend_t *be);
int ddp_set_ordered(ddp_t *d, int64_t bn_floats, err_t *e);
bool ddp_is_ordered(const ddp_t *d);
int ddp_check(ddp_t *d, err_t *e);

/* The pure SyncBN combination, exposed for tests: n ranks' (count, mean[c], var[c])
 * rows combined in rank order into mean_out, var_out (biased); returns the total count. */
int64_t ddp_combine_bn_stats(int n, int c, const int64_t *counts, const float *means,
                             const float *vars, float *mean_out, float *var_out);

#ifdef __cplusplus
}
#endif
#endif
