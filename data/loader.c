/* loader.c: the prefetching, augmenting batch loader (see loader.h for the contract).
 *
 * Batch b of an epoch lives in ring slot b % nslots. Workers claim batches in increasing
 * order under one mutex, but only while the slot is free (b < released + nslots, where
 * released counts the batches the consumer has given back), fill them without the lock,
 * and mark them ready. loader_next gives back the previous batch and waits for the next
 * one in order, so the consumer sees batches in order whatever the workers' timing. A
 * generation counter lets loader_start_epoch abandon in-flight work: it waits until no
 * worker is filling, then resets the ring. A filler that fails (a bad image file) marks
 * its slot failed with the error, which loader_next returns in batch order. Not here: the
 * per-sample maths (augment.c, image_transform.c).
 */
#include "data/loader.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"
#include "util/half.h"

enum { SLOT_FREE = 0, SLOT_FILLING = 1, SLOT_READY = 2 };

typedef struct slot {
    loader_batch_t b;
    int64_t *ids;
    float *f32;            /* mixup: the batch in fp32 (== b.images for float dtypes) */
    int state;
    int failed;
    err_t err;
} slot_t;

/* Per-filler scratch: the augmented uint8 image and the rotation's intermediate; with
 * erasing or mixup the normalised fp32 sample and the batch's mixing; for datasets not in
 * memory the file's bytes and the decoder's memory. */
typedef struct scratch {
    uint8_t *img, *tmp;
    float *f32;
    mix_sample_t *mix;
    data_buf_t file;
    img_work_t work;
} scratch_t;

typedef struct worker_arg {
    loader_t *l;
    int id;
} worker_arg_t;

struct loader {
    const dataset_t *ds;
    loader_opts_t o;
    loader_allocator_t alloc;
    sampler_t sampler;
    int c, h, w, oh, ow;
    size_t img_elems, elem_size;
    int64_t num_batches;
    float lut[DATA_MAX_CHANNELS][256];
    aa_entry_t *aa;            /* auto-augment op table (training, auto on), else NULL */
    bool erase, mix;           /* random erasing / mixup on (training) */
    float mix_on, mix_off;     /* mixup target values */
    int nslots;
    slot_t *slots;
    scratch_t *scratch;        /* nthreads + 1 (the last is the synchronous path's) */
    int nthreads, started;
    pthread_t *threads;
    worker_arg_t *args;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    /* epoch state, under mu */
    int64_t epoch;
    uint64_t generation;
    int active, shutdown, in_flight;
    int64_t next_claim, released, next_consume, end_batch, held;
    /* datasets not in memory */
    bool files;
    uint8_t *bad;              /* per sample: failed to decode (skip_bad); atomic bytes */
    int64_t bad_count;         /* distinct, atomic */
    pthread_mutex_t bad_mu;    /* the finds not yet taken (loader_take_bad): */
    int64_t *bad_new, n_new, cap_new;
    char **bad_why;
};

static void *default_alloc(void *ctx, size_t n) { (void)ctx; return malloc(n); }
static void default_free(void *ctx, void *p) { (void)ctx; free(p); }

/* Converts count fp32 values f to the batch dtype at element offset off of images (f may
 * be images + off itself). */
static void store_f32(const loader_t *l, const float *f, void *images, size_t off, size_t count) {
    if (l->o.dtype == LOADER_F32) {
        if ((float *)images + off != f) memcpy((float *)images + off, f, count * sizeof(float));
    } else if (l->o.dtype == LOADER_F32_ROUND_F16 || l->o.dtype == LOADER_F32_ROUND_BF16) {
        float *out = (float *)images + off;
        bool f16 = l->o.dtype == LOADER_F32_ROUND_F16;
        for (size_t i = 0; i < count; i++) out[i] = f16 ? round_f16(f[i]) : round_bf16(f[i]);
    } else {
        uint16_t *out = (uint16_t *)images + off;
        bool f16 = l->o.dtype == LOADER_F16;
        for (size_t i = 0; i < count; i++) out[i] = f16 ? f32_to_f16(f[i]) : f32_to_bf16(f[i]);
    }
}

