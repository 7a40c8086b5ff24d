/* amp.h: the dynamic loss scaler for fp16 mixed precision (torch.amp.GradScaler semantics).
 *
 * The scaler's state lives in the optimizer's step control (step_ctl_t in backend memory,
 * optim_ctl), so nothing here makes the host wait for the GPU inside a step:
 * - net_loss_async multiplies the loss gradient by ctl->loss_scale on the device;
 * - loss_scaler_unscale enqueues found_inf = 0 and g *= 1/scale with the inf/NaN check
 *   (backend op unscale_check_finite);
 * - optim_step's ops skip the update when found_inf is set, and its step_ctl_update then
 *   halves the scale (backoff_factor 0.5) and resets the growth tracker, or counts a clean
 *   step and doubles the scale (growth_factor 2) after growth_interval of them.
 * bf16 and fp32: the scale stays 1 and nothing is checked or skipped.
 * The host reads the state only when it asks (loss_scaler_scale, _found_inf, _get_state:
 * each a download, which waits for the queued work).
 * What it does not do: per-optimizer bookkeeping, inf checks across ranks (DDP
 * all-reduces gradients before unscaling, so every rank sees the same inf).
 */
#ifndef RUNNER_MODEL_AMP_H
#define RUNNER_MODEL_AMP_H

#include <stdbool.h>
#include <stdint.h>

#include "model/backend.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loss_scaler {
    bool enabled;            /* true only for fp16 */
    backend_t *be;
    step_ctl_t *ctl;         /* backend memory: the optimizer's step control (not owned) */
} loss_scaler_t;

/* Sets up s for activation dtype act_dt over the step control ctl (optim_ctl of the
 * optimizer that will take the steps): DT_F16 enables scaling starting at init_scale
 * (growth interval growth_interval, factors 2 and 0.5), written into ctl; DT_F32/DT_BF16
 * disable it (ctl keeps scale 1, interval 0). init_scale must be a finite float > 0. */
int loss_scaler_init(loss_scaler_t *s, backend_t *be, step_ctl_t *ctl, dtype_t act_dt,
                     double init_scale, int64_t growth_interval, err_t *e);

/* Unscales n gradients at g (backend memory) by 1/scale and sets ctl->found_inf if any
 * is inf or NaN; enqueued, no wait. Disabled: nothing. */
int loss_scaler_unscale(loss_scaler_t *s, float *g, int64_t n, err_t *e);

/* Reads the current scale (1 when disabled) / the last unscale's verdict; these wait. */
int loss_scaler_scale(const loss_scaler_t *s, double *scale, err_t *e);
int loss_scaler_found_inf(const loss_scaler_t *s, bool *found_inf, err_t *e);

/* Checkpoint state (download / upload). */
int loss_scaler_get_state(const loss_scaler_t *s, double *scale, int64_t *growth_tracker, err_t *e);
int loss_scaler_set_state(loss_scaler_t *s, double scale, int64_t growth_tracker, err_t *e);

#ifdef __cplusplus
}
#endif
#endif
