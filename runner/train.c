/* train.c: one rank's training run (train.h): setup of backend, data, net, optimizer,
 * communicator and tracking; the epoch loop; evaluation; teardown.
 * One optimizer step and the read-back of step windows are in train_step.c; checkpoint
 * contents and summary.json in train_state.c. */
#include "runner/train.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runner/init_from.h"
#include "runner/rundir.h"
#include "runner/train_internal.h"
#include "util/json.h"
#include "util/rng.h"

#ifdef RUNNER_HAVE_CUDA
#include "comm/nccl.h"
#include "model/cuda/cuda_backend.h"
#endif

/* Signal state: the only process-wide mutable state, because a signal handler has no
 * context argument. The loop polls it once per step. */
static volatile sig_atomic_t stop_signals = 0, stop_interrupt = 0, stop_preempt = 0;

static void on_stop_signal(int sig) {
    if (stop_interrupt && sig == SIGINT) _exit(130);
    stop_signals++;
    if (sig == SIGINT) stop_interrupt = 1;
    else stop_preempt = 1;
}

void train_install_signal_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

bool train_stop_requested(void) { return stop_signals > 0; }

int train_stop_kind(void) { return stop_interrupt ? 1 : stop_preempt ? 2 : 0; }

/* ------------------------------------------------------------------ setup */

static int setup_backend(trainer_t *t, err_t *e) {
    bool cuda = !strcmp(t->p->device, "cuda");
    int replicas = t->dp_mode ? t->p->world_size : 1;
    if (replicas > TRAIN_MAX_REPLICAS)
        return err_set(e, ERR_INPUT, "parallel.world_size %d: dp supports at most %d replicas", replicas, TRAIN_MAX_REPLICAS);
    for (int i = 0; i < replicas; i++) {
        backend_opts_t o = {0};
        o.kind = cuda ? BACKEND_CUDA : BACKEND_CPU;
        int slot = t->dp_mode ? i : t->env->local_rank;
        o.device = t->e->parallel.n_devices ? t->e->parallel.devices[slot % t->e->parallel.n_devices]
                                            : (cuda && t->e->parallel.backend == COMM_SHM ? 0 : slot);
        o.threads = t->p->threads_per_rank;
        o.deterministic = t->e->train.deterministic;
        o.allow_tf32 = t->e->amp.tf32;
        o.cpu_winograd = t->e->train.cpu_winograd;
        for (int k = 0; k < t->e->train.n_cuda_fusion; k++) {   /* names checked at load */
            unsigned bits = 0;
            if (backend_fusion_parse(t->e->train.cuda_fusion[k], &bits, e) < 0) return -1;
            o.cuda_fusion |= bits;
        }
        /* test hook: RUNNER_CUDA_FUSION=LIST adds options, so the gpu CLI tests (exact
         * resume, graphs on == off, DDP) can run their checks with them unchanged */
        const char *fv = getenv("RUNNER_CUDA_FUSION");
        if (fv && *fv) {
            unsigned bits = 0;
            err_t pe = {0};
            if (backend_fusion_parse(fv, &bits, &pe) < 0)
                return err_set(e, ERR_INPUT, "environment variable RUNNER_CUDA_FUSION=%s: %s; unset it or fix the list",
                               fv, pe.msg);
            o.cuda_fusion |= bits;
        }
        t->replica_be[i] = backend_create(&o, e);
        if (!t->replica_be[i]) return -1;
    }
    t->be = t->replica_be[0];
    t->act_dt = !t->e->amp.enabled ? DT_F32 : t->e->amp.dtype == PREC_BF16 ? DT_BF16 : DT_F16;
    return 0;
}

static void fill_norm(const experiment_t *x, const dataset_t *d, loader_opts_t *lo) {
    dataset_info_t info;
    err_t ignore = {0};
    int c, h, w;
    dataset_shape(d, &c, &h, &w);
    if ((x->data.norm_set || !dataset_in_memory(d)) && x->data.n_norm > 0) {
        lo->n_norm = c;
        for (int k = 0; k < c && k < DATA_MAX_CHANNELS; k++) {
            int src = x->data.n_norm == 1 ? 0 : k;
            lo->mean[k] = (float)x->data.mean[src];
            lo->std[k] = (float)x->data.std[src];
        }
    } else if (dataset_info(dataset_name(d), &info, &ignore) == 0) {
        lo->n_norm = c;
        for (int k = 0; k < c && k < DATA_MAX_CHANNELS; k++) {
            lo->mean[k] = info.mean[k];
            lo->std[k] = info.std[k];
        }
    }
}

