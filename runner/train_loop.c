/* train_loop.c: the epoch loop of one rank's run (train_internal.h): steps, window
 * read-backs, evaluation of the weights and of their EMA, the metrics row, the
 * checkpoint cadence (epoch, best, every N steps, on a stop), early stopping, and the
 * ways a run stops early: SIGINT (exit 130), SIGTERM/SIGUSR1 preemption (exit 75),
 * train.max_steps, train.early_stopping.
 * Not here: setup and teardown (train.c), one step (train_step.c), what a checkpoint
 * holds (train_state.c).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runner/train_internal.h"

/* ------------------------------------------------------------------ evaluation */

/* One pass over this rank's validation shard with the net's current weights; the sums
 * are all-reduced, so every rank gets the global loss, top-1 and top-5. */
static int eval_pass(trainer_t *t, double out[3], err_t *e) {
    if (loader_start_epoch(t->val_ld, 0, 0, e)) return -1;
    float sums[4] = {0, 0, 0, 0};   /* loss, top1, top5, count */
    double loss = 0;
    int64_t c1 = 0, c5 = 0, n = 0;
    loader_batch_t *b;
    int r;
    int64_t batches = loader_num_batches(t->val_ld), done = 0;
    int ranks = t->ddp_mode ? t->env->world_size : 1;
    track_eval_progress(t->track, t->epoch + 1, 0, batches, 0);
    while ((r = loader_next(t->val_ld, &b, e)) == 1) {
        net_loss_out_t lo;
        if (net_upload_input(t->net, b->images, b->n, e) || trainer_upload_labels(t, b->labels, b->n, e) ||
            trainer_eval_batch(t, b->n, &lo, e))
            return -1;
        loss += lo.loss_sum;
        c1 += lo.correct1;
        c5 += lo.correct5;
        n += b->n;
        track_eval_progress(t->track, t->epoch + 1, ++done, batches, n * ranks);   /* rank 0's share x ranks */
    }
    if (r < 0) return -1;
    sums[0] = (float)loss; sums[1] = (float)c1; sums[2] = (float)c5; sums[3] = (float)n;
    if (trainer_allreduce_small(t, sums, 4, e)) return -1;
    if (t->comm) { loss = sums[0]; c1 = (int64_t)sums[1]; c5 = (int64_t)sums[2]; n = (int64_t)sums[3]; }
    if (n <= 0) return err_set(e, ERR_RUNTIME, "evaluation saw no samples");
    out[0] = loss / (double)n;
    out[1] = (double)c1 / (double)n;
    out[2] = (double)c5 / (double)n;
    return 0;
}

/* Evaluates the weights and, with train.ema, the averaged weights (swapped into the net
 * for the pass and back, so nothing the step uses changes address). */
static int evaluate(trainer_t *t, err_t *e) {
    if (t->ddp && ddp_sync_buffers(t->ddp, net_buffers(t->net), (int64_t)net_num_buffers(t->net), e)) return -1;
    /* in queue order (recorded steps, nccl) nothing waited for that broadcast: wait here,
     * within parallel.timeout_s, before the evaluation's downloads wait without a bound */
    if (t->graphs && t->comm && (comm_mark(t->comm, e) || comm_fence(t->comm, e))) return -1;
    double v[3];
    if (eval_pass(t, v, e)) return -1;
    t->val_loss = v[0]; t->val_top1 = v[1]; t->val_top5 = v[2];
    if (t->ema) {
        if (ema_swap(t->ema, e)) return -1;
        int rc = eval_pass(t, v, e);
        if (ema_swap(t->ema, rc ? &(err_t){0} : e) || rc) return -1;
        t->val_loss_ema = v[0]; t->val_top1_ema = v[1]; t->val_top5_ema = v[2];
    }
    t->evaluated = true;
    return 0;
}

