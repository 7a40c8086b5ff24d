/* plan.c: experiment -> plan (plan.h). Starts, writes and downloads nothing. */
#include "runner/plan.h"

#include <libgen.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/augment.h"
#include "data/dataset.h"
#include "model/net.h"
#include "runner/init_from.h"
#include "model/schedule.h"
#include "runner/rundir.h"
#include "util/json.h"

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Fills the schedule the trainer uses from the experiment. */
void plan_schedule(const experiment_t *e, schedule_t *s) {
    memset(s, 0, sizeof *s);
    s->kind = e->schedule.name == SCHED_CONSTANT ? SCHEDULE_CONSTANT
            : e->schedule.name == SCHED_COSINE   ? SCHEDULE_COSINE
                                                 : SCHEDULE_MULTISTEP;
    s->base_lr = e->optimizer.lr;
    s->warmup_epochs = e->schedule.warmup_epochs;
    s->epochs = e->train.epochs;
    s->n_milestones = e->schedule.n_milestones;
    for (int i = 0; i < e->schedule.n_milestones && i < SCHEDULE_MAX_MILESTONES; i++)
        s->milestones[i] = e->schedule.milestones[i];
    s->gamma = e->schedule.gamma;
    s->min_lr = e->schedule.min_lr;
}

/* train.cuda_graphs resolved (runner/train_graph.c records). Whole steps can be recorded
 * on CUDA in single mode and in DDP over NCCL (its collectives are recorded with the
 * kernels); there they replay the same kernels with the same arguments, so the result is
 * the bits of normal launches and auto turns them on. Not: the cpu backend (ops run as
 * they are issued: no launches to save; RUNNER_CPU_GRAPHS=1, a test hook, gives it graphs
 * with CUDA's semantics, and then single and DDP over shm are recorded), DP (one process
 * drives several GPUs and scatters host batches each step), DDP over shm with GPUs (its
 * collectives run on the host between the GPU's kernels, which a graph cannot hold). */
static void plan_cuda_graphs(const experiment_t *e, plan_t *p) {
    const char *hook = getenv("RUNNER_CPU_GRAPHS");
    bool cuda = !strcmp(p->device, "cuda"), cpu_graphs = !cuda && hook && *hook && strcmp(hook, "0");
    const char *no = NULL;
    if (!cuda && !cpu_graphs)
        no = "the cpu backend runs ops as they are issued (no launches to save)";
    else if (e->parallel.mode == PAR_DP)
        no = "dp drives several GPUs from one process and scatters host batches every step";
    else if (e->parallel.mode == PAR_DDP && cuda && strcmp(p->comm_backend, "nccl"))
        no = "ddp over shm runs its all-reduces on the host between the GPU's kernels, which a graph cannot "
             "hold (parallel.backend nccl can)";
    graphs_mode_t g = e->train.cuda_graphs;
    const char *key = g == GRAPHS_AUTO ? "auto" : g == GRAPHS_TRUE ? "true" : "false";
    p->cuda_graphs = g != GRAPHS_FALSE && !no;
    if (g == GRAPHS_FALSE)
        snprintf(p->cuda_graphs_why, sizeof p->cuda_graphs_why, "train.cuda_graphs false");
    else if (no)
        snprintf(p->cuda_graphs_why, sizeof p->cuda_graphs_why, "train.cuda_graphs %s: not here: %s", key, no);
    else
        snprintf(p->cuda_graphs_why, sizeof p->cuda_graphs_why, "train.cuda_graphs %s: each step (%s) and "
                 "evaluation batch recorded once per shape and replayed with one launch; the same bits as "
                 "without%s", key, !strcmp(p->mode, "ddp") ? "all-reduces included" : "forward to optimizer",
                 cuda ? "" : " (RUNNER_CPU_GRAPHS: the cpu backend's recording test hook)");
}


