/* autoaugment.h: torchvision's RandAugment and TrivialAugmentWide on uint8 HWC images (the
 * CPU loader's side; model/cuda/augment.cu is the GPU's, sharing util/augops.h).
 *
 * Definitions followed (torchvision 0.14, transforms/autoaugment.py and the tensor
 * functional ops): the 14 ops Identity, ShearX, ShearY, TranslateX, TranslateY, Rotate,
 * Brightness, Color, Contrast, Sharpness, Posterize, Solarize, AutoContrast, Equalize;
 * magnitude tables of 31 bins (torch.linspace in float32, signed ops negated with
 * probability 1/2); interpolation nearest, fill 0. RandAugment(num_ops, magnitude) applies
 * num_ops ops drawn uniformly at the fixed magnitude bin; TrivialAugmentWide one op at a
 * uniformly drawn bin. Applied after the geometric augmentation (crop, flip, rotation),
 * before normalisation.
 *
 * The draws of a sample come from util/augops.h aa_draw (key (seed, AUGMENT, epoch, index)
 * at block AUG_BLOCK_AUTOAUG). Each drawn (op, bin, sign) indexes a table of resolved
 * parameters (affine grid matrix, blend ratios, posterize mask, solarize threshold) built
 * once per image size, so the CPU and the GPU read the same floats.
 */
#ifndef RUNNER_DATA_AUTOAUGMENT_H
#define RUNNER_DATA_AUTOAUGMENT_H

#include <stdint.h>

#include "util/augops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct autoaug_opts {
    autoaug_kind_t kind;   /* AUTOAUG_NONE: off */
    int num_ops;           /* RandAugment: ops per image, 0..AA_MAX_OPS (torchvision 2) */
    int magnitude;         /* RandAugment: the bin, 0..30 (torchvision 9) */
} autoaug_opts_t;

/* The table value of op at bin (the float32 torchvision's table holds, unsigned) for an
 * h x w image; 0 for ops without a table. */
float autoaug_magnitude(autoaug_kind_t kind, int op, int bin, int h, int w);

/* torch.linspace(start, end, steps)[i] in float32 as torch 1.13 computes it on an AVX2 CPU
 * (8-wide vector chunks from an fma-computed base, then scalar). */
float autoaug_linspace(double start, double end, int steps, int i);

/* Resolves op with the signed magnitude m (as torchvision's _apply_op receives it) for an
 * h x w image into e. */
void autoaug_resolve(int op, double m, int h, int w, aa_entry_t *e);

/* Fills table[AA_TABLE_SIZE] (index aa_index(op, bin, negated)) for kind and h x w. */
void autoaug_build_table(autoaug_kind_t kind, int h, int w, aa_entry_t *table);

/* Applies entry e to img (h x w x c, c 1 or 3) in place; tmp holds h * w * c bytes. */
void autoaug_apply_entry(const aa_entry_t *e, uint8_t *img, uint8_t *tmp, int c, int h, int w);

/* Draws the ops of sample (seed, epoch, index) and applies them in order. */
void autoaug_apply(const autoaug_opts_t *o, const aa_entry_t *table, uint64_t seed, int64_t epoch,
                   int64_t index, uint8_t *img, uint8_t *tmp, int c, int h, int w);

#ifdef __cplusplus
}
#endif
#endif