/* The value of metric m after this epoch's evaluation (NaN when not evaluated). */
static double metric_value(const trainer_t *t, metric_t m) {
    switch (m) {
    case METRIC_VAL_LOSS: return t->val_loss;
    case METRIC_VAL_TOP1: return t->val_top1;
    case METRIC_VAL_TOP5: return t->val_top5;
    case METRIC_VAL_LOSS_EMA: return t->val_loss_ema;
    case METRIC_VAL_TOP1_EMA: return t->val_top1_ema;
    case METRIC_VAL_TOP5_EMA: return t->val_top5_ema;
    case METRIC_TRAIN_LOSS: return t->train_loss;
    case METRIC_TRAIN_TOP1: return t->train_top1;
    default: return NAN;
    }
}

void trainer_note(const trainer_t *t, const char *fmt, ...) {
    if (t->rank0 || !t->ddp_mode) return;
    va_list ap;
    va_start(ap, fmt);
    printf("[rank %d/%d] ", t->env->rank, t->env->world_size);
    vprintf(fmt, ap);
    putchar('\n');
    fflush(stdout);
    va_end(ap);
}

/* ------------------------------------------------------------------ stopping */

/* After a stop signal: rank 0 writes last.ckpt where the run is (and waits for it to be
 * on disk), every rank waits for that, says so, and the exit code tells a scheduler what
 * happened. */
static int stop_now(trainer_t *t, int kind, bool write, err_t *e) {
    char path[CFG_PATH + 64], line[CFG_PATH + 300];
    if (trainer_skipped_sync(t, e)) return -1;   /* the list as complete as the checkpoint */
    if (t->rank0) {
        snprintf(path, sizeof path, "%s/checkpoints/last.ckpt", t->run_dir);
        if (write && trainer_checkpoint(t, TRAINER_CKPT_LAST, false, e)) return -1;
        if (ckpt_writer_wait(t->writer, e)) return -1;
        if (kind == TRAINER_STOP_PREEMPT)
            snprintf(line, sizeof line, "preempted (SIGTERM/SIGUSR1) at step %lld: checkpoint written to %s; "
                     "exit %d: run the same command again to continue", (long long)t->step, path, ERR_PREEMPTED);
        else
            snprintf(line, sizeof line, "interrupted at step %lld: checkpoint written to %s", (long long)t->step,
                     path);
        track_console(t->track, line);
    }
    /* no rank exits before the checkpoint is on disk: torchrun, and srun with
     * --kill-on-bad-exit, kill the remaining ranks as soon as one exits non-zero */
    if (t->store && store_barrier(t->store, "stopped", e)) return -1;
    trainer_note(t, "%s at step %lld with every rank", kind == TRAINER_STOP_PREEMPT ? "preempted" : "interrupted",
                 (long long)t->step);
    return kind == TRAINER_STOP_PREEMPT ? ERR_PREEMPTED : ERR_INTERRUPT;
}

/* ------------------------------------------------------------------ the loop */

/* End of an epoch (or of max_steps): evaluation, best weights, early stopping, the
 * metrics row, the epoch's checkpoint. cut: train.max_steps ended the run inside this
 * epoch; last.ckpt is then written after the evaluation and before the epoch sums are
 * reset (a resume with a larger max_steps continues the epoch), and is best.ckpt when that
 * evaluation improved. Returns 1 when a checkpoint was written. */
