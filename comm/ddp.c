/* ddp.c: DistributedDataParallel over a comm_t (ddp.h): bucket assignment, all-reduce
 * of each bucket as soon as its gradients are final, averaging, optional 16-bit
 * compression, parameter/buffer broadcasts and the SyncBN hooks.
 *
 * Memory: with a host-memory comm (shm) and the CPU backend, buckets are all-reduced in
 * place in the gradient array. With a host comm and a device backend, each bucket is
 * downloaded into a host copy when it becomes ready and uploaded after its all-reduce.
 * With a device comm (nccl), buckets are all-reduced in place in device memory.
 * Scratch buffers are allocated on first use and kept, so steady-state steps allocate
 * nothing.
 *
 * Ordered mode (ddp_set_ordered, ddp_ordered.c) issues the same collectives in the
 * backend's queue order without host waits, so that a whole step can be one graph.
 *
 * It does not: detect unused parameters (a bucket whose gradients never become ready is
 * started by ddp_finish_step), or reorder buckets by observed readiness (PyTorch's
 * rebuild_buckets) — the flat layout already matches backward order.
 */
#include "comm/ddp.h"
#include "comm/ddp_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/bn_combine.h"
#include "util/clock.h"
#include "util/half.h"

#ifdef RUNNER_HAVE_CUDA
#include "model/cuda/cuda_backend.h"
#endif

/* struct ddp: comm/ddp_impl.h */

/* Copies the backend's error into e and returns -1. */
static int be_fail(ddp_t *d, err_t *e, const char *what) {
    if (e) {
        *e = d->be->err;
        if (!e->code) e->code = ERR_RUNTIME;
        err_wrap(e, "ddp: %s", what);
    }
    return -1;
}

int ddp_plan_buckets(int64_t n_params, const int64_t *off, int n_tensors, double first_bucket_mb,
                     double bucket_mb, int64_t *begin, int64_t *end) {
    if (first_bucket_mb <= 0) first_bucket_mb = 1;
    if (bucket_mb <= 0) bucket_mb = 25;
    int64_t first_cap = (int64_t)(first_bucket_mb * 1048576.0 / 4.0);
    int64_t cap = (int64_t)(bucket_mb * 1048576.0 / 4.0);
    if (first_cap < 1) first_cap = 1;
    if (cap < 1) cap = 1;
    int nb = 0;
    int64_t hi = n_params, size = 0, limit = first_cap;
    if (off) {
        for (int t = n_tensors - 1; t >= 0; t--) {
            size += off[t + 1] - off[t];
            if (size >= limit || t == 0) {
                if (begin) begin[nb] = off[t];
                if (end) end[nb] = hi;
                nb++;
                hi = off[t];
                size = 0;
                limit = cap;
            }
        }
    } else {
        while (hi > 0) {
            int64_t lo = hi - limit > 0 ? hi - limit : 0;
            if (begin) begin[nb] = lo;
            if (end) end[nb] = hi;
            nb++;
            hi = lo;
            limit = cap;
        }
    }
    return nb;
}

/* Assigns buckets PyTorch's way (ddp_plan_buckets) into d->begin, d->end. */
static int assign_buckets(ddp_t *d, const int64_t *off, int n_tensors, err_t *e) {
    int nb = ddp_plan_buckets(d->n, off, n_tensors, d->o.first_bucket_mb, d->o.bucket_mb, NULL, NULL);
    d->begin = calloc((size_t)nb + 1, sizeof *d->begin);
    d->end = calloc((size_t)nb + 1, sizeof *d->end);
    d->tl = calloc((size_t)nb + 1, sizeof *d->tl);
    d->tl_last = calloc((size_t)nb + 1, sizeof *d->tl_last);
    if (!d->begin || !d->end || !d->tl || !d->tl_last) return err_set(e, ERR_RUNTIME, "out of memory");
    d->n_buckets = ddp_plan_buckets(d->n, off, n_tensors, d->o.first_bucket_mb, d->o.bucket_mb,
                                    d->begin, d->end);
    return 0;
}

