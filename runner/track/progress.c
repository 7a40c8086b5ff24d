/* progress.c: the console progress display. On a terminal one line is redrawn with \r
 * every step (epoch, step/steps, loss, images/s, ETA) and during evaluation (epoch,
 * batch/batches, images/s, ETA); elsewhere (a log file, a pipe) the step text is printed
 * as a plain line every print_every steps and evaluation prints nothing. Epoch summaries
 * and console lines are printed on their own lines, after a redrawn step line (which
 * stays) or an evaluation line (which is cleared).
 *
 * In DDP, rank 0 writes to a pipe the launcher copies to the terminal and to
 * logs/rank0.log (TRACK_PROGRESS_TEE): the redrawn lines are framed for the terminal and
 * the plain periodic lines for the log (track.h TRACK_TEE_*), so the terminal looks as in
 * single mode and the log as when not on a terminal.
 *
 * Not here: colours or cursor movement beyond \r (logs stay readable when captured).
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "runner/track/track_impl.h"

enum { LINE_WIDTH = 78 };

void track_progress_init(track_progress_sink_t *p, FILE *out, track_progress_t mode,
                         int print_every, int64_t total_steps, int total_epochs) {
    memset(p, 0, sizeof *p);
    p->out = out;
    p->off = mode == TRACK_PROGRESS_OFF;
    p->tee = mode == TRACK_PROGRESS_TEE;
    p->tty = p->tee || mode == TRACK_PROGRESS_TTY || (mode == TRACK_PROGRESS_AUTO && isatty(fileno(out)));
    p->print_every = print_every > 0 ? print_every : 1;
    p->total_steps = total_steps;
    p->total_epochs = total_epochs;
    p->first_step = -1;
}

/* Writes "1h02m03s", "4m05s" or "6s"; "?" for a negative or non-finite value. */
void track_format_eta(double s, char *buf, size_t len) {
    if (!(s >= 0) || !isfinite(s)) { snprintf(buf, len, "?"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, len, "%ldh%02ldm%02lds", t / 3600, (t / 60) % 60, t % 60);
    else if (t >= 60) snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, len, "%lds", t);
}

/* Opens / closes a frame of tee output for one destination (nothing outside tee mode). */
static void frame(track_progress_sink_t *p, char dest) {
    if (p->tee) fprintf(p->out, "%c%c", TRACK_TEE_START, dest);
}
static void frame_end(track_progress_sink_t *p) {
    if (p->tee) fputc(TRACK_TEE_END, p->out);
}

/* Redraws the terminal line with text. */
static void redraw(track_progress_sink_t *p, const char *text) {
    frame(p, TRACK_TEE_TERMINAL);
    fprintf(p->out, "\r%-*s", LINE_WIDTH, text);
    frame_end(p);
    p->line_open = true;
}

/* Ends a redrawn line so the next output starts on a fresh line: a step line stays on
 * screen, an evaluation line is wiped (its epoch line says the same, finished). */
static void progress_break(track_progress_sink_t *p) {
    if (!p->line_open) return;
    frame(p, TRACK_TEE_TERMINAL);
    if (p->eval_open) fprintf(p->out, "\r%*s\r", LINE_WIDTH, "");
    else fputc('\n', p->out);
    frame_end(p);
    p->line_open = false;
    p->eval_open = false;
}

/* Shows one step: redrawn on a terminal, a plain line every print_every steps otherwise
 * (in tee mode both, each framed for its destination). */
