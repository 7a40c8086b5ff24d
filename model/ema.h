/* ema.h: an exponential moving average of a net's weights and BN buffers, with timm's
 * ModelEmaV3 semantics (timm/utils/model_ema.py, as timm's train.py uses it).
 *
 * ModelEmaV3 keeps a copy of every floating-point state_dict entry (parameters and BN
 * running mean/var; num_batches_tracked, an integer, is copied, not averaged) and after
 * each optimizer step calls update(model, step=num_updates) with num_updates counting the
 * optimizer steps taken so far, this one included (1, 2, ...). The decay for that step is
 * get_decay(step) with update_after_step 0 and min_decay 0:
 *
 *     k = max(0, step - 1);   k == 0: decay 0 (the first update copies the weights)
 *     warmup:    decay = min(decay, 1 - (1 + k / warmup_gamma) ^ -warmup_power)
 *     otherwise: decay
 *
 * and every entry moves by ema.lerp_(model, weight = 1 - decay) (backend op ema_update).
 * timm's train.py counts num_updates whether or not GradScaler skipped an overflowed
 * step, and so does the trainer here: on a skipped step the weights did not move and the
 * EMA still takes its update towards them.
 *
 * The average lives in backend memory beside the net (params and buffers layout), so an
 * update is one op per array and never waits for the device. For evaluation the averaged
 * values are swapped into the net (ema_swap; a second call swaps back), which needs one
 * more copy of each array, allocated at creation.
 */
#ifndef RUNNER_MODEL_EMA_H
#define RUNNER_MODEL_EMA_H

#include <stdbool.h>
#include <stdint.h>

#include "model/net.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ema_opts {
    double decay;          /* (0, 1): timm --model-ema-decay (0.9998 in timm's train.py) */
    bool warmup;           /* timm --model-ema-warmup */
    double warmup_gamma;   /* ModelEmaV3 warmup_gamma: 1.0 */
    double warmup_power;   /* ModelEmaV3 warmup_power: 2/3 */
} ema_opts_t;

typedef struct ema ema_t;

/* ModelEmaV3.get_decay(step) for the update after optimizer step `step` (1-based). */
double ema_decay_at(const ema_opts_t *o, int64_t step);

/* An average of the bound net n, starting as a copy of its current params and buffers. */
ema_t *ema_create(net_t *n, const ema_opts_t *o, err_t *e);
void ema_free(ema_t *m);

/* The update after optimizer step `step` (1-based), enqueued on the net's backend. */
int ema_update(ema_t *m, int64_t step, err_t *e);
/* ema_update in two halves, for steps recorded as one graph: ema_prepare writes the decay
 * of update `step` into backend memory (an upload, before the step's ops); ema_apply
 * enqueues the update, which reads it there (backend op ema_update_dev; recordable). */
int ema_prepare(ema_t *m, int64_t step, err_t *e);
int ema_apply(ema_t *m, err_t *e);

/* Exchanges the net's params and buffers with the averaged ones (3 copies each). Call it
 * before evaluating the EMA weights and again after. */
int ema_swap(ema_t *m, err_t *e);

/* Makes the average a copy of the net's current params and buffers. */
int ema_reset(ema_t *m, err_t *e);

/* The averaged arrays (backend memory, net_num_params / net_num_buffers floats). */
float *ema_params(ema_t *m);
float *ema_buffers(ema_t *m);

#ifdef __cplusplus
}
#endif
#endif