/* Picks the device and checks that what the experiment asks for exists. */
static int plan_devices(const experiment_t *e, plan_t *p, err_t *err) {
    p->gpus_visible = backend_cuda_device_count();
    const char *src = e->source_path[0] ? e->source_path : "experiment";
    if (e->device == DEVICE_CUDA && p->gpus_visible == 0) {
        char v[256];
        backend_cuda_versions(v, sizeof v);
        return err_set(err, ERR_INPUT,
                       "%s: device: cuda, but %s; use device: cpu (or auto, which picks the "
                       "GPU when there is one)", src,
                       v[0] ? "no CUDA GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
                            : "this runner was built without CUDA (install the CUDA toolkit and rebuild)");
    }
    bool cuda = e->device == DEVICE_CUDA || (e->device == DEVICE_AUTO && p->gpus_visible > 0);
    snprintf(p->device, sizeof p->device, "%s", cuda ? "cuda" : "cpu");
    /* train.c's test hook: a bad list stops the run here, before a run directory exists */
    const char *fv = getenv("RUNNER_CUDA_FUSION");
    unsigned bits;
    err_t fe = {0};
    if (fv && *fv && backend_fusion_parse(fv, &bits, &fe) < 0)
        return err_set(err, ERR_INPUT, "environment variable RUNNER_CUDA_FUSION=%s: %s; unset it or fix the list", fv,
                       fe.msg);

    p->nnodes = e->parallel.nnodes;
    if (e->parallel.mode == PAR_SINGLE) {
        snprintf(p->mode, sizeof p->mode, "single");
        p->world_size = 1;
    } else {
        snprintf(p->mode, sizeof p->mode, "%s", e->parallel.mode == PAR_DP ? "dp" : "ddp");
        p->world_size = e->parallel.world_size;
    }
    if (e->parallel.mode == PAR_DP && p->nnodes > 1)
        return err_set(err, ERR_INPUT, "%s: parallel.mode: dp runs in one process on one host; "
                       "use parallel.mode: ddp with parallel.nnodes: %d", src, p->nnodes);
    if (p->world_size % p->nnodes)
        return err_set(err, ERR_INPUT, "%s: parallel.world_size %d is not divisible by parallel.nnodes %d; "
                       "world_size counts all ranks on all hosts", src, p->world_size, p->nnodes);
    p->local_world_size = p->world_size / p->nnodes;

    if (cuda) {
        int need = e->parallel.mode == PAR_SINGLE ? 1 : p->local_world_size;
        if (e->parallel.n_devices) {
            if (e->parallel.n_devices < need)
                return err_set(err, ERR_INPUT, "%s: parallel.devices lists %d devices but %d are needed "
                               "(world_size %d per host); list %d devices", src,
                               e->parallel.n_devices, need, p->local_world_size, need);
            for (int i = 0; i < e->parallel.n_devices; i++)
                if (e->parallel.devices[i] >= p->gpus_visible)
                    return err_set(err, ERR_INPUT, "%s: parallel.devices contains %d but only %d GPU%s "
                                   "visible (0..%d)", src, e->parallel.devices[i], p->gpus_visible,
                                   p->gpus_visible == 1 ? " is" : "s are", p->gpus_visible - 1);
        } else if (need > p->gpus_visible && e->parallel.backend != COMM_SHM) {
            return err_set(err, ERR_INPUT, "%s: %d GPUs needed (parallel.world_size %d) but %d visible; "
                           "set parallel.world_size: %d, or parallel.backend: shm to share one GPU",
                           src, need, p->local_world_size, p->gpus_visible, p->gpus_visible);
        }
        int dev0 = e->parallel.n_devices ? e->parallel.devices[0] : 0;
        backend_cuda_device_name(dev0, p->gpu_name, sizeof p->gpu_name);
    }

    if (e->parallel.mode == PAR_DDP) {
        comm_backend_t b = e->parallel.backend;
        if (b == COMM_AUTO) b = cuda ? COMM_NCCL : COMM_SHM;
        if (b == COMM_NCCL && !cuda)
            return err_set(err, ERR_INPUT, "%s: parallel.backend: nccl needs CUDA GPUs but the run is on "
                           "the cpu; use parallel.backend: shm (or auto)", src);
        if (b == COMM_SHM && p->nnodes > 1)
            return err_set(err, ERR_INPUT, "%s: parallel.backend: shm works within one host; with "
                           "parallel.nnodes: %d use nccl (GPUs)", src, p->nnodes);
        snprintf(p->comm_backend, sizeof p->comm_backend, "%s", b == COMM_NCCL ? "nccl" : "shm");
    } else {
        snprintf(p->comm_backend, sizeof p->comm_backend, "none");
    }
    /* the cores this process may run on (taskset, cgroups, Slurm's --cpus-per-task) */
    cpu_set_t cs;
    long cores = sched_getaffinity(0, sizeof cs, &cs) == 0 ? CPU_COUNT(&cs) : sysconf(_SC_NPROCESSORS_ONLN);
    int per = e->parallel.mode == PAR_SINGLE ? 1 : p->local_world_size;
    p->cpu_cores = (int)(cores > 0 ? cores : 1);
    p->threads_per_rank = cuda ? 1 : (p->cpu_cores / per > 0 ? p->cpu_cores / per : 1);
    /* CPU compute threads beyond the cores make every step slower (threads wait for each
     * other at every op), so say so; loader threads mostly wait and are not counted */
    p->oversubscribed = !cuda && per * p->threads_per_rank > p->cpu_cores;
    plan_cuda_graphs(e, p);
    if (p->oversubscribed)
        snprintf(p->warning, sizeof p->warning, "%d %s x %d thread%s = %d compute threads on %d core%s: "
                 "oversubscribed, so each step will be slower than with fewer ranks; use "
                 "parallel.world_size: %d or less (per host), or parallel.mode: single",
                 per, e->parallel.mode == PAR_DP ? "replicas" : "ranks", p->threads_per_rank,
                 p->threads_per_rank == 1 ? "" : "s", per * p->threads_per_rank, p->cpu_cores,
                 p->cpu_cores == 1 ? "" : "s", p->cpu_cores);
    return 0;
}

/* "; a relative data.root is looked up in ..." for a relative root, "" otherwise: a
 * relative data.root is resolved against the current directory (unlike base:, which is
 * relative to the file), which messages about missing data must say. */
static void relative_root_note(const char *root, char *out, size_t cap) {
    char cwd[CFG_PATH] = "";
    out[0] = '\0';
    if (root[0] != '/' && getcwd(cwd, sizeof cwd))
        snprintf(out, cap, "; a relative data.root is looked up in the current directory %s, not next to the "
                 "experiment file", cwd);
}

