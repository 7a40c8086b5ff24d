/* cpu_backend.h: the CPU compute backend, the reference every other backend is checked
 * against.
 *
 * It fills every slot of backend_ops_t (model/backend.h) for host memory: convolutions
 * through oneDNN (when built with it) or im2col / 1x1-as-GEMM on OpenBLAS, batch norm,
 * elementwise ops, pooling, the classifier GEMM, the loss and the optimizers on a small
 * thread pool. Results are deterministic: the same inputs give the same bits every run,
 * whatever the thread timing. Half precision (DT_F16 / DT_BF16) is emulated in 4-byte
 * floats holding values rounded to half (backend_elem_size is 4 for every dtype).
 *
 * Not here: the dispatch on backend kind (model/backend.c), anything GPU.
 */
#ifndef RUNNER_MODEL_CPU_BACKEND_H
#define RUNNER_MODEL_CPU_BACKEND_H

#include "model/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates a CPU backend with o->threads worker threads (0: all online cores). Returns
 * NULL and fills e on failure (out of memory, thread creation). Free with backend_free. */
backend_t *cpu_backend_create(const backend_opts_t *o, err_t *e);

/* Which convolution engine the backend uses for a shape in direction which (0 forward,
 * 1 backward data, 2 backward filter), for benchmarks and tests: "dnnl" (oneDNN on NHWC),
 * "dnnl_blk" (oneDNN, activations reordered to its blocked layout), "dnnl_wino" (oneDNN
 * Winograd, 3x3 stride 1) or "gemm" (im2col / 1x1 as GEMM on OpenBLAS); "error" when
 * asking oneDNN failed (be->err). The choice is made on first use and kept: the engines
 * preferred for the shape, each taken only where oneDNN implements it on this CPU (and
 * ONEDNN_MAX_CPU_ISA), else the next, GEMM last. cpu_backend_conv_engine: forward. */
const char *cpu_backend_conv_engine_for(backend_t *be, const conv_shape_t *s, int which);
const char *cpu_backend_conv_engine(backend_t *be, const conv_shape_t *s);
/* The same with oneDNN's kernel name, e.g. "dnnl_blk jit:avx2" (the conv_engine op). */
int cpu_backend_conv_describe(backend_t *be, const conv_shape_t *s, int which, char *buf,
                              size_t len);

/* Forces the convolution engine: 0 automatic (default), 1 im2col/GEMM, 2 oneDNN on
 * NHWC, 3 oneDNN with blocked activations, 4 oneDNN Winograd where the shape allows it
 * (3 elsewhere). Where oneDNN lacks the kernel (or is not built in) the choice falls back
 * as the automatic one does (Winograd -> blocked -> NHWC -> GEMM). Used by tests and
 * benchmarks to check the engines against each other; a runner process takes it from
 * RUNNER_CPU_CONV_ENGINE=gemm|dnnl|dnnl_blk|dnnl_wino (a test hook, read by
 * cpu_backend_create). */
void cpu_backend_set_conv_engine(backend_t *be, int engine);

#ifdef __cplusplus
}
#endif
#endif
