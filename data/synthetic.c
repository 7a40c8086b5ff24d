/* synthetic.c: the "synthetic" dataset, generated deterministically from the seed.
 *
 * Each class k has a mean pattern: per channel a base level plus a plane wave whose
 * frequency, orientation and phase depend on k, drawn from rng keyed
 * (seed, RNG_STREAM_SYNTHETIC, 2, k) (split 2 = patterns, shared by train and val). Sample i
 * of a split s draws its label and its noise from rng keyed (seed, RNG_STREAM_SYNTHETIC, s, i):
 * label uniform in [0, classes), pixel = clamp(pattern + uniform noise in [-48, 48]).
 * So the classes are separable but not trivially (a small ResNet learns it far above chance),
 * and the data is the same on every machine and for every rank.
 *
 * Not here: any file I/O.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset_impl.h"
#include "util/rng.h"

static int synthetic_open(dataset_t *d, const dataset_opts_t *opts, err_t *e) {
    const data_synthetic_opts_t *o = &opts->synthetic;
    uint64_t seed = opts->seed;
    d->root[0] = 0;
    int64_t n = d->split == DATA_SPLIT_TRAIN ? o->train_size : o->val_size;
    int c = o->channels, h = o->height, w = o->width, classes = o->classes;
    if (n < 1 || n > (1LL << 31))
        return err_set(e, ERR_INPUT, "data.synthetic.%s is %lld, expected 1..2^31",
                       d->split == DATA_SPLIT_TRAIN ? "train_size" : "val_size", (long long)n);
    if (c < 1 || c > DATA_MAX_CHANNELS || h < 1 || h > 4096 || w < 1 || w > 4096)
        return err_set(e, ERR_INPUT, "data.synthetic.image is [%d, %d, %d], expected [C, H, W] "
                       "with C in 1..%d and H, W in 1..4096", c, h, w, DATA_MAX_CHANNELS);
    if (classes < 2 || classes > 100000)
        return err_set(e, ERR_INPUT, "data.synthetic.classes is %d, expected 2..100000",
                       classes);
    if (dataset_alloc_(d, n, c, h, w, classes, e)) return -1;
    size_t img = (size_t)h * w * c;
    float *patterns = xmalloc((size_t)classes * img * sizeof(float), e);
    if (!patterns) return -1;
    for (int k = 0; k < classes; k++) {
        rng_t r = rng_make(seed, RNG_STREAM_SYNTHETIC, 2, (uint64_t)k);
        float fy = (float)rng_below(&r, 4), fx = (float)rng_below(&r, 4);
        if (fx == 0 && fy == 0) fx = 1;
        for (int ch = 0; ch < c; ch++) {
            float base = 64.0f + 128.0f * rng_uniform(&r);
            float amp = 40.0f + 30.0f * rng_uniform(&r);
            float phase = 6.2831853f * rng_uniform(&r);
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                    patterns[(size_t)k * img + ((size_t)y * w + x) * c + ch] =
                        base + amp * sinf(6.2831853f * (fx * x / w + fy * y / h) + phase);
        }
    }
    uint32_t split = d->split == DATA_SPLIT_TRAIN ? 0 : 1;
    for (int64_t i = 0; i < n; i++) {
        rng_t r = rng_make(seed, RNG_STREAM_SYNTHETIC, split, (uint64_t)i);
        int label = (int)rng_below(&r, (uint32_t)classes);
        d->labels[i] = label;
        const float *p = patterns + (size_t)label * img;
        uint8_t *dst = d->pixels + (size_t)i * img;
        for (size_t j = 0; j < img; j += 4) {
            uint32_t bits = rng_u32(&r);
            for (size_t t = 0; t < 4 && j + t < img; t++) {
                float noise = ((float)((bits >> (8 * t)) & 0xff) - 127.5f) * (48.0f / 127.5f);
                float v = p[j + t] + noise;
                dst[j + t] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : lrintf(v));
            }
        }
    }
    free(patterns);
    return 0;
}

const dataset_reader_t dataset_reader_synthetic = {
    {"synthetic", "", "", "", 3, 32, 32, 10, 1024, 256, {0.5f, 0.5f, 0.5f, 0.5f},
     {0.25f, 0.25f, 0.25f, 0.25f}},
    NULL, synthetic_open, NULL, NULL, NULL, NULL,
};
