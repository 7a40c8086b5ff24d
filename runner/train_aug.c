/* train_aug.c: the trainer's side of issue 17's data recipe (train_internal.h): the
 * loader options for auto-augment, random erasing and mixup from the experiment, soft
 * targets on the nets, and on the GPU data path the device table and scratch, the
 * augmentation and mixing kernels of a micro-batch (trainer_gpu_batch: device work only,
 * recordable, reading the epoch, the indices and the mixing draws from backend memory) and
 * the per-micro-batch mixing draws (trainer_aug_mix_draw: on the host with data/mixup.h,
 * exactly as the CPU loader draws, uploaded into the micro-batch's slot). Where mixing happens per mode: single and each DDP rank mix their own
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
            !(t->gpu_mix_samples = be->ops->alloc(be, (size_t)mb * t->p->grad_accum * sizeof(mix_sample_t)))) {
            *e = be->err;
            return -1;
        }
        if (!(t->mix_host = malloc((size_t)mb * sizeof(mix_sample_t)))) return err_set(e, ERR_RUNTIME, "out of memory");
    }
    return 0;
}

int trainer_aug_mix_draw(trainer_t *t, int n, int64_t batch, int slot, err_t *e) {
    backend_t *be = t->be;
    const loader_opts_t *lo = &t->train_opts;
    mixup_draw(&lo->mixup, lo->seed, t->epoch, batch, lo->rank, n, t->p->height, t->p->width, t->mix_host);
    void *dst = (char *)t->gpu_mix_samples + (size_t)slot * t->p->micro_batch * sizeof(mix_sample_t);
    if (be->ops->upload(be, dst, t->mix_host, (size_t)n * sizeof(mix_sample_t))) {
        *e = be->err;
        return -1;
    }
    return 0;
}

int trainer_gpu_batch(trainer_t *t, int m, int n, err_t *e) {
    backend_t *be = t->be;
    const loader_opts_t *lo = &t->train_opts;
    int c, h, w, mb = t->p->micro_batch;
    dataset_shape(t->train_ds, &c, &h, &w);
    cuda_augment_desc_t d = {.c = c, .h = h, .w = w, .train = true,
                             .random_crop = lo->augment.random_crop, .crop_size = lo->augment.crop_size,
                             .crop_padding = lo->augment.crop_padding,
                             .horizontal_flip = lo->augment.horizontal_flip,
                             .rotation = lo->augment.rotation, .seed = lo->seed, .epoch = t->epoch,
                             .epoch_dev = t->gpu_epoch,
                             .auto_kind = lo->autoaug.kind, .aa_num_ops = lo->autoaug.num_ops,
                             .aa_magnitude = lo->autoaug.magnitude, .aa_table = t->gpu_aa_table,
                             .aa_scratch = t->gpu_aa_scratch, .erase_prob = lo->erasing.prob,
                             .erase_mode = lo->erasing.mode, .erase_count = lo->erasing.count};
    for (int k = 0; k < c && k < 4; k++) {
        d.mean[k] = lo->n_norm ? lo->mean[k] : 0.0f;
        d.std[k] = lo->n_norm ? lo->std[k] : 1.0f;
    }
    net_t *net = t->net;
    if (cuda_augment_batch(be, &d, t->gpu_pixels, dataset_size(t->train_ds), t->gpu_labels,
                           t->gpu_indices + (size_t)m * mb, n, t->mix ? DT_F32 : t->act_dt,
                           t->mix ? (void *)t->gpu_mix_in : net_input(net), net_labels(net)) ||
        (t->mix && cuda_mixup_batch(be, (const char *)t->gpu_mix_samples + (size_t)m * mb * sizeof(mix_sample_t), n,
                                    t->p->height, t->p->width, t->p->channels, t->gpu_mix_in, t->act_dt,
                                    net_input(net), net_labels(net), lo->mixup.classes, t->mix_on, t->mix_off,
                                    net_targets(net)))) {
        *e = be->err;
        return -1;
    }
    return 0;
}
#endif
