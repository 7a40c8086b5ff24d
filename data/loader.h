/* loader.h: batches for one rank: sampler -> augmentation -> normalised NHWC tensors.
 *
 * A loader owns a sampler (sampler.h) and a ring of `prefetch` batch buffers. With
 * workers > 0, that many threads fill batches ahead of the consumer, in any order, into
 * their ring slot; loader_next hands them out strictly in batch order. With workers = 0
 * loader_next fills each batch itself (synchronous). The output is identical for any
 * worker count, batch size or world size, because every random draw of a sample comes
 * from rng keyed (seed, RNG_STREAM_AUGMENT, epoch, dataset index) (augment.h).
 *
 * A batch is n images of oh x ow x c in NHWC order (augment_out_shape), normalised,
 * stored as the dtype option says: float32, float32 holding values rounded to fp16/bf16
 * (the CPU backend's AMP emulation) or real 2-byte fp16/bf16 (uint16_t; the CUDA
 * backend); labels are int32. The last batch of an epoch may be short unless
 * drop_last_batch is set.
 *
 * With mixup on (training), each batch is mixed in fp32 before the conversion to dtype and
 * carries soft targets; the mixing of batch b is keyed (seed, epoch, b, rank) (mixup.h).
 *
 * Training loaders (eval = false) augment; evaluation loaders do not and split the data
 * without padding (sampler.h). A dataset not held in memory (image_folder) is decoded per
 * sample by the transform stage (image_transform.h, options in `image`): training
 * RandomResizedCrop + flip, evaluation Resize + CenterCrop, then rotation when set; its
 * output is image.size x image.size. A file that fails to read or decode makes
 * loader_next fail with ERR_INPUT naming it; with skip_bad the sample is replaced by the
 * next sample (in dataset order) that decodes, drawn with the original sample's random
 * numbers, and loader_bad_images counts the distinct failed files: deterministic, since a
 * file that fails always fails. Host buffers come from the caller's allocator (pinned memory
 * for the CUDA backend) or malloc.
 *
 * Lifecycle: loader_create -> { loader_start_epoch(epoch, start_batch) -> loader_next ... }
 * -> loader_free. loader_free (or a new start_epoch) stops and joins in-flight work; no
 * thread outlives the loader. The loader never touches the dataset's memory after free.
 */
#ifndef RUNNER_DATA_LOADER_H
#define RUNNER_DATA_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/augment.h"
#include "data/autoaugment.h"
#include "data/dataset.h"
#include "data/erasing.h"
#include "data/mixup.h"
#include "data/image_transform.h"
#include "data/sampler.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LOADER_F32 = 0,        /* float32 */
    LOADER_F32_ROUND_F16,  /* float32 holding values rounded to fp16 */
    LOADER_F32_ROUND_BF16, /* float32 holding values rounded to bf16 */
    LOADER_F16,            /* 2-byte IEEE half (uint16_t) */
    LOADER_BF16            /* 2-byte bfloat16 (uint16_t) */
} loader_dtype_t;

/* Host memory for batch buffers. alloc returns NULL on failure. */
typedef struct loader_allocator {
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *ptr);
    void *ctx;
} loader_allocator_t;

typedef struct loader_opts {
    int batch_size;        /* per rank, >= 1 */
    int workers;           /* 0 = synchronous; else threads */
    int prefetch;          /* ring slots; 0 = max(2, 2 * workers) */
    bool eval;             /* evaluation loader: no augmentation, no padding, no shuffle */
    bool shuffle;          /* train: true */
    bool drop_last;        /* sampler drop_last (DistributedSampler) */
    bool drop_last_batch;  /* drop this rank's final short batch */
    int world_size, rank;  /* 1, 0 for a single process */
    uint64_t seed;         /* shuffle + augmentation seed */
    augment_opts_t augment;/* ignored when eval except the crop size (centre crop) */
    /* training only: after `augment`, on uint8 (autoaugment.h); after normalisation, per
     * sample (erasing.h) and per batch (mixup.h, which then fills loader_batch_t.targets) */
    autoaug_opts_t autoaug;
    erasing_opts_t erasing;
    mixup_opts_t mixup;
    int n_norm;            /* 0 = no normalisation (x / 255), else = channels */
    float mean[DATA_MAX_CHANNELS], std[DATA_MAX_CHANNELS];
    loader_dtype_t dtype;
    const loader_allocator_t *allocator; /* NULL = malloc/free */
    img_tf_opts_t image;   /* datasets not in memory: decode + transform */
    bool skip_bad;         /* data.bad_images: skip (else a bad file fails the batch) */
} loader_opts_t;

/* One batch; valid until the next loader_next, loader_start_epoch or loader_free. */
typedef struct loader_batch {
    int64_t index;         /* batch number within the epoch */
    int n;                 /* images in this batch (<= batch_size) */
    int h, w, c;           /* image shape (NHWC) */
    loader_dtype_t dtype;
    void *images;          /* n*h*w*c values: float (F32*) or uint16_t (F16, BF16) */
    int32_t *labels;       /* n labels */
    float *targets;        /* mixup on: n x mixup.classes soft targets (fp32), else NULL */
    const int64_t *sample_ids; /* n dataset indices (the sampler's order) */
    double data_wait_s;    /* seconds loader_next waited for this batch */
} loader_batch_t;

typedef struct loader loader_t;

/* Creates a loader over ds (which must outlive it). Starts the worker threads.
 * Returns 0 or -1 (ERR_INPUT for bad options, ERR_RUNTIME for thread/memory failure). */
int loader_create(const dataset_t *ds, const loader_opts_t *o, loader_t **out, err_t *e);

/* Batches per epoch for this rank (the same every epoch). */
int64_t loader_num_batches(const loader_t *l);

/* Samples per epoch for this rank. */
int64_t loader_num_samples(const loader_t *l);

/* The output image shape. */
void loader_shape(const loader_t *l, int *h, int *w, int *c);

/* Starts epoch `epoch` at batch start_batch (0 normally; > 0 to resume mid-epoch, which
 * yields exactly the batches start_batch.. of the uninterrupted epoch). Abandons any
 * batches of the previous epoch still in flight. Returns 0 or -1. */
int loader_start_epoch(loader_t *l, int64_t epoch, int64_t start_batch, err_t *e);

/* The next batch of the epoch: returns 1 and sets *out, 0 at the end of the epoch, -1 on
 * error. The previous batch's buffer is recycled by this call. */
int loader_next(loader_t *l, loader_batch_t **out, err_t *e);

/* Files that failed to decode and were replaced (skip_bad), distinct, so far. */
int64_t loader_bad_images(const loader_t *l);

/* The files that failed to decode (skip_bad) since the last call, each once, in the order
 * found: *idx gets their dataset indices and *why their reasons (the message without the
 * "image_folder: <path>: " prefix; an entry may be NULL when out of memory), both
 * malloc'd arrays the caller frees, with each string. Returns how many (0: both NULL).
 * Thread-safe against the workers. */
int64_t loader_take_bad(loader_t *l, int64_t **idx, char ***why);

/* The sampler of the current epoch (indices of this rank). */
const sampler_t *loader_sampler(const loader_t *l);

/* Stops and joins the workers and frees everything (NULL is fine). */
void loader_free(loader_t *l);

#ifdef __cplusplus
}
#endif
#endif
