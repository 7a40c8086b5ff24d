/* schedule.h: learning rate as a function of the optimizer step.
 *
 * With t = optimizer steps taken so far (0 for the first step), S = steps_per_epoch,
 * W = round(warmup_epochs * S) warmup steps, T = epochs * S total steps, base = base_lr:
 *
 *   t < W (warmup, linear from 0, per step):  lr = base * (t + 1) / W
 *   otherwise, by kind:
 *     constant:   lr = base
 *     multistep:  lr = base * gamma^k,  k = #{ milestones m : t >= m * S }
 *     cosine:     p = (t - W) / (T - W) clamped to [0, 1]   (p = 1 if T <= W)
 *                 lr = min_lr + (base - min_lr) * (1 + cos(pi * p)) / 2
 *
 * So the LR at the end of warmup (t = W - 1) is exactly base, a multistep milestone at
 * epoch m takes effect from its first step t = m * S, and cosine reaches min_lr at the
 * last step of training only in the limit (t = T gives min_lr). Pure function, no state.
 */
#ifndef RUNNER_MODEL_SCHEDULE_H
#define RUNNER_MODEL_SCHEDULE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SCHEDULE_CONSTANT = 0, SCHEDULE_MULTISTEP, SCHEDULE_COSINE, SCHEDULE_KIND_COUNT } schedule_kind_t;
extern const char *const schedule_kind_names[SCHEDULE_KIND_COUNT]; /* "constant", ... */

enum { SCHEDULE_MAX_MILESTONES = 16 };

typedef struct schedule {
    schedule_kind_t kind;
    double base_lr;
    double warmup_epochs;        /* 0 = no warmup */
    int epochs;                  /* total epochs (cosine) */
    int n_milestones;            /* multistep */
    int milestones[SCHEDULE_MAX_MILESTONES]; /* epochs, increasing */
    double gamma;                /* multistep */
    double min_lr;               /* cosine */
} schedule_t;

/* The learning rate for optimizer step `step` (0-based) with steps_per_epoch >= 1. */
double schedule_lr(const schedule_t *s, int64_t step, int64_t steps_per_epoch);

/* W above: the number of warmup steps. */
int64_t schedule_warmup_steps(const schedule_t *s, int64_t steps_per_epoch);

#ifdef __cplusplus
}
#endif
#endif
