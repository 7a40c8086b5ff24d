/* amp.h: the dynamic loss scaler for fp16 mixed precision (torch.amp.GradScaler semantics).
 *
 * fp16: the loss gradient is multiplied by `scale` (net_loss's grad_scale); before the
 * optimizer step the gradients are unscaled (g *= 1/scale) and checked for inf/NaN with
 * the backend op unscale_check_finite. If any is non-finite the step is skipped and the
 * scale multiplied by backoff_factor (0.5), the growth tracker reset; otherwise the
 * tracker counts clean steps and after growth_interval of them the scale is multiplied
 * by growth_factor (2) and the tracker reset. bf16 and fp32: scale is 1 and nothing is
 * checked or skipped (loss_scaler_unscale reports finite without touching gradients).
 * The state (scale, growth_tracker) is two numbers a checkpoint saves and restores.
 * What it does not do: per-optimizer bookkeeping, inf checks across ranks (DDP
 * all-reduces gradients before unscaling, so every rank sees the same inf).
 */
#ifndef RUNNER_MODEL_AMP_H
#define RUNNER_MODEL_AMP_H

#include <stdbool.h>
#include <stdint.h>

#include "model/backend.h"
#include "runner/util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loss_scaler {
    bool enabled;            /* true only for fp16 */
    double scale;            /* current scale (1 when disabled) */
    double growth_factor;    /* 2.0 */
    double backoff_factor;   /* 0.5 */
    int64_t growth_interval; /* 2000 */
    int64_t growth_tracker;  /* consecutive clean steps since the last change */
    backend_t *be;
    int32_t *found_inf;      /* backend memory, one int */
} loss_scaler_t;

/* Sets up s for activation dtype act_dt: DT_F16 enables scaling starting at init_scale;
 * DT_F32/DT_BF16 disable it. Allocates one int in be (free with loss_scaler_deinit). */
int loss_scaler_init(loss_scaler_t *s, backend_t *be, dtype_t act_dt, double init_scale,
                     int64_t growth_interval, err_t *e);
void loss_scaler_deinit(loss_scaler_t *s);

/* The factor to pass as (part of) net_loss's grad_scale: scale, or 1 when disabled. */
double loss_scaler_scale(const loss_scaler_t *s);

/* Unscales n gradients at g (backend memory) by 1/scale and sets *found_inf if any is
 * inf or NaN. Disabled: *found_inf = false and g untouched. */
int loss_scaler_unscale(loss_scaler_t *s, float *g, int64_t n, bool *found_inf, err_t *e);

/* Updates the scale after a step attempt: found_inf halves it (the caller skipped the
 * optimizer step), else counts a clean step and doubles it after growth_interval. */
void loss_scaler_update(loss_scaler_t *s, bool found_inf);

/* Checkpoint state. */
void loss_scaler_get_state(const loss_scaler_t *s, double *scale, int64_t *growth_tracker);
void loss_scaler_set_state(loss_scaler_t *s, double scale, int64_t growth_tracker);

#ifdef __cplusplus
}
#endif
#endif
