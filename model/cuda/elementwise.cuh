/* elementwise.cuh: the CUDA backend's elementwise and pooling ops (relu, add, global
 * average pool, dtype casts, AMP unscale/check and scaling, half-gradient accumulation).
 * Signatures are those of backend_ops_t (model/backend.h). Not here: anything that
 * reduces across channels or rows beyond a single pixel loop (norm.cu, loss.cu).
 */
#ifndef RUNNER_MODEL_CUDA_ELEMENTWISE_CUH
#define RUNNER_MODEL_CUDA_ELEMENTWISE_CUH

#include "model/backend.h"

int cu_relu_fwd(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y);
int cu_relu_bwd(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx);
int cu_add(backend_t *be, int64_t n, dtype_t dt, const void *a, const void *b, void *y);
int cu_avgpool_fwd(backend_t *be, int n, int hw, int c, dtype_t dt, const void *x, void *y);
int cu_avgpool_bwd(backend_t *be, int n, int hw, int c, dtype_t dt, const void *dy, void *dx);
int cu_cast(backend_t *be, int64_t n, const void *src, dtype_t src_dt, void *dst, dtype_t dst_dt);
int cu_unscale_check_finite(backend_t *be, int64_t n, float *g, step_ctl_t *ctl);
int cu_scale(backend_t *be, int64_t n, float *x, float alpha);
/* dw[i] += (float)src[i] for i < n; src of src_dt (any dtype). */
int cu_accumulate(backend_t *be, int64_t n, dtype_t src_dt, const void *src, float *dw);

#endif
