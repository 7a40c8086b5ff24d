/* train_step.c: one optimizer step of a rank's training run and the read-back of windows
 * of steps (train_internal.h): the next micro-batch (CPU loader, the copy stream, or
 * the augmentation kernel on the GPU), forward/loss/backward (replayed from a CUDA graph
 * where train.cuda_graphs records one), gradient reduction, unscale and the optimizer,
 * all enqueued without waiting for the device; then, once per window, the records read
 * back, agreed on with the other ranks and handed to tracking.
 * Not here: setup, the epoch loop, evaluation (train.c), checkpoints (train_state.c).
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

/* One training micro-batch. */
typedef struct train_batch {
    int n;
    const int32_t *labels;     /* host; NULL: already in net_labels on the device */
    const float *images;       /* host NHWC (CPU loader), NULL when already on the device */
    const float *targets;      /* mixup: host soft targets; NULL: in net_targets (or no mixup) */
    double data_wait_s;
} train_batch_t;

/* Fetches the next micro-batch of the epoch and, unless DP (which scatters host images
 * itself), puts it in the net's input buffer. Returns 1, 0 at the end of the epoch, -1. */
static int next_train_batch(trainer_t *t, train_batch_t *tb, err_t *e) {
    memset(tb, 0, sizeof *tb);
#ifdef RUNNER_HAVE_CUDA
    if (t->gpu_data) {
        const sampler_t *s = &t->gpu_sampler;
        int64_t first = t->gpu_batch * t->p->micro_batch;
        if (first >= s->num_samples) return 0;
        int n = (int)(s->num_samples - first < t->p->micro_batch ? s->num_samples - first : t->p->micro_batch);
        const loader_opts_t *lo = &t->train_opts;
        int c, h, w;
        dataset_shape(t->train_ds, &c, &h, &w);
        cuda_augment_desc_t d = {.c = c, .h = h, .w = w, .train = true,
                                 .random_crop = lo->augment.random_crop, .crop_size = lo->augment.crop_size,
                                 .crop_padding = lo->augment.crop_padding,
                                 .horizontal_flip = lo->augment.horizontal_flip,
                                 .rotation = lo->augment.rotation, .seed = lo->seed, .epoch = t->epoch};
        for (int k = 0; k < c && k < 4; k++) {
            d.mean[k] = lo->n_norm ? lo->mean[k] : 0.0f;
            d.std[k] = lo->n_norm ? lo->std[k] : 1.0f;
        }
        trainer_aug_desc(t, &d);
        backend_t *be = t->be;
        if (be->ops->upload(be, t->gpu_indices, s->indices + first, (size_t)n * sizeof(int64_t)) ||
            cuda_augment_batch(be, &d, t->gpu_pixels, dataset_size(t->train_ds), t->gpu_labels, t->gpu_indices, n,
                               t->mix ? DT_F32 : t->act_dt, t->mix ? (void *)t->gpu_mix_in : net_input(t->net),
                               net_labels(t->net))) {
            *e = be->err;
            return -1;
        }
        if (t->mix && trainer_aug_mix_gpu(t, n, t->gpu_batch, e)) return -1;
        t->gpu_batch++;
        tb->n = n;
        tb->labels = NULL;   /* gathered into net_labels by the kernel */
        return 1;
    }
#endif
    loader_batch_t *b;
    int r = loader_next(t->train_ld, &b, e);
    if (r <= 0) return r;
    tb->n = b->n;
    tb->labels = b->labels;
    tb->images = b->images;
    tb->targets = b->targets;
    tb->data_wait_s = b->data_wait_s;
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
        if (t->be->ops->copy(t->be, dst2, dev2, second_bytes)) {
            *e = t->be->err;
            return -1;
        }
        if (cuda_stager_release(t->stager, e)) return -1;
        tb->labels = NULL;   /* in net_labels */
        tb->targets = NULL;  /* in net_targets */
        return 1;
    }
#endif
    if (!t->dp && net_upload_input(t->net, b->images, b->n, e)) return -1;
    return 1;
}

/* The loss of the last forward: soft targets under mixup, else labels (host values when
 * given, else what the net's buffers hold). */
static int loss_async(trainer_t *t, const train_batch_t *b, bool host, float smoothing, float grad_scale,
                      const step_ctl_t *ctl, float *loss_sum, int32_t *correct, err_t *e) {
    if (t->mix) return net_loss_soft_async(t->net, host ? b->targets : NULL, grad_scale, ctl, loss_sum, correct, e);
    return net_loss_async(t->net, host ? b->labels : NULL, smoothing, grad_scale, ctl, loss_sum, correct, e);
}

