/* erasing.h: timm's RandomErasing on one normalised HWC float image (the CPU loader's side;
 * model/cuda/augment.cu applies the same boxes and values on the GPU).
 *
 * Definition followed (timm data/random_erasing.py, RandomErasing(probability, mode,
 * count) with its defaults min_area 0.02, max_area 1/3, min_aspect 0.3, max_aspect 1/0.3):
 * with probability `prob` the image gets 1..count boxes (count drawn uniformly when > 1),
 * each from up to 10 attempts at area U(0.02, 1/3) * H * W / count and log-uniform aspect
 * ratio, kept when it fits; the box is filled with 0 (mode const), one normal value per
 * channel (rand) or one per element (pixel). Applied after normalisation, before mixup.
 * Draws: util/augops.h erase_draw (boxes) and erase_normal (values).
 */
#ifndef RUNNER_DATA_ERASING_H
#define RUNNER_DATA_ERASING_H

#include <stdint.h>

#include "util/augops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct erasing_opts {
    double prob;          /* 0: off (timm --reprob) */
    erase_mode_t mode;    /* const | rand | pixel (timm --remode, default pixel) */
    int count;            /* most boxes per image, 1..ERASE_MAX_COUNT (timm --recount); 0: 1 */
} erasing_opts_t;

/* Erases sample (seed, epoch, index) of img (h x w x c floats) in place; returns the number
 * of boxes written. */
int erasing_apply(const erasing_opts_t *o, uint64_t seed, int64_t epoch, int64_t index, float *img, int c,
                  int h, int w);

#ifdef __cplusplus
}
#endif
#endif