/* The fp32 path of one sample (erasing or mixup on): normalise u into f, erase, and
 * unless the batch is still to be mixed store it at element offset off of the batch. */
static void fill_f32(const loader_t *l, int64_t epoch, int64_t idx, const uint8_t *u, float *f, slot_t *s,
                     size_t off) {
    int c = l->c;
    size_t px = (size_t)l->oh * l->ow;
    for (size_t i = 0; i < px; i++)
        for (int k = 0; k < c; k++) f[i * c + k] = l->lut[k][u[i * c + k]];
    if (l->erase) erasing_apply(&l->o.erasing, l->o.seed, epoch, idx, f, c, l->oh, l->ow);
    if (!l->mix) store_f32(l, f, s->b.images, off, l->img_elems);
}

/* Records sample src's first failure for loader_take_bad: why without the
 * "image_folder: <path>: " the message starts with. Out of memory loses the reason only. */
static void note_bad(loader_t *l, int64_t src, const char *msg, const char *path) {
    const char *why = msg;
    if (!strncmp(why, "image_folder: ", 14)) why += 14;
    size_t pl = path ? strlen(path) : 0;
    if (pl && !strncmp(why, path, pl) && !strncmp(why + pl, ": ", 2)) why += pl + 2;
    pthread_mutex_lock(&l->bad_mu);
    if (l->n_new == l->cap_new) {
        int64_t c = l->cap_new ? 2 * l->cap_new : 16;
        int64_t *ni = realloc(l->bad_new, (size_t)c * sizeof *ni);
        if (ni) l->bad_new = ni;
        char **nw = ni ? realloc(l->bad_why, (size_t)c * sizeof *nw) : NULL;
        if (nw) l->bad_why = nw, l->cap_new = c;
    }
    if (l->n_new < l->cap_new) {
        l->bad_new[l->n_new] = src;
        l->bad_why[l->n_new++] = strdup(why);
    }
    pthread_mutex_unlock(&l->bad_mu);
}

/* One sample of a dataset not in memory into sc->img (oh x ow x c): read, decode and
 * transform; rotation last. With skip_bad, a sample whose file fails is replaced by the
 * next one that decodes, drawn with idx's random numbers. */
static int image_sample(loader_t *l, int64_t epoch, int64_t idx, scratch_t *sc, int *label,
                        err_t *e) {
    int64_t n = dataset_size(l->ds), src = idx;
    for (int64_t tries = 0; tries < n; tries++, src = (src + 1) % n) {
        if (l->bad && __atomic_load_n(&l->bad[src], __ATOMIC_RELAXED)) continue;
        rng_t r = rng_make(l->o.seed, RNG_STREAM_AUGMENT, (uint64_t)epoch, (uint64_t)idx);
        data_sample_t s;
        err_t fe = {0};
        int rc = dataset_read(l->ds, src, &s, &sc->file, &fe);
        if (!rc && img_transform(&l->o.image, s.bytes, s.len, !l->o.eval, &r, sc->img,
                                 &sc->work, NULL, &fe)) {
            err_t wrapped = {0};
            err_set(&wrapped, fe.code ? fe.code : ERR_INPUT, "image_folder: %s: %s", s.path, fe.msg);
            fe = wrapped;
            rc = -1;
        }
        if (!rc) {
            *label = s.label;
            if (!l->o.eval && l->o.augment.rotation != 0.0) {
                double a = -l->o.augment.rotation + 2.0 * l->o.augment.rotation * rng_uniform_f64(&r);
                augment_rotate(sc->img, l->c, l->oh, l->ow, a, sc->tmp);
                memcpy(sc->img, sc->tmp, l->img_elems);
            }
            return 0;
        }
        if (!l->bad || fe.code != ERR_INPUT) {
            if (fe.code == ERR_INPUT)
                snprintf(fe.msg + strlen(fe.msg), sizeof fe.msg - strlen(fe.msg), "; fix or "
                         "remove the file, or set data.bad_images: skip to leave such files out");
            *e = fe;
            return -1;
        }
        if (!__atomic_exchange_n(&l->bad[src], 1, __ATOMIC_RELAXED)) {
            __atomic_fetch_add(&l->bad_count, 1, __ATOMIC_RELAXED);
            note_bad(l, src, fe.msg, s.path);
        }
    }
    return err_set(e, ERR_INPUT, "image_folder: none of the %lld images of %s can be decoded",
                   (long long)n, dataset_root(l->ds));
}

