/* half.h: fp32 <-> fp16 / bf16 conversion with round-to-nearest-even, on the host.
 *
 * Used by the CPU backend's AMP emulation (inputs and weights of convolutions and
 * GEMMs rounded to half, accumulated in fp32), by checkpoints and by export. NaN stays
 * NaN, overflow in fp16 becomes +-inf as on the GPU.
 */
#ifndef RUNNER_UTIL_HALF_H
#define RUNNER_UTIL_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t half_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float half_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u = half_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bf16_to_f32(uint16_t h) { return half_bits_f32((uint32_t)h << 16); }

static inline uint16_t f32_to_f16(float f) {
    uint32_t u = half_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);      /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);     /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                      /* below 2^-14: subnormal */
        if (a < 0x33000000u) return (uint16_t)sign;              /* < 2^-25: rounds to 0 */
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23);                        /* 14..24 */
        uint32_t r = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u;                                /* rebias exponent */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0) return half_bits_f32(sign);
        float v = (float)m * (1.0f / 16777216.0f);               /* m * 2^-24 */
        return sign ? -v : v;
    }
    if (e == 31) return half_bits_f32(sign | 0x7f800000u | (m << 13));
    return half_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* Rounds f to the nearest value representable in fp16 / bf16, kept as fp32. */
static inline float round_f16(float f) { return f16_to_f32(f32_to_f16(f)); }
static inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

#endif
