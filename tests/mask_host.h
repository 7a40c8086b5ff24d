/* mask_host.h: the ReLU mask of the CUDA backend's bn_mask_bits on the host, for the tests
 * that stand in for its ops on the CPU (tests/model/test_net_fusion.c's composites,
 * tests/gpu/test_gpu_bn_fusion.c's dry-run stand-ins) and check what it wrote. The layout
 * is backend.h's: element i (row * c + channel) at bit i & 7 of byte i >> 3. Static
 * inline helpers, test code only.
 */
#ifndef RUNNER_TESTS_MASK_HOST_H
#define RUNNER_TESTS_MASK_HOST_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "model/backend.h"

/* Whether the BN backward keeps the gradient at stored output y: y > 0 for relu, not
 * (y <= 0 or y >= 6) for relu6 (NaN: masked by relu, passed by relu6). */
static inline bool mask_keeps(act_kind_t act, float y) {
    return act == ACT_RELU6 ? !(y <= 0.0f || y >= 6.0f) : y > 0.0f;
}

/* Bit i of mask. */
static inline bool mask_bit(const uint8_t *mask, int64_t i) { return (mask[i >> 3] >> (i & 7)) & 1u; }

/* The mask of n stored outputs y (floats, as the CPU backend stores every dtype). */
static inline void mask_from_y(uint8_t *mask, int64_t n, act_kind_t act, const float *y) {
    memset(mask, 0, (size_t)(n + 7) / 8);
    for (int64_t i = 0; i < n; i++)
        if (mask_keeps(act, y[i])) mask[i >> 3] |= (uint8_t)(1u << (i & 7));
}

#endif