/* Fills slot s with batch b of the current epoch. Reads only immutable state (dataset,
 * sampler indices, options), so it runs without the lock. */
static int fill_batch(loader_t *l, int64_t epoch, int64_t b, slot_t *s, scratch_t *sc) {
    int64_t start = b * l->o.batch_size;
    int64_t n = l->sampler.num_samples - start;
    if (n > l->o.batch_size) n = l->o.batch_size;
    s->b.index = b;
    s->b.n = (int)n;
    s->failed = 0;
    augment_params_t eval_p = augment_eval_params(&l->o.augment, l->h, l->w);
    size_t px = (size_t)l->oh * l->ow;
    for (int64_t j = 0; j < n; j++) {
        int64_t idx = l->sampler.indices[start + j];
        int label;
        if (l->files) {
            if (image_sample(l, epoch, idx, sc, &label, &s->err)) {
                s->failed = 1;
                return -1;
            }
        } else {
            const uint8_t *src = dataset_get(l->ds, idx, &label);
            augment_params_t p = l->o.eval ? eval_p
                : augment_draw(&l->o.augment, l->h, l->w, l->o.seed, epoch, idx);
            augment_apply(&l->o.augment, &p, src, l->c, l->h, l->w, sc->img, sc->tmp);
        }
        if (l->aa)
            autoaug_apply(&l->o.autoaug, l->aa, l->o.seed, epoch, idx, sc->img, sc->tmp, l->c, l->oh, l->ow);
        s->ids[j] = idx;
        s->b.labels[j] = label;
        size_t off = (size_t)j * l->img_elems;
        const uint8_t *u = sc->img;
        int c = l->c;
        if (l->erase || l->mix) {
            float *f = l->mix ? s->f32 + off : l->o.dtype == LOADER_F32 ? (float *)s->b.images + off : sc->f32;
            fill_f32(l, epoch, idx, u, f, s, off);
            continue;
        }
        switch (l->o.dtype) {
        case LOADER_F32: {
            float *out = (float *)s->b.images + off;
            for (size_t i = 0; i < px; i++)
                for (int k = 0; k < c; k++) out[i * c + k] = l->lut[k][u[i * c + k]];
            break;
        }
        case LOADER_F32_ROUND_F16:
        case LOADER_F32_ROUND_BF16: {
            float *out = (float *)s->b.images + off;
            int f16 = l->o.dtype == LOADER_F32_ROUND_F16;
            for (size_t i = 0; i < px; i++)
                for (int k = 0; k < c; k++) {
                    float v = l->lut[k][u[i * c + k]];
                    out[i * c + k] = f16 ? round_f16(v) : round_bf16(v);
                }
            break;
        }
        case LOADER_F16:
        case LOADER_BF16: {
            uint16_t *out = (uint16_t *)s->b.images + off;
            int f16 = l->o.dtype == LOADER_F16;
            for (size_t i = 0; i < px; i++)
                for (int k = 0; k < c; k++) {
                    float v = l->lut[k][u[i * c + k]];
                    out[i * c + k] = f16 ? f32_to_f16(v) : f32_to_bf16(v);
                }
            break;
        }
        }
    }
    if (l->mix) {
        mixup_draw(&l->o.mixup, l->o.seed, epoch, b, l->o.rank, (int)n, l->oh, l->ow, sc->mix);
        mixup_apply(sc->mix, (int)n, l->oh, l->ow, l->c, s->f32);
        mixup_targets(sc->mix, (int)n, s->b.labels, l->o.mixup.classes, l->mix_on, l->mix_off, s->b.targets);
        store_f32(l, s->f32, s->b.images, 0, (size_t)n * l->img_elems);
    }
    return 0;
}

