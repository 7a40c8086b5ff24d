/* optim.cuh: torch.optim.SGD and torch.optim.AdamW steps over flat fp32 arrays on the GPU
 * (backend_ops_t.sgd_step / adamw_step), skipped on the device when the step control
 * says found_inf, the step control update (backend_ops_t.step_ctl_update), gradient
 * clipping by the global norm (clip_grad_norm), the EMA of weights (ema_update, and
 * ema_update_dev with the decay in device memory) and SyncBN's statistics combine
 * (bn_combine).
 * Not here: learning-rate schedules.
 */
#ifndef RUNNER_MODEL_CUDA_OPTIM_CUH
#define RUNNER_MODEL_CUDA_OPTIM_CUH

#include "model/backend.h"

int cu_sgd_step(backend_t *be, int64_t n, float *p, const float *g, float *buf, double lr,
                double momentum, double dampening, double weight_decay, bool nesterov,
                const step_ctl_t *ctl);
int cu_adamw_step(backend_t *be, int64_t n, float *p, const float *g, float *m, float *v,
                  double lr, double beta1, double beta2, double eps, double weight_decay,
                  const step_ctl_t *ctl);
int cu_step_ctl_update(backend_t *be, step_ctl_t *ctl);
int cu_clip_grad_norm(backend_t *be, int64_t n, float *g, double max_norm, const step_ctl_t *ctl,
                      float *norm);
int cu_ema_update(backend_t *be, int64_t n, float *ema, const float *x, double decay);
int cu_ema_update_dev(backend_t *be, int64_t n, float *ema, const float *x, const double *decay);
int cu_bn_combine(backend_t *be, int world, int c, const float *gathered, int64_t count, float *mean,
                  float *var);

#endif