/* Forward, loss and backward of one micro-batch (single/ddp, not DP), writing the loss
 * sum and hits to loss_dst (3 words: float loss, int32 top-1, int32 top-5).
 *
 * With train.cuda_graphs (CUDA, single mode) a micro-batch whose (size, gradient factor)
 * already ran once is recorded as a graph (backend graph_* ops) and every later one
 * replayed with one launch; the loss goes to the fixed t->graph_out and is copied to
 * loss_dst. A recording that fails (an op the driver cannot record) restores the host
 * state it touched, turns graphs off for the run with one console line, and the
 * micro-batch runs as usual. A stale graph (a workspace grew since) is recorded again. */
static int micro_batch(trainer_t *t, const train_batch_t *b, float grad_scale, float smoothing,
                       int32_t *loss_dst, err_t *e) {
    backend_t *be = t->be;
    net_t *n = t->net;
    const void *x = net_input(n);
    const step_ctl_t *ctl = optim_ctl(t->opt);
    if (t->graphs) {
        if ((b->labels && be->ops->upload(be, net_labels(n), b->labels, (size_t)b->n * sizeof(int32_t))) ||
            (t->mix && b->targets &&
             be->ops->upload(be, net_targets(n), b->targets,
                             (size_t)b->n * t->train_opts.mixup.classes * sizeof(float)))) {
            *e = be->err;
            return -1;
        }
        bool same = t->graph_batch == b->n && t->graph_scale == grad_scale;
        if (t->graph && !same) {
            be->ops->graph_free(be, t->graph);
            t->graph = NULL;
        }
        int r = t->graph ? be->ops->graph_launch(be, t->graph) : 1;
        if (r < 0) {
            *e = be->err;
            return -1;
        }
        if (r == 1 && t->graph) {   /* stale */
            be->ops->graph_free(be, t->graph);
            t->graph = NULL;
        }
        if (r == 1 && same && t->graph_ran_once) {
            /* record; a failure anywhere inside leaves the run on normal launches */
            int nc = net_num_counters(n);
            int64_t *saved = malloc((size_t)(nc ? nc : 1) * sizeof *saved);
            if (!saved) return err_set(e, ERR_RUNTIME, "out of memory");
            memcpy(saved, net_counters(n), (size_t)nc * sizeof *saved);
            err_t ce = {0};
            void *g = NULL;
            int rc = be->ops->graph_capture_begin(be);
            if (rc == 0) {
                rc = net_forward(n, x, b->n, true, NULL, &ce) ||
                     loss_async(t, b, false, smoothing, grad_scale, ctl, t->graph_out, (int32_t *)t->graph_out + 1, &ce) ||
                     net_backward(n, NULL, &ce);
                int end = be->ops->graph_capture_end(be, &g);
                if (!rc) rc = end;
            }
            memcpy(net_counters(n), saved, (size_t)nc * sizeof *saved);
            free(saved);
            if (rc == 0 && g) {
                t->graph = g;
                r = be->ops->graph_launch(be, g);
                if (r < 0) {
                    *e = be->err;
                    return -1;
                }
            } else {
                char line[sizeof ce.msg + 128];
                snprintf(line, sizeof line, "train.cuda_graphs: recording a micro-batch failed, running without "
                         "graphs: %s", ce.code ? ce.msg : be->err.msg);
                track_console(t->track, line);
                t->graphs = false;
                r = 1;
            }
        }
        if (r == 0) {
            net_graph_replayed(n, x, b->n);
            if (be->ops->copy(be, loss_dst, t->graph_out, 3 * sizeof(int32_t))) {
                *e = be->err;
                return -1;
            }
            return 0;
        }
        t->graph_batch = b->n;
        t->graph_scale = grad_scale;
        t->graph_ran_once = true;
    }
    if (net_forward(n, x, b->n, true, &t->hooks, e) ||
        loss_async(t, b, true, smoothing, grad_scale, ctl, (float *)loss_dst, loss_dst + 1, e) ||
        net_backward(n, &t->hooks, e)) {
        /* a failed SyncBN hook returns -1 without an err_t: its reason is in ddp */
        const err_t *he = t->ddp ? ddp_last_error(t->ddp) : NULL;
        if (he && he->code) err_wrap(e, "%s", he->msg);
        return -1;
    }
    return 0;
}

