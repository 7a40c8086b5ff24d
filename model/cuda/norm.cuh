/* norm.cuh: batch-norm ops of the CUDA backend (statistics, fused apply with residual add
 * and relu or relu6, running-stat update, the two backward phases). Signatures are those of
 * backend_ops_t (model/backend.h). Not here: cross-rank reduction (SyncBN hooks, comm/).
 */
#ifndef RUNNER_MODEL_CUDA_NORM_CUH
#define RUNNER_MODEL_CUDA_NORM_CUH

#include "model/backend.h"

/* The one-pass reductions' tickets (cuda_be_t.bn_counters), allocated and zeroed once,
 * outside a capture: 0, or -1 with cb's error. */
struct cuda_be;
int cu_bn_counters(struct cuda_be *cb);
int cu_bn_stats(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean,
                float *var);
/* bn_stats then bn_update_running in one op: the running update in the statistics' final
 * kernel (bn_fold_running; backend_ops_t.bn_stats_running) */
int cu_bn_stats_running(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean, float *var,
                        int64_t count, float momentum, float *run_mean, float *run_var);
int cu_bn_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                const float *var, const float *gamma, const float *beta, float eps,
                const void *z, act_kind_t act, void *y);
int cu_bn_update_running(backend_t *be, int c, const float *mean, const float *var,
                         int64_t count, float momentum, float *run_mean, float *run_var);
int cu_bn_bwd_reduce(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                     act_kind_t act, const void *dy, const float *mean, const float *var,
                     const float *gamma, const float *beta, float eps, float *sum_dy,
                     float *sum_dy_xhat, float *dgamma, float *dbeta);
int cu_bn_bwd_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                    act_kind_t act, const void *dy, const float *mean, const float *var,
                    const float *gamma, const float *beta, float eps, const float *sum_dy,
                    const float *sum_dy_xhat, int64_t count, void *dx, void *dz);
/* the mask kept as bits (bn_mask_bits; backend_ops_t.bn_apply_mask, bn_bwd_reduce_mask,
 * bn_bwd_apply_mask) */
int cu_bn_apply_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                     const float *var, const float *gamma, const float *beta, float eps, const void *z,
                     act_kind_t act, void *y, uint8_t *mask);
int cu_bn_bwd_reduce_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                          act_kind_t act, const void *dy, const float *mean, const float *var,
                          const float *gamma, float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma,
                          float *dbeta, const uint8_t *mask);
int cu_bn_bwd_apply_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                         act_kind_t act, const void *dy, const float *mean, const float *var,
                         const float *gamma, float eps, const float *sum_dy, const float *sum_dy_xhat,
                         int64_t count, void *dx, void *dz, const uint8_t *mask);
/* a shortcut's BN inside the add-relu BN's kernels (bn_dual_add; backend_ops_t.bn_apply_dual,
 * bn_bwd_reduce_dual, bn_bwd_apply_dual) */
int cu_bn_apply_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean, const float *var,
                     const float *gamma, const float *beta, const void *x2, const float *mean2, const float *var2,
                     const float *gamma2, const float *beta2, float eps, act_kind_t act, void *y, uint8_t *mask);
int cu_bn_bwd_reduce_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                          const void *dy, const float *mean, const float *var, const void *x2, const float *mean2,
                          const float *var2, float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta,
                          float *sum_dy2, float *sum_dy_xhat2, float *dgamma2, float *dbeta2, const uint8_t *mask);
int cu_bn_bwd_apply_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                         const void *dy, const float *mean, const float *var, const float *gamma, const void *x2,
                         const float *mean2, const float *var2, const float *gamma2, float eps, const float *sum_dy,
                         const float *sum_dy_xhat, int64_t count, const float *sum_dy2, const float *sum_dy_xhat2,
                         int64_t count2, void *dx, void *dx2, const uint8_t *mask);
/* a BN's forward and backward each in one cooperative kernel (bn_persist, norm_persist.cu;
 * backend_ops_t.bn_fwd_fused, bn_bwd_fused): 0 ran, 1 cannot here (nothing written) */
int cu_bn_fwd_fused(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean, float *var,
                    int64_t count, float momentum, float *run_mean, float *run_var, const float *gamma,
                    const float *beta, float eps, const void *z, act_kind_t act, void *y, uint8_t *mask);
int cu_bn_bwd_fused(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y, act_kind_t act,
                    const void *dy, const float *mean, const float *var, const float *gamma, const float *beta,
                    float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta, int64_t count,
                    void *dx, void *dz, const uint8_t *mask);

#endif
