/* conv.cuh: 2-D convolutions of the CUDA backend on cuDNN (NHWC activations, KRSC
 * weights; backend_ops_t.conv2d_fwd / conv2d_bwd_data / conv2d_bwd_filter) and the
 * per-shape plan cache they keep in the backend; grouped when s->groups > 1. Not here:
 * bias, dilation.
 */
#ifndef RUNNER_MODEL_CUDA_CONV_CUH
#define RUNNER_MODEL_CUDA_CONV_CUH

#include "model/backend.h"

int cu_conv2d_fwd(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *w,
                  void *y);
int cu_conv2d_bwd_data(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                       const void *w, void *dx);
int cu_conv2d_bwd_filter(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x,
                         const void *dy, float *dw);
/* The legacy API's data gradient, dx = dgrad(dy, w) + beta * dx (beta 0 or 1; the
 * graph API is not tried): conv2d_bwd_data's legacy half, and the residual sum of the
 * dgrad_accum fusion (fusion.cu). */
int cu_conv_legacy_bwd_data(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                            const void *w, void *dx, float beta);

/* backend_ops_t.conv_engine: the algorithm each plan of shape s uses in direction which
 * (0 fwd, 1 bwd data, 2 bwd filter) and how it was chosen, e.g. "cudnn fwd
 * IMPLICIT_PRECOMP_GEMM tensor_op, ws 12.0 MB, gpu 0.123 ms, host 9 us; by gpu+host cost
 * of 5 usable" (several plans of the shape, e.g. two dtypes: joined by " | ", each
 * prefixed with its dtype). -1 (buf says so) before the first call of the shape. */
int cu_conv_describe(backend_t *be, const conv_shape_t *s, int which, char *buf, size_t len);

struct cuda_be;
/* Destroys every cached plan (descriptors and chosen algorithms). */
void cu_conv_free_plans(struct cuda_be *cb);

#endif
