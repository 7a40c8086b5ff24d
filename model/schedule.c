/* schedule.c: the learning-rate schedules of schedule.h (formulas documented there). */
#include "model/schedule.h"

#include <math.h>

const char *const schedule_kind_names[SCHEDULE_KIND_COUNT] = {"constant", "multistep", "cosine"};
_Static_assert(SCHEDULE_KIND_COUNT == 3, "schedule_kind_names must list every schedule");

int64_t schedule_warmup_steps(const schedule_t *s, int64_t steps_per_epoch) {
    if (s->warmup_epochs <= 0) return 0;
    return (int64_t)llround(s->warmup_epochs * (double)steps_per_epoch);
}

double schedule_lr(const schedule_t *s, int64_t step, int64_t steps_per_epoch) {
    if (steps_per_epoch < 1) steps_per_epoch = 1;
    if (step < 0) step = 0;
    int64_t W = schedule_warmup_steps(s, steps_per_epoch);
    if (step < W) return s->base_lr * (double)(step + 1) / (double)W;
    switch (s->kind) {
    case SCHEDULE_MULTISTEP: {
        double lr = s->base_lr;
        for (int i = 0; i < s->n_milestones; i++)
            if (step >= (int64_t)s->milestones[i] * steps_per_epoch) lr *= s->gamma;
        return lr;
    }
    case SCHEDULE_COSINE: {
        int64_t T = (int64_t)s->epochs * steps_per_epoch;
        double p = T > W ? (double)(step - W) / (double)(T - W) : 1.0;
        if (p > 1.0) p = 1.0;
        return s->min_lr + (s->base_lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * p));
    }
    case SCHEDULE_CONSTANT:
    default:
        return s->base_lr;
    }
}
