/* loss.cuh: softmax cross-entropy with label smoothing and top-1/top-5 counting on the
 * GPU (backend_ops_t.softmax_xent). Not here: the mean over the batch (grad_scale does it).
 */
#ifndef RUNNER_MODEL_CUDA_LOSS_CUH
#define RUNNER_MODEL_CUDA_LOSS_CUH

#include "model/backend.h"

int cu_softmax_xent(backend_t *be, int n, int classes, dtype_t dt, const void *logits,
                    const int32_t *labels, float smoothing, float grad_scale,
                    const step_ctl_t *ctl, void *dlogits, float *loss_sum, int32_t *correct);
int cu_softmax_xent_soft(backend_t *be, int n, int classes, dtype_t dt, const void *logits,
                         const float *targets, float grad_scale, const step_ctl_t *ctl,
                         void *dlogits, float *loss_sum, int32_t *correct);

#endif