static int open_split(trainer_t *t, data_split_t split, dataset_t **out, err_t *e) {
    const experiment_t *x = t->e;
    dataset_opts_t o = {0};
    if (t->p->images) { /* image_folder: the options the plan used (its index is cached) */
        plan_folder_opts(x, &o, split, t->p->data_root);
        return dataset_open(&o, out, e);
    }
    o.name = x->data.dataset;
    o.root = t->p->data_root;
    o.split = split;
    o.download = x->data.download;
    o.download_url = x->data.download_url;
    o.download_md5 = x->data.download_md5;
    o.synthetic.train_size = x->data.synthetic.train_size;
    o.synthetic.val_size = x->data.synthetic.val_size;
    o.synthetic.channels = x->data.synthetic.image[0];
    o.synthetic.height = x->data.synthetic.image[1];
    o.synthetic.width = x->data.synthetic.image[2];
    o.synthetic.classes = x->data.synthetic.classes;
    o.seed = x->seed;
    return dataset_open(&o, out, e);
}

/* Batch buffers in page-locked memory when the batches go to a GPU, so the copy to the
 * device runs at full speed (and asynchronously). */
#ifdef RUNNER_HAVE_CUDA
static void *pinned_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    err_t ignore = {0};
    return cuda_host_alloc(bytes, &ignore);
}
static void pinned_free(void *ctx, void *p) {
    (void)ctx;
    cuda_host_free(p);
}
static const loader_allocator_t pinned_allocator = {pinned_alloc, pinned_free, NULL};
#endif

#ifdef RUNNER_HAVE_CUDA
/* Uploads the train split to the device when it fits comfortably (CIFAR: 150 MB,
 * Fashion-MNIST: 47 MB); larger datasets stay on the CPU loader with pinned buffers. */
static int setup_gpu_data(trainer_t *t, err_t *e) {
    if (!dataset_in_memory(t->train_ds)) return 0; /* decoded per batch by the CPU loader */
    int c, h, w;
    dataset_shape(t->train_ds, &c, &h, &w);
    int64_t n = dataset_size(t->train_ds);
    size_t bytes = (size_t)n * (size_t)(c * h * w);
    if (bytes > ((size_t)4 << 30)) return 0;
    backend_t *be = t->be;
    int mb = t->p->micro_batch;
    if (!(t->gpu_pixels = be->ops->alloc(be, bytes)) ||
        !(t->gpu_indices = be->ops->alloc(be, (size_t)mb * t->p->grad_accum * sizeof(int64_t))) ||
        !(t->gpu_epoch = be->ops->alloc(be, sizeof(int64_t))) ||
        !(t->gpu_labels = be->ops->alloc(be, (size_t)n * sizeof(int32_t))) ||
        be->ops->upload(be, t->gpu_pixels, dataset_pixels(t->train_ds), bytes) ||
        be->ops->upload(be, t->gpu_labels, dataset_labels(t->train_ds), (size_t)n * sizeof(int32_t))) {
        *e = be->err;
        return -1;
    }
    sampler_opts_t so = {.n = n, .world_size = t->train_opts.world_size, .rank = t->train_opts.rank,
                         .shuffle = t->train_opts.shuffle, .seed = t->train_opts.seed};
    if (sampler_init(&t->gpu_sampler, &so, e)) return -1;
    t->gpu_sampler_ready = true;
    t->gpu_data = true;
    return trainer_aug_setup_gpu(t, e);
}
#endif

/* plan is t->p, writable here: a download (ranks started by torchrun download
 * themselves) gives files whose sizes the plan must be made from. */