/* A worker thread: claims the next fillable batch, fills it, marks it ready. */
static void *worker_main(void *arg) {
    worker_arg_t *a = arg;
    loader_t *l = a->l;
    pthread_mutex_lock(&l->mu);
    while (!l->shutdown) {
        if (l->active && l->next_claim < l->end_batch &&
            l->next_claim < l->released + l->nslots) {
            int64_t b = l->next_claim++, epoch = l->epoch;
            uint64_t gen = l->generation;
            slot_t *s = &l->slots[b % l->nslots];
            s->state = SLOT_FILLING;
            l->in_flight++;
            pthread_mutex_unlock(&l->mu);
            (void)fill_batch(l, epoch, b, s, &l->scratch[a->id]); /* failure: s->failed */
            pthread_mutex_lock(&l->mu);
            l->in_flight--;
            if (gen == l->generation) s->state = SLOT_READY;
            pthread_cond_broadcast(&l->cv_done);
            continue;
        }
        pthread_cond_wait(&l->cv_work, &l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* The training-only options: auto-augment, random erasing, mixup. */
static int check_recipe_opts(const loader_t *l, const loader_opts_t *o, err_t *e) {
    const autoaug_opts_t *a = &o->autoaug;
    if (a->kind != AUTOAUG_NONE) {
        if (a->kind != AUTOAUG_RAND && a->kind != AUTOAUG_TRIVIAL)
            return err_set(e, ERR_INPUT, "data.augment.auto: unknown kind %d", (int)a->kind);
        if (l->c != 1 && l->c != 3)
            return err_set(e, ERR_INPUT, "data.augment.auto needs 1- or 3-channel images (torchvision's "
                           "ops are defined for those); these have %d; set it to null", l->c);
        if (a->kind == AUTOAUG_RAND && (a->num_ops < 0 || a->num_ops > AA_MAX_OPS || a->magnitude < 0 ||
                                        a->magnitude >= AA_BINS))
            return err_set(e, ERR_INPUT, "data.augment.randaugment: num_ops %d, magnitude %d; expected "
                           "num_ops 0..%d and magnitude 0..%d", a->num_ops, a->magnitude, AA_MAX_OPS, AA_BINS - 1);
    }
    const erasing_opts_t *r = &o->erasing;
    if (!(r->prob >= 0.0 && r->prob <= 1.0) || r->count < 0 || r->count > ERASE_MAX_COUNT ||
        (r->mode != ERASE_CONST && r->mode != ERASE_RAND && r->mode != ERASE_PIXEL))
        return err_set(e, ERR_INPUT, "data.augment.random_erasing: prob %g, count %d, mode %d; expected prob "
                       "0..1, count 1..%d, mode const|rand|pixel", r->prob, r->count, (int)r->mode,
                       ERASE_MAX_COUNT);
    const mixup_opts_t *m = &o->mixup;
    if (!(m->alpha >= 0.0 && m->alpha <= 1e6) || !(m->cutmix_alpha >= 0.0 && m->cutmix_alpha <= 1e6) ||
        !(m->prob >= 0.0 && m->prob <= 1.0) || !(m->switch_prob >= 0.0 && m->switch_prob <= 1.0) ||
        (unsigned)m->mode > MIXUP_ELEM || !(m->smoothing >= 0.0 && m->smoothing < 1.0))
        return err_set(e, ERR_INPUT, "data.mixup: alpha %g, cutmix_alpha %g, prob %g, switch_prob %g, smoothing "
                       "%g; expected alphas >= 0, probabilities 0..1, smoothing in [0, 1)", m->alpha,
                       m->cutmix_alpha, m->prob, m->switch_prob, m->smoothing);
    if (mixup_enabled(m) && m->classes < 1)
        return err_set(e, ERR_INPUT, "data.mixup: %d classes; the soft targets need model.num_classes >= 1",
                       m->classes);
    return 0;
}

/* Validates the options against the dataset; fills l's shapes. */
static int check_opts(loader_t *l, const loader_opts_t *o, err_t *e) {
    const augment_opts_t *a = &o->augment;
    if (o->batch_size < 1)
        return err_set(e, ERR_INPUT, "loader: batch size %d, expected >= 1", o->batch_size);
    if (o->workers < 0 || o->workers > 256)
        return err_set(e, ERR_INPUT, "loader: data.workers is %d, expected 0..256",
                       o->workers);
    if (o->prefetch < 0)
        return err_set(e, ERR_INPUT, "loader: prefetch %d < 0", o->prefetch);
    if (l->files) {
        const img_tf_opts_t *im = &o->image;
        if (a->random_crop)
            return err_set(e, ERR_INPUT, "data.augment.random_crop does not apply to %s; use "
                           "data.augment.random_resized_crop", dataset_name(l->ds));
        if (im->size < 1 || im->size > 8192 || im->resize < 1 || im->resize > 65535)
            return err_set(e, ERR_INPUT, "loader: image size %d / resize %d, expected 1..8192 "
                           "and 1..65535", im->size, im->resize);
        if (im->rrc && !(im->scale[0] > 0 && im->scale[0] <= im->scale[1] && im->scale[1] <= 1 &&
                         im->ratio[0] > 0 && im->ratio[0] <= im->ratio[1]))
            return err_set(e, ERR_INPUT, "data.augment.random_resized_crop: scale [%g, %g] and "
                           "ratio [%g, %g] must satisfy 0 < scale[0] <= scale[1] <= 1 and 0 < "
                           "ratio[0] <= ratio[1]", im->scale[0], im->scale[1], im->ratio[0],
                           im->ratio[1]);
    } else if (a->random_crop && (a->crop_padding < 0 || a->crop_size < 1 ||
                           a->crop_size > l->h + 2 * a->crop_padding ||
                           a->crop_size > l->w + 2 * a->crop_padding))
        return err_set(e, ERR_INPUT, "data.augment.random_crop: size %d with padding %d does "
                       "not fit a %dx%d image (need 1 <= size <= side + 2 * padding)",
                       a->crop_size, a->crop_padding, l->h, l->w);
    if (!(a->rotation >= 0.0 && a->rotation <= 180.0))
        return err_set(e, ERR_INPUT, "data.augment.rotation is %g, expected 0..180 degrees",
                       a->rotation);
    if (o->n_norm != 0 && o->n_norm != 1 && o->n_norm != l->c)
        return err_set(e, ERR_INPUT, "data.normalize has %d values, expected %d (one per "
                       "channel) or 1", o->n_norm, l->c);
    for (int k = 0; k < o->n_norm; k++)
        if (!(o->std[k] > 0))
            return err_set(e, ERR_INPUT, "data.normalize.std[%d] is %g, expected > 0", k,
                           (double)o->std[k]);
    if (o->dtype < LOADER_F32 || o->dtype > LOADER_BF16)
        return err_set(e, ERR_INPUT, "loader: unknown dtype %d", (int)o->dtype);
    return o->eval ? 0 : check_recipe_opts(l, o, e);
}

int loader_create(const dataset_t *ds, const loader_opts_t *o, loader_t **out, err_t *e) {
    *out = NULL;
    loader_t *l = xcalloc(1, sizeof *l, e);
    if (!l) return -1;
    pthread_mutex_init(&l->bad_mu, NULL);
    l->ds = ds;
    l->o = *o;
    dataset_shape(ds, &l->c, &l->h, &l->w);
    l->files = !dataset_in_memory(ds);
    if (o->eval) l->o.augment.horizontal_flip = false, l->o.augment.rotation = 0;
    if (check_opts(l, o, e)) { free(l); return -1; }
    if (o->eval) {
        memset(&l->o.autoaug, 0, sizeof l->o.autoaug);
        memset(&l->o.erasing, 0, sizeof l->o.erasing);
        memset(&l->o.mixup, 0, sizeof l->o.mixup);
    }
    l->erase = l->o.erasing.prob > 0.0;
    if (l->o.erasing.count == 0) l->o.erasing.count = 1;   /* zero-initialised options: one box */
    l->mix = mixup_enabled(&l->o.mixup);
    if (l->mix) mixup_on_off(l->o.mixup.smoothing, l->o.mixup.classes, &l->mix_on, &l->mix_off);
    if (l->files) {
        l->o.image.channels = l->c;
        if (o->skip_bad && !(l->bad = calloc((size_t)dataset_size(ds) + 1, 1))) {
            free(l);
            return err_set(e, ERR_RUNTIME, "out of memory (loader)");
        }
    }
    l->alloc = o->allocator ? *o->allocator
                            : (loader_allocator_t){default_alloc, default_free, NULL};
    if (l->files) l->oh = l->ow = o->image.size;
    else augment_out_shape(&l->o.augment, l->h, l->w, &l->oh, &l->ow);
    if (l->o.autoaug.kind != AUTOAUG_NONE) {
        if (!(l->aa = xmalloc(AA_TABLE_SIZE * sizeof(aa_entry_t), e))) { free(l->bad); free(l); return -1; }
        autoaug_build_table(l->o.autoaug.kind, l->oh, l->ow, l->aa);
    }
    l->img_elems = (size_t)l->oh * l->ow * l->c;
    l->elem_size = (o->dtype == LOADER_F16 || o->dtype == LOADER_BF16) ? 2 : 4;
    for (int k = 0; k < l->c; k++) {
        float mean = 0.0f, std = 1.0f;
        if (o->n_norm) {
            mean = o->mean[o->n_norm == 1 ? 0 : k];
            std = o->std[o->n_norm == 1 ? 0 : k];
        }
        for (int v = 0; v < 256; v++) l->lut[k][v] = ((float)v / 255.0f - mean) / std;
    }
    sampler_opts_t so = {dataset_size(ds), o->world_size ? o->world_size : 1, o->rank,
                         o->shuffle, o->drop_last, o->eval, o->seed};
    if (sampler_init(&l->sampler, &so, e)) { free(l->aa); free(l->bad); free(l); return -1; }
    l->num_batches = o->drop_last_batch ? l->sampler.num_samples / o->batch_size
        : (l->sampler.num_samples + o->batch_size - 1) / o->batch_size;
    if (l->num_batches < 1) {
        err_set(e, ERR_INPUT, "loader: %lld samples per rank make no full batch of %d with "
                "drop_last; lower the batch size", (long long)l->sampler.num_samples,
                o->batch_size);
        sampler_deinit(&l->sampler);
        free(l->aa);
        free(l->bad);
        free(l);
        return -1;
    }
    l->nthreads = o->workers;
    l->nslots = o->prefetch ? o->prefetch : (2 * o->workers > 2 ? 2 * o->workers : 2);
    l->slots = xcalloc((size_t)l->nslots, sizeof(slot_t), e);
    l->scratch = xcalloc((size_t)l->nthreads + 1, sizeof(scratch_t), e);
    l->threads = xcalloc((size_t)l->nthreads + 1, sizeof(pthread_t), e);
    l->args = xcalloc((size_t)l->nthreads + 1, sizeof(worker_arg_t), e);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv_work, NULL);
    pthread_cond_init(&l->cv_done, NULL);
    l->epoch = -1;
    l->held = -1;
    if (!l->slots || !l->scratch || !l->threads || !l->args) { loader_free(l); return -1; }
    for (int i = 0; i < l->nslots; i++) {
        slot_t *s = &l->slots[i];
        s->b.images = l->alloc.alloc(l->alloc.ctx, (size_t)o->batch_size * l->img_elems *
                                     l->elem_size);
        s->b.labels = l->alloc.alloc(l->alloc.ctx, (size_t)o->batch_size * sizeof(int32_t));
        s->ids = xmalloc((size_t)o->batch_size * sizeof(int64_t), e);
        s->f32 = (float *)s->b.images;
        bool need = s->b.images && s->b.labels && s->ids;
        if (l->mix && need) {
            s->b.targets = l->alloc.alloc(l->alloc.ctx, (size_t)o->batch_size * o->mixup.classes * sizeof(float));
            if (l->elem_size == 2) s->f32 = xmalloc((size_t)o->batch_size * l->img_elems * sizeof(float), e);
            need = s->b.targets && s->f32;
        }
        if (!need) {
            if (!s->ids || e == NULL || !e->code)
                err_set(e, ERR_RUNTIME, "loader: cannot allocate batch buffers (%zu bytes)",
                        (size_t)o->batch_size * l->img_elems * l->elem_size);
            loader_free(l);
            return -1;
        }
        s->b.h = l->oh; s->b.w = l->ow; s->b.c = l->c;
        s->b.dtype = o->dtype;
        s->b.sample_ids = s->ids;
    }
    for (int i = 0; i <= l->nthreads; i++) {
        size_t bytes = l->img_elems ? l->img_elems : 1;
        l->scratch[i].img = xmalloc(bytes, e);
        l->scratch[i].tmp = xmalloc(bytes, e);
        if (!l->scratch[i].img || !l->scratch[i].tmp) { loader_free(l); return -1; }
        if ((l->erase || l->mix) && !(l->scratch[i].f32 = xmalloc(bytes * sizeof(float), e))) {
            loader_free(l);
            return -1;
        }
        if (l->mix && !(l->scratch[i].mix = xmalloc((size_t)o->batch_size * sizeof(mix_sample_t), e))) {
            loader_free(l);
            return -1;
        }
    }
    for (int i = 0; i < l->nthreads; i++) {
        l->args[i] = (worker_arg_t){l, i};
        if (pthread_create(&l->threads[i], NULL, worker_main, &l->args[i]) != 0) {
            err_set(e, ERR_RUNTIME, "loader: cannot start worker thread %d of %d", i + 1,
                    l->nthreads);
            loader_free(l);
            return -1;
        }
        l->started++;
    }
    *out = l;
    return 0;
}

int64_t loader_num_batches(const loader_t *l) { return l->num_batches; }
int64_t loader_bad_images(const loader_t *l) {
    return __atomic_load_n(&l->bad_count, __ATOMIC_RELAXED);
}
int64_t loader_take_bad(loader_t *l, int64_t **idx, char ***why) {
    pthread_mutex_lock(&l->bad_mu);
    int64_t n = l->n_new;
    *idx = n ? l->bad_new : NULL;
    *why = n ? l->bad_why : NULL;
    if (n) l->bad_new = NULL, l->bad_why = NULL, l->n_new = l->cap_new = 0;
    pthread_mutex_unlock(&l->bad_mu);
    return n;
}

int64_t loader_num_samples(const loader_t *l) { return l->sampler.num_samples; }
const sampler_t *loader_sampler(const loader_t *l) { return &l->sampler; }

void loader_shape(const loader_t *l, int *h, int *w, int *c) {
    if (h) *h = l->oh;
    if (w) *w = l->ow;
    if (c) *c = l->c;
}

int loader_start_epoch(loader_t *l, int64_t epoch, int64_t start_batch, err_t *e) {
    if (epoch < 0)
        return err_set(e, ERR_INPUT, "loader: epoch %lld < 0", (long long)epoch);
    if (start_batch < 0 || start_batch > l->num_batches)
        return err_set(e, ERR_INPUT, "loader: start batch %lld is outside 0..%lld (batches "
                       "per epoch); the checkpoint does not match this data setup",
                       (long long)start_batch, (long long)l->num_batches);
    pthread_mutex_lock(&l->mu);
    l->generation++;
    l->active = 0;
    while (l->in_flight > 0) pthread_cond_wait(&l->cv_done, &l->mu);
    for (int i = 0; i < l->nslots; i++) l->slots[i].state = SLOT_FREE;
    int rc = sampler_set_epoch(&l->sampler, epoch, e);
    if (rc == 0) {
        l->epoch = epoch;
        l->next_claim = l->released = l->next_consume = start_batch;
        l->end_batch = l->num_batches;
        l->held = -1;
        l->active = 1;
        pthread_cond_broadcast(&l->cv_work);
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int loader_next(loader_t *l, loader_batch_t **out, err_t *e) {
    *out = NULL;
    if (l->epoch < 0)
        return err_set(e, ERR_RUNTIME, "loader: loader_next before loader_start_epoch");
    double t0 = now_s();
    pthread_mutex_lock(&l->mu);
    if (l->held >= 0) {
        l->slots[l->held % l->nslots].state = SLOT_FREE;
        l->released = l->held + 1;
        l->held = -1;
        pthread_cond_broadcast(&l->cv_work);
    }
    if (l->next_consume >= l->end_batch) {
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    int64_t b = l->next_consume++;
    slot_t *s = &l->slots[b % l->nslots];
    if (l->nthreads == 0) {
        pthread_mutex_unlock(&l->mu);
        (void)fill_batch(l, l->epoch, b, s, &l->scratch[0]);
        pthread_mutex_lock(&l->mu);
    } else {
        while (!(s->state == SLOT_READY && s->b.index == b))
            pthread_cond_wait(&l->cv_done, &l->mu);
    }
    l->held = b;
    pthread_mutex_unlock(&l->mu);
    if (s->failed) {
        *e = s->err;
        return -1;
    }
    s->b.data_wait_s = now_s() - t0;
    *out = &s->b;
    return 1;
}

void loader_free(loader_t *l) {
    if (!l) return;
    if (l->threads) {
        pthread_mutex_lock(&l->mu);
        l->shutdown = 1;
        l->generation++;
        pthread_cond_broadcast(&l->cv_work);
        pthread_mutex_unlock(&l->mu);
        for (int i = 0; i < l->started; i++) pthread_join(l->threads[i], NULL);
    }
    for (int i = 0; l->slots && i < l->nslots; i++) {
        if (l->slots[i].b.images) l->alloc.free(l->alloc.ctx, l->slots[i].b.images);
        if (l->slots[i].b.labels) l->alloc.free(l->alloc.ctx, l->slots[i].b.labels);
        if (l->slots[i].b.targets) l->alloc.free(l->alloc.ctx, l->slots[i].b.targets);
        if (l->slots[i].f32 != (float *)l->slots[i].b.images) free(l->slots[i].f32);
        free(l->slots[i].ids);
    }
    for (int i = 0; l->scratch && i <= l->nthreads; i++) {
        free(l->scratch[i].img);
        free(l->scratch[i].tmp);
        free(l->scratch[i].f32);
        free(l->scratch[i].mix);
        data_buf_free(&l->scratch[i].file);
        img_work_free(&l->scratch[i].work);
    }
    free(l->aa);
    free(l->bad);
    for (int64_t i = 0; i < l->n_new; i++) free(l->bad_why[i]);
    free(l->bad_new);
    free(l->bad_why);
    pthread_mutex_destroy(&l->bad_mu);
    free(l->slots);
    free(l->scratch);
    free(l->threads);
    free(l->args);
    sampler_deinit(&l->sampler);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv_done);
    pthread_cond_destroy(&l->cv_work);
    free(l);
}
