/* ddp_impl.h: the private state of a ddp_t, shared by ddp.c (buckets, host waits, SyncBN
 * through the host) and ddp_ordered.c (the same in the backend's queue order, for steps
 * recorded as one graph). Not for use outside comm/ddp*.c. */
#ifndef RUNNER_COMM_DDP_IMPL_H
#define RUNNER_COMM_DDP_IMPL_H

#include "comm/ddp.h"

struct ddp_task;

struct ddp {
    comm_t *comm;
    backend_t *be;
    float *grads;             /* backend memory */
    int64_t n;
    ddp_opts_t o;
    int n_buckets;
    int64_t *begin, *end;     /* bucket i = grads[begin[i], end[i]) */
    comm_work_t **work;       /* started, not yet waited */
    int next;                 /* buckets started this backward */
    bool sync;
    bool stage;               /* host comm + device backend: all-reduce a host copy */
    float *host;              /* n floats: staged gradients (stage) */
    bool host_pinned;         /* host came from cuda_host_alloc (DMA without a bounce) */
    uint16_t *half;           /* n 16-bit values: compression on a host comm */
    void *dev_half;           /* compression on a device comm */
    float *scratch;           /* host scratch for broadcasts / SyncBN */
    size_t scratch_bytes;
    void *dev_scratch;        /* device scratch for SyncBN on a device comm */
    size_t dev_scratch_bytes;
    err_t err;                /* first error of a hook */
    bool failed;
    ddp_timing_t t;
    double t0;                   /* ddp_begin_backward (CLOCK_MONOTONIC seconds) */
    ddp_bucket_time_t *tl;       /* this backward's bucket timeline (seconds since t0) */
    ddp_bucket_time_t *tl_last;  /* the last completed synchronised step's */
    ddp_step_times_t step_last;
    bool have_last;
    /* ordered mode (ddp_ordered.c): collectives in the backend's queue order, for steps
     * recorded as one graph */
    bool ordered;
    bool host_tasks;          /* through the backend's host_task op (cpu backend, shm) */
    float *gather;            /* backend memory: world x bn_floats (SyncBN all-gather) */
    float *gather_send;       /* backend memory: bn_floats (mean and var side by side) */
    int64_t bn_floats;
    struct ddp_task **tasks;  /* host_task closures, one per collective site, kept for
                                 the recordings that bake their addresses in */
    int n_tasks, cap_tasks;
    bool task_failed;         /* a host task failed (ddp_check reports task_err) */
    err_t task_err;
};

/* ddp.c: the bucket steps the ordered mode reuses inside host tasks. */
int ddp_start_bucket(ddp_t *d, int i, bool ordered, err_t *e);
int ddp_finish_bucket(ddp_t *d, int i, err_t *e);
/* ddp.c: the host-path SyncBN and buffer broadcast. */
int ddp_bcast_floats(ddp_t *d, float *p, int64_t n, err_t *e);

/* ddp_ordered.c: the ordered versions ddp.c calls when d->ordered. */
int ddp_ordered_start_bucket(ddp_t *d, int i, err_t *e);
int ddp_ordered_finish(ddp_t *d, err_t *e);
int ddp_ordered_bcast(ddp_t *d, float *p, int64_t n, err_t *e);
int ddp_ordered_bn_stats(ddp_t *d, int c, float *mean, float *var, int64_t local_count, int64_t *global_count);
int ddp_ordered_bn_grads(ddp_t *d, int c, float *sum_dy, float *sum_dy_xhat);
void ddp_ordered_free(ddp_t *d);

#endif