static int setup_data(trainer_t *t, plan_t *plan, err_t *e) {
    const experiment_t *x = t->e;
    /* With a download pending, local rank 0 fetches first and the others wait. */
    bool first = t->env->local_rank == 0;
    if (t->p->will_download && t->store && !first && store_barrier(t->store, "data", e)) return -1;
    if (open_split(t, DATA_SPLIT_TRAIN, &t->train_ds, e) || open_split(t, DATA_SPLIT_VAL, &t->val_ds, e))
        return -1;
    if (t->p->will_download && t->store && first && store_barrier(t->store, "data", e)) return -1;
    if (plan->will_download && plan_after_download(x, plan, e)) return -1;

    loader_opts_t lo = {0};
    lo.batch_size = t->p->micro_batch;
    lo.workers = t->p->loader_workers;
    lo.shuffle = x->data.shuffle;
    lo.world_size = t->ddp_mode ? t->env->world_size : 1;
    lo.rank = t->ddp_mode ? t->env->rank : 0;
    lo.seed = x->seed;
    lo.augment.random_crop = x->data.augment.random_crop;
    lo.augment.crop_size = x->data.augment.crop_size;
    lo.augment.crop_padding = x->data.augment.crop_padding;
    lo.augment.horizontal_flip = x->data.augment.horizontal_flip;
    lo.augment.rotation = x->data.augment.rotation;
    trainer_aug_opts(x, t->p->num_classes, &lo);
    lo.dtype = LOADER_F32;
    plan_image_tf(x, &lo.image);
    lo.skip_bad = x->data.bad_images == 1;
#ifdef RUNNER_HAVE_CUDA
    if (!strcmp(t->p->device, "cuda")) lo.allocator = &pinned_allocator;
#endif
    fill_norm(x, t->train_ds, &lo);
    t->train_opts = lo;
    if (loader_create(t->train_ds, &lo, &t->train_ld, e)) return -1;
    loader_opts_t vo = lo;
    vo.eval = true;
    vo.shuffle = false;
    vo.batch_size = t->p->per_device_batch;
    vo.workers = t->p->images ? t->p->loader_workers /* decoding: as many as training */
               : x->data.workers > 1 ? 1 : x->data.workers;
    fill_norm(x, t->val_ds, &vo);
    if (loader_create(t->val_ds, &vo, &t->val_ld, e)) return -1;
#ifdef RUNNER_HAVE_CUDA
    if (!strcmp(t->p->device, "cuda") && !t->dp_mode && x->data.on_device && setup_gpu_data(t, e)) return -1;
    /* the CPU loader's batches reach the GPU through the copy stream (not for DP, whose
     * replicas take host slices) */
    if (!strcmp(t->p->device, "cuda") && !t->dp_mode && !t->gpu_data) {
        size_t bytes = (size_t)t->p->micro_batch * t->p->channels * t->p->height * t->p->width * sizeof(float);
        size_t second = mixup_enabled(&lo.mixup) ? (size_t)lo.mixup.classes * sizeof(float) : sizeof(int32_t);
        if (!(t->stager = cuda_stager_create(t->be, bytes + (size_t)t->p->micro_batch * second, e)))
            return -1;
    }
#endif
    if (loader_num_batches(t->train_ld) != t->p->batches_per_epoch)
        return err_set(e, ERR_RUNTIME, "internal: loader has %lld batches per epoch, plan says %lld",
                       (long long)loader_num_batches(t->train_ld), (long long)t->p->batches_per_epoch);
    return 0;
}

static int setup_model(trainer_t *t, err_t *e) {
    const experiment_t *x = t->e;
    int replicas = t->dp_mode ? t->p->world_size : 1;
    for (int i = 0; i < replicas; i++) {
        arch_opts_t o;
        plan_arch_opts(x, t->p, &o);
        net_t *n = arch_build(x->model.arch, &o, e);
        if (!n) return -1;
        t->replica_net[i] = n;
        if (net_bind(n, t->replica_be[i], t->p->per_device_batch, t->p->height, t->p->width, t->act_dt, e))
            return -1;
    }
    t->net = t->replica_net[0];
    if (net_init(t->net, x->seed, e)) return -1;
    init_from_opts_t io = {.path = x->model.init_from, .reinit_head = x->model.init_head == INIT_HEAD_REINIT,
                           .arch = x->model.arch, .stem = t->p->stem, .stem_reason = t->p->stem_reason};
    /* a resumed run takes every weight from its checkpoint */
    if (x->model.init_from[0] && !t->p->resumes && init_from_load(t->net, &io, e))
        return err_wrap(e, "model.init_from");
    if (t->dp_mode && !(t->dp = dp_create(t->replica_net, replicas, t->p->height, t->p->width, e))) return -1;
    if (trainer_aug_soft_targets(t, e)) return -1;

    optim_opts_t oo = {0};
    oo.kind = x->optimizer.name == OPT_ADAMW ? OPTIM_ADAMW : OPTIM_SGD;
    oo.momentum = x->optimizer.momentum;
    oo.nesterov = x->optimizer.nesterov;
    oo.weight_decay = x->optimizer.weight_decay;
    oo.no_weight_decay_on_bn_and_bias = x->optimizer.no_weight_decay_on_bn_and_bias;
    oo.beta1 = x->optimizer.betas[0];
    oo.beta2 = x->optimizer.betas[1];
    oo.eps = x->optimizer.eps;
    if (!(t->opt = optim_create(t->net, &oo, e))) return -1;
    if (x->train.ema.decay > 0) {
        ema_opts_t eo = {x->train.ema.decay, x->train.ema.warmup, x->train.ema.warmup_gamma,
                         x->train.ema.warmup_power};
        if (!(t->ema = ema_create(t->net, &eo, e))) return -1;
    }
    early_stop_init(&t->stop, x->train.early_stopping.metric, x->train.early_stopping.mode,
                    x->train.early_stopping.patience, x->train.early_stopping.min_delta);
    if (loss_scaler_init(&t->scaler, t->be, optim_ctl(t->opt), t->act_dt, x->amp.init_scale,
                         x->amp.growth_interval, e))
        return -1;
    /* The CPU backend computes synchronously, so reading each step back costs nothing;
     * a GPU reads back once per print interval (at most TRAIN_MAX_WINDOW steps), so the
     * host can queue the next steps while the device runs. DP waits per micro-batch
     * anyway. */
    int window = x->logging.print_every;
    if (window > TRAIN_MAX_WINDOW) window = TRAIN_MAX_WINDOW;
    t->window = t->be->kind == BACKEND_CPU || t->dp ? 1 : window;
    /* test hook: RUNNER_STEP_WINDOW=N (1..TRAIN_MAX_WINDOW) forces the window, so the CPU
     * tests exercise the multi-step read-back a GPU run takes (same numbers, read later) */
    const char *wv = getenv("RUNNER_STEP_WINDOW");
    if (wv && atoi(wv) >= 1 && atoi(wv) <= TRAIN_MAX_WINDOW && !t->dp) t->window = atoi(wv);
    size_t rec_bytes = (size_t)t->window * (size_t)trainer_step_rec_words(t->p->grad_accum) * sizeof(int32_t);
    if (!(t->step_recs = t->be->ops->alloc(t->be, rec_bytes))) {
        *e = t->be->err;
        return -1;
    }
    /* train.cuda_graphs as the plan resolved it (runner plan says where and why) */
    t->graphs = t->p->cuda_graphs && !t->dp && t->be->ops->graph_capture_begin;
    /* dropout's per-micro-batch keys (train_step.c rng_key_slot; DP keys its replicas) */
    if (net_has_dropout(t->net) && !t->dp &&
        !(t->rng_keys = t->be->ops->alloc(t->be, (size_t)t->p->grad_accum * sizeof(dropout_key_t)))) {
        *e = t->be->err;
        return -1;
    }
    t->host_recs = malloc(rec_bytes);
    t->pending = calloc((size_t)t->window, sizeof *t->pending);
    t->pending_loss = calloc((size_t)t->window, sizeof *t->pending_loss);
    if (!t->host_recs || !t->pending || !t->pending_loss) return err_set(e, ERR_RUNTIME, "out of memory");
    plan_schedule(x, &t->sched);
    return 0;
}

