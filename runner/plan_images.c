/* plan_images.c: the image_folder part of the plan (plan.h): the folders' sizes, classes
 * and per-class counts, the transforms, and the loader worker count.
 *
 * Workers (data.workers: auto): the decode + training transform is timed on this thread
 * (CPU time, so a loaded machine does not skew it) over up to 32 training images spread
 * through the split, giving images/s per core. The device's appetite is estimated as
 * effective FLOP/s / (3 x forward FLOPs per image): on CUDA 100 TFLOP/s with AMP and 50
 * without (ResNet-50 at 224 px, 8.2 GFLOP forward: ~4000 and ~2000 images/s, the order of
 * NVIDIA's published H100 training throughput: an assumption until this project measures
 * it on its own GPU runs), on the CPU
 * backend 20 GFLOP/s per compute thread. workers = ceil(appetite / rate), at least 1, at
 * most the cores per local rank minus one (the rank's own thread) on CUDA, 2 on the CPU
 * (the compute threads use the cores). The plan prints the numbers it used.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/image_transform.h"
#include "runner/plan.h"
#include "util/fs.h"
#include "util/json.h"

struct plan_images {
    int classes;
    char **names;
    int64_t *train_count, *val_count;
    dataset_notes_t train_notes, val_notes;
    dataset_t *train;          /* open between plan_images_data and plan_images_workers */
    double rate;               /* measured images/s per core, 0: not measured */
    int timed;
    double appetite;           /* images/s the device is estimated to take */
};

void plan_folder_opts(const experiment_t *x, dataset_opts_t *o, data_split_t split,
                      const char *root) {
    memset(o, 0, sizeof *o);
    o->name = x->data.dataset;
    o->root = root;
    o->split = split;
    o->folder.train_dir = x->data.train_dir;
    o->folder.val_dir = x->data.val_dir;
    o->folder.channels = x->data.image_mode == 1 ? 1 : 3;
    o->folder.skip_bad = x->data.bad_images == 1;
}

void plan_image_tf(const experiment_t *x, img_tf_opts_t *tf) {
    memset(tf, 0, sizeof *tf);
    tf->size = x->data.image_size;
    tf->resize = x->data.resize;
    tf->rrc = x->data.augment.random_resized_crop;
    for (int i = 0; i < 2; i++) {
        tf->scale[i] = x->data.augment.rrc_scale[i];
        tf->ratio[i] = x->data.augment.rrc_ratio[i];
    }
    tf->flip = x->data.augment.horizontal_flip;
    tf->dct_scaling = x->data.jpeg_dct_scaling;
    tf->channels = x->data.image_mode == 1 ? 1 : 3;
    tf->limits = img_default_limits();
}

void plan_images_free(plan_t *p) {
    struct plan_images *im = p->images;
    if (!im) return;
    for (int k = 0; im->names && k < im->classes; k++) free(im->names[k]);
    free(im->names);
    free(im->train_count);
    free(im->val_count);
    dataset_free(im->train);
    free(im);
    p->images = NULL;
}

int plan_images_data(const experiment_t *e, plan_t *p, int *classes, err_t *err) {
    struct plan_images *im = calloc(1, sizeof *im);
    if (!im) return err_set(err, ERR_RUNTIME, "out of memory");
    p->images = im;
    dataset_t *val = NULL;
    dataset_opts_t o;
    plan_folder_opts(e, &o, DATA_SPLIT_TRAIN, p->data_root);
    o.folder.cache_read_only = p->read_only;
    if (dataset_open(&o, &im->train, err)) return -1;
    plan_folder_opts(e, &o, DATA_SPLIT_VAL, p->data_root);
    o.folder.cache_read_only = p->read_only;
    if (dataset_open(&o, &val, err)) return -1;
    im->classes = dataset_num_classes(im->train);
    im->names = calloc((size_t)im->classes, sizeof *im->names);
    im->train_count = calloc((size_t)im->classes, sizeof *im->train_count);
    im->val_count = calloc((size_t)im->classes, sizeof *im->val_count);
    int rc = im->names && im->train_count && im->val_count ? 0
           : err_set(err, ERR_RUNTIME, "out of memory");
    for (int k = 0; !rc && k < im->classes; k++)
        if (!(im->names[k] = strdup(dataset_class_name(im->train, k))))
            rc = err_set(err, ERR_RUNTIME, "out of memory");
    if (!rc) {
        dataset_class_counts(im->train, im->train_count);
        dataset_class_counts(val, im->val_count);
        im->train_notes = *dataset_notes(im->train);
        im->val_notes = *dataset_notes(val);
        p->train_size = dataset_size(im->train);
        p->val_size = dataset_size(val);
        p->data_present = true;
        p->channels = e->data.image_mode == 1 ? 1 : 3;
        p->height = p->width = e->data.image_size;
        *classes = im->classes;
    }
    dataset_free(val);
    return rc;
}

