/* augment.h: training-batch augmentation on the GPU, drawing exactly what the CPU loader
 * (data/augment.c) draws, so a run gives the same images on either path.
 *
 * The whole dataset split is uploaded once as uint8 HWC images (dataset_pixels); each step
 * passes the batch's dataset indices (device int64), and one kernel writes the normalised
 * NHWC batch (fp32, fp16 or bf16) and, optionally, the gathered labels.
 *
 * Random draws per sample, from rng_make(seed, RNG_STREAM_AUGMENT, epoch, index)
 * (util/rng.h), in this order, each only when its augmentation is enabled:
 *   1. crop top  = rng_below(H + 2*pad - size + 1)        (random_crop; 2*pad+1 when size == H)
 *   2. crop left = rng_below(W + 2*pad - size + 1)
 *   3. flip      = rng_uniform() < 0.5f                   (horizontal_flip)
 *   4. angle     = -r + 2*r * rng_uniform_f64()  degrees  (rotation r != 0; two u32 draws)
 * Evaluation (train = false) draws nothing: centre crop top = left = pad + lround((H-size)/2),
 * no flip, no rotation.
 * The image is cropped from the zero-padded source (top/left in padded coordinates),
 * flipped, rotated about ((W-1)/2, (H-1)/2) counter-clockwise by angle with bilinear
 * sampling (out-of-image neighbours are 0, the result times the in-image weight, rounded
 * half to even to uint8), then normalised: out = (v / 255 - mean[c]) / std[c] in fp32 and
 * rounded once to the output dtype. Device arithmetic uses explicit round-to-nearest
 * operations in the CPU's evaluation order (no FMA contraction), so it matches
 * data/augment.c bit for bit, rotation included (up to cos/sin of the angle, which both
 * compute in double).
 *
 * With auto_kind set, each sample's uint8 image then goes through its RandAugment /
 * TrivialAugmentWide ops (data/autoaugment.h; ops drawn on the device by aa_draw, their
 * parameters read from the host-built table, per-pixel formulas shared with the CPU in
 * util/augops.h, per-image statistics as exact integers) in aa_scratch; with erase_prob > 0
 * the boxes of erase_draw replace the normalised values (erase_value). Both are bit-exact
 * with the CPU loader, except the erasing's normal values and box sides, which use log,
 * exp, cos and sin in double: the two libms differ in the last bits of a double, which
 * changes the float value or the integer side only when it lies within ~1e-16 of a
 * rounding boundary.
 *
 * cuda_mixup_batch then mixes a batch written in fp32 (dt DT_F32 into a staging buffer) into
 * the net's input and writes the soft targets, from the per-sample mix_sample_t the host
 * drew with data/mixup.h (the same draws as the CPU loader).
 *
 * Not here: sampling/shuffling (data/sampler.c), the upload of the dataset (the caller
 * allocates with backend alloc and uploads once), CPU augmentation (data/augment.c).
 */
#ifndef RUNNER_MODEL_CUDA_AUGMENT_H
#define RUNNER_MODEL_CUDA_AUGMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "model/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_augment_desc {
    int c, h, w;             /* dataset image shape (uint8 HWC), c in 1..4 */
    bool train;              /* true: random draws; false: evaluation parameters */
    bool random_crop;        /* RandomCrop(crop_size, padding = crop_padding) */
    int crop_size;
    int crop_padding;
    bool horizontal_flip;    /* p = 0.5 */
    double rotation;         /* degrees, 0 = off */
    float mean[4], std[4];   /* per channel; std must be non-zero */
    uint64_t seed;
    int64_t epoch;
    const int64_t *epoch_dev; /* non-NULL: the epoch is read on the device from this word
                                 instead (a recorded step takes each step's epoch) */
    /* training only (issue 17), all zero/NULL: off; draws and formulas in util/augops.h */
    int auto_kind;           /* AUTOAUG_RAND | AUTOAUG_TRIVIAL, after the crop/flip/rotation */
    int aa_num_ops, aa_magnitude;
    const void *aa_table;    /* device aa_entry_t[AA_TABLE_SIZE] from autoaug_build_table (oh x ow) */
    uint8_t *aa_scratch;     /* device, 2 x batch x oh x ow x c bytes (the images between ops) */
    double erase_prob;       /* timm RandomErasing on the normalised values; 0: off */
    int erase_mode, erase_count;
} cuda_augment_desc_t;

/* Output side lengths (crop_size when cropping, else h, w). */
void cuda_augment_out_shape(const cuda_augment_desc_t *d, int *oh, int *ow);

/* Writes batch augmented samples into out (device, batch x oh x ow x c of dt, NHWC).
 * images: device uint8, the whole split (n_images x h x w x c); indices: device int64,
 * batch dataset indices in [0, n_images) (out-of-range indices give a zero image and
 * label -1); labels: device int32 per image or NULL; out_labels: device int32 x batch or
 * NULL. Enqueued on the backend's stream and allocates nothing; returns 0, or -1 with the
 * backend error set. Call it from the thread that drives the backend, between steps: the
 * stream orders it after the previous step's reads of `out` (use two output buffers to
 * let the next batch's augmentation overlap the current step's kernels). */
int cuda_augment_batch(backend_t *be, const cuda_augment_desc_t *d, const uint8_t *images,
                       int64_t n_images, const int32_t *labels, const int64_t *indices,
                       int batch, dtype_t dt, void *out, int32_t *out_labels);

/* Mixes a batch of n fp32 images x (n x h x w x c, device, from cuda_augment_batch with
 * DT_F32) into out (dt) as samples (device mix_sample_t[n], util/augops.h) say, and writes
 * targets (device, n x classes fp32) from labels (device int32[n]) with the on/off values of
 * data/mixup.h mixup_on_off. Enqueued on the backend's stream; returns 0 or -1. */
int cuda_mixup_batch(backend_t *be, const void *samples, int n, int h, int w, int c, const float *x,
                     dtype_t dt, void *out, const int32_t *labels, int classes, float on, float off,
                     float *targets);

#ifdef __cplusplus
}
#endif
#endif