/* CUDA: every shape the run will compute runs once before the first step, on random
 * images: the training micro-batch and the epoch's short last one (forward, loss,
 * backward), the evaluation batch and its short last one (forward, loss). cuDNN's
 * algorithm search and the growth of the shared workspaces happen here, so nothing is
 * allocated inside a step, a recorded graph never goes stale, and the peak memory is
 * reached before training. What it changes is put back: BN running statistics and
 * counters, gradients; parameters are only read. Not for DP (its replicas plan on their
 * first micro-batch). */
static int plan_device_work(trainer_t *t, err_t *e) {
    /* test hook: RUNNER_PLAN_ON_CPU=1 runs it on the CPU backend too, where the tests check
     * that it leaves no trace (test_dist_equivalence) */
    bool on_cpu = getenv("RUNNER_PLAN_ON_CPU") && !strcmp(getenv("RUNNER_PLAN_ON_CPU"), "1");
    if ((t->be->kind != BACKEND_CUDA && !on_cpu) || t->dp) return 0;
    net_t *n = t->net;
    const plan_t *p = t->p;
    int w = t->ddp_mode ? t->env->world_size : 1, r = t->ddp_mode ? t->env->rank : 0;
    int64_t n_train = sampler_num_samples(dataset_size(t->train_ds), w, false);
    sampler_t vs;   /* this rank's evaluation shard, by the sampler's own rule */
    sampler_opts_t vo = {.n = dataset_size(t->val_ds), .world_size = w, .rank = r, .eval = true};
    if (sampler_init(&vs, &vo, e)) return -1;
    int64_t n_val = vs.num_samples;
    sampler_deinit(&vs);
    int train_sizes[2] = {p->micro_batch, (int)(n_train % p->micro_batch)};
    int eval_sizes[2] = {n_val >= p->per_device_batch ? p->per_device_batch : 0,
                         (int)(n_val % p->per_device_batch)};
    size_t nb = net_num_buffers(n), npix = (size_t)p->per_device_batch * p->channels * p->height * p->width;
    int nc = net_num_counters(n);
    float *buffers = malloc(nb * sizeof(float) + 4), *img = malloc(npix * sizeof(float));
    int64_t *counters = malloc((size_t)(nc ? nc : 1) * sizeof(int64_t));
    int32_t *labels = calloc((size_t)p->per_device_batch, sizeof(int32_t));
    int rc = -1;
    if (!buffers || !img || !counters || !labels) {
        err_set(e, ERR_RUNTIME, "out of memory");
        goto out;
    }
    rng_t g = rng_make(t->e->seed, RNG_STREAM_MISC, 7, 0);
    for (size_t i = 0; i < npix; i++) img[i] = rng_uniform(&g) * 4.0f - 2.0f;
    if (nc) memcpy(counters, net_counters(n), (size_t)nc * sizeof(int64_t));   /* a net without BN: NULL */
    if (net_download_buffers(n, buffers, e) || net_upload_input(n, img, p->per_device_batch, e)) goto out;
    if (t->be->ops->upload(t->be, net_labels(n), labels, (size_t)p->per_device_batch * sizeof(int32_t))) {
        *e = t->be->err;
        goto out;
    }
    for (int k = 0; k < 2; k++) {
        int b = train_sizes[k];
        if (b > 0 && (net_set_rng_key(n, t->e->seed, 0, 0, 1, e) || net_forward(n, net_input(n), b, true, NULL, e) ||
                      net_loss_async(n, NULL, 0.0f, 1.0f / (float)b, NULL, NULL, NULL, e) || net_backward(n, NULL, e)))
            goto out;
    }
    for (int k = 0; k < 2; k++) {
        int b = eval_sizes[k];
        if (b > 0 && (net_forward(n, net_input(n), b, false, NULL, e) ||
                      net_loss_async(n, NULL, 0.0f, 0.0f, NULL, NULL, NULL, e)))
            goto out;
    }
    if (nc) memcpy(net_counters(n), counters, (size_t)nc * sizeof(int64_t));
    if (net_upload_buffers(n, buffers, e) || net_zero_grads(n, e)) goto out;
    if (t->be->ops->sync(t->be)) {
        *e = t->be->err;
        goto out;
    }
    rc = 0;
out:
    if (rc) err_wrap(e, "planning the device work before the first step");
    free(buffers);
    free(img);
    free(counters);
    free(labels);
    return rc;
}