static int finish_epoch(trainer_t *t, double ep_s, bool epoch_done, bool cut, err_t *e) {
    const plan_t *p = t->p;
    t->train_loss = t->ep_samples ? t->ep_loss_sum / (double)t->ep_samples : NAN;
    t->train_top1 = t->ep_samples ? (double)t->ep_correct / (double)t->ep_samples : NAN;
    bool last = t->step >= p->total_steps;
    bool eval_now = last || ((t->epoch + 1) % t->e->train.eval_every == 0);
    if (eval_now && evaluate(t, e)) return -1;   /* else the last evaluation's numbers stay */
    if (trainer_skipped_sync(t, e)) return -1;   /* before any checkpoint below */
    int ep = t->epoch + 1;
    if (eval_now && t->val_top1 > t->best_val_top1) { t->best_val_top1 = t->val_top1; t->best_epoch = ep; }
    if (eval_now && t->ema && t->val_top1_ema > t->best_val_top1_ema) t->best_val_top1_ema = t->val_top1_ema;
    /* best.ckpt follows checkpoint.best_metric (losses: lower is better) */
    metric_t bm = t->e->checkpoint.best_metric;
    double bv = metric_value(t, bm);
    bool improved = eval_now && isfinite(bv) &&
                    (t->best_value_epoch == 0 || (metric_minimised(bm) ? bv < t->best_value : bv > t->best_value));
    if (improved) { t->best_value = bv; t->best_value_epoch = ep; }
    /* early stopping looks at evaluated, complete epochs, on every rank alike (the
     * numbers are global) */
    bool stop_now_early = eval_now && epoch_done && early_stop_update(&t->stop, metric_value(t, t->stop.metric), ep);
    if (epoch_done) { t->epoch_seconds_sum += ep_s; t->epochs_timed++; }
    size_t peak = t->be->ops->peak_memory ? t->be->ops->peak_memory(t->be) : 0;
    track_epoch_t er = {
        .epoch = ep, .step = t->step,
        .lr = schedule_lr(&t->sched, t->step > 0 ? t->step - 1 : 0, p->steps_per_epoch),
        .train_loss = t->train_loss, .train_top1 = t->train_top1,
        .val_loss = eval_now ? t->val_loss : NAN, .val_top1 = eval_now ? t->val_top1 : NAN,
        .val_top5 = eval_now ? t->val_top5 : NAN, .val_loss_ema = eval_now ? t->val_loss_ema : NAN,
        .val_top1_ema = eval_now ? t->val_top1_ema : NAN, .val_top5_ema = eval_now ? t->val_top5_ema : NAN,
        .epoch_seconds = ep_s, .images_per_second = ep_s > 0 ? (double)t->ep_samples / ep_s : 0,
        .peak_memory_bytes = (int64_t)peak};
    if (track_epoch(t->track, &er, e)) return -1;
    if (stop_now_early && t->rank0) track_console(t->track, t->stop.reason);
    trainer_note(t, "epoch %d done at step %lld: train_loss %.4f (all ranks)", ep, (long long)t->step,
                 t->train_loss);
    if (cut) {
        if (t->rank0 && (trainer_checkpoint(t, TRAINER_CKPT_LAST, improved, e) || ckpt_writer_wait(t->writer, e)))
            return -1;
        if (t->rank0) {
            char line[CFG_PATH + 128];
            snprintf(line, sizeof line, "train.max_steps reached at step %lld: checkpoint written to "
                     "%s/checkpoints/last.ckpt", (long long)t->step, t->run_dir);
            track_console(t->track, line);
        }
        t->start_batch = 0;
        t->ep_loss_sum = 0; t->ep_correct = 0; t->ep_samples = 0; t->ep_seconds = 0;
        return 1;
    }
    t->ep_loss_sum = 0; t->ep_correct = 0; t->ep_samples = 0; t->ep_seconds = 0;
    int every = t->e->checkpoint.every_epochs;   /* 0: only last/best */
    bool final = last || t->stop.stopped;
    if (!(t->rank0 && epoch_done && (final || (every > 0 && ep % every == 0) || improved))) return 0;
    t->start_batch = 0;
    if (trainer_checkpoint(t, TRAINER_CKPT_EPOCH, improved, e)) return -1;
    return 1;
}

/* Runs epochs until total_steps (or early stopping); returns 0 (done), 130 (SIGINT) or
 * 75 (SIGTERM/SIGUSR1), -1 on error. */