ddp_t *ddp_create(comm_t *comm, backend_t *be, float *grads, int64_t n_params,
                  const int64_t *tensor_offsets, int n_tensors, const ddp_opts_t *opts,
                  err_t *e) {
    if (n_params <= 0) { err_set(e, ERR_RUNTIME, "ddp: no parameters"); return NULL; }
    if (comm->device_memory && be->kind == BACKEND_CPU) {
        err_set(e, ERR_INPUT, "parallel.backend '%s' needs a GPU backend; use shm with the cpu "
                "device", comm_name(comm));
        return NULL;
    }
    if (tensor_offsets) {
        if (n_tensors < 1 || tensor_offsets[0] != 0 || tensor_offsets[n_tensors] != n_params) {
            err_set(e, ERR_RUNTIME, "ddp: tensor offsets must run from 0 to n_params");
            return NULL;
        }
        for (int t = 0; t < n_tensors; t++)
            if (tensor_offsets[t + 1] <= tensor_offsets[t]) {
                err_set(e, ERR_RUNTIME, "ddp: tensor offsets must increase (tensor %d)", t);
                return NULL;
            }
    }
    ddp_t *d = calloc(1, sizeof *d);
    if (!d) { err_set(e, ERR_RUNTIME, "out of memory"); return NULL; }
    d->comm = comm;
    d->be = be;
    d->grads = grads;
    d->n = n_params;
    d->o = *opts;
    if (d->o.bucket_mb <= 0) d->o.bucket_mb = 25;
    if (d->o.first_bucket_mb <= 0) d->o.first_bucket_mb = 1;
    if (d->o.compression != DT_F16 && d->o.compression != DT_BF16) d->o.compression = DT_F32;
    d->sync = true;
    d->t0 = now_s();
    d->stage = !comm->device_memory && be->kind != BACKEND_CPU;
    if (assign_buckets(d, tensor_offsets, n_tensors, e) < 0) goto fail;
    d->work = calloc((size_t)d->n_buckets, sizeof *d->work);
    if (!d->work) { err_set(e, ERR_RUNTIME, "out of memory"); goto fail; }
    if (d->stage) {
#ifdef RUNNER_HAVE_CUDA
        /* page-locked, so each bucket's download and upload is one DMA (pageable memory
         * goes through the driver's bounce buffer at about half the speed) */
        err_t pe = {0};
        if (be->kind == BACKEND_CUDA && (d->host = cuda_host_alloc((size_t)n_params * 4, &pe))) d->host_pinned = true;
#endif
        if (!d->host && !(d->host = malloc((size_t)n_params * 4))) {
            err_set(e, ERR_RUNTIME, "out of memory (%lld gradient floats)", (long long)n_params);
            goto fail;
        }
    }
    if (d->o.compression != DT_F32) {
        if (!comm->device_memory) {
            d->half = malloc((size_t)n_params * 2);
            if (!d->half) { err_set(e, ERR_RUNTIME, "out of memory"); goto fail; }
        } else {
            d->dev_half = be->ops->alloc(be, (size_t)n_params * backend_elem_size(be, d->o.compression));
            if (!d->dev_half) { be_fail(d, e, "allocating the compression buffer"); goto fail; }
        }
    }
    return d;
fail:
    ddp_free(d);
    return NULL;
}

void ddp_free(ddp_t *d) {
    if (!d) return;
    ddp_ordered_free(d);
    for (int i = 0; i < d->n_buckets && d->work; i++)
        if (d->work[i]) comm_wait(d->comm, d->work[i], NULL, NULL);
    if (d->dev_half) d->be->ops->release(d->be, d->dev_half);
    if (d->dev_scratch) d->be->ops->release(d->be, d->dev_scratch);
    free(d->begin);
    free(d->end);
    free(d->work);
    free(d->tl);
    free(d->tl_last);
#ifdef RUNNER_HAVE_CUDA
    if (d->host_pinned) cuda_host_free(d->host);
    else
#endif
        free(d->host);
    free(d->half);
    free(d->scratch);
    free(d);
}

int ddp_bucket_count(const ddp_t *d) { return d->n_buckets; }

void ddp_bucket_range(const ddp_t *d, int i, int64_t *begin, int64_t *end) {
    *begin = d->begin[i];
    *end = d->end[i];
}

int ddp_buckets_started(const ddp_t *d) { return d->next; }

/* Host scratch of at least bytes. */
static void *host_scratch(ddp_t *d, size_t bytes, err_t *e) {
    if (d->scratch_bytes < bytes) {
        float *p = realloc(d->scratch, bytes);
        if (!p) { err_set(e, ERR_RUNTIME, "out of memory (%zu bytes)", bytes); return NULL; }
        d->scratch = p;
        d->scratch_bytes = bytes;
    }
    return d->scratch;
}

