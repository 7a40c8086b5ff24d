/* step_ctl.h: the update rule of step_ctl_t (model/backend.h), shared by the CPU backend
 * and the CUDA kernel so both advance the step control identically.
 *
 * torch's _amp_update_scale_: an overflow multiplies the scale by backoff_factor and
 * resets the tracker; a clean step counts, and the growth_interval-th clean step in a
 * row multiplies the scale by growth_factor (kept only if the result is finite) and
 * resets the tracker. A clean step also counts as an optimizer step. Without dynamic
 * scaling (growth_interval 0) only the step count moves.
 */
#ifndef RUNNER_MODEL_STEP_CTL_H
#define RUNNER_MODEL_STEP_CTL_H

#include <math.h>

#include "model/backend.h"

#ifdef __CUDACC__
#define STEP_CTL_HD __host__ __device__
#else
#define STEP_CTL_HD
#endif

static inline STEP_CTL_HD void step_ctl_advance(step_ctl_t *c) {
    if (c->found_inf) {
        if (c->growth_interval > 0) {
            c->loss_scale *= c->backoff_factor;
            c->growth_tracker = 0;
        }
        return;
    }
    c->optim_steps++;
    if (c->growth_interval > 0 && ++c->growth_tracker >= c->growth_interval) {
        float grown = c->loss_scale * c->growth_factor;
        if (isfinite(grown)) c->loss_scale = grown;
        c->growth_tracker = 0;
    }
}

#endif
