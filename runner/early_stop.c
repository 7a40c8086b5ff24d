/* early_stop.c: Lightning's EarlyStopping decision (early_stop.h). */
#include "runner/early_stop.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void early_stop_init(early_stop_t *s, metric_t metric, stop_mode_t mode, int patience, double min_delta) {
    memset(s, 0, sizeof *s);
    s->metric = metric;
    s->minimise = mode == STOP_MODE_MIN || (mode == STOP_MODE_AUTO && metric_minimised(metric));
    s->patience = patience;
    s->min_delta = min_delta;
    s->best = s->minimise ? INFINITY : -INFINITY;
}

bool early_stop_update(early_stop_t *s, double value, int epoch) {
    if (s->metric == METRIC_NONE || s->stopped) return s->stopped;
    const char *name = metric_name(s->metric);
    if (!isfinite(value)) {
        s->stopped = true;
        snprintf(s->reason, sizeof s->reason, "early stopping: %s = %g at epoch %d is not finite (best %.6g at "
                 "epoch %d)", name, value, epoch, s->best, s->best_epoch);
        return true;
    }
    bool better = s->minimise ? value < s->best - s->min_delta : value > s->best + s->min_delta;
    if (better) {
        s->best = value;
        s->best_epoch = epoch;
        s->wait = 0;
        return false;
    }
    if (++s->wait < s->patience) return false;
    s->stopped = true;
    snprintf(s->reason, sizeof s->reason, "early stopping: %s did not %s by more than %g in the last %d "
             "evaluation%s (best %.6g at epoch %d)", name, s->minimise ? "decrease" : "increase", s->min_delta,
             s->patience, s->patience == 1 ? "" : "s", s->best, s->best_epoch);
    return true;
}
