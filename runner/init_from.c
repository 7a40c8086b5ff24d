/* init_from.c: model.init_from / model.init_head (init_from.h). The checks here turn a
 * shape mismatch the loader would report generically into the key the user has to change;
 * the loading itself is safetensors_load_net_from. */
#include "runner/init_from.h"

#include <stdio.h>
#include <string.h>

#include "model/safetensors.h"

/* "[64,3,7,7]" */
static const char *shape_of(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

static bool same_shape(const st_tensor_t *f, const net_tensor_t *t) {
    if (f->ndim != t->ndim) return false;
    for (int d = 0; d < t->ndim; d++)
        if (f->shape[d] != t->shape[d]) return false;
    return true;
}

/* The stem and input channels of conv1, the architecture named in the metadata. */
static int check_stem(const safetensors_t *st, const net_t *n, const init_from_opts_t *o, err_t *e) {
    const char *arch = safetensors_meta(st, "arch");
    if (arch && arch[0] && strcmp(arch, o->arch))
        return err_set(e, ERR_INPUT, "%s holds %s weights (its metadata says arch %s), and this run builds %s; "
                       "set model.arch: %s", o->path, arch, arch, o->arch, arch);
    const st_tensor_t *f = safetensors_find(st, "classifier.0.weight");
    const net_tensor_t *t = net_find_tensor(n, "classifier.0.weight");
    const arch_info_t *ai = arch_info(o->arch);
    if (ai && ai->family == ARCH_FAM_VGG && f && t && f->ndim == 2 && !same_shape(f, t) && f->shape[1] != t->shape[1]) {
        char a[64], b[64];
        bool file_imagenet = f->shape[1] > 512;
        return err_set(e, ERR_INPUT, "%s has classifier.0.weight %s, %s, but this run builds %s's %s variant "
                       "(classifier.0.weight %s; %s); set model.stem: %s", o->path,
                       shape_of(a, sizeof a, f->ndim, f->shape),
                       file_imagenet ? "torchvision's ImageNet head (7x7 pool, 4096 wide)" : "the CIFAR variant's 512-wide head",
                       o->arch, o->stem == ARCH_STEM_IMAGENET ? "ImageNet" : "CIFAR",
                       shape_of(b, sizeof b, t->ndim, t->shape), o->stem_reason ? o->stem_reason : "model.stem",
                       file_imagenet ? "imagenet" : "cifar");
    }
    f = safetensors_find(st, "conv1.weight");
    t = net_find_tensor(n, "conv1.weight");
    if (!f || !t || f->ndim != 4 || same_shape(f, t)) return 0;
    char a[64], b[64];
    shape_of(a, sizeof a, f->ndim, f->shape);
    shape_of(b, sizeof b, t->ndim, t->shape);
    if (f->shape[2] != t->shape[2] || f->shape[3] != t->shape[3]) {
        bool file_imagenet = f->shape[2] == 7;
        return err_set(e, ERR_INPUT, "%s has conv1.weight %s, %s, but this run builds %s with the %s stem "
                       "(conv1.weight %s; %s); set model.stem: %s", o->path, a,
                       file_imagenet ? "torchvision's ImageNet stem (7x7 conv + max-pool)" : "a CIFAR stem (3x3 conv, no max-pool)",
                       o->arch, o->stem == ARCH_STEM_IMAGENET ? "ImageNet" : "CIFAR", b,
                       o->stem_reason ? o->stem_reason : "model.stem", file_imagenet ? "imagenet" : "cifar");
    }
    if (f->shape[1] != t->shape[1])
        return err_set(e, ERR_INPUT, "%s has conv1.weight %s for %lld input channels, and the data has %lld "
                       "(conv1.weight %s); use %lld-channel images, or adapt conv1 before converting (for "
                       "grayscale, sum conv1.weight over its input channels)", o->path, a,
                       (long long)f->shape[1], (long long)t->shape[1], b, (long long)f->shape[1]);
    return 0;
}

/* "<classifier>." of the run's arch (fc. for the ResNets; arch_head): what reinit keeps. */
static const char *head_prefix(const init_from_opts_t *o, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.", arch_head(o->arch));
    return buf;
}

/* The classifier under strict: a class-count mismatch names both shapes and model.init_head. */
static int check_head(const safetensors_t *st, const net_t *n, const init_from_opts_t *o, err_t *e) {
    char w[64];
    snprintf(w, sizeof w, "%s.weight", arch_head(o->arch));
    const st_tensor_t *f = safetensors_find(st, w);
    const net_tensor_t *t = net_find_tensor(n, w);
    if (o->reinit_head || !f || !t || f->ndim != 2 || same_shape(f, t) || f->shape[1] != t->shape[1])
        return 0;   /* other in-features: an architecture mismatch, the loader's message */
    char a[64], b[64];
    return err_set(e, ERR_INPUT, "%s: %s has shape %s (%lld classes), and this model's is %s "
                   "(model.num_classes %lld); set model.init_head: reinit to start the classifier afresh "
                   "and load everything else, or model.num_classes: %lld", o->path, w,
                   shape_of(a, sizeof a, f->ndim, f->shape), (long long)f->shape[0],
                   shape_of(b, sizeof b, t->ndim, t->shape), (long long)t->shape[0], (long long)f->shape[0]);
}

/* Opens o->path and runs every check; the file, or NULL with e set. */
static safetensors_t *open_checked(const net_t *n, const init_from_opts_t *o, err_t *e) {
    char head[64];
    safetensors_t *st = safetensors_open(o->path, 0, e);
    if (st && (check_stem(st, n, o, e) || check_head(st, n, o, e) ||
               safetensors_check_net(n, st, o->reinit_head ? head_prefix(o, head, sizeof head) : NULL, e))) {
        safetensors_close(st);
        return NULL;
    }
    return st;
}

int init_from_check(const net_t *n, const init_from_opts_t *o, err_t *e) {
    safetensors_t *st = open_checked(n, o, e);
    int rc = st ? 0 : -1;
    safetensors_close(st);
    return rc;
}

int init_from_load(net_t *n, const init_from_opts_t *o, err_t *e) {
    safetensors_t *st = open_checked(n, o, e);
    if (!st) return -1;
    char head[64];
    int rc = safetensors_load_net_from(n, st, o->reinit_head ? head_prefix(o, head, sizeof head) : NULL, e);
    safetensors_close(st);
    return rc;
}