int plan_data_files(const experiment_t *e, char *root, size_t cap, bool *present, bool *will_download, err_t *err) {
    dataset_info_t info;
    if (dataset_info(e->data.dataset, &info, err)) return -1;
    snprintf(root, cap, "%s", e->data.root[0] ? e->data.root : info.default_root);
    *present = true;
    *will_download = false;
    if (!strcmp(info.name, "synthetic")) return 0;
    char missing[CFG_PATH];
    int tr = dataset_files_present(info.name, root, DATA_SPLIT_TRAIN, missing, sizeof missing, err);
    int va = tr == 1 ? dataset_files_present(info.name, root, DATA_SPLIT_VAL, missing, sizeof missing, err) : tr;
    if (tr < 0 || va < 0) return -1;
    *present = tr == 1 && va == 1;
    if (*present) return 0;
    /* say where a relative root was looked for, and never promise a download that cannot
     * happen (Fashion-MNIST has no official archive the runner can fetch) */
    char where[CFG_PATH + 160];
    relative_root_note(root, where, sizeof where);
    bool fetchable = info.url[0] || e->data.download_url[0];
    if (!fetchable)
        return err_set(err, ERR_INPUT, "%s: data.dataset %s: %s is missing (data.root: %s)%s; %s cannot be "
                       "downloaded by the runner%s: install it with `apt-get install dataset-fashion-mnist` "
                       "(files in %s) or put its IDX files (.gz or uncompressed) in data.root",
                       e->source_path, info.name, missing, root, where, info.name,
                       e->data.download ? " (data.download: true cannot help)" : "", info.default_root);
    if (!e->data.download)
        return err_set(err, ERR_INPUT, "%s: data.dataset %s: %s is missing (data.root: %s)%s; set "
                       "data.download: true to fetch %s, or put the files in data.root",
                       e->source_path, info.name, missing, root, where,
                       e->data.download_url[0] ? e->data.download_url : info.url);
    *will_download = true;
    return 0;
}

/* Dataset sizes and shapes: from the files when they are there, else the known sizes. */
static int plan_data(const experiment_t *e, plan_t *p, err_t *err) {
    dataset_info_t info;
    if (dataset_info(e->data.dataset, &info, err) ||
        plan_data_files(e, p->data_root, sizeof p->data_root, &p->data_present, &p->will_download, err))
        return -1;
    snprintf(p->dataset, sizeof p->dataset, "%s", info.name);
    int c = info.channels, h = info.height, w = info.width, classes = info.num_classes;
    p->train_size = info.train_size;
    p->val_size = info.val_size;
    if (!strcmp(info.name, "image_folder")) {
        if (plan_images_data(e, p, &classes, err)) {
            char where[CFG_PATH + 160];
            relative_root_note(p->data_root, where, sizeof where);
            if (err && err->code == ERR_INPUT && where[0]) {
                size_t n = strlen(err->msg);
                snprintf(err->msg + n, sizeof err->msg - n, "%s", where);
            }
            return err_wrap(err, "%s", e->source_path);
        }
        c = p->channels;
        h = w = e->data.image_size;
    } else if (!strcmp(info.name, "synthetic")) {
        c = e->data.synthetic.image[0];
        h = e->data.synthetic.image[1];
        w = e->data.synthetic.image[2];
        classes = e->data.synthetic.classes;
        p->train_size = e->data.synthetic.train_size;
        p->val_size = e->data.synthetic.val_size;
    } else if (p->data_present) {
        /* read the real files: sizes may differ from the official ones, and problems
         * are best reported before anything starts */
        for (int split = 0; split < 2; split++) {
            dataset_opts_t o = {.name = info.name, .root = p->data_root, .split = (data_split_t)split};
            dataset_t *d = NULL;
            if (dataset_open(&o, &d, err)) return -1;
            if (split == 0) p->train_size = dataset_size(d);
            else p->val_size = dataset_size(d);
            dataset_shape(d, &c, &h, &w);
            dataset_free(d);
        }
    }
    augment_opts_t ao = {.random_crop = e->data.augment.random_crop,
                         .crop_size = e->data.augment.crop_size,
                         .crop_padding = e->data.augment.crop_padding};
    int oh = h, ow = w;
    if (!p->images) augment_out_shape(&ao, h, w, &oh, &ow);
    p->channels = c;
    p->height = oh;
    p->width = ow;
    /* in memory: the pixels of both splits (image folders decode from disk: their file
     * list only, ~a path and a label per image) */
    p->data_bytes = (p->train_size + p->val_size) *
                    (p->images ? 128 : (int64_t)c * h * w + (int64_t)sizeof(int32_t));
    p->num_classes = e->model.num_classes ? e->model.num_classes : classes;
    if (p->num_classes < classes)
        return err_set(err, ERR_INPUT, "%s: model.num_classes %d is smaller than the %d classes of %s; "
                       "remove model.num_classes to use the dataset's", e->source_path,
                       p->num_classes, classes, info.name);
    return 0;
}

