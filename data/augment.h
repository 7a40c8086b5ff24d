/* augment.h: per-sample augmentation of uint8 HWC images, and normalisation.
 *
 * The order is torchvision's usual CIFAR pipeline: RandomCrop(size, padding) with zero
 * padding, RandomHorizontalFlip(p=0.5), RandomRotation(r) (angle uniform in [-r, r]
 * degrees, counter-clockwise positive, about the image centre ((W-1)/2, (H-1)/2) in pixel
 * coordinates, bilinear, zero fill, result rounded to uint8 as PIL does), then ToTensor and
 * Normalize: out = (x / 255 - mean[c]) / std[c].
 *
 * The random parameters of a sample are a pure function of (seed, epoch, dataset index):
 * augment_draw uses rng keyed (seed, RNG_STREAM_AUGMENT, epoch, index) and draws, in this
 * order, crop top, crop left, flip, angle. Only enabled ops draw.
 *
 * Evaluation applies no randomness: with a crop size different from the image, it takes
 * the centre crop (zero padded if larger), so train and eval tensors have the same shape.
 */
#ifndef RUNNER_DATA_AUGMENT_H
#define RUNNER_DATA_AUGMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "data/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct augment_opts {
    bool random_crop;     /* RandomCrop(crop_size, padding=crop_padding) */
    int crop_size;        /* output side; <= H + 2 * padding and <= W + 2 * padding */
    int crop_padding;     /* zero padding on each side */
    bool horizontal_flip; /* p = 0.5 */
    double rotation;      /* degrees; 0 = off */
} augment_opts_t;

/* One sample's drawn parameters. */
typedef struct augment_params {
    int top, left;        /* crop offset in the padded image (padded coordinates) */
    bool flip;
    double angle;         /* degrees, counter-clockwise */
} augment_params_t;

/* Output side lengths for an input of h x w under o (crop size if cropping, else h, w). */
void augment_out_shape(const augment_opts_t *o, int h, int w, int *oh, int *ow);

/* Draws the parameters for (seed, epoch, index) for an h x w input. */
augment_params_t augment_draw(const augment_opts_t *o, int h, int w, uint64_t seed,
                              int64_t epoch, int64_t index);

/* The deterministic evaluation parameters (centre crop, no flip, no rotation). */
augment_params_t augment_eval_params(const augment_opts_t *o, int h, int w);

/* Applies p to src (h x w x c, HWC) writing dst (oh x ow x c, HWC, from augment_out_shape).
 * scratch must hold oh * ow * c bytes (used only when rotating). */
void augment_apply(const augment_opts_t *o, const augment_params_t *p, const uint8_t *src,
                   int c, int h, int w, uint8_t *dst, uint8_t *scratch);

/* The rotation alone (src h x w x c -> dst, as augment_apply rotates). */
void augment_rotate(const uint8_t *src, int c, int h, int w, double angle, uint8_t *dst);

/* Normalises n pixels of c channels: out[i*c+k] = (in[i*c+k] / 255 - mean[k]) / std[k]. */
void augment_normalize(const uint8_t *in, int64_t n, int c, const float *mean,
                       const float *std, float *out);

#ifdef __cplusplus
}
#endif
#endif