/* Store, communicator and DDP state for ddp mode. */
static int setup_comm(trainer_t *t, err_t *e) {
    const train_env_t *v = t->env;
    double timeout = t->e->parallel.timeout_s;
    /* the job id keeps a second job started on the same port out (store.h); the run
     * directory tells jobs apart on one host (each host of a multi-host run makes its own) */
    const char *rd = t->p->nnodes > 1 ? NULL : getenv("RUNNER_RUN_DIR");
    store_server_opts_t so = {store_job_id(rd, config_hash(t->e)), v->world_size, timeout, stderr};
    if (v->rank == 0 && !(t->srv = store_server_start_opts(v->master_addr, v->master_port, &so, e))) return -1;
    if (!(t->store = store_connect_job(v->master_addr, v->master_port, v->rank, v->world_size, timeout,
                                       so.job_id, e)))
        return -1;
    return store_barrier(t->store, "start", e);
}

static int setup_ddp(trainer_t *t, err_t *e) {
    if (!strcmp(t->p->comm_backend, "nccl")) {
#ifdef RUNNER_HAVE_CUDA
        t->comm = comm_nccl_create(t->store, t->be, e);
#else
        return err_set(e, ERR_INPUT, "parallel.backend nccl: this runner was built without CUDA");
#endif
    } else {
        t->comm = comm_shm_create(t->store, e);
    }
    if (!t->comm) return -1;
    if (!(t->comm_scratch = t->be->ops->alloc(t->be, (2 + 3 * TRAIN_MAX_WINDOW) * sizeof(float)))) {
        *e = t->be->err;
        return -1;
    }
    int nt = net_num_tensors(t->net), np = 0;
    int64_t *offs = calloc((size_t)nt + 1, sizeof *offs);
    if (!offs) return err_set(e, ERR_RUNTIME, "out of memory");
    for (int i = 0; i < nt; i++) {
        const net_tensor_t *ti = net_tensor(t->net, i);
        if (ti->store == NET_STORE_PARAM) offs[np++] = (int64_t)ti->offset;
    }
    /* tensor offsets must increase: sort (the table is in state_dict order) */
    for (int i = 1; i < np; i++)
        for (int j = i; j > 0 && offs[j - 1] > offs[j]; j--) {
            int64_t tmp = offs[j]; offs[j] = offs[j - 1]; offs[j - 1] = tmp;
        }
    offs[np] = (int64_t)net_num_params(t->net);
    ddp_opts_t o = {0};
    o.bucket_mb = t->e->parallel.bucket_mb;
    o.compression = t->e->parallel.grad_compression == PREC_FP16 ? DT_F16
                  : t->e->parallel.grad_compression == PREC_BF16 ? DT_BF16 : DT_F32;
    o.sync_bn = t->e->parallel.sync_bn;
    t->ddp = ddp_create(t->comm, t->be, net_grads(t->net), (int64_t)net_num_params(t->net), offs, np, &o, e);
    free(offs);
    if (!t->ddp) return -1;
    t->hooks.ctx = t->ddp;
    t->hooks.grads_ready = ddp_grads_ready;
    if (t->e->parallel.sync_bn) {
        t->hooks.bn_sync_stats = ddp_bn_sync_stats;
        t->hooks.bn_sync_grads = ddp_bn_sync_grads;
    }
    return 0;
}