/* Batch geometry and step counts. */
static int plan_steps(const experiment_t *e, plan_t *p, err_t *err) {
    int ranks = p->world_size, accum = e->train.grad_accum;
    p->global_batch = e->train.batch_size;
    p->grad_accum = accum;
    int div = (!strcmp(p->mode, "ddp") ? ranks : 1) * accum;
    if (p->global_batch % div)
        return err_set(err, ERR_INPUT, "%s: train.batch_size %d is not divisible by %s%d; use a multiple of %d",
                       e->source_path, p->global_batch,
                       !strcmp(p->mode, "ddp") ? "parallel.world_size x train.grad_accum = " : "train.grad_accum ",
                       div, div);
    p->micro_batch = p->global_batch / div;
    p->per_device_batch = !strcmp(p->mode, "dp") ? (int)ceil_div(p->micro_batch, ranks) : p->micro_batch;
    if (!strcmp(p->mode, "dp") && p->micro_batch < ranks)
        return err_set(err, ERR_INPUT, "%s: parallel.mode dp splits each micro-batch of %d over %d devices; "
                       "raise train.batch_size to at least %d", e->source_path, p->micro_batch,
                       ranks, ranks * accum);
    p->samples_per_rank = !strcmp(p->mode, "ddp") ? ceil_div(p->train_size, ranks) : p->train_size;
    if (p->samples_per_rank < 1 || p->val_size < 1)
        return err_set(err, ERR_INPUT, "%s: the dataset has %lld training and %lld validation samples; both "
                       "must be at least 1", e->source_path, (long long)p->train_size, (long long)p->val_size);
    p->batches_per_epoch = ceil_div(p->samples_per_rank, p->micro_batch);
    p->steps_per_epoch = ceil_div(p->batches_per_epoch, accum);
    p->total_steps = (int64_t)e->train.epochs * p->steps_per_epoch;
    if (e->train.max_steps > 0 && e->train.max_steps < p->total_steps) p->total_steps = e->train.max_steps;
    p->epochs = (int)ceil_div(p->total_steps, p->steps_per_epoch);

    schedule_t s;
    plan_schedule(e, &s);
    p->lr_base = e->optimizer.lr;
    p->warmup_steps = schedule_warmup_steps(&s, p->steps_per_epoch);
    p->lr_warmup_end = schedule_lr(&s, p->warmup_steps > 0 ? p->warmup_steps - 1 : 0, p->steps_per_epoch);
    p->n_milestones = 0;
    if (s.kind == SCHEDULE_MULTISTEP)
        for (int i = 0; i < s.n_milestones && i < PLAN_MAX_MILESTONES; i++) {
            p->milestone_steps[i] = (int64_t)s.milestones[i] * p->steps_per_epoch;
            p->lr_after_milestone[i] = schedule_lr(&s, p->milestone_steps[i], p->steps_per_epoch);
            p->n_milestones++;
        }
    p->lr_final = schedule_lr(&s, p->total_steps > 0 ? p->total_steps - 1 : 0, p->steps_per_epoch);
    return 0;
}

/* model.stem resolved: auto takes torchvision's ImageNet stem (7x7/2 conv + max-pool) for
 * inputs larger than 64 px, where the CIFAR stem's full-resolution layer1 would cost 16x
 * the compute, and the CIFAR stem for CIFAR/Fashion-MNIST-sized ones, whose 32 px would
 * shrink to 8 px before layer1. */
static void plan_stem(const experiment_t *e, plan_t *p) {
    const char *a = e->model.arch;
    const arch_info_t *info = arch_info(a);
    if (e->model.stem != STEM_AUTO) {
        p->stem = e->model.stem == STEM_IMAGENET ? ARCH_STEM_IMAGENET : ARCH_STEM_CIFAR;
        snprintf(p->stem_reason, sizeof p->stem_reason, "model.stem: %s", arch_stem_name(p->stem));
    } else if (info && !info->imagenet) {
        p->stem = ARCH_STEM_CIFAR;
        snprintf(p->stem_reason, sizeof p->stem_reason, "auto: %s has only the CIFAR %s", a,
                 info->family == ARCH_FAM_RESNET_CIFAR || info->family == ARCH_FAM_RESNET ? "stem" : "variant");
    } else {
        bool large = p->height > 64 || p->width > 64;
        p->stem = large ? ARCH_STEM_IMAGENET : ARCH_STEM_CIFAR;
        snprintf(p->stem_reason, sizeof p->stem_reason, "auto: %dx%d inputs are %s 64 px", p->height,
                 p->width, large ? "larger than" : "at most");
    }
}

void plan_arch_opts(const experiment_t *e, const plan_t *p, arch_opts_t *o) {
    *o = (arch_opts_t){.stem = p->stem, .in_channels = p->channels, .num_classes = p->num_classes,
                       .zero_init_residual = e->model.zero_init_residual, .width = e->model.width,
                       .groups = e->model.groups, .dropout = e->model.dropout};
}

