/* linear.cuh: the fully connected layer of the CUDA backend on cuBLASLt
 * (backend_ops_t.linear_fwd / linear_bwd), plus the plan cache it keeps in the backend.
 * Not here: anything but y = x w^T + b and its gradients.
 */
#ifndef RUNNER_MODEL_CUDA_LINEAR_CUH
#define RUNNER_MODEL_CUDA_LINEAR_CUH

#include "model/backend.h"

int cu_linear_fwd(backend_t *be, int n, int in, int out, dtype_t dt, const void *x,
                  const void *w, const float *b, void *y);
int cu_linear_bwd(backend_t *be, int n, int in, int out, dtype_t dt, const void *x,
                  const void *w, const void *dy, void *dx, float *dw, float *db);

struct cuda_be;
/* Frees every cached cuBLASLt descriptor of the backend (at destroy). */
void cu_linear_free_plans(struct cuda_be *cb);

#endif