/* Device scratch of at least bytes (device comms only). */
static void *dev_scratch(ddp_t *d, size_t bytes, err_t *e) {
    if (d->dev_scratch_bytes < bytes) {
        if (d->dev_scratch) d->be->ops->release(d->be, d->dev_scratch);
        d->dev_scratch = d->be->ops->alloc(d->be, bytes);
        d->dev_scratch_bytes = d->dev_scratch ? bytes : 0;
        if (!d->dev_scratch) { be_fail(d, e, "allocating scratch"); return NULL; }
    }
    return d->dev_scratch;
}

/* Broadcasts n floats of backend memory from rank 0, through the host when the comm
 * cannot read backend memory directly. */
int ddp_bcast_floats(ddp_t *d, float *p, int64_t n, err_t *e) {
    if (n <= 0 || !p) return 0;
    size_t bytes = (size_t)n * 4;
    if (d->comm->device_memory || d->be->kind == BACKEND_CPU)
        return comm_broadcast(d->comm, p, bytes, 0, e);
    float *h = host_scratch(d, bytes, e);
    if (!h) return -1;
    if (d->be->ops->download(d->be, h, p, bytes) < 0) return be_fail(d, e, "download");
    if (comm_broadcast(d->comm, h, bytes, 0, e) < 0) return -1;
    if (d->be->ops->upload(d->be, p, h, bytes) < 0) return be_fail(d, e, "upload");
    return 0;
}

int ddp_broadcast_initial(ddp_t *d, float *params, int64_t n_params, float *buffers,
                          int64_t n_buffers, err_t *e) {
    if (ddp_bcast_floats(d, params, n_params, e) < 0) return err_wrap(e, "broadcasting parameters");
    if (ddp_bcast_floats(d, buffers, n_buffers, e) < 0) return err_wrap(e, "broadcasting buffers");
    return 0;
}

int ddp_sync_buffers(ddp_t *d, float *buffers, int64_t n_buffers, err_t *e) {
    if (d->o.sync_bn) return 0;
    double t0 = now_s();
    int rc = d->ordered ? ddp_ordered_bcast(d, buffers, n_buffers, e) : ddp_bcast_floats(d, buffers, n_buffers, e);
    d->t.exposed_s += now_s() - t0;
    return rc < 0 ? err_wrap(e, "broadcasting BN buffers") : 0;
}

void ddp_set_sync(ddp_t *d, bool sync) { d->sync = sync; }

void ddp_begin_backward(ddp_t *d) {
    d->next = 0;
    d->failed = false;   /* a backward that never finished (a failed recording) left it */
    d->t0 = now_s();
}

/* Starts bucket i's all-reduce: stage / compress it as configured, then start (ordered:
 * the comm's ordered all-reduce, device comms only). */
int ddp_start_bucket(ddp_t *d, int i, bool ordered, err_t *e) {
    int64_t b = d->begin[i], cnt = d->end[i] - b;
    float *buf = d->grads + b;
    if (d->stage) {
        if (d->be->ops->download(d->be, d->host + b, buf, (size_t)cnt * 4) < 0)
            return be_fail(d, e, "downloading a gradient bucket");
        buf = d->host + b;
    }
    int rc;
    float inv = 1.0f / (float)d->comm->world;
    if (d->o.compression == DT_F32) {
        if (ordered) return comm_allreduce_ordered(d->comm, buf, (size_t)cnt, DT_F32, COMM_AVG, e);
        rc = comm_start_allreduce(d->comm, buf, (size_t)cnt, DT_F32, COMM_AVG, &d->work[i], e);
    } else if (!d->comm->device_memory) {
        /* PyTorch's fp16_compress_hook: divide first (no overflow), then round */
        uint16_t *h = d->half + b;
        if (d->o.compression == DT_F16)
            for (int64_t k = 0; k < cnt; k++) h[k] = f32_to_f16(buf[k] * inv);
        else
            for (int64_t k = 0; k < cnt; k++) h[k] = f32_to_bf16(buf[k] * inv);
        rc = comm_start_allreduce(d->comm, h, (size_t)cnt, d->o.compression, COMM_SUM,
                                  &d->work[i], e);
    } else {
        size_t es = backend_elem_size(d->be, d->o.compression);
        void *h = (char *)d->dev_half + (size_t)b * es;
        if (d->be->ops->scale(d->be, cnt, buf, inv) < 0 ||
            d->be->ops->cast(d->be, cnt, buf, DT_F32, h, d->o.compression) < 0)
            return be_fail(d, e, "compressing a gradient bucket");
        if (ordered) return comm_allreduce_ordered(d->comm, h, (size_t)cnt, d->o.compression, COMM_SUM, e);
        rc = comm_start_allreduce(d->comm, h, (size_t)cnt, d->o.compression, COMM_SUM,
                                  &d->work[i], e);
    }
    return rc;
}