static char *experiment_json(const trainer_t *t) {
    /* W&B config: the plan's numbers plus the resolved YAML text, which is the full
     * experiment (config_write_yaml). */
    char *buf = NULL, *yaml = config_yaml_string(t->e, NULL);
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) { free(yaml); return NULL; }
    jw_t w;
    jw_init(&w, f, false);
    jw_obj_begin(&w);
    jw_kstr(&w, "arch", t->e->model.arch);
    jw_kstr(&w, "dataset", t->e->data.dataset);
    jw_kstr(&w, "mode", t->p->mode);
    jw_kint(&w, "world_size", t->p->world_size);
    jw_kstr(&w, "precision", t->p->precision);
    jw_kint(&w, "batch_size", t->p->global_batch);
    jw_kint(&w, "grad_accum", t->p->grad_accum);
    jw_kint(&w, "epochs", t->e->train.epochs);
    jw_knum(&w, "lr", t->e->optimizer.lr);
    jw_kint(&w, "seed", (int64_t)t->e->seed);
    jw_kstr(&w, "device", t->p->device);
    jw_kstr(&w, "resolved_yaml", yaml ? yaml : "");
    jw_obj_end(&w);
    fclose(f);
    free(yaml);
    return buf;
}

static int setup_tracking(trainer_t *t, err_t *e) {
    const experiment_t *x = t->e;
    track_opts_t o;
    track_opts_init(&o);
    char *cfg = t->rank0 ? experiment_json(t) : NULL;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    o.run_dir = t->run_dir;
    o.experiment = x->name;
    o.config_json = cfg;
    o.print_every = x->logging.print_every;
    o.csv = x->logging.csv;
    o.tensorboard = x->logging.tensorboard;
    o.wandb_mode = x->logging.wandb.mode == WANDB_ONLINE ? "online"
                 : x->logging.wandb.mode == WANDB_OFFLINE ? "offline" : "disabled";
    o.wandb_project = x->logging.wandb.project;
    o.wandb_entity = x->logging.wandb.entity;
    for (int i = 0; i < x->logging.wandb.n_tags && i < TRACK_MAX_TAGS; i++) o.wandb_tags[i] = x->logging.wandb.tags[i];
    o.n_wandb_tags = x->logging.wandb.n_tags < TRACK_MAX_TAGS ? x->logging.wandb.n_tags : TRACK_MAX_TAGS;
    o.wandb_group = x->logging.wandb.group;
    o.host = host;
    o.commit = runner_commit();
    o.is_resume = t->p->resumes;
    o.resume_step = t->step;
    o.resume_mid_epoch = t->p->resumes && t->step % t->p->steps_per_epoch != 0;
    o.wandb_run_id = t->wandb_run_id[0] ? t->wandb_run_id : NULL;
    o.total_steps = t->p->total_steps;
    o.total_epochs = t->p->epochs;
    o.rank = t->env->rank;
    /* DDP rank 0 under the runner's launcher, which copies its output to a terminal */
    if (getenv("RUNNER_TTY") && !strcmp(getenv("RUNNER_TTY"), "1")) o.progress = TRACK_PROGRESS_TEE;
    t->track = track_open(&o, e);
    free(cfg);
    if (!t->track) return -1;
    if (t->rank0) snprintf(t->wandb_run_id, sizeof t->wandb_run_id, "%s", track_wandb_run_id(t->track));
    return 0;
}


/* Rank 0's background checkpoint writer; its snapshot buffer is page-locked on CUDA, so
 * each array is one device-to-host copy at full speed. */
static int setup_writer(trainer_t *t, err_t *e) {
    if (!t->rank0) return 0;
    ckpt_allocator_t a = {0};
#ifdef RUNNER_HAVE_CUDA
    if (t->be->kind == BACKEND_CUDA) a = (ckpt_allocator_t){pinned_alloc, pinned_free, NULL};
#endif
    char dir[CFG_PATH + 16];
    snprintf(dir, sizeof dir, "%s/checkpoints", t->run_dir);
    return (t->writer = ckpt_writer_create(&a, dir, e)) ? 0 : -1;
}

/* ------------------------------------------------------------------ run */

/* Rank 0 learns every rank's host name through the store (env.json lists them). */
static int gather_hosts(trainer_t *t, err_t *e) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    if (!t->store) {
        t->n_hosts = 0;
        return 0;
    }
    char key[64];
    snprintf(key, sizeof key, "host.%d", t->env->rank);
    if (store_set(t->store, key, host, strlen(host) + 1, e)) return -1;
    if (!t->rank0) return 0;
    int w = t->env->world_size;
    t->hosts = calloc((size_t)w, sizeof *t->hosts);
    if (!t->hosts) return err_set(e, ERR_RUNTIME, "out of memory");
    for (int r = 0; r < w; r++) {
        char name[256] = "";
        size_t len = 0;
        snprintf(key, sizeof key, "host.%d", r);
        if (store_get(t->store, key, name, sizeof name - 1, &len, t->e->parallel.timeout_s, e)) return -1;
        name[sizeof name - 1] = '\0';
        /* one entry per distinct host, in rank order */
        bool seen = false;
        for (int k = 0; k < t->n_hosts; k++) seen |= !strcmp(t->hosts[k], name);
        if (!seen && !(t->hosts[t->n_hosts++] = strdup(name))) return err_set(e, ERR_RUNTIME, "out of memory");
    }
    return 0;
}

