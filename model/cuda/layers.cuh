/* layers.cuh: the CUDA backend's ops for the layers beyond ResNet's (relu6, per-channel
 * conv bias, dropout, adaptive average pooling), the twins of model/cpu/cpu_layers.c.
 * Signatures are those of backend_ops_t (model/backend.h). Not here: convolution
 * (conv.cu), global average pooling (elementwise.cu), max pooling (pool.cu).
 */
#ifndef RUNNER_MODEL_CUDA_LAYERS_CUH
#define RUNNER_MODEL_CUDA_LAYERS_CUH

#include "model/backend.h"

int cu_relu6_fwd(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y);
int cu_relu6_bwd(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx);
int cu_channel_bias_fwd(backend_t *be, int64_t m, int c, dtype_t dt, const float *b, void *y);
int cu_channel_bias_bwd(backend_t *be, int64_t m, int c, dtype_t dt, const void *dy, float *db);
int cu_dropout_fwd(backend_t *be, int n, int64_t per_sample, dtype_t dt, double p, uint32_t node,
                   const dropout_key_t *key, const void *x, void *y);
int cu_dropout_bwd(backend_t *be, int n, int64_t per_sample, dtype_t dt, double p, uint32_t node,
                   const dropout_key_t *key, const void *dy, void *dx);
int cu_adaptive_avgpool_fwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y);
int cu_adaptive_avgpool_bwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *dy, void *dx);

#endif