/* Completes bucket i after its all-reduce: widen compressed values, upload staged ones. */
int ddp_finish_bucket(ddp_t *d, int i, err_t *e) {
    int64_t b = d->begin[i], cnt = d->end[i] - b;
    if (d->o.compression != DT_F32 && d->comm->device_memory) {
        size_t es = backend_elem_size(d->be, d->o.compression);
        if (d->be->ops->cast(d->be, cnt, (char *)d->dev_half + (size_t)b * es, d->o.compression,
                             d->grads + b, DT_F32) < 0)
            return be_fail(d, e, "widening a compressed bucket");
        return 0;
    }
    float *buf = d->stage ? d->host + b : d->grads + b;
    if (d->o.compression == DT_F16)
        for (int64_t k = 0; k < cnt; k++) buf[k] = f16_to_f32(d->half[b + k]);
    else if (d->o.compression == DT_BF16)
        for (int64_t k = 0; k < cnt; k++) buf[k] = bf16_to_f32(d->half[b + k]);
    if (d->stage && d->be->ops->upload(d->be, d->grads + b, buf, (size_t)cnt * 4) < 0)
        return be_fail(d, e, "uploading a gradient bucket");
    return 0;
}

void ddp_grads_ready(void *ctx, size_t ready_from) {
    ddp_t *d = ctx;
    if (!d->sync || d->failed) return;
    double now = now_s() - d->t0;
    while (d->next < d->n_buckets && (size_t)d->begin[d->next] >= ready_from) {
        ddp_bucket_time_t *bt = &d->tl[d->next];
        *bt = (ddp_bucket_time_t){now, 0, 0, 0};
        if ((d->ordered ? ddp_ordered_start_bucket(d, d->next, &d->err) : ddp_start_bucket(d, d->next, false, &d->err)) < 0) {
            d->failed = true;
            return;
        }
        bt->started_s = now_s() - d->t0;
        d->next++;
    }
}

int ddp_finish_step(ddp_t *d, err_t *e) {
    if (!d->sync) return 0;
    if (d->ordered) return ddp_ordered_finish(d, e);
    double t0 = now_s();
    ddp_step_times_t st = {t0 - d->t0, 0, d->n_buckets};
    ddp_grads_ready(d, 0);   /* buckets whose gradients were never reported */
    int rc = 0;
    for (int i = 0; i < d->n_buckets; i++) {
        if (!d->work[i]) continue;
        double secs = 0;
        err_t we = {0};
        if (comm_wait(d->comm, d->work[i], &secs, &we) < 0 && rc == 0) {
            rc = -1;
            if (e) *e = we;
        }
        d->work[i] = NULL;
        d->tl[i].op_s = secs;
        d->tl[i].done_s = now_s() - d->t0;
        d->t.allreduce_s += secs;
        d->t.buckets++;
        if (rc == 0 && ddp_finish_bucket(d, i, e) < 0) rc = -1;
    }
    if (d->failed && rc == 0) {
        if (e) *e = d->err;
        rc = -1;
    }
    d->failed = false;
    d->next = 0;
    double t1 = now_s();
    d->t.exposed_s += t1 - t0;
    if (rc == 0) {
        st.finish_exit_s = t1 - d->t0;
        memcpy(d->tl_last, d->tl, (size_t)d->n_buckets * sizeof *d->tl);
        d->step_last = st;
        d->have_last = true;
    }
    return rc < 0 ? err_wrap(e, "ddp gradient all-reduce") : 0;
}

int ddp_last_timeline(const ddp_t *d, ddp_step_times_t *step, ddp_bucket_time_t *buckets) {
    if (!d->have_last) return -1;
    if (step) *step = d->step_last;
    if (buckets) memcpy(buckets, d->tl_last, (size_t)d->n_buckets * sizeof *buckets);
    return 0;
}

void ddp_take_timing(ddp_t *d, ddp_timing_t *t) {
    *t = d->t;
    memset(&d->t, 0, sizeof d->t);
}

void ddp_abort(ddp_t *d, const char *msg) { comm_abort(d->comm, msg); }

const err_t *ddp_last_error(const ddp_t *d) { return &d->err; }

int64_t ddp_combine_bn_stats(int n, int c, const int64_t *counts, const float *means,
                             const float *vars, float *mean_out, float *var_out) {
    int64_t total = 0;
    for (int j = 0; j < n; j++) total += counts[j];
    for (int ch = 0; ch < c; ch++)
        bn_combine_channel(n, counts, 0, means + ch, vars + ch, (size_t)c, &mean_out[ch], &var_out[ch]);
    return total;
}