void track_progress_step(track_progress_sink_t *p, const track_step_t *r, double now) {
    if (p->off) return;
    if (p->first_step < 0) { p->first_step = r->step; p->first_time = now; }
    bool last = p->total_steps > 0 && r->step >= p->total_steps;
    bool periodic = r->step % p->print_every == 0 || last;
    if (!p->tty && !periodic) return;

    char eta[32] = "?";
    if (p->total_steps > 0 && r->step > p->first_step) {
        double per = (now - p->first_time) / (double)(r->step - p->first_step);
        track_format_eta(per * (double)(p->total_steps - r->step), eta, sizeof eta);
    }
    char ep[32], st[48];
    if (p->total_epochs > 0) snprintf(ep, sizeof ep, "%d/%d", r->epoch, p->total_epochs);
    else snprintf(ep, sizeof ep, "%d", r->epoch);
    if (p->total_steps > 0) snprintf(st, sizeof st, "%" PRId64 "/%" PRId64, r->step, p->total_steps);
    else snprintf(st, sizeof st, "%" PRId64, r->step);
    char line[256];
    snprintf(line, sizeof line, "epoch %s  step %s  loss %.4f  %.1f img/s  ETA %s",
             ep, st, r->loss, r->images_per_second, eta);
    if (p->eval_open) progress_break(p);
    if (p->tee && periodic) {
        frame(p, TRACK_TEE_LOG);
        fprintf(p->out, "%s\n", line);
        frame_end(p);
    }
    if (p->tty) redraw(p, line);
    else fprintf(p->out, "%s\n", line);
    fflush(p->out);
}

void track_progress_eval(track_progress_sink_t *p, int epoch, int64_t batch, int64_t batches, int64_t images,
                         double now) {
    if (p->off || !p->tty) return;
    if (batch == 0 || batch < p->eval_batch) {   /* a new evaluation starts */
        p->eval_t0 = now;
        p->eval_batch = 0;
        if (batch == 0) return;
    }
    bool done = batch >= batches;
    /* at most ~10 redraws a second: evaluation batches can be much faster than steps */
    if (!done && batch > 1 && now - p->last_draw < 0.1) { p->eval_batch = batch; return; }
    p->eval_batch = batch;
    p->last_draw = now;
    double dt = now - p->eval_t0;
    char eta[32] = "?", ep[32];
    if (batch > 0 && dt > 0) track_format_eta(dt / (double)batch * (double)(batches - batch), eta, sizeof eta);
    if (p->total_epochs > 0) snprintf(ep, sizeof ep, "%d/%d", epoch, p->total_epochs);
    else snprintf(ep, sizeof ep, "%d", epoch);
    char line[256];
    snprintf(line, sizeof line, "epoch %s  evaluating %" PRId64 "/%" PRId64 "  %.1f img/s  ETA %s", ep, batch,
             batches, dt > 0 ? (double)images / dt : 0.0, eta);
    if (p->line_open && !p->eval_open) progress_break(p);   /* keep the last step line */
    redraw(p, line);
    p->eval_open = true;
    fflush(p->out);
}

/* Prints the epoch summary on its own line. */
void track_progress_epoch(track_progress_sink_t *p, const track_epoch_t *r) {
    if (p->off) return;
    progress_break(p);
    char val[160] = "";
    if (!isnan(r->val_top1))
        snprintf(val, sizeof val, "  val_loss %.4f  val_top1 %.4f  val_top5 %.4f",
                 r->val_loss, r->val_top1, r->val_top5);
    if (!isnan(r->val_top1_ema)) {
        size_t l = strlen(val);
        snprintf(val + l, sizeof val - l, "  val_top1_ema %.4f", r->val_top1_ema);
    }
    fprintf(p->out, "epoch %d done  step %" PRId64 "  train_loss %.4f  train_top1 %.4f%s  "
            "%.1fs  %.1f img/s\n", r->epoch, r->step, r->train_loss, r->train_top1, val,
            r->epoch_seconds, r->images_per_second);
    fflush(p->out);
}

void track_progress_line(track_progress_sink_t *p, const char *line) {
    if (p->off) return;
    progress_break(p);
    fprintf(p->out, "%s\n", line);
    fflush(p->out);
}

void track_progress_finish(track_progress_sink_t *p) {
    if (!p->out) return;
    progress_break(p);
    fflush(p->out);
}