static int plan_model(const experiment_t *e, plan_t *p, err_t *err) {
    snprintf(p->arch, sizeof p->arch, "%s", e->model.arch);
    struct stat st;
    if (e->model.init_from[0] && (stat(e->model.init_from, &st) != 0 || !S_ISREG(st.st_mode) ||
                                  access(e->model.init_from, R_OK) != 0))
        return err_set(err, ERR_INPUT, "%s: model.init_from: %s is not a readable file; give a .safetensors file "
                       "with torchvision names (e.g. from runner export), or null", e->source_path,
                       e->model.init_from);
    plan_stem(e, p);
    arch_opts_t o, r;
    plan_arch_opts(e, p, &o);
    if (arch_resolve(e->model.arch, &o, &r, err)) return err_wrap(err, "%s", e->source_path);
    p->arch_width = r.width;
    p->arch_groups = r.groups;
    p->arch_dropout = r.dropout;
    net_t *n = arch_build(e->model.arch, &r, err);
    if (!n) return err_wrap(err, "%s", e->source_path);
    bool cuda = !strcmp(p->device, "cuda");
    size_t elem = (cuda && e->amp.enabled) ? 2 : 4;
    p->param_count = (int64_t)net_num_params(n);
    p->forward_gflops_per_sample = net_forward_flops(n, p->height, p->width) / 1e9;
    p->activation_bytes = (int64_t)net_activation_bytes(n, p->per_device_batch, p->height, p->width, elem);
    if (p->activation_bytes == 0) {
        int min = arch_min_input(n);
        net_free(n);
        return err_set(err, ERR_INPUT, "%s: %dx%d inputs are too small for %s (%s); it takes at "
                       "least %dx%d; use larger inputs (data.augment.random_crop.size, "
                       "data.image_size)%s", e->source_path, p->height, p->width, e->model.arch,
                       arch_stem_text(e->model.arch, p->stem), min, min,
                       p->stem == ARCH_STEM_IMAGENET ? ", the CIFAR variant (model.stem: cifar)"
                                                     : " or another model.arch");
    }
    int states = e->optimizer.name == OPT_ADAMW ? 2 : (e->optimizer.momentum > 0 ? 1 : 0);
    p->state_bytes = (int64_t)(net_num_params(n) * 4 * (2 + states) + net_num_buffers(n) * 4 +
                               (e->amp.enabled ? net_num_params(n) * elem : 0));
    /* train.ema: the average and the spare copy ema_swap uses, of params and buffers */
    if (e->train.ema.decay > 0) p->state_bytes += (int64_t)(net_num_params(n) + net_num_buffers(n)) * 4 * 2;
    net_free(n);
    return 0;
}

/* model.init_from checked against the net a new run builds, so a bad file stops it before
 * its directory exists (a resumed run takes its weights from the checkpoint instead). */
static int plan_init_from(const experiment_t *e, const plan_t *p, err_t *err) {
    if (!e->model.init_from[0] || p->resumes) return 0;
    arch_opts_t o;
    plan_arch_opts(e, p, &o);
    net_t *n = arch_build(e->model.arch, &o, err);
    if (!n) return -1;
    init_from_opts_t io = {.path = e->model.init_from, .reinit_head = e->model.init_head == INIT_HEAD_REINIT,
                           .arch = e->model.arch, .stem = p->stem, .stem_reason = p->stem_reason};
    int rc = init_from_check(n, &io, err);
    net_free(n);
    return rc ? err_wrap(err, "%s: model.init_from", e->source_path) : 0;
}

static void human_bytes(double b, char *out, size_t len);

/* " (width 10, dropout 0.3)": the model.* settings the architecture has, for the plan. */
static void plan_arch_knobs(const plan_t *p, char *out, size_t cap) {
    const arch_info_t *a = arch_info(p->arch);
    if (!a || (a->width == 0 && a->groups == 0 && a->dropout < 0)) return;
    size_t o = (size_t)snprintf(out, cap, " (");
    if (a->width != 0) o += (size_t)snprintf(out + o, o < cap ? cap - o : 0, "width %g", p->arch_width);
    if (a->groups != 0) o += (size_t)snprintf(out + o, o < cap ? cap - o : 0, ", groups %d", p->arch_groups);
    if (a->dropout >= 0)
        o += (size_t)snprintf(out + o, o < cap ? cap - o : 0, "%sdropout %g", a->width != 0 ? ", " : "",
                              p->arch_dropout);
    if (o < cap) snprintf(out + o, cap - o, ")");
}

/* Physical memory of this host, or the cgroup (v2) limit of this process when lower. */
static int64_t host_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    int64_t total = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (f) {
        long long lim;
        if (fscanf(f, "%lld", &lim) == 1 && lim > 0 && (total == 0 || lim < total)) total = lim;
        fclose(f);
    }
    return total;
}

/* What the run holds in memory, per host and per GPU, against what there is: refused
 * before anything is allocated (a run that cannot fit would die allocating, or swap the
 * host to a halt). Counted: activations and weights/gradients/optimizer state per rank
 * or replica (on the GPU with cuda), the dataset in memory per process (and on the GPU
 * with data.on_device, up to the 4 GiB the trainer puts there), the loader's batch
 * buffers. Not counted: workspaces (a few hundred MiB), the program itself. */
