/* optim.cuh: torch.optim.SGD and torch.optim.AdamW steps over flat fp32 arrays on the GPU
 * (backend_ops_t.sgd_step / adamw_step). Not here: learning-rate schedules, AMP skipping.
 */
#ifndef RUNNER_MODEL_CUDA_OPTIM_CUH
#define RUNNER_MODEL_CUDA_OPTIM_CUH

#include "model/backend.h"

int cu_sgd_step(backend_t *be, int64_t n, float *p, const float *g, float *buf, float lr,
                float momentum, float dampening, float weight_decay, bool nesterov,
                bool first_step);
int cu_adamw_step(backend_t *be, int64_t n, float *p, const float *g, float *m, float *v,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  int64_t step);

#endif