static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Decode + training transform of up to 32 training images, timed. */
static int measure(const experiment_t *e, struct plan_images *im, err_t *err) {
    img_tf_opts_t tf;
    plan_image_tf(e, &tf);
    int64_t n = dataset_size(im->train), k = n < 32 ? n : 32;
    data_buf_t buf = {0};
    img_work_t work = {0};
    uint8_t *out = malloc((size_t)tf.size * tf.size * tf.channels);
    if (!out) return err_set(err, ERR_RUNTIME, "out of memory");
    double busy = 0;
    int rc = 0, done = 0;
    for (int64_t j = 0; j < k && !rc; j++) {
        int64_t i = j * n / k;
        data_sample_t s;
        err_t fe = {0};
        double t0 = thread_seconds();
        rng_t r = rng_make(e->seed, RNG_STREAM_AUGMENT, 0, (uint64_t)i);
        if (dataset_read(im->train, i, &s, &buf, &fe) ||
            img_transform(&tf, s.bytes, s.len, true, &r, out, &work, NULL, &fe)) {
            if (e->data.bad_images == 1) continue; /* the run skips it too */
            rc = err_set(err, ERR_INPUT, "image_folder: %s: %s; fix or remove the file, or set "
                         "data.bad_images: skip", buf.path, fe.msg);
            break;
        }
        busy += thread_seconds() - t0;
        done++;
    }
    free(out);
    data_buf_free(&buf);
    img_work_free(&work);
    im->timed = done;
    im->rate = done && busy > 0 ? done / busy : 0;
    return rc;
}

int plan_images_workers(const experiment_t *e, plan_t *p, err_t *err) {
    struct plan_images *im = p->images;
    int rc = 0;
    if (e->data.workers >= 0) {
        p->loader_workers = e->data.workers;
        snprintf(p->workers_why, sizeof p->workers_why, "data.workers");
    } else if (!im) {
        p->loader_workers = 2;
        snprintf(p->workers_why, sizeof p->workers_why, "auto: 2 for in-memory datasets");
    } else if (!(rc = measure(e, im, err))) {
        bool cuda = !strcmp(p->device, "cuda");
        double flops = cuda ? (e->amp.enabled ? 100e12 : 50e12) : 20e9 * p->threads_per_rank;
        double per_image = 3e9 * (p->forward_gflops_per_sample > 0 ? p->forward_gflops_per_sample : 1);
        im->appetite = flops / per_image;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int per_rank = (int)(cores / (p->local_world_size > 0 ? p->local_world_size : 1));
        int cap = cuda ? (per_rank > 1 ? per_rank - 1 : 1) : 2;
        if (cap > 64) cap = 64;
        int want = im->rate > 0 ? (int)ceil(im->appetite / im->rate) : cap;
        p->loader_workers = want < 1 ? 1 : want > cap ? cap : want;
        snprintf(p->workers_why, sizeof p->workers_why,
                 "auto: decode + transform measured at %.0f images/s per core on %d training "
                 "images; the %s is estimated to take ~%.0f images/s (%.0f %sFLOP/s effective, "
                 "%.2f GFLOP per image forward x 3); at most %d", im->rate, im->timed,
                 cuda ? "GPU" : "CPU backend", im->appetite, cuda ? flops / 1e12 : flops / 1e9,
                 cuda ? "T" : "G", per_image / 3e9, cap);
    }
    if (im) {
        dataset_free(im->train);
        im->train = NULL;
    }
    return rc;
}

static void describe_counts(const int64_t *c, int k, const char *const *names, char *out,
                            size_t cap) {
    int64_t lo = -1, hi = -1, tot = 0;
    int lo_k = 0;
    for (int i = 0; i < k; i++) {
        tot += c[i];
        if (lo < 0 || c[i] < lo) lo = c[i], lo_k = i;
        if (c[i] > hi) hi = c[i];
    }
    if (lo == hi) snprintf(out, cap, "%lld in %d classes (%lld each)", (long long)tot, k, (long long)lo);
    else if (lo == 0) snprintf(out, cap, "%lld in %d classes (%lld .. %lld per class; %s has none)",
                               (long long)tot, k, (long long)lo, (long long)hi, names[lo_k]);
    else snprintf(out, cap, "%lld in %d classes (%lld .. %lld per class, imbalance %.2fx; smallest %s)",
                  (long long)tot, k, (long long)lo, (long long)hi, (double)hi / (double)lo, names[lo_k]);
}

