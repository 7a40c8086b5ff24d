/* progress.c: the console progress display. On a terminal one line is redrawn with \r
 * every step (epoch, step/steps, loss, images/s, ETA); elsewhere (a log file, a pipe) the
 * same text is printed as a plain line every print_every steps. Epoch summaries and
 * console lines are printed on their own lines, clearing a redrawn line first.
 *
 * Not here: colours or cursor movement beyond \r (logs stay readable when captured).
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "runner/track/track_impl.h"

void track_progress_init(track_progress_sink_t *p, FILE *out, track_progress_t mode,
                         int print_every, int64_t total_steps, int total_epochs) {
    memset(p, 0, sizeof *p);
    p->out = out;
    p->off = mode == TRACK_PROGRESS_OFF;
    p->tty = mode == TRACK_PROGRESS_TTY || (mode == TRACK_PROGRESS_AUTO && isatty(fileno(out)));
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

/* Clears a redrawn line so the next output starts on a fresh line. */
static void progress_break(track_progress_sink_t *p) {
    if (p->line_open) {
        fputc('\n', p->out);
        p->line_open = false;
    }
}

/* Shows one step: redrawn on a terminal, a plain line every print_every steps otherwise. */
void track_progress_step(track_progress_sink_t *p, const track_step_t *r, double now) {
    if (p->off) return;
    if (p->first_step < 0) { p->first_step = r->step; p->first_time = now; }
    bool last = p->total_steps > 0 && r->step >= p->total_steps;
    if (!p->tty && r->step % p->print_every != 0 && !last) return;

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
    if (p->tty) {
        fprintf(p->out, "\r%-78s", line);
        p->line_open = true;
    } else {
        fprintf(p->out, "%s\n", line);
    }
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