/* One optimizer step: n_micro micro-batches, gradient reduction, unscale, optimizer,
 * enqueued without waiting for the device (except where DP or a host-staged
 * communicator must); the step's numbers are written to the device record rec. */
int trainer_step(trainer_t *t, int n_micro, double lr, int32_t *rec, pending_step_t *ps, err_t *e) {
    memset(ps, 0, sizeof *ps);
    ps->lr = lr;
    ps->n_micro = n_micro;
    backend_t *be = t->be;
    if (net_zero_grads(t->net, e)) return -1;
    if (t->ddp && !t->buffers_synced &&
        ddp_sync_buffers(t->ddp, net_buffers(t->net), (int64_t)net_num_buffers(t->net), e))
        return -1;
    t->buffers_synced = false;
    float smoothing = (float)t->e->train.label_smoothing;
    double dp_scale = 1.0;
    if (t->dp && loss_scaler_scale(&t->scaler, &dp_scale, e)) return -1;
    for (int m = 0; m < n_micro; m++) {
        train_batch_t b;
        int r = next_train_batch(t, &b, e);
        if (r < 0) return -1;
        if (r == 0) return err_set(e, ERR_RUNTIME, "internal: the epoch ended %d micro-batches early", n_micro - m);
        ps->data_wait_s += b.data_wait_s;
        if (t->dp) {
            net_loss_out_t out;
            if (dp_forward_backward(t->dp, b.images, b.labels, t->mix ? b.targets : NULL, b.n, b.n * n_micro, smoothing,
                                    (float)dp_scale, &out, e))
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
        } else {
            float grad_scale = (float)(1.0 / ((double)b.n * n_micro));
            if (t->ddp) {
                ddp_set_sync(t->ddp, m == n_micro - 1);
                ddp_begin_backward(t->ddp);
            }
            if (micro_batch(t, &b, grad_scale, smoothing, rec + REC_HEAD + 3 * m, e)) return -1;
            if (t->ddp && ddp_finish_step(t->ddp, e)) return -1;
        }
        ps->samples += b.n;
    }
    if (t->ddp) {
        ddp_timing_t tm;
        ddp_take_timing(t->ddp, &tm);
        ps->comm_exposed_s = tm.exposed_s;
        ps->comm_allreduce_s = tm.allreduce_s;
    }
    /* unscale + inf check, the record of the scale used and the verdict, then the update
     * (skipped on the device after an overflow) and the step-control advance */
    if (loss_scaler_unscale(&t->scaler, net_grads(t->net), (int64_t)net_num_params(t->net), e)) return -1;
    if (be->ops->copy(be, rec, optim_ctl(t->opt), 2 * sizeof(int32_t))) {
        *e = be->err;
        return -1;
    }
    /* clip the all-reduced, unscaled gradients (not on an overflowed step); the norm goes
     * to the record like the loss */
    double clip = t->e->optimizer.clip_grad_norm;
    if (clip > 0 && optim_clip_grad_norm(t->opt, clip, (float *)(rec + 2), e)) return -1;
    if (optim_step(t->opt, lr, e)) return -1;
    if (!t->ema) return 0;
    /* The EMA must be identical on every rank, but each DDP rank has updated its BN
     * buffers from its own batch; they all take rank 0's at the next step's broadcast, so
     * that broadcast moves here, before the average reads them (same values, one
     * broadcast per step as before). The update counts every step, as timm's train.py
     * counts num_updates also when GradScaler skipped the optimizer. */
    if (t->ddp && ddp_sync_buffers(t->ddp, net_buffers(t->net), (int64_t)net_num_buffers(t->net), e)) return -1;
    t->buffers_synced = t->ddp != NULL;
    return ema_update(t->ema, t->step + 1, e);
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
        t->sum_comm_exposed_s += ps->comm_exposed_s;
        t->sum_comm_allreduce_s += ps->comm_allreduce_s;
        track_step_t row = {
            .step = step, .epoch = t->epoch + 1, .lr = ps->lr,
            .loss = samples ? loss_sum / (double)samples : NAN,
            .top1 = samples ? (double)correct / (double)samples : NAN,
            .images_per_second = ips, .step_seconds = dt,
            .compute_seconds = dt - ps->data_wait_s - ps->comm_exposed_s,
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
