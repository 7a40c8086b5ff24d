/* fusion.cuh: the fused convolution ops of the CUDA backend (backend_ops_t's
 * conv2d_bwd_data_accum, conv2d_fwd_bn_stats, conv2d_bwd_data_bn; issue 25) and the
 * function that puts them into a backend's op table for its fusion options.
 */
#ifndef RUNNER_MODEL_CUDA_FUSION_CUH
#define RUNNER_MODEL_CUDA_FUSION_CUH

#include "model/backend.h"

/* Sets the fused slots of o that the BACKEND_FUSE_* bits in fusion turn on (and leaves
 * the others as they are, NULL in the shared table); with any option that may run a
 * convolution on the graph API, conv_engine reports the graph engine where one ran and
 * the shared table's conv_engine (the legacy API's) elsewhere. */
void cu_fusion_install(backend_ops_t *o, unsigned fusion);

/* The op table every CUDA backend starts from (backend.cu). */
const backend_ops_t *cu_shared_ops(void);

int cu_conv2d_bwd_data_accum(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                             const void *w, void *dx);
int cu_conv2d_fwd_bn_stats(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x,
                           const void *w, void *y, float *mean, float *var);
int cu_conv2d_bwd_data_bn(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                          const void *w, void *dx, const void *bn_x, const void *relu_y, act_kind_t act,
                          const float *mean, const float *var, float eps, float *sum_dy,
                          float *sum_dy_xhat, float *dgamma, float *dbeta);

#endif
