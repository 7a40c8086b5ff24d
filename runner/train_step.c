/* train_step.c: one optimizer step of a rank's training run and the read-back of windows
 * of steps (train_internal.h): what the host writes per step (learning rate, EMA decay,
 * epoch, the micro-batches from the CPU loader, the copy stream, or indices for the
 * augmentation kernel on the GPU), then the device work — forward/loss/backward, gradient
 * reduction, unscale, clipping, the optimizer, the EMA — as segments that train.cuda_graphs
 * records and replays (train_graph.c), all enqueued without waiting for the device; then,
 * once per window, the records read back, agreed on with the other ranks and handed to
 * tracking.
 * Not here: setup (train.c), the epoch loop and evaluation (train_loop.c), recording
 * (train_graph.c), checkpoints (train_state.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runner/train_internal.h"

#ifdef RUNNER_HAVE_CUDA
#include "model/cuda/augment.h"
#include "model/cuda/cuda_backend.h"
#endif

/* Sums n small values over all ranks (host in/out), through backend memory when the
 * communicator works on device memory. */
int trainer_allreduce_small(trainer_t *t, float *vals, int n, err_t *e) {
    if (!t->comm) return 0;
    if (!comm_device_memory(t->comm)) return comm_allreduce(t->comm, vals, (size_t)n, DT_F32, COMM_SUM, e);
    backend_t *be = t->be;
    if (be->ops->upload(be, t->comm_scratch, vals, (size_t)n * sizeof(float)) ||
        comm_allreduce(t->comm, t->comm_scratch, (size_t)n, DT_F32, COMM_SUM, e) ||
        be->ops->download(be, vals, t->comm_scratch, (size_t)n * sizeof(float))) {
        if (!e->code) *e = be->err;
        return -1;
    }
    return 0;
}

/* Words of one step record: loss_scale (float) and found_inf (int32), copied from the
 * step control after the unscale, the gradient norm (float, optimizer.clip_grad_norm),
 * then per micro-batch the loss sum (float) and the top-1/top-5 hits (int32). */
enum { REC_HEAD = 3 };
int trainer_step_rec_words(int grad_accum) { return REC_HEAD + 3 * grad_accum; }

/* Starts the training epoch at micro-batch t->start_batch. */
int trainer_start_epoch(trainer_t *t, err_t *e) {
    if (!t->gpu_data) return loader_start_epoch(t->train_ld, t->epoch, t->start_batch, e);
    t->gpu_batch = t->start_batch;
    return sampler_set_epoch(&t->gpu_sampler, t->epoch, e);
}