static int plan_memory(const experiment_t *e, plan_t *p, err_t *err) {
    bool cuda = !strcmp(p->device, "cuda"), dp = !strcmp(p->mode, "dp");
    int procs = !strcmp(p->mode, "ddp") ? p->local_world_size : 1;   /* processes on this host */
    int replicas = dp ? p->world_size : 1;                            /* nets per process */
    int64_t net_bytes = p->activation_bytes + p->state_bytes;
    int64_t in_bytes = (int64_t)p->channels * p->height * p->width * (int64_t)sizeof(float);
    int slots = 2 * e->data.workers > 2 ? 2 * e->data.workers : 2;
    int64_t loader = (int64_t)slots * p->micro_batch * in_bytes + 2 * (int64_t)p->per_device_batch * in_bytes;
    p->host_bytes = procs * (p->data_bytes + loader + (cuda ? 0 : replicas * net_bytes));
    p->host_total_bytes = host_memory();
    if (cuda) {
        bool on_device = e->data.on_device && !dp && !p->images && p->data_bytes <= ((int64_t)4 << 30);
        p->device_bytes = net_bytes + (on_device ? p->data_bytes : 0);
        int dev0 = e->parallel.n_devices ? e->parallel.devices[0] : 0;
        p->device_total_bytes = (int64_t)backend_cuda_device_memory(dev0);
    }
    char keys[512];
    snprintf(keys, sizeof keys, "lower train.batch_size (or raise train.grad_accum: same global batch, "
             "smaller micro-batches), choose a smaller model.arch, or use smaller inputs "
             "(data.augment.random_crop.size%s)", !strcmp(p->dataset, "synthetic")
             ? ", or fewer and smaller images: data.synthetic.image, data.synthetic.train_size and "
               "val_size" : "");
    char need[32], have[32], act[32], st[32], data[32];
    human_bytes((double)p->activation_bytes, act, sizeof act);
    human_bytes((double)p->state_bytes, st, sizeof st);
    human_bytes((double)p->data_bytes, data, sizeof data);
    if (p->device_total_bytes > 0 && p->device_bytes > p->device_total_bytes) {
        human_bytes((double)p->device_bytes, need, sizeof need);
        human_bytes((double)p->device_total_bytes, have, sizeof have);
        return err_set(err, ERR_INPUT, "%s: the run needs %s on each GPU (%s activations for a "
                       "micro-batch of %d on %s at %dx%dx%d + %s weights/gradients/optimizer state%s) "
                       "but %s has %s; %s%s", e->source_path, need, act, p->per_device_batch,
                       p->arch, p->channels, p->height, p->width, st,
                       p->device_bytes > net_bytes ? " + the training split (data.on_device)" : "",
                       p->gpu_name[0] ? p->gpu_name : "the GPU", have, keys,
                       p->device_bytes > net_bytes ? ", or set data.on_device: false" : "");
    }
    if (p->host_total_bytes > 0 && p->host_bytes > p->host_total_bytes) {
        human_bytes((double)p->host_bytes, need, sizeof need);
        human_bytes((double)p->host_total_bytes, have, sizeof have);
        char nets[256] = "";
        if (!cuda)
            snprintf(nets, sizeof nets, "%s activations for a micro-batch of %d on %s at %dx%dx%d + "
                     "%s weights/gradients/optimizer state, ", act, p->per_device_batch, p->arch,
                     p->channels, p->height, p->width, st);
        return err_set(err, ERR_INPUT, "%s: the run needs %s of memory on this host (%s%s dataset "
                       "in memory%s%s) but the host has %s; %s", e->source_path, need, nets, data,
                       procs * replicas > 1 ? ", times " : "",
                       procs > 1 ? "the ranks on this host" : replicas > 1 ? "the dp replicas" : "",
                       have, keys);
    }
    return 0;
}

int plan_build(const experiment_t *e, const plan_request_t *req, plan_t *p, err_t *err) {
    memset(p, 0, sizeof *p);
    p->read_only = req && req->read_only;
    snprintf(p->precision, sizeof p->precision, "%s",
             !e->amp.enabled ? "fp32" : e->amp.dtype == PREC_BF16 ? "bf16" : "fp16");
    if (plan_devices(e, p, err) || plan_data(e, p, err) || plan_steps(e, p, err) ||
        plan_model(e, p, err) || plan_memory(e, p, err) || plan_images_workers(e, p, err)) {
        plan_free(p);
        return -1;
    }
    if (req && req->for_worker) return 0;
    if (plan_rundir(e, req, p, err) || plan_init_from(e, p, err)) {
        plan_free(p);
        return -1;
    }
    return 0;
}

void plan_free(plan_t *p) { plan_images_free(p); }

int plan_after_download(const experiment_t *e, plan_t *p, err_t *err) {
    if (!p->will_download || p->images) return 0;   /* image folders are never downloaded */
    plan_t q = *p;
    if (plan_data(e, &q, err) || plan_steps(e, &q, err) || plan_model(e, &q, err) ||
        plan_memory(e, &q, err))
        return err_wrap(err, "planning from the downloaded files");
    if (!q.data_present)
        return err_set(err, ERR_INPUT, "%s: data.download fetched %s but its files are still not all "
                       "under %s; check data.download_url", e->source_path, q.dataset, q.data_root);
    *p = q;
    return 0;
}