static void trainer_teardown(trainer_t *t) {
    trainer_skipped_free(t);
    loader_free(t->train_ld);
    loader_free(t->val_ld);
    if (t->be) trainer_graphs_free(t);   /* before the communicator its recordings use */
    dp_free(t->dp);
    ddp_free(t->ddp);
    if (t->comm_scratch) t->be->ops->release(t->be, t->comm_scratch);
    comm_free(t->comm);
    store_close(t->store);
    if (t->srv) store_server_stop(t->srv);
    if (t->step_recs) t->be->ops->release(t->be, t->step_recs);
    if (t->rng_keys) t->be->ops->release(t->be, t->rng_keys);
    free(t->host_recs);
    free(t->pending);
    free(t->pending_loss);
    ckpt_writer_free(t->writer);
    ema_free(t->ema);
    optim_free(t->opt);
    if (t->gpu_pixels) t->be->ops->release(t->be, t->gpu_pixels);
    if (t->gpu_indices) t->be->ops->release(t->be, t->gpu_indices);
    if (t->gpu_epoch) t->be->ops->release(t->be, t->gpu_epoch);
    if (t->gpu_labels) t->be->ops->release(t->be, t->gpu_labels);
    if (t->be) trainer_aug_free(t);
#ifdef RUNNER_HAVE_CUDA
    cuda_stager_free(t->stager);
#endif
    for (int i = 0; i < TRAIN_MAX_REPLICAS; i++) {
        net_free(t->replica_net[i]);
        backend_free(t->replica_be[i]);
    }
    dataset_free(t->train_ds);
    dataset_free(t->val_ds);
    if (t->gpu_sampler_ready) sampler_deinit(&t->gpu_sampler);
    for (int i = 0; i < t->n_hosts; i++) free(t->hosts[i]);
    free(t->hosts);
}

/* DDP start: every rank takes rank 0's parameters and BN buffers (PyTorch DDP's
 * construction-time broadcast), on resume too, so that the ranks start identical even
 * if a rank's own restore differed; on resume also the optimizer state, which every
 * rank then owns a copy of. */
static int broadcast_state(trainer_t *t, err_t *e) {
    if (ddp_broadcast_initial(t->ddp, net_params(t->net), (int64_t)net_num_params(t->net), net_buffers(t->net),
                              (int64_t)net_num_buffers(t->net), e))
        return -1;
    if (!t->p->resumes) return 0;
    for (int i = 0; i < optim_num_state(t->opt); i++)
        if (comm_broadcast(t->comm, optim_state(t->opt, i), optim_state_numel(t->opt) * sizeof(float), 0, e))
            return -1;
    return 0;
}

/* Rank 0's decisions about the run directory, which every rank must share: the directory
 * (workers started by another launcher do not know it) and whether and from which
 * checkpoint the run resumes. Under torchrun or Slurm with checkpoint.resume: auto only
 * rank 0 searches for an unfinished run; a rank that decided on its own would start at
 * step 0 while rank 0 continues at step N, and their collectives would no longer match.
 * So rank 0 publishes both and the other ranks adopt them (plan is the trainer's copy). */
static int share_run_dir(trainer_t *t, plan_t *plan, err_t *e) {
    if (!t->store) return 0;
    if (t->rank0) {
        const char *from = plan->resumes ? plan->resume_from : "";
        return store_set(t->store, "run_dir", t->run_dir, strlen(t->run_dir) + 1, e) ||
               store_set(t->store, "resume_from", from, strlen(from) + 1, e) ? -1 : 0;
    }
    size_t len = 0;
    double timeout = t->e->parallel.timeout_s;
    if (!t->run_dir[0]) {
        if (store_get(t->store, "run_dir", t->run_dir, sizeof t->run_dir, &len, timeout, e)) return -1;
        t->run_dir[sizeof t->run_dir - 1] = '\0';
    }
    if (store_get(t->store, "resume_from", plan->resume_from, sizeof plan->resume_from, &len, timeout, e))
        return -1;
    plan->resume_from[sizeof plan->resume_from - 1] = '\0';
    plan->resumes = plan->resume_from[0] != '\0';
    return 0;
}

