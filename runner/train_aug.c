/* train_aug.c: the trainer's side of issue 17's data recipe (train_internal.h): the
 * loader options for auto-augment, random erasing and mixup from the experiment, soft
 * targets on the nets, and on the GPU data path the device table and scratch, the
 * descriptor fields and the per-micro-batch mixing (drawn here on the host with
 * data/mixup.h, exactly as the CPU loader draws, then uploaded and applied by
 * cuda_mixup_batch). Where mixing happens per mode: single and each DDP rank mix their own
 * micro-batch (timm's Mixup on each rank's batch, keyed by the rank); DP mixes the whole
 * micro-batch on the host before the scatter (rank 0's key), as timm's Mixup in front of
 * nn.DataParallel does.
 * Not here: the ops themselves (data/autoaugment.c, erasing.c, mixup.c, model/cuda/augment.cu).
 */
#include <stdlib.h>
#include <string.h>

#include "runner/train_internal.h"

#ifdef RUNNER_HAVE_CUDA
#include "model/cuda/augment.h"
#endif

void trainer_aug_opts(const experiment_t *x, int classes, loader_opts_t *lo) {
    lo->autoaug.kind = (autoaug_kind_t)x->data.augment.auto_kind;
    lo->autoaug.num_ops = x->data.augment.ra_num_ops;
    lo->autoaug.magnitude = x->data.augment.ra_magnitude;
    lo->erasing.prob = x->data.augment.erase_prob;
    lo->erasing.mode = (erase_mode_t)x->data.augment.erase_mode;
    lo->erasing.count = x->data.augment.erase_count;
    lo->mixup.alpha = x->data.mixup.alpha;
    lo->mixup.cutmix_alpha = x->data.mixup.cutmix_alpha;
    lo->mixup.prob = x->data.mixup.prob;
    lo->mixup.switch_prob = x->data.mixup.switch_prob;
    lo->mixup.mode = (mixup_mode_t)x->data.mixup.mode;
    lo->mixup.smoothing = x->train.label_smoothing;
    lo->mixup.classes = classes;
}

int trainer_aug_soft_targets(trainer_t *t, err_t *e) {
    t->mix = mixup_enabled(&t->train_opts.mixup);
    if (!t->mix) return 0;
    mixup_on_off(t->train_opts.mixup.smoothing, t->train_opts.mixup.classes, &t->mix_on, &t->mix_off);
    for (int i = 0; i < TRAIN_MAX_REPLICAS && t->replica_net[i]; i++)
        if (net_enable_soft_targets(t->replica_net[i], e)) return -1;
    return 0;
}

void trainer_aug_free(trainer_t *t) {
    backend_t *be = t->be;
    void *p[] = {t->gpu_aa_table, t->gpu_aa_scratch, t->gpu_mix_in, t->gpu_mix_samples};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i]) be->ops->release(be, p[i]);
    free(t->mix_host);
}

#ifdef RUNNER_HAVE_CUDA
int trainer_aug_setup_gpu(trainer_t *t, err_t *e) {
    const loader_opts_t *lo = &t->train_opts;
    backend_t *be = t->be;
    int mb = t->p->micro_batch;
    t->mix = mixup_enabled(&lo->mixup);
    size_t elems = (size_t)t->p->height * t->p->width * t->p->channels;
    if (lo->autoaug.kind != AUTOAUG_NONE) {
        aa_entry_t *table = malloc(AA_TABLE_SIZE * sizeof *table);
        if (!table) return err_set(e, ERR_RUNTIME, "out of memory");
        autoaug_build_table(lo->autoaug.kind, t->p->height, t->p->width, table);
        int bad = !(t->gpu_aa_table = be->ops->alloc(be, AA_TABLE_SIZE * sizeof *table)) ||
                  be->ops->upload(be, t->gpu_aa_table, table, AA_TABLE_SIZE * sizeof *table) ||
                  !(t->gpu_aa_scratch = be->ops->alloc(be, 2 * (size_t)mb * elems));
        free(table);
        if (bad) {
            *e = be->err;
            return -1;
        }
    }
    if (t->mix) {
        if (!(t->gpu_mix_in = be->ops->alloc(be, (size_t)mb * elems * sizeof(float))) ||
            !(t->gpu_mix_samples = be->ops->alloc(be, (size_t)mb * sizeof(mix_sample_t)))) {
            *e = be->err;
            return -1;
        }
        if (!(t->mix_host = malloc((size_t)mb * sizeof(mix_sample_t)))) return err_set(e, ERR_RUNTIME, "out of memory");
    }
    return 0;
}

void trainer_aug_desc(const trainer_t *t, cuda_augment_desc_t *d) {
    const loader_opts_t *lo = &t->train_opts;
    d->auto_kind = lo->autoaug.kind;
    d->aa_num_ops = lo->autoaug.num_ops;
    d->aa_magnitude = lo->autoaug.magnitude;
    d->aa_table = t->gpu_aa_table;
    d->aa_scratch = t->gpu_aa_scratch;
    d->erase_prob = lo->erasing.prob;
    d->erase_mode = lo->erasing.mode;
    d->erase_count = lo->erasing.count;
}

int trainer_aug_mix_gpu(trainer_t *t, int n, int64_t batch, err_t *e) {
    backend_t *be = t->be;
    const loader_opts_t *lo = &t->train_opts;
    int h = t->p->height, w = t->p->width;
    mixup_draw(&lo->mixup, lo->seed, t->epoch, batch, lo->rank, n, h, w, t->mix_host);
    if (be->ops->upload(be, t->gpu_mix_samples, t->mix_host, (size_t)n * sizeof(mix_sample_t)) ||
        cuda_mixup_batch(be, t->gpu_mix_samples, n, h, w, t->p->channels, t->gpu_mix_in, t->act_dt,
                         net_input(t->net), net_labels(t->net), lo->mixup.classes, t->mix_on, t->mix_off,
                         net_targets(t->net))) {
        *e = be->err;
        return -1;
    }
    return 0;
}
#endif
