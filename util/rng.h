/* rng.h: the one source of randomness, a counter-based generator (Philox4x32-10).
 *
 * Every random draw in the runner is a pure function of a key and a counter, never of
 * thread timing or call order: parameter init is keyed by (seed, parameter index),
 * augmentation by (seed, epoch, sample index), shuffling by (seed, epoch). So the same
 * experiment gives the same numbers whatever the worker count, world size or batch size,
 * and a resumed run draws exactly what the uninterrupted one would have drawn.
 *
 * Typical use: rng_t r = rng_make(seed, RNG_STREAM_AUGMENT, epoch, sample);
 *              float u = rng_uniform(&r);  // successive draws advance the counter
 * The same functions compile as CUDA device code (RNG_HD) so GPU kernels draw the same.
 */
#ifndef RUNNER_UTIL_RNG_H
#define RUNNER_UTIL_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define RNG_HD __host__ __device__ __forceinline__
#else
#define RNG_HD static inline
#endif

/* Stream ids keep different uses of one seed independent. */
enum {
    RNG_STREAM_INIT = 1,     /* a = parameter tensor index, b = 0 */
    RNG_STREAM_SHUFFLE = 2,  /* a = epoch, b = 0 */
    RNG_STREAM_AUGMENT = 3,  /* a = epoch, b = sample index */
    RNG_STREAM_SYNTHETIC = 4,/* a = split (0 train, 1 val), b = sample index */
    RNG_STREAM_MISC = 5,
    RNG_STREAM_MIXUP = 6,    /* a = epoch, b = micro-batch index + 2^32 * rank (data/mixup.h) */
    RNG_STREAM_ERASE = 7,    /* a = epoch, b = sample index: random erasing's normal values */
    RNG_STREAM_DROPOUT = 8   /* dropout masks: its own counter layout (util/dropout.h) */
};

typedef struct rng {
    uint32_t key[2];
    uint32_t ctr[4];
    uint32_t out[4];
    int used; /* how many of out[] were consumed; 4 means generate a new block */
} rng_t;

RNG_HD void rng_philox_block_(const uint32_t k_in[2], const uint32_t c_in[4], uint32_t out[4]) {
    uint32_t k0 = k_in[0], k1 = k_in[1];
    uint32_t c0 = c_in[0], c1 = c_in[1], c2 = c_in[2], c3 = c_in[3];
    for (int i = 0; i < 10; i++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* A generator for (seed, stream, a, b). */
RNG_HD rng_t rng_make(uint64_t seed, uint32_t stream, uint64_t a, uint64_t b) {
    rng_t r;
    r.key[0] = (uint32_t)seed ^ (stream * 0x9E3779B9u);
    r.key[1] = (uint32_t)(seed >> 32) ^ 0x85EBCA6Bu;
    r.ctr[0] = 0;                       /* block counter within this (a, b) */
    r.ctr[1] = (uint32_t)a ^ (uint32_t)(a >> 32) * 0x27D4EB2Fu;
    r.ctr[2] = (uint32_t)b;
    r.ctr[3] = (uint32_t)(b >> 32) ^ (stream << 16);
    r.used = 4;
    return r;
}

/* Moves r to block `block` of its (a, b) (each block holds 4 u32 draws): lets independent
 * uses of one key start at fixed offsets, whatever number of draws came before. */
RNG_HD void rng_seek(rng_t *r, uint32_t block) {
    r->ctr[0] = block;
    r->used = 4;
}

RNG_HD uint32_t rng_u32(rng_t *r) {
    if (r->used == 4) {
        rng_philox_block_(r->key, r->ctr, r->out);
        r->ctr[0]++;
        r->used = 0;
    }
    return r->out[r->used++];
}

/* Uniform in [0, 1) with 24 bits. */
RNG_HD float rng_uniform(rng_t *r) { return (float)(rng_u32(r) >> 8) * (1.0f / 16777216.0f); }

/* Uniform in [0, 1) with 53 bits. */
RNG_HD double rng_uniform_f64(rng_t *r) {
    uint64_t hi = rng_u32(r) >> 5, lo = rng_u32(r) >> 6;
    return (double)(hi * 67108864.0 + lo) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n), n > 0, without modulo bias (Lemire). */
RNG_HD uint32_t rng_below(rng_t *r, uint32_t n) {
    uint64_t m = (uint64_t)rng_u32(r) * n;
    uint32_t l = (uint32_t)m;
    if (l < n) {
        uint32_t t = (uint32_t)(-n) % n;
        while (l < t) {
            m = (uint64_t)rng_u32(r) * n;
            l = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

/* Standard normal (Box-Muller, one value per call; deterministic). */
double rng_normal(rng_t *r);

#endif