static void human_bytes(double b, char *out, size_t len) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) { b /= 1024; i++; }
    snprintf(out, len, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

void plan_print(const plan_t *p, const experiment_t *e, FILE *f) {
    char a[32], s[32];
    fprintf(f, "experiment   %s (%s)\n", e->name, e->source_path);
    fprintf(f, "device       %s%s%s%s\n", p->device, p->gpu_name[0] ? " (" : "", p->gpu_name,
            p->gpu_name[0] ? ")" : "");
    fprintf(f, "mode         %s, world size %d", p->mode, p->world_size);
    if (p->nnodes > 1) fprintf(f, " (%d hosts x %d)", p->nnodes, p->local_world_size);
    fprintf(f, ", comm %s", p->comm_backend);
    fprintf(f, "\n");
    if (!strcmp(p->device, "cpu")) {
        int per = !strcmp(p->mode, "single") ? 1 : p->local_world_size;
        fprintf(f, "threads      %d per %s x %d = %d on %d core%s%s\n", p->threads_per_rank,
                !strcmp(p->mode, "dp") ? "replica" : "rank", per, per * p->threads_per_rank, p->cpu_cores,
                p->cpu_cores == 1 ? "" : "s", p->oversubscribed ? " (oversubscribed)" : "");
    }
    fprintf(f, "precision    %s\n", p->precision);
    fprintf(f, "graphs       %s: %s\n", p->cuda_graphs ? "on" : "off", p->cuda_graphs_why);
    char cwd[CFG_PATH] = "";
    bool synthetic = !strcmp(p->dataset, "synthetic");   /* data.root does not apply: no files */
    bool rel = !synthetic && p->data_root[0] && p->data_root[0] != '/' && getcwd(cwd, sizeof cwd);
    if (synthetic)
        fprintf(f, "data         synthetic, generated from seed %llu (no files)", (unsigned long long)e->seed);
    else
        fprintf(f, "data         %s from %s%s%s%s%s", p->dataset, p->data_root, rel ? " (in " : "", rel ? cwd : "",
                rel ? ")" : "", p->will_download ? " (will download)" : "");
    fprintf(f, ": %lld train / %lld test samples, %dx%dx%d input, %d classes\n", (long long)p->train_size,
            (long long)p->val_size, p->channels, p->height, p->width, p->num_classes);
    if (!strcmp(p->mode, "ddp"))
        fprintf(f, "batch        %d ranks x %d", p->world_size, p->micro_batch);
    else if (!strcmp(p->mode, "dp"))
        fprintf(f, "batch        %d per step split over %d devices (%d each)", p->micro_batch, p->world_size, p->per_device_batch);
    else
        fprintf(f, "batch        %d", p->micro_batch);
    if (p->grad_accum > 1) fprintf(f, " x %d accumulation", p->grad_accum);
    fprintf(f, " = %d global\n", p->global_batch);
    fprintf(f, "steps        %lld per epoch x %d epochs = %lld steps", (long long)p->steps_per_epoch,
            p->epochs, (long long)p->total_steps);
    if (e->train.max_steps > 0) fprintf(f, " (train.max_steps %lld)", (long long)e->train.max_steps);
    fprintf(f, "\n");
    fprintf(f, "lr           base %g", p->lr_base);
    if (p->warmup_steps > 0)
        fprintf(f, ", warm-up %lld step%s to %g", (long long)p->warmup_steps, p->warmup_steps == 1 ? "" : "s",
                p->lr_warmup_end);
    for (int i = 0; i < p->n_milestones; i++)
        fprintf(f, ", %g from step %lld (epoch %d)", p->lr_after_milestone[i],
                (long long)p->milestone_steps[i], e->schedule.milestones[i]);
    fprintf(f, ", last step %g\n", p->lr_final);
    plan_images_print(p, e, f);
    human_bytes((double)p->activation_bytes, a, sizeof a);
    human_bytes((double)p->state_bytes, s, sizeof s);
    char knobs[160] = "";
    plan_arch_knobs(p, knobs, sizeof knobs);
    fprintf(f, "model        %s%s, %lld parameters, %.3f GFLOP forward per sample\n", p->arch, knobs,
            (long long)p->param_count, p->forward_gflops_per_sample);
    fprintf(f, "stem         %s (%s)\n", arch_stem_text(p->arch, p->stem), p->stem_reason);
    if (e->model.init_from[0])
        fprintf(f, "init from    %s (classifier %s)\n", e->model.init_from,
                e->model.init_head == INIT_HEAD_REINIT ? "re-initialised: model.init_head reinit" : "loaded too");
    fprintf(f, "memory       %s activations + %s weights/gradients/optimizer per rank\n", a, s);
    char hb[32], ht[32];
    human_bytes((double)p->host_bytes, hb, sizeof hb);
    human_bytes((double)p->host_total_bytes, ht, sizeof ht);
    fprintf(f, "             %s on this host (of %s)", hb, ht);
    if (p->device_total_bytes > 0) {
        human_bytes((double)p->device_bytes, hb, sizeof hb);
        human_bytes((double)p->device_total_bytes, ht, sizeof ht);
        fprintf(f, ", %s per GPU (of %s) before workspaces", hb, ht);
    }
    fprintf(f, "%s\n", p->will_download ? "; the run plans again from the downloaded files" : "");
    if (p->resumes)
        fprintf(f, "run dir      %s (resumes%s%s)\n", p->run_dir, p->extends[0] ? ": continues the completed run, " : "",
                p->extends);
    else   /* the name is the time the run starts: none can be shown before */
        fprintf(f, "run dir      %s/<YYYYmmdd-HHMMSS>-<id> (new: created when the run starts, named by its start "
                "time and a random id)\n", p->run_parent);
    if (p->resumes) fprintf(f, "resume from  %s\n", p->resume_from);
    if (p->busy[0])
        fprintf(f, "             in use now: another runner is writing it (%s); starting this run now would "
                "stop with exit 2\n", p->busy);
    if (p->changed_from[0])
        fprintf(f, "             not continuing %s: the configuration changed (%s)\n", p->changed_from, p->changes);
    if (p->note[0]) fprintf(f, "             %s\n", p->note);
    if (p->est_source[0]) fprintf(f, "time         %s\n", p->est_source);
    if (p->warning[0]) fprintf(f, "warning      %s\n", p->warning);
}

void plan_write_json(const plan_t *p, FILE *f) {
    jw_t w;
    jw_init(&w, f, true);
    jw_obj_begin(&w);
    jw_kstr(&w, "device", p->device);
    jw_kint(&w, "gpus_visible", p->gpus_visible);
    jw_kstr(&w, "gpu_name", p->gpu_name);
    jw_kstr(&w, "mode", p->mode);
    jw_kint(&w, "world_size", p->world_size);
    jw_kint(&w, "nnodes", p->nnodes);
    jw_kint(&w, "local_world_size", p->local_world_size);
    jw_kstr(&w, "comm_backend", p->comm_backend);
    jw_kint(&w, "threads_per_rank", p->threads_per_rank);
    jw_kint(&w, "cpu_cores", p->cpu_cores);
    jw_kbool(&w, "oversubscribed", p->oversubscribed);
    jw_kstr(&w, "precision", p->precision);
    jw_kbool(&w, "cuda_graphs", p->cuda_graphs);
    jw_kstr(&w, "cuda_graphs_why", p->cuda_graphs_why);
    jw_kstr(&w, "dataset", p->dataset);
    jw_kstr(&w, "data_root", p->data_root);
    jw_kbool(&w, "data_present", p->data_present);
    jw_kbool(&w, "will_download", p->will_download);
    jw_kint(&w, "train_size", p->train_size);
    jw_kint(&w, "val_size", p->val_size);
    jw_key(&w, "input");
    jw_arr_begin(&w);
    jw_int(&w, p->channels); jw_int(&w, p->height); jw_int(&w, p->width);
    jw_arr_end(&w);
    jw_kint(&w, "num_classes", p->num_classes);
    plan_images_json(p, &w);
    jw_kint(&w, "global_batch", p->global_batch);
    jw_kint(&w, "grad_accum", p->grad_accum);
    jw_kint(&w, "micro_batch", p->micro_batch);
    jw_kint(&w, "per_device_batch", p->per_device_batch);
    jw_kint(&w, "samples_per_rank", p->samples_per_rank);
    jw_kint(&w, "batches_per_epoch", p->batches_per_epoch);
    jw_kint(&w, "steps_per_epoch", p->steps_per_epoch);
    jw_kint(&w, "epochs", p->epochs);
    jw_kint(&w, "total_steps", p->total_steps);
    jw_knum(&w, "lr_base", p->lr_base);
    jw_kint(&w, "warmup_steps", p->warmup_steps);
    jw_knum(&w, "lr_warmup_end", p->lr_warmup_end);
    jw_key(&w, "milestones");
    jw_arr_begin(&w);
    for (int i = 0; i < p->n_milestones; i++) {
        jw_obj_begin(&w);
        jw_kint(&w, "step", p->milestone_steps[i]);
        jw_knum(&w, "lr", p->lr_after_milestone[i]);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_knum(&w, "lr_final", p->lr_final);
    jw_kstr(&w, "arch", p->arch);
    jw_kstr(&w, "stem", arch_stem_name(p->stem));
    jw_kstr(&w, "stem_reason", p->stem_reason);
    jw_knum(&w, "arch_width", p->arch_width);
    jw_kint(&w, "arch_groups", p->arch_groups);
    jw_knum(&w, "arch_dropout", p->arch_dropout);
    jw_kint(&w, "param_count", p->param_count);
    jw_knum(&w, "forward_gflops_per_sample", p->forward_gflops_per_sample);
    jw_kint(&w, "activation_bytes", p->activation_bytes);
    jw_kint(&w, "state_bytes", p->state_bytes);
    jw_kint(&w, "data_bytes", p->data_bytes);
    jw_kint(&w, "host_bytes", p->host_bytes);
    jw_kint(&w, "host_total_bytes", p->host_total_bytes);
    jw_kint(&w, "device_bytes", p->device_bytes);
    jw_kint(&w, "device_total_bytes", p->device_total_bytes);
    jw_kstr(&w, "run_dir", p->run_dir);
    if (p->run_parent[0]) jw_kstr(&w, "run_parent", p->run_parent);
    jw_kbool(&w, "resumes", p->resumes);
    jw_kstr(&w, "resume_from", p->resume_from);
    if (p->extends[0]) jw_kstr(&w, "extends", p->extends);
    if (p->est_source[0]) {   /* `runner plan` only */
        jw_knum(&w, "estimated_seconds", p->est_seconds);
        jw_kstr(&w, "estimate", p->est_source);
    }
    jw_obj_end(&w);
    fputc('\n', f);
}
