/* dropout.h: dropout's masks and scale, the one definition the CPU backend
 * (model/cpu/cpu_layers.c) and the CUDA kernels (model/cuda/dropout.cu) share, so both
 * keep and scale the same elements bit for bit. Every function is host and device
 * inline (DROPOUT_HD); the mask is integer math (Philox4x32-10, util/rng.h).
 *
 * Mask. Element e of sample `sample` at dropout node `node` is kept when the 32-bit
 * draw u = word (e % 4) of the Philox block
 *     key  = (seed ^ RNG_STREAM_DROPOUT * 0x9E3779B9, (seed >> 32) ^ 0x85EBCA6B)
 *     ctr  = (e / 4, sample, epoch, node | (epoch >> 32 & 0xff) << 16 | RNG_STREAM_DROPOUT << 24)
 * satisfies u >= threshold(p) = floor(p * 2^32) (2^32 for p >= 1: nothing kept), i.e.
 * with probability 1 - p, as torch's bernoulli_(1 - p). `sample` is the sample's place in
 * the epoch's global order (net_set_rng_key), so the mask follows the sample, not the
 * rank, replica, micro-batch or worker that processes it.
 *
 * Scale. torch (CPU, fp32) computes dropout as x * (mask.div_(1 - p)): the kept factor
 * is the fp32 quotient 1.0f / (float)(1 - p) with 1 - p formed in double (p is a Python
 * float), and y = x * factor is one fp32 multiplication; dropout_scale gives that factor
 * (checked against torch 1.13 for 20,000 values of p), so fp32 outputs equal torch's for
 * the same mask. p >= 1 gives factor 0 (torch returns x * 0).
 *
 * Not here: the loops over tensors (the backends), where the key comes from (net.c).
 */
#ifndef RUNNER_UTIL_DROPOUT_H
#define RUNNER_UTIL_DROPOUT_H

#include <stdint.h>

#include "util/rng.h"

#ifdef __CUDACC__
#define DROPOUT_HD __host__ __device__ __forceinline__
#else
#define DROPOUT_HD static inline
#endif

/* The kept fraction's threshold: keep when (uint64_t)u >= the result (0 keeps all). */
DROPOUT_HD uint64_t dropout_threshold(double p) {
    if (!(p > 0.0)) return 0;
    if (p >= 1.0) return (uint64_t)1 << 32;
    return (uint64_t)(p * 4294967296.0);
}

/* The factor a kept element is multiplied by (torch's fp32 1 / (1 - p)). */
DROPOUT_HD float dropout_scale(double p) {
    if (p >= 1.0) return 0.0f;
    return 1.0f / (float)(1.0 - p);
}

/* The four draws of elements [4 * block, 4 * block + 4) of one sample. */
DROPOUT_HD void dropout_block(uint64_t seed, uint64_t epoch, uint64_t sample, uint32_t node,
                              uint32_t block, uint32_t out[4]) {
    uint32_t k[2] = {(uint32_t)seed ^ ((uint32_t)RNG_STREAM_DROPOUT * 0x9E3779B9u),
                     (uint32_t)(seed >> 32) ^ 0x85EBCA6Bu};
    uint32_t c[4] = {block, (uint32_t)sample, (uint32_t)epoch,
                     (node & 0xffffu) | ((uint32_t)(epoch >> 32) & 0xffu) << 16 |
                         (uint32_t)RNG_STREAM_DROPOUT << 24};
    rng_philox_block_(k, c, out);
}

#endif
