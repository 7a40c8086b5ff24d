/* image_transform.h: torchvision's ImageNet transforms, fused with decoding: encoded file
 * -> size x size x c uint8 pixels, one call per sample.
 *
 * Training:   RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip(0.5)
 *             (or, with rrc off, the evaluation geometry + the flip).
 * Evaluation: Resize(resize) (shorter side; the longer one int(resize * long / short),
 *             as torchvision computes it) + CenterCrop(size) (offsets rounded half to
 *             even, zero padding when the crop is larger than the resized image).
 * Resampling is PIL's bilinear filter with its antialiasing support (support 1 x the
 * downscale factor), 22-bit fixed-point coefficients and an 8-bit intermediate between
 * the horizontal and the vertical pass (Pillow's Resample.c), which torchvision's PIL path
 * uses; restricting the filter to the crop reproduces crop-then-resize. So at full decode
 * scale the output equals torchvision's transforms on PIL images bit for bit (tested); the
 * centre crop only computes the pixels it keeps.
 *
 * RandomResizedCrop draws follow torchvision's get_params: up to 10 attempts of (area
 * fraction uniform in scale, log aspect ratio uniform in log(ratio)), w = round(sqrt(area
 * x ratio)), h = round(sqrt(area / ratio)) with Python's half-to-even rounding, accepted
 * when it fits, then top uniform in [0, H - h], left in [0, W - w]; else the centre
 * fallback clamped to the ratio range. The draws come from the caller's rng (Philox keyed
 * (seed, AUGMENT, epoch, index)), in that order, then the flip (uniform < 0.5).
 *
 * DCT-domain scaling (dct_scaling, JPEG only): the decoder scales by the smallest M/8 (M
 * in 1..8) at which the crop still has at least as many pixels as the output on both
 * axes, and decodes only the crop's blocks; the bilinear pass then maps the scaled crop
 * to the output. PIL's draft mode and FFCV do the same with M/8 in {1, 2, 4, 8}/8.
 */
#ifndef RUNNER_DATA_IMAGE_TRANSFORM_H
#define RUNNER_DATA_IMAGE_TRANSFORM_H

#include <stdbool.h>
#include <stdint.h>

#include "data/image.h"
#include "util/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct img_tf_opts {
    int size;                 /* output side (data.image_size) */
    int resize;               /* evaluation: shorter side before the centre crop */
    bool rrc;                 /* training: RandomResizedCrop (else resize + centre crop) */
    double scale[2], ratio[2];/* RandomResizedCrop bounds */
    bool flip;                /* training: RandomHorizontalFlip(0.5) */
    bool dct_scaling;         /* JPEG: decode at reduced scale when the crop allows */
    int channels;             /* 3 (RGB) or 1 (L) */
    img_limits_t limits;
} img_tf_opts_t;

/* What one sample's transform did (tests, benchmark). */
typedef struct img_tf_info {
    int width, height;        /* the file's */
    int top, left, h, w;      /* the crop in the file's pixels (training) */
    bool flip;
    int scale_num;            /* DCT scale used, /8 */
} img_tf_info_t;

/* Per-thread memory, zero-initialised; img_work_free releases it. */
typedef struct img_work {
    img_buf_t dec;
    uint8_t *tmp;             /* horizontal pass output */
    size_t tmp_cap;
    int *xb, *yb;             /* per output pixel: first source pixel, tap count */
    int32_t *xk, *yk;         /* taps */
    size_t kcap, bcap;
} img_work_t;

void img_work_free(img_work_t *w);

/* torchvision's RandomResizedCrop.get_params for a width x height image. */
void img_rrc_params(const double scale[2], const double ratio[2], int width, int height,
                    rng_t *r, int *top, int *left, int *h, int *w);

/* The evaluation geometry: the resized image's side lengths for a width x height image. */
void img_resize_dims(int resize, int width, int height, int *rw, int *rh);

/* Decodes bytes and writes out (size x size x channels, HWC). train: draws from r (the
 * crop when o->rrc, then the flip when o->flip); else r is unused. info may be NULL.
 * Returns 0 or -1 (ERR_INPUT for a bad file, the message without the file name). */
int img_transform(const img_tf_opts_t *o, const uint8_t *bytes, size_t len, bool train,
                  rng_t *r, uint8_t *out, img_work_t *w, img_tf_info_t *info, err_t *e);

/* The resampling alone, on decoded pixels (src: sw x sh x c, HWC): the box [bx0, bx1) x
 * [by0, by1) of src, filtered within it, to out (ow x oh). For the tests (PIL's
 * crop + resize). */
int img_resize_box(const uint8_t *src, int sw, int sh, int c, int bx0, int by0, int bx1,
                   int by1, int ow, int oh, uint8_t *out, img_work_t *w, err_t *e);

#ifdef __cplusplus
}
#endif
#endif
