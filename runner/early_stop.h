/* early_stop.h: early stopping on an epoch metric, as PyTorch Lightning's EarlyStopping
 * callback decides it (monitor, mode, patience, min_delta, check_finite).
 *
 * Each evaluation reports the watched value. It counts as an improvement when it beats
 * the best so far by more than min_delta (minimised: value < best - min_delta; maximised:
 * value > best + min_delta; the first finite value always does); an improvement makes it
 * the best and resets the wait counter, anything else adds one. The run stops when the
 * counter reaches patience, or at once when the value is not finite. Mode auto minimises
 * losses and maximises top-k accuracies. The state is a plain value, saved in checkpoints
 * so a resumed run continues counting where it stopped.
 */
#ifndef RUNNER_EARLY_STOP_H
#define RUNNER_EARLY_STOP_H

#include <stdbool.h>

#include "runner/config.h"

typedef struct early_stop {
    metric_t metric;     /* METRIC_NONE: off */
    bool minimise;
    int patience;
    double min_delta;
    double best;         /* +inf / -inf before the first evaluation */
    int best_epoch;      /* 1-based, 0 before the first improvement */
    int wait;            /* evaluations since the last improvement */
    bool stopped;
    char reason[256];    /* why it stopped (for summary.json and the console) */
} early_stop_t;

/* From train.early_stopping; off when metric is METRIC_NONE. */
void early_stop_init(early_stop_t *s, metric_t metric, stop_mode_t mode, int patience, double min_delta);

/* One evaluation of the metric at epoch (1-based). Returns true when training should stop
 * now (s->reason says why). */
bool early_stop_update(early_stop_t *s, double value, int epoch);

#endif