int train_run(const experiment_t *x, const plan_t *plan_in, const train_env_t *env, err_t *e) {
    plan_t plan = *plan_in;   /* share_run_dir may take rank 0's resume decision */
    const plan_t *p = &plan;
    trainer_t t;
    memset(&t, 0, sizeof t);
    t.e = x;
    t.p = p;
    t.env = env;
    t.rank0 = env->rank == 0;
    t.ddp_mode = !strcmp(p->mode, "ddp");
    t.dp_mode = !strcmp(p->mode, "dp");
    t.best_val_top1 = -1;
    t.val_loss = t.val_top1 = t.val_top5 = NAN;
    t.val_loss_ema = t.val_top1_ema = t.val_top5_ema = NAN;
    t.best_val_top1_ema = -1;
    t.best_value = NAN;
    t.train_loss = t.train_top1 = NAN;
    t.wall_start = now_s();
    if (env->run_dir) snprintf(t.run_dir, sizeof t.run_dir, "%s", env->run_dir);

    int rc = -1;
    if ((t.ddp_mode && (setup_comm(&t, e) || share_run_dir(&t, &plan, e))) || setup_backend(&t, e) ||
        setup_data(&t, &plan, e) || setup_model(&t, e) || plan_device_work(&t, e) || setup_writer(&t, e))
        goto done;
    if (p->resumes && trainer_restore(&t, e)) goto done;
    if (p->resumes && (t.step >= p->total_steps || t.stop.stopped)) {
        /* a finished run: nothing to train, and its summary and metrics stay as they are */
        if (t.rank0 && t.stop.stopped)
            printf("runner: %s already finished (%s); nothing to do\n", t.run_dir, t.stop.reason);
        else if (t.rank0)
            printf("runner: %s already finished all %lld steps; nothing to do\n", t.run_dir,
                   (long long)p->total_steps);
        t.already_finished = true;
        rc = 0;
        goto done;
    }
    if (t.ddp_mode && (setup_ddp(&t, e) || broadcast_state(&t, e))) goto done;
    if (trainer_graphs_setup(&t, e)) goto done;
    trainer_note(&t, "pid %d, run %s: %s at step %lld of %lld", (int)getpid(), t.run_dir,
              p->resumes ? "resuming" : "starting", (long long)t.step, (long long)p->total_steps);
    if (gather_hosts(&t, e) || (t.rank0 && trainer_write_run_files(&t, e))) goto done;
    if (setup_tracking(&t, e) || trainer_skipped_start(&t, e)) goto done;
    if (t.rank0) {
        char line[CFG_PATH + 256];
        if (t.be->notice[0]) {   /* e.g. a cuDNN fallback while plan_device_work searched */
            snprintf(line, sizeof line, "note: %.600s", t.be->notice);
            track_console(t.track, line);
            t.be->notice[0] = '\0';
        }
        snprintf(line, sizeof line, "%s %.1023s: %.64s on %.8s, %lld steps", p->resumes ? "resuming" : "run", t.run_dir,
                 x->model.arch, p->device, (long long)p->total_steps);
        track_console(t.track, line);
        if (p->resumes) {
            snprintf(line, sizeof line, "continuing at step %lld (epoch %d)", (long long)t.step, (int)(t.step / p->steps_per_epoch) + 1);
            track_console(t.track, line);
        }
        if (t.be->kind == BACKEND_CUDA && t.be->ops->peak_memory) {
            /* after plan_device_work: what the steps will use, workspaces included */
            snprintf(line, sizeof line, "GPU memory: %.2f GiB planned (activations, weights, gradients, "
                     "optimizer state, cuDNN/cuBLASLt workspaces)",
                     (double)t.be->ops->peak_memory(t.be) / (double)(1u << 30));
            track_console(t.track, line);
        }
    }
    t.loop_started = true;
    rc = trainer_loop(&t, e);
    if (rc >= 0) trainer_skipped_report(&t);
    if (rc == 0) trainer_note(&t, "finished at step %lld", (long long)t.step);
done:
    if (t.writer) {   /* every checkpoint on disk before the summary says where the run is */
        err_t ew = {0};
        if (ckpt_writer_wait(t.writer, &ew) && rc >= 0) { *e = ew; rc = -1; }
    }
    if (rc < 0 && t.ddp) ddp_abort(t.ddp, e->msg);
    if (rc < 0 && t.store) store_set_failed(t.store, e->msg);
    if (t.rank0 && t.run_dir[0] && !t.already_finished && (!p->resumes || t.loop_started)) {
        /* also when a new run's setup failed (a bad init_from, an unreachable peer): its
         * directory then says failed and why, instead of looking like a run still going.
         * A resume refused before its first step leaves the run's summary as it was. */
        err_t e2 = {0};
        const char *status = rc == 0 ? "completed" : rc == ERR_INTERRUPT ? "interrupted"
                           : rc == ERR_PREEMPTED ? "preempted" : "failed";
        int code = rc >= 0 ? rc : (e->code ? e->code : 1);
        if (trainer_write_summary(&t, status, code, rc < 0 ? e->msg : NULL, &e2) && rc == 0) { *e = e2; rc = -1; }
    }
    if (t.track) {
        err_t e3 = {0};
        if (track_close(t.track, rc >= 0 ? rc : (e->code ? e->code : 1), &e3) && rc == 0) { *e = e3; rc = -1; }
    }
    trainer_teardown(&t);
    return rc;
}