/* Uploads n labels (host) into the net's label buffer, checked as net_loss checks them. */
int trainer_upload_labels(trainer_t *t, const int32_t *labels, int n, err_t *e) {
    int classes = t->p->num_classes;
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return err_set(e, ERR_INPUT, "label %d of sample %d is outside [0, %d); check the dataset's classes "
                           "and model.num_classes", labels[i], i, classes);
    backend_t *be = t->be;
    if (be->ops->upload(be, net_labels(t->net), labels, (size_t)n * sizeof(int32_t))) {
        *e = be->err;
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ host inputs */

/* Dropout's key of micro-batch m (nets with dropout): its rows in the epoch's global order
 * (the sampler gives rank r of W the places r, r + W, ...; first is the micro-batch's first
 * place in this rank's order), so a sample's mask is the same at every world size, after a
 * resume and with any number of loader workers. It goes into slot m of t->rng_keys, which
 * the device work copies into the net's key word (device_micro): one recording may hold
 * several micro-batches, so the key cannot be a value baked into it. */
static int rng_key_slot(trainer_t *t, int m, int64_t first, err_t *e) {
    if (!t->rng_keys) return 0;
    int64_t world = t->train_opts.world_size;
    dropout_key_t k = {.seed = t->e->seed, .epoch = (uint64_t)t->epoch,
                       .first_sample = t->train_opts.rank + first * world, .sample_stride = world};
    backend_t *be = t->be;
    if (be->ops->upload(be, (dropout_key_t *)t->rng_keys + m, &k, sizeof k)) {
        *e = be->err;
        return -1;
    }
    return 0;
}

/* What the host does for micro-batch m of a step before the device computes it: the next
 * batch of the epoch into the buffers the device reads. GPU data path: its dataset indices
 * into index slot m and, with mixup, its mixing draws into sample slot m (the augmentation
 * and mixing kernels run with the device work, reading those slots and the epoch word).
 * CPU loader: images into the net's input (through the copy stream on CUDA), labels or soft
 * targets into the net's buffers. A resident trainer (train_bench.c) keeps the batch it
 * was given and only keys dropout. Returns the micro-batch's size, 0 at the end of the
 * epoch, -1. */
static int host_batch(trainer_t *t, int m, pending_step_t *ps, err_t *e) {
    backend_t *be = t->be;
    if (t->resident) {   /* train_bench.c: the batch stays where it is */
        if (rng_key_slot(t, m, t->resident_batch * t->p->micro_batch, e)) return -1;
        t->resident_batch++;
        return t->p->micro_batch;
    }
#ifdef RUNNER_HAVE_CUDA
    if (t->gpu_data) {
        const sampler_t *s = &t->gpu_sampler;
        int mb = t->p->micro_batch;
        int64_t first = t->gpu_batch * mb;
        if (first >= s->num_samples) return 0;
        int n = (int)(s->num_samples - first < mb ? s->num_samples - first : mb);
        if (be->ops->upload(be, t->gpu_indices + (size_t)m * mb, s->indices + first, (size_t)n * sizeof(int64_t))) {
            *e = be->err;
            return -1;
        }
        if (t->mix && trainer_aug_mix_draw(t, n, t->gpu_batch, m, e)) return -1;
        if (rng_key_slot(t, m, first, e)) return -1;
        t->gpu_batch++;
        return n;
    }
#endif
    loader_batch_t *b;
    int r = loader_next(t->train_ld, &b, e);
    if (r <= 0) return r;
    ps->data_wait_s += b->data_wait_s;
    if (rng_key_slot(t, m, b->index * t->p->micro_batch, e)) return -1;
#ifdef RUNNER_HAVE_CUDA
    if (t->stager) {
        /* images and labels (mixup: the soft targets instead, the loss reads no labels)
         * through the copy stream, then (compute stream) into the net */
        size_t bytes = (size_t)b->n * t->p->channels * t->p->height * t->p->width * sizeof(float);
        const void *second = b->targets ? (const void *)b->targets : (const void *)b->labels;
        size_t second_bytes = (size_t)b->n * (b->targets ? t->train_opts.mixup.classes * sizeof(float) : sizeof(int32_t));
        void *dst2 = b->targets ? (void *)net_targets(t->net) : (void *)net_labels(t->net), *dev2 = NULL;
        const float *dev = cuda_stager_upload(t->stager, b->images, bytes, second, second_bytes, &dev2, e);
        if (!dev || net_input_from_f32(t->net, dev, b->n, e)) return -1;
        if (be->ops->copy(be, dst2, dev2, second_bytes)) {
            *e = be->err;
            return -1;
        }
        if (cuda_stager_release(t->stager, e)) return -1;
        return b->n;
    }
#endif
    if (net_upload_input(t->net, b->images, b->n, e)) return -1;
    if (t->mix) {
        if (be->ops->upload(be, net_targets(t->net), b->targets,
                            (size_t)b->n * t->train_opts.mixup.classes * sizeof(float))) {
            *e = be->err;
            return -1;
        }
    } else if (trainer_upload_labels(t, b->labels, b->n, e)) {
        return -1;
    }
    return b->n;
}

/* ------------------------------------------------------------------ device work */

/* A segment of a step: its micro-batches [first, first + count) of n_micro, all full but
 * the step's last, of n_last samples; the first segment zeroes the gradients (and, bcast,
 * takes rank 0's BN buffers), the last one finishes the step. Everything it enqueues reads
 * device memory only (what the host changes per step was written before: the learning
 * rate, the EMA decay, the epoch, the batches' indices, mixing draws or images), so a
 * segment with the same key can be recorded once and replayed for every later step. */
typedef struct step_seg {
    int first, count, n_micro, n_last;
    bool bcast;
    int32_t *rec;          /* the step's record (device words) */
} step_seg_t;

/* Forward, loss and backward of micro-batch m of the segment's step (its data in place). */
static int device_micro(trainer_t *t, const step_seg_t *s, int m, err_t *e) {
    net_t *n = t->net;
    int nb = m == s->n_micro - 1 ? s->n_last : t->p->micro_batch;
    float grad_scale = (float)(1.0 / ((double)nb * s->n_micro));
    float smoothing = (float)t->e->train.label_smoothing;
    const step_ctl_t *ctl = optim_ctl(t->opt);
    int32_t *out = s->rec + REC_HEAD + 3 * m;
#ifdef RUNNER_HAVE_CUDA
    if (t->gpu_data && trainer_gpu_batch(t, m, nb, e)) return -1;
#endif
    /* a per-micro-batch value the host decides comes from slot m of an array the host
     * half filled, copied here into the word the net reads (one recording may hold several
     * micro-batches): dropout's key */
    if (t->rng_keys && net_set_rng_key_dev(n, (const dropout_key_t *)t->rng_keys + m, e)) return -1;
    if (t->ddp) {
        ddp_set_sync(t->ddp, m == s->n_micro - 1);
        ddp_begin_backward(t->ddp);
    }
    int rc = net_forward(n, net_input(n), nb, true, &t->hooks, e);
    if (!rc)
        rc = t->mix ? net_loss_soft_async(n, NULL, grad_scale, ctl, (float *)out, out + 1, e)
                    : net_loss_async(n, NULL, smoothing, grad_scale, ctl, (float *)out, out + 1, e);
    if (!rc) rc = net_backward(n, &t->hooks, e);
    if (rc) {
        /* a failed SyncBN hook returns -1 without an err_t: its reason is in ddp */
        const err_t *he = t->ddp ? ddp_last_error(t->ddp) : NULL;
        if (he && he->code) err_wrap(e, "%s", he->msg);
        return -1;
    }
    return t->ddp ? ddp_finish_step(t->ddp, e) : 0;
}

static int device_segment(trainer_t *t, void *arg, err_t *e) {
    const step_seg_t *s = arg;
    backend_t *be = t->be;
    net_t *n = t->net;
    if (s->first == 0) {
        if (net_zero_grads(n, e)) return -1;
        if (s->bcast && ddp_sync_buffers(t->ddp, net_buffers(n), (int64_t)net_num_buffers(n), e)) return -1;
    }
    for (int m = s->first; m < s->first + s->count; m++)
        if (device_micro(t, s, m, e)) return -1;
    if (s->first + s->count < s->n_micro) return 0;
    /* unscale + inf check, the record of the scale used and the verdict, the clipping of
     * the all-reduced, unscaled gradients (not on an overflowed step; the norm goes to the
     * record), then the update (skipped on the device after an overflow) and the
     * step-control advance */
    if (loss_scaler_unscale(&t->scaler, net_grads(n), (int64_t)net_num_params(n), e)) return -1;
    if (be->ops->copy(be, s->rec, optim_ctl(t->opt), 2 * sizeof(int32_t))) {
        *e = be->err;
        return -1;
    }
    double clip = t->e->optimizer.clip_grad_norm;
    if (clip > 0 && optim_clip_grad_norm(t->opt, clip, (float *)(s->rec + 2), e)) return -1;
    if (optim_apply(t->opt, e)) return -1;
    if (!t->ema) return 0;
    /* The EMA must be identical on every rank, but each DDP rank has updated its BN
     * buffers from its own batch; they all take rank 0's at the next step's broadcast, so
     * that broadcast moves here, before the average reads them (same values, one
     * broadcast per step as before). */
    if (t->ddp && ddp_sync_buffers(t->ddp, net_buffers(n), (int64_t)net_num_buffers(n), e)) return -1;
    return ema_apply(t->ema, e);
}

/* ------------------------------------------------------------------ steps */

/* DP: every micro-batch is scattered from the host and its gradients summed by dp.c;
 * then the same finish as a segment's. */
static int dp_step(trainer_t *t, int n_micro, int32_t *rec, pending_step_t *ps, err_t *e) {
    backend_t *be = t->be;
    float smoothing = (float)t->e->train.label_smoothing;
    double dp_scale = 1.0;
    if (net_zero_grads(t->net, e) || loss_scaler_scale(&t->scaler, &dp_scale, e)) return -1;
    for (int m = 0; m < n_micro; m++) {
        loader_batch_t *b;
        int r = loader_next(t->train_ld, &b, e);
        if (r < 0) return -1;
        if (r == 0) return err_set(e, ERR_RUNTIME, "internal: the epoch ended %d micro-batches early", n_micro - m);
        ps->data_wait_s += b->data_wait_s;
        /* dropout's key: each replica keys the rows of its chunk (dp.c) */
        int64_t world = t->train_opts.world_size;
        dp_set_rng_key(t->dp, t->e->seed, (uint64_t)t->epoch,
                       t->train_opts.rank + b->index * t->p->micro_batch * world, world);
        net_loss_out_t out;
        if (dp_forward_backward(t->dp, b->images, b->labels, t->mix ? b->targets : NULL, b->n, b->n * n_micro,
                                smoothing, (float)dp_scale, &out, e))
            return -1;
        int32_t words[3];
        float loss = (float)out.loss_sum;
        memcpy(&words[0], &loss, sizeof loss);
        words[1] = (int32_t)out.correct1;
        words[2] = (int32_t)out.correct5;
        if (be->ops->upload(be, rec + REC_HEAD + 3 * m, words, sizeof words)) {
            *e = be->err;
            return -1;
        }
        ps->samples += b->n;
    }
    step_seg_t s = {.first = n_micro, .count = 0, .n_micro = n_micro, .rec = rec};
    return device_segment(t, &s, e);
}

/* One optimizer step: n_micro micro-batches, gradient reduction, unscale, optimizer,
 * enqueued without waiting for the device (except where DP or a host-staged
 * communicator must); the step's numbers are written to the device record rec.
 *
 * Single and DDP: the host writes what changes per step into backend memory (learning
 * rate, EMA decay, epoch; then each micro-batch's inputs, host_batch) and the device work
 * runs as segments (device_segment) through trainer_graph_run, which with
 * train.cuda_graphs records each segment key once and replays it (train_graph.c). With
 * the data on the GPU the whole step is one segment; with the CPU loader each micro-batch
 * is its own, since its images arrive from the host in between. A recorded step writes
 * its record into the fixed t->graph_rec, copied to rec after it. */
int trainer_step(trainer_t *t, int n_micro, double lr, int32_t *rec, pending_step_t *ps, err_t *e) {
    memset(ps, 0, sizeof *ps);
    ps->lr = lr;
    ps->n_micro = n_micro;
    backend_t *be = t->be;
    if (optim_set_lr(t->opt, lr, e) || (t->ema && ema_prepare(t->ema, t->step + 1, e))) return -1;
    if (t->dp) return dp_step(t, n_micro, rec, ps, e);
#ifdef RUNNER_HAVE_CUDA
    if (t->gpu_data && be->ops->upload(be, t->gpu_epoch, &(int64_t){t->epoch}, sizeof(int64_t))) {
        *e = be->err;
        return -1;
    }
#endif
    int words = REC_HEAD + 3 * n_micro;
    /* BN buffers from rank 0 first (not under SyncBN, nor after an EMA step already did) */
    bool fixed_rec = t->graphs;   /* (a failed recording may turn graphs off mid-step) */
    step_seg_t s = {.n_micro = n_micro, .bcast = t->ddp && !t->buffers_synced && !t->e->parallel.sync_bn,
                    .rec = fixed_rec ? t->graph_rec : rec};
    bool one_segment = t->graphs && t->gpu_data;   /* every micro-batch's inputs written first */
    int first = 0;
    for (int m = 0; m < n_micro; m++) {
        int nb = host_batch(t, m, ps, e);
        if (nb < 0) return -1;
        if (nb == 0) return err_set(e, ERR_RUNTIME, "internal: the epoch ended %d micro-batches early", n_micro - m);
        if (m < n_micro - 1 && nb != t->p->micro_batch)
            return err_set(e, ERR_RUNTIME, "internal: a short micro-batch (%d) inside a step", nb);
        ps->samples += nb;
        s.n_last = nb;
        if (one_segment && m < n_micro - 1) continue;
        s.first = first;
        s.count = m + 1 - first;
        graph_key_t k = {.kind = GRAPH_TRAIN, .first = s.first, .count = s.count, .n_micro = n_micro,
                         .n_last = m == n_micro - 1 ? nb : 0, .bcast = s.bcast};
        if (trainer_graph_run(t, &k, device_segment, &s, e)) return -1;
        first = m + 1;
    }
    t->buffers_synced = t->ema && t->ddp;
    if (fixed_rec && be->ops->copy(be, rec, t->graph_rec, (size_t)words * sizeof(int32_t))) {
        *e = be->err;
        return -1;
    }
    if (t->ddp) {
        ddp_timing_t tm;
        ddp_take_timing(t->ddp, &tm);
        bool ordered = ddp_is_ordered(t->ddp);
        ps->comm_exposed_s = ordered ? NAN : tm.exposed_s;   /* not measured in queue order */
        ps->comm_allreduce_s = ordered ? NAN : tm.allreduce_s;
        if (ddp_check(t->ddp, e)) return -1;
    }
    /* the watchdog of what the host no longer waits for (nccl): one mark per step */
    if (t->graphs && t->comm && comm_mark(t->comm, e)) return -1;
    return 0;
}

/* Reads back the window of steps issued since the last flush (one download, which waits
 * for the device), agrees with the other ranks on what happened (one all-reduce of the
 * stop flag and each step's loss sum, top-1 hits and samples: every rank then holds the
 * global numbers, so rank 0 logs what a single process would, every rank fails on the
 * same non-finite loss, and every rank stops after the same step when any got
 * SIGINT/SIGTERM/SIGUSR1), and hands one row per step to tracking. The window's wall time is
 * shared equally by its steps (a window of one step on the CPU: its own time). */
int trainer_flush_window(trainer_t *t, int *stop, err_t *e) {
    int np = t->n_pending, words = trainer_step_rec_words(t->p->grad_accum);
    backend_t *be = t->be;
    *stop = train_stop_kind();
    /* recorded steps' collectives: wait for them within parallel.timeout_s each (nccl),
     * before the download below waits without a bound */
    if (t->comm && comm_fence(t->comm, e)) return -1;
    if (be->ops->download(be, t->host_recs, t->step_recs, (size_t)np * words * sizeof(int32_t))) {
        *e = be->err;
        return -1;
    }
    double window_s = now_s() - t->window_t0;
    /* v[0]: some rank got SIGINT, v[1]: some rank got SIGTERM/SIGUSR1 (a scheduler may
     * signal only the launcher or only some ranks), then 3 numbers per step */
    float v[2 + 3 * TRAIN_MAX_WINDOW];
    v[0] = *stop == TRAINER_STOP_INTERRUPT ? 1.0f : 0.0f;
    v[1] = *stop == TRAINER_STOP_PREEMPT ? 1.0f : 0.0f;
    for (int i = 0; i < np; i++) {
        const int32_t *rec = t->host_recs + (size_t)i * words;
        double loss = 0;
        int64_t correct = 0;
        for (int m = 0; m < t->pending[i].n_micro; m++) {
            float l;
            memcpy(&l, &rec[REC_HEAD + 3 * m], sizeof l);
            loss += l;
            correct += rec[REC_HEAD + 1 + 3 * m];
        }
        v[2 + 3 * i] = (float)loss;
        v[3 + 3 * i] = (float)correct;
        v[4 + 3 * i] = (float)t->pending[i].samples;
        if (!t->comm) t->pending_loss[i] = loss;   /* keep the double sum without a peer */
    }
    if (t->comm) {
        if (trainer_allreduce_small(t, v, 2 + 3 * np, e)) return -1;
        *stop = v[0] > 0.0f ? TRAINER_STOP_INTERRUPT : v[1] > 0.0f ? TRAINER_STOP_PREEMPT : TRAINER_STOP_NONE;
        for (int i = 0; i < np; i++) t->pending_loss[i] = v[2 + 3 * i];
    }
    int64_t first_step = t->step - np + 1, window_images = 0;
    for (int i = 0; i < np; i++) {
        const pending_step_t *ps = &t->pending[i];
        const int32_t *rec = t->host_recs + (size_t)i * words;
        double loss_sum = t->pending_loss[i];
        int64_t correct = (int64_t)v[3 + 3 * i], samples = (int64_t)v[4 + 3 * i];
        float scale, norm;
        memcpy(&scale, &rec[0], sizeof scale);
        memcpy(&norm, &rec[2], sizeof norm);
        double dt = window_s / np;
        int64_t step = first_step + i;
        t->ep_loss_sum += loss_sum;
        t->ep_correct += correct;
        t->ep_samples += samples;
        double ips = dt > 0 ? (double)samples / dt : 0;
        window_images += samples;
        t->sum_step_s += dt;
        /* in queue order (recorded steps) the collectives' times are not measured: NaN */
        double exposed = isnan(ps->comm_exposed_s) ? 0 : ps->comm_exposed_s;
        if (!isnan(ps->comm_exposed_s)) t->sum_comm_exposed_s += ps->comm_exposed_s;
        if (!isnan(ps->comm_allreduce_s)) t->sum_comm_allreduce_s += ps->comm_allreduce_s;
        track_step_t row = {
            .step = step, .epoch = t->epoch + 1, .lr = ps->lr,
            .loss = samples ? loss_sum / (double)samples : NAN,
            .top1 = samples ? (double)correct / (double)samples : NAN,
            .images_per_second = ips, .step_seconds = dt,
            .compute_seconds = dt - ps->data_wait_s - exposed,
            .comm_exposed_seconds = t->ddp ? ps->comm_exposed_s : NAN,
            .data_wait_seconds = ps->data_wait_s,
            .loss_scale = t->scaler.enabled ? (double)scale : NAN,
            .grad_norm = t->e->optimizer.clip_grad_norm > 0 ? (double)norm : NAN};
        if (track_step(t->track, &row, e)) return -1;
        if (!isfinite(row.loss))
            return err_set(e, ERR_RUNTIME, "step %lld: the loss is %g; lower optimizer.lr or enable "
                           "amp loss scaling", (long long)step, row.loss);
    }
    /* the window's time for the steady-state rate (timing.csv, summary.json) */
    track_window_t tw = {.step = t->step, .steps = np, .epoch = t->epoch + 1, .since_start = t->seg_steps,
                         .images = window_images, .seconds = window_s};
    steady_add(&t->steady, tw.since_start, np, (double)window_images, window_s);
    t->seg_steps += np;
    if (track_window(t->track, &tw, e)) return -1;
    t->n_pending = 0;
    t->window_t0 = now_s();
    return 0;
}