/* Runs an all-gather / all-reduce of host bytes, through device scratch when the comm
 * only takes device memory. kind 0: allgather(send bytes -> recv world*bytes); 1:
 * all-reduce-sum of bytes/4 floats in place in send. */
static int host_collective(ddp_t *d, int kind, void *send, void *recv, size_t bytes, err_t *e) {
    if (!d->comm->device_memory)
        return kind == 0 ? comm_allgather(d->comm, send, recv, bytes, e)
                         : comm_allreduce(d->comm, send, bytes / 4, DT_F32, COMM_SUM, e);
    size_t w = (size_t)d->comm->world, pad = (bytes + 255) & ~(size_t)255;
    char *dev = dev_scratch(d, pad * (1 + w), e);
    if (!dev) return -1;
    if (d->be->ops->upload(d->be, dev, send, bytes) < 0) return be_fail(d, e, "upload");
    if (kind == 0) {
        if (comm_allgather(d->comm, dev, dev + pad, bytes, e) < 0) return -1;
        if (d->be->ops->download(d->be, recv, dev + pad, bytes * w) < 0) return be_fail(d, e, "download");
    } else {
        if (comm_allreduce(d->comm, dev, bytes / 4, DT_F32, COMM_SUM, e) < 0) return -1;
        if (d->be->ops->download(d->be, send, dev, bytes) < 0) return be_fail(d, e, "download");
    }
    return 0;
}

int ddp_bn_sync_stats(void *ctx, int c, float *mean, float *var, int64_t local_count,
                      int64_t *global_count) {
    ddp_t *d = ctx;
    if (d->ordered) return ddp_ordered_bn_stats(d, c, mean, var, local_count, global_count);
    size_t w = (size_t)d->comm->world, rec = 8 + 8 * (size_t)c;   /* count, mean[c], var[c] */
    char *buf = host_scratch(d, rec * (w + 1) + 8 * (size_t)c * (w + 1), &d->err);
    if (!buf) return -1;
    char *mine = buf, *all = buf + rec;
    float *means = (float *)(all + rec * w), *vars = means + (size_t)c * w;
    int64_t *counts = (int64_t *)(vars + (size_t)c * w);
    memcpy(mine, &local_count, 8);
    if (d->be->ops->download(d->be, mine + 8, mean, (size_t)c * 4) < 0 ||
        d->be->ops->download(d->be, mine + 8 + 4 * (size_t)c, var, (size_t)c * 4) < 0)
        return be_fail(d, &d->err, "SyncBN download");
    if (host_collective(d, 0, mine, all, rec, &d->err) < 0) return -1;
    for (size_t j = 0; j < w; j++) {
        memcpy(&counts[j], all + j * rec, 8);
        memcpy(means + j * (size_t)c, all + j * rec + 8, (size_t)c * 4);
        memcpy(vars + j * (size_t)c, all + j * rec + 8 + 4 * (size_t)c, (size_t)c * 4);
    }
    /* the combined statistics overwrite this rank's record (no longer needed) */
    float *gm = (float *)(mine + 8), *gv = gm + c;
    *global_count = ddp_combine_bn_stats((int)w, c, counts, means, vars, gm, gv);
    if (d->be->ops->upload(d->be, mean, gm, (size_t)c * 4) < 0 ||
        d->be->ops->upload(d->be, var, gv, (size_t)c * 4) < 0)
        return be_fail(d, &d->err, "SyncBN upload");
    return 0;
}

int ddp_bn_sync_grads(void *ctx, int c, float *sum_dy, float *sum_dy_xhat) {
    ddp_t *d = ctx;
    if (d->ordered) return ddp_ordered_bn_grads(d, c, sum_dy, sum_dy_xhat);
    float *h = host_scratch(d, 8 * (size_t)c, &d->err);
    if (!h) return -1;
    if (d->be->ops->download(d->be, h, sum_dy, (size_t)c * 4) < 0 ||
        d->be->ops->download(d->be, h + c, sum_dy_xhat, (size_t)c * 4) < 0)
        return be_fail(d, &d->err, "SyncBN download");
    if (host_collective(d, 1, h, NULL, 8 * (size_t)c, &d->err) < 0) return -1;
    if (d->be->ops->upload(d->be, sum_dy, h, (size_t)c * 4) < 0 ||
        d->be->ops->upload(d->be, sum_dy_xhat, h + c, (size_t)c * 4) < 0)
        return be_fail(d, &d->err, "SyncBN upload");
    return 0;
}
