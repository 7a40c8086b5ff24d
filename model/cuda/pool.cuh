/* pool.cuh: the CUDA backend's max pool (backend_ops_t.maxpool_fwd / maxpool_bwd, NHWC,
 * fp32 / fp16 / bf16). Global average pooling lives in elementwise.cu.
 */
#ifndef RUNNER_MODEL_CUDA_POOL_CUH
#define RUNNER_MODEL_CUDA_POOL_CUH

#include "model/backend.h"

int cu_maxpool_fwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y);
int cu_maxpool_bwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, const void *dy,
                   void *dx);

#endif