void plan_images_print(const plan_t *p, const experiment_t *e, FILE *f) {
    const struct plan_images *im = p->images;
    if (!im) return;
    char tr[512], va[512];
    describe_counts(im->train_count, im->classes, (const char *const *)im->names, tr, sizeof tr);
    describe_counts(im->val_count, im->classes, (const char *const *)im->names, va, sizeof va);
    fprintf(f, "images       train %s\n             val %s\n", tr, va);
    fprintf(f, "classes      ");
    for (int k = 0; k < im->classes && k < 8; k++) fprintf(f, "%s%d %s", k ? ", " : "", k, im->names[k]);
    fprintf(f, "%s (all in plan.json and classes.txt)\n", im->classes > 8 ? ", ..." : "");
    int64_t skipped = im->train_notes.skipped + im->val_notes.skipped;
    if (skipped)
        fprintf(f, "bad files    %lld left out (data.bad_images: skip), found while indexing; first: %s "
                "(files that fail to decode are found while training: the run lists both in "
                "skipped_images.jsonl)\n", (long long)skipped,
                im->train_notes.first_skipped[0] ? im->train_notes.first_skipped : im->val_notes.first_skipped);
    int64_t rechecked = im->train_notes.index_rechecked + im->val_notes.index_rechecked;
    fprintf(f, "index        %s", im->train_notes.index_path[0] ? im->train_notes.index_path : "not cached (no writable cache directory)");
    if (im->train_notes.index_reused && rechecked)
        fprintf(f, " (reused: no walk of the tree; %lld file%s changed since, checked again)\n", (long long)rechecked,
                rechecked == 1 ? "" : "s");
    else
        fprintf(f, "%s\n", im->train_notes.index_reused ? " (reused: no walk of the tree)"
                           : !im->train_notes.index_path[0] ? ""
                           : p->read_only ? " (built in memory: the plan writes nothing; the run caches it there)"
                                          : " (written)");
    fprintf(f, "transform    train ");
    if (e->data.augment.random_resized_crop)
        fprintf(f, "RandomResizedCrop(%d, scale=(%g, %g), ratio=(%g, %g))", e->data.image_size,
                e->data.augment.rrc_scale[0], e->data.augment.rrc_scale[1],
                e->data.augment.rrc_ratio[0], e->data.augment.rrc_ratio[1]);
    else
        fprintf(f, "Resize(%d) + CenterCrop(%d)", e->data.resize, e->data.image_size);
    if (e->data.augment.horizontal_flip) fprintf(f, " + RandomHorizontalFlip");
    if (e->data.augment.rotation > 0) fprintf(f, " + RandomRotation(%g)", e->data.augment.rotation);
    fprintf(f, "; eval Resize(%d) + CenterCrop(%d); %s; JPEG DCT scaling %s\n", e->data.resize,
            e->data.image_size, e->data.image_mode == 1 ? "grayscale (L)" : "RGB",
            e->data.jpeg_dct_scaling ? "on" : "off");
    fprintf(f, "loader       %d worker%s per rank (%s)\n", p->loader_workers,
            p->loader_workers == 1 ? "" : "s", p->workers_why);
}

void plan_images_json(const plan_t *p, jw_t *w) {
    jw_kint(w, "loader_workers", p->loader_workers);
    jw_kstr(w, "loader_workers_why", p->workers_why);
    const struct plan_images *im = p->images;
    if (!im) return;
    jw_key(w, "classes");
    jw_arr_begin(w);
    for (int k = 0; k < im->classes; k++) jw_str(w, im->names[k]);
    jw_arr_end(w);
    jw_key(w, "train_per_class");
    jw_arr_begin(w);
    for (int k = 0; k < im->classes; k++) jw_int(w, im->train_count[k]);
    jw_arr_end(w);
    jw_key(w, "val_per_class");
    jw_arr_begin(w);
    for (int k = 0; k < im->classes; k++) jw_int(w, im->val_count[k]);
    jw_arr_end(w);
    jw_kint(w, "bad_images_skipped", im->train_notes.skipped + im->val_notes.skipped);
    jw_kint(w, "other_formats", im->train_notes.other_formats + im->val_notes.other_formats);
    jw_kstr(w, "index_cache", im->train_notes.index_path);
    jw_kbool(w, "index_reused", im->train_notes.index_reused);
    jw_kint(w, "index_rechecked", im->train_notes.index_rechecked + im->val_notes.index_rechecked);
    jw_knum(w, "decode_img_per_s_per_core", im->rate);
}

int plan_images_write_classes(const plan_t *p, const char *path, err_t *e) {
    const struct plan_images *im = p->images;
    if (!im) return 0;
    size_t len = 0;
    for (int k = 0; k < im->classes; k++) len += strlen(im->names[k]) + 1;
    char *buf = malloc(len + 1), *q = buf;
    if (!buf) return err_set(e, ERR_RUNTIME, "out of memory");
    for (int k = 0; k < im->classes; k++) q += sprintf(q, "%s\n", im->names[k]);
    int rc = write_file_atomic(path, buf, len, e);
    free(buf);
    return rc;
}