int trainer_loop(trainer_t *t, err_t *e) {
    const plan_t *p = t->p;
    int A = p->grad_accum, every_steps = t->e->checkpoint.every_steps;
    while (t->step < p->total_steps && !t->stop.stopped) {
        t->epoch = (int)(t->step / p->steps_per_epoch);
        int64_t epoch_first_step = (int64_t)t->epoch * p->steps_per_epoch;
        if (trainer_start_epoch(t, e)) return -1;
        int64_t batch = t->start_batch;
        t->start_batch = 0;
        double ep_t0 = now_s() - t->ep_seconds;
        int64_t epoch_end = epoch_first_step + p->steps_per_epoch;
        if (epoch_end > p->total_steps) epoch_end = p->total_steps;
        int stopping = 0;   /* a stop that arrived with the epoch's last step */
        bool cut = false;   /* train.max_steps ends the run inside this epoch */
        t->n_pending = 0;
        t->seg_steps = 0;   /* the first steps of each epoch (and of a resume) are warm-up */
        t->window_t0 = now_s();
        while (t->step < epoch_end) {
            int n_micro = (int)(p->batches_per_epoch - batch < A ? p->batches_per_epoch - batch : A);
            double lr = schedule_lr(&t->sched, t->step, p->steps_per_epoch);
            int32_t *rec = t->step_recs + (size_t)t->n_pending * trainer_step_rec_words(A);
            if (trainer_step(t, n_micro, lr, rec, &t->pending[t->n_pending], e)) return -1;
            t->n_pending++;
            batch += n_micro;
            t->step++;
            /* a step checkpoint is taken at a window end, so every step before it is read
             * back and agreed on */
            bool step_ckpt = every_steps > 0 && t->step % every_steps == 0;
            if (t->n_pending < t->window && t->step < epoch_end && !step_ckpt) continue;
            int stop;
            if (trainer_flush_window(t, &stop, e)) return -1;   /* numbers now over all ranks */
            bool epoch_last = batch >= p->batches_per_epoch;
            if (stop && epoch_last) {
                /* stopped by the epoch's last step: finish the epoch first (evaluation,
                 * metrics row, epoch checkpoint with the epoch sums reset), or its row
                 * would never be written and resume would count its sums into the next */
                stopping = stop;
                break;
            }
            bool midway_max = t->step >= p->total_steps && t->step < (int64_t)t->e->train.epochs * p->steps_per_epoch;
            if (stop || midway_max || (step_ckpt && !epoch_last)) {
                /* save exactly where we are: the epoch restarts at this micro-batch */
                t->ep_seconds = now_s() - ep_t0;
                t->start_batch = epoch_last ? 0 : batch;
                if (stop) return stop_now(t, stop, true, e);
                if (midway_max) {   /* checkpointed after the evaluation (finish_epoch) */
                    cut = true;
                    break;
                }
                if (trainer_skipped_sync(t, e) || (t->rank0 && trainer_checkpoint(t, TRAINER_CKPT_STEP, false, e)))
                    return -1;
                t->start_batch = 0;
                t->window_t0 = now_s();   /* the checkpoint's time is no step's */
            }
        }
        /* end of epoch (or of max_steps) */
        double ep_s = now_s() - ep_t0;
        bool epoch_done = t->step == epoch_end && batch >= p->batches_per_epoch;
        int wrote = finish_epoch(t, ep_s, epoch_done, cut, e);
        if (wrote < 0) return -1;
        if (!wrote && t->rank0 && epoch_done && every_steps > 0 && t->step % every_steps == 0 &&
            trainer_checkpoint(t, TRAINER_CKPT_STEP, false, e))
            return -1;
        /* a stop that came with the run's last step (or the step early stopping ended
         * the run at) leaves nothing to continue: the run completes */
        if (stopping && t->step < p->total_steps && !t->stop.stopped) return stop_now(t, stopping, !wrote, e);
    }
    return 0;
}
