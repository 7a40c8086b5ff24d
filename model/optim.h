/* optim.h: SGD and AdamW over a net's flat parameter/gradient arrays.
 *
 * Exactly torch.optim.SGD (momentum buffer = grad at the first step, dampening,
 * nesterov, L2 weight decay added to the gradient) and torch.optim.AdamW (decoupled
 * decay p *= 1 - lr*wd, bias-corrected moments, eps outside the sqrt), computed by the
 * backend's sgd_step / adamw_step over contiguous ranges. With
 * no_weight_decay_on_bn_and_bias, BN weights/biases and biases get weight decay 0
 * (net_tensor.no_decay); ranges of equal decay are merged, so a step is a few dozen
 * backend calls. State (momentum buffer, or exp_avg and exp_avg_sq) lives in backend
 * memory with the params layout, so checkpoints save it as flat arrays.
 * Gradient clipping by the global norm (optim_clip_grad_norm) is a separate call between
 * the unscale and the step, as torch.nn.utils.clip_grad_norm_ is.
 * What it does not do: parameter groups with other learning rates.
 */
#ifndef RUNNER_MODEL_OPTIM_H
#define RUNNER_MODEL_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/net.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { OPTIM_SGD = 0, OPTIM_ADAMW = 1, OPTIM_KIND_COUNT } optim_kind_t;

typedef struct optim_opts {
    optim_kind_t kind;
    double momentum;        /* sgd: 0.9 in the schema; 0 = plain SGD (no state) */
    double dampening;       /* sgd: 0 */
    bool nesterov;          /* sgd */
    double weight_decay;
    bool no_weight_decay_on_bn_and_bias;
    double beta1, beta2;    /* adamw: 0.9, 0.999 */
    double eps;             /* adamw: 1e-8 */
} optim_opts_t;

typedef struct optim optim_t;

/* An optimizer over the bound net n (same backend). State is zero; step count 0. */
optim_t *optim_create(net_t *n, const optim_opts_t *opts, err_t *e);
void optim_free(optim_t *o);

/* One optimizer step at learning rate lr on net_params with net_grads, enqueued on the
 * backend without waiting: the ops skip the update on the device when the step control
 * (optim_ctl) says found_inf, and step_ctl_update then advances the step count (AdamW
 * bias-corrects with the count after this step; SGD initialises the momentum buffer
 * from the gradient on the first step taken) and the loss scale (amp.h). */
int optim_step(optim_t *o, double lr, err_t *e);
/* optim_step in two halves, for steps recorded as one graph: optim_set_lr writes lr into
 * the step control (an upload, before the step's ops); optim_apply enqueues the step's ops,
 * which read it there, and nothing else (recordable). optim_step = both. */
int optim_set_lr(optim_t *o, double lr, err_t *e);
int optim_apply(optim_t *o, err_t *e);

/* torch.nn.utils.clip_grad_norm_(params, max_norm) on net_grads, enqueued: the global L2
 * norm goes to norm_out (one float of backend memory, e.g. the step's record) and the
 * gradients are scaled by min(1, max_norm / (norm + 1e-6)), except when the step control
 * says found_inf (the step will be skipped; torch's GradScaler skips it too). max_norm
 * <= 0: the norm only. */
int optim_clip_grad_norm(optim_t *o, double max_norm, float *norm_out, err_t *e);

/* Optimizer steps taken (a download, which waits); set it when restoring a checkpoint. */
int optim_steps(const optim_t *o, int64_t *steps, err_t *e);
int optim_set_steps(optim_t *o, int64_t steps, err_t *e);

/* The step control in backend memory (loss scale, found_inf, step count); owned by o. */
step_ctl_t *optim_ctl(optim_t *o);

/* State arrays (backend memory, net_num_params floats each): sgd with momentum:
 * 1 (momentum_buffer); adamw: 2 (exp_avg, exp_avg_sq); plain sgd: 0. */
int optim_num_state(const optim_t *o);
float *optim_state(optim_t *o, int i);
const char *optim_state_name(const optim_t *o, int i); /* "momentum_buffer", "exp_avg", ... */
size_t optim_state_numel(const optim_t *o);            /* = net_num_params */

#ifdef __cplusplus
}
#endif
#endif
