/* config_schema.c: the schema table of the experiment file (one row per dotted key with
 * its type, bounds, struct field and meaning), key lookup, the closest-key suggestions
 * for typos, and the plain-name rule for run names.
 *
 * It does not parse YAML or apply values (config_apply.c) and holds no mutable state:
 * the table is const. Row order is the order of docs/experiment-files.md and of
 * resolved.yaml; a K_SWITCH row is followed by its F_CHILD rows.
 */
#include "runner/config_internal.h"
#include "model/arch/arch_table.h"
#include "model/backend.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define OFF(f) ((ptrdiff_t)offsetof(experiment_t, f))
#define SZ(f) sizeof(((experiment_t *)0)->f)
#define NAMES(a) a, (int)(sizeof a / sizeof a[0])
#define INF HUGE_VAL

static const char *const DEVICES[] = {"auto", "cpu", "cuda"};
static const char *const DATASETS[] = {"cifar10", "cifar100", "fashion_mnist", "synthetic",
                                       "image_folder"};
static const char *const IMAGE_MODES[] = {"rgb", "grayscale"};
static const char *const BAD_IMAGES[] = {"error", "skip"};
static const char *const OPTIMS[] = {"sgd", "adamw"};
static const char *const SCHEDS[] = {"constant", "multistep", "cosine"};
static const char *const AMP_DTYPES[] = {NULL, "fp16", "bf16"};
static const char *const PRECS[] = {"none", "fp16", "bf16"};
static const char *const MODES[] = {"single", "dp", "ddp"};
static const char *const BACKENDS[] = {"auto", "nccl", "shm"};
static const char *const WANDB[] = {"disabled", "online", "offline"};
static const char *const STEMS[] = {"auto", "cifar", "imagenet"};
static const char *const INIT_HEADS[] = {"strict", "reinit"};
static const char *const METRICS[] = {NULL, "val_loss", "val_top1", "val_top5", "val_loss_ema",
                                      "val_top1_ema", "val_top5_ema", "train_loss", "train_top1"};
static const char *const STOP_MODES[] = {"auto", "min", "max"};
static const char *const GRAPHS[] = {"false", "true", "auto"};   /* graphs_mode_t */
/* backend_fusion_name's names, and all (BACKEND_FUSE_ALL: the options measured faster; the default) */
static const char *const FUSIONS[] = {BACKEND_FUSION_NAMES, "all"};
_Static_assert(sizeof METRICS / sizeof METRICS[0] == METRIC_COUNT, "one name per metric_t");
/* rows added after the hash was pinned: hashed only when used (F_HASH_SET) */
#define HASH_NEW (F_HASH | F_HASH_SET)
static const char *const AUTO_AUGS[] = {NULL, "randaugment", "trivialaugment"};   /* NULL: null */
static const char *const ERASE_MODES[] = {"const", "rand", "pixel"};
static const char *const MIX_MODES[] = {"batch", "pair", "elem"};

/* Shorthands for the common row shapes. */
#define ROW_INT(k, f, lo, hi, fl, doc) {k, K_INT, OFF(f), 0, lo, hi, fl, 0, 0, -1, NULL, 0, doc}
#define ROW_FLT(k, f, lo, hi, fl, doc) {k, K_FLOAT, OFF(f), 0, lo, hi, fl, 0, 0, -1, NULL, 0, doc}
#define ROW_BOOL(k, f, fl, doc) {k, K_BOOL, OFF(f), 0, 0, 0, fl, 0, 0, -1, NULL, 0, doc}
#define ROW_STR(k, f, fl, doc) \
    {k, K_STR, OFF(f), SZ(f), 0, 0, (fl) | F_QUOTE, 0, 0, -1, NULL, 0, doc}
#define ROW_ENUM(k, f, names, fl, doc) \
    {k, K_ENUM, OFF(f), SZ(f), 0, 0, fl, 0, 0, -1, NAMES(names), doc}
#define ROW_NAME(k, f, names, fl, doc) \
    {k, K_NAME, OFF(f), SZ(f), 0, 0, fl, 0, 0, -1, NAMES(names), doc}

const cfg_row_t cfg_rows[] = {
    ROW_STR("name", name, F_PLAIN | F_NONEMPTY, "run directory name under output.root"),
    {"seed", K_UINT64, OFF(seed), 0, 0, INF, F_HASH, 0, 0, -1, NULL, 0,
     "keys every random draw (init, shuffle, augmentation)"},
    ROW_ENUM("device", device, DEVICES, F_HASH, "auto | cpu | cuda"),

    ROW_NAME("data.dataset", data.dataset, DATASETS, F_HASH,
             "cifar10 | cifar100 | fashion_mnist | synthetic | image_folder"),
    ROW_STR("data.root", data.root, F_PATH, "where the dataset files are"),
    ROW_BOOL("data.download", data.download, 0, "fetch, verify and extract missing files"),
    ROW_STR("data.download_url", data.download_url, F_NULLABLE | F_URL,
            "null: the dataset's official URL"),
    ROW_STR("data.download_md5", data.download_md5, F_NULLABLE | F_MD5,
            "null: the official tarball's md5"),
    ROW_BOOL("data.shuffle", data.shuffle, F_HASH, "reshuffle the training set every epoch"),
    ROW_INT("data.workers", data.workers, 0, 64, F_AUTO,
            "loader threads per rank; auto: planned from the decode rate (image_folder)"),
    ROW_BOOL("data.on_device", data.on_device, 0,
             "project key: CUDA keeps a training split that fits on the GPU and augments there; "
             "false: the CPU loader with pinned buffers and a copy stream"),
    {"data.augment.random_crop", K_SWITCH, OFF(data.augment.random_crop), 0, 0, 0, F_HASH, 0,
     0, -1, NULL, 0, "false | {size, padding}: pad, then crop at a random place"},
    ROW_INT("data.augment.random_crop.size", data.augment.crop_size, 1, 4096, F_CHILD,
            "crop side in pixels (default: the image side)"),
    ROW_INT("data.augment.random_crop.padding", data.augment.crop_padding, 0, 1024, F_CHILD,
            "zero padding on each side before cropping"),
    ROW_BOOL("data.augment.horizontal_flip", data.augment.horizontal_flip, F_HASH,
             "flip half of the images left-right"),
    {"data.augment.rotation", K_ROTATION, OFF(data.augment.rotation), 0, 0, 180, F_HASH, 0, 0,
     -1, NULL, 0, "degrees: uniform in [-r, r], bilinear; 0 or false: off"},
    ROW_ENUM("data.augment.auto", data.augment.auto_kind, AUTO_AUGS, F_NULLABLE | HASH_NEW,
             "null | randaugment | trivialaugment (torchvision, after crop/flip/rotation)"),
    ROW_INT("data.augment.randaugment.num_ops", data.augment.ra_num_ops, 0, 16, HASH_NEW,
            "RandAugment ops per image"),
    ROW_INT("data.augment.randaugment.magnitude", data.augment.ra_magnitude, 0, 30, HASH_NEW,
            "RandAugment magnitude bin of 31"),
    ROW_FLT("data.augment.random_erasing.prob", data.augment.erase_prob, 0, 1, HASH_NEW,
            "timm RandomErasing probability per image (--reprob); 0: off"),
    ROW_ENUM("data.augment.random_erasing.mode", data.augment.erase_mode, ERASE_MODES, HASH_NEW,
             "const (zeros) | rand (normal per channel) | pixel (normal per element)"),
    ROW_INT("data.augment.random_erasing.count", data.augment.erase_count, 1, 8, HASH_NEW,
            "most boxes per image (--recount)"),
    {"data.augment.random_resized_crop", K_SWITCH, OFF(data.augment.random_resized_crop), 0, 0, 0,
     F_HASH | F_IMAGES, 0, 0, -1, NULL, 0, "image_folder: false | {scale, ratio}: torchvision's RandomResizedCrop"},
    {"data.augment.random_resized_crop.scale", K_FLOATS, OFF(data.augment.rrc_scale), 0, 0, 1,
     F_CHILD | F_LO_OPEN, 2, 2, -1, NULL, 0, "area fraction range"},
    {"data.augment.random_resized_crop.ratio", K_FLOATS, OFF(data.augment.rrc_ratio), 0, 0, 100,
     F_CHILD | F_LO_OPEN, 2, 2, -1, NULL, 0, "aspect ratio range"},
    {"data.normalize", K_SWITCH, -1, 0, 0, 0, F_HASH, 0, 0, -1, NULL, 0,
     "false | {mean: [..], std: [..]} per channel (default: the dataset's)"},
    {"data.normalize.mean", K_FLOATS, OFF(data.mean), 0, -INF, INF, F_CHILD, 1, 4, -1, NULL, 0,
     "per-channel mean"},
    {"data.normalize.std", K_FLOATS, OFF(data.std), 0, 0, INF, F_CHILD | F_LO_OPEN, 1, 4, -1,
     NULL, 0, "per-channel standard deviation"},
    ROW_FLT("data.mixup.alpha", data.mixup.alpha, 0, 1e6, HASH_NEW,
            "timm mixup Beta alpha (--mixup); 0: no mixup"),
    ROW_FLT("data.mixup.cutmix_alpha", data.mixup.cutmix_alpha, 0, 1e6, HASH_NEW,
            "timm cutmix Beta alpha (--cutmix); 0: no cutmix"),
    ROW_FLT("data.mixup.prob", data.mixup.prob, 0, 1, HASH_NEW, "probability of mixing (--mixup-prob)"),
    ROW_FLT("data.mixup.switch_prob", data.mixup.switch_prob, 0, 1, HASH_NEW,
            "probability of cutmix when both are on (--mixup-switch-prob)"),
    ROW_ENUM("data.mixup.mode", data.mixup.mode, MIX_MODES, HASH_NEW,
             "batch | pair | elem (--mixup-mode)"),
    ROW_INT("data.synthetic.train_size", data.synthetic.train_size, 1, 100000000, F_HASH,
            "synthetic training images"),
    ROW_INT("data.synthetic.val_size", data.synthetic.val_size, 1, 100000000, F_HASH,
            "synthetic validation images"),
    {"data.synthetic.image", K_INTS, OFF(data.synthetic.image), 0, 1, 4096, F_HASH, 3, 3, -1,
     NULL, 0, "[channels, height, width]"},
    ROW_INT("data.synthetic.classes", data.synthetic.classes, 2, 100000, F_HASH,
            "synthetic label count"),
    /* image_folder (issue 16) */
    ROW_STR("data.train_dir", data.train_dir, F_NONEMPTY, "image_folder: training split, under data.root"),
    ROW_STR("data.val_dir", data.val_dir, F_NONEMPTY, "image_folder: validation split, under data.root"),
    ROW_INT("data.image_size", data.image_size, 1, 8192, F_HASH | F_IMAGES,
            "image_folder: training and evaluation crop side"),
    ROW_INT("data.resize", data.resize, 1, 65535, F_HASH | F_IMAGES,
            "image_folder: evaluation shorter side before the centre crop (default image_size / 0.875)"),
    ROW_ENUM("data.image_mode", data.image_mode, IMAGE_MODES, F_HASH | F_IMAGES,
             "image_folder: rgb (PIL convert(\"RGB\")) | grayscale (convert(\"L\"))"),
    ROW_ENUM("data.bad_images", data.bad_images, BAD_IMAGES, F_HASH | F_IMAGES,
             "image_folder: error (stop, naming the file) | skip (leave out, count)"),
    ROW_BOOL("data.jpeg_dct_scaling", data.jpeg_dct_scaling, F_HASH | F_IMAGES,
             "project key: decode JPEGs at 1/2, 1/4, 1/8 size when the crop allows"),

    ROW_NAME("model.arch", model.arch, ARCH_NAMES, F_HASH,
             "resnet18..152 | resnet20..110 | wide_resnet50_2 | resnext50_32x4d | wrn28_10 | "
             "preact_resnet18 | resnext29_8x64d | vgg11_bn..vgg19_bn | mobilenet_v2 | ... "
             "(model/arch/arch_table.h)"),
    ROW_INT("model.num_classes", model.num_classes, 0, 100000, F_HASH,
            "classifier outputs (0 in the file: the dataset's)"),
    ROW_BOOL("model.zero_init_residual", model.zero_init_residual, F_HASH,
             "zero the last BN gamma of each residual branch"),
    ROW_STR("model.init_from", model.init_from, F_NULLABLE | F_HASH | F_PATH,
            "null | a .safetensors file with torchvision-style names"),
    ROW_ENUM("model.stem", model.stem, STEMS, F_HASH | F_HASH_SET,
             "auto | cifar (3x3 conv) | imagenet (7x7/2 conv + 3x3/2 max-pool); auto: imagenet above 64 px"),
    ROW_ENUM("model.init_head", model.init_head, INIT_HEADS, F_HASH | F_HASH_SET,
             "strict: fc.* of init_from must fit | reinit: fresh fc, the rest loaded"),
    /* issue 24 */
    ROW_FLT("model.width", model.width, 0, 4096, F_LO_OPEN | F_NULLABLE | HASH_NEW,
            "null | the arch's width: WRN widen factor, width_per_group, MobileNetV2 multiplier"),
    ROW_INT("model.groups", model.groups, 0, 1024, HASH_NEW, "0 | ResNeXt cardinality (0: the arch's)"),
    ROW_FLT("model.dropout", model.dropout, 0, 1, F_HI_OPEN | F_NULLABLE | HASH_NEW,
            "null | dropout probability of wrn*, vgg*_bn, mobilenet_v2 (null: the arch's)"),

    ROW_ENUM("optimizer.name", optimizer.name, OPTIMS, F_HASH, "sgd | adamw"),
    ROW_FLT("optimizer.lr", optimizer.lr, 0, INF, F_LO_OPEN | F_HASH,
            "learning rate for the global batch"),
    ROW_FLT("optimizer.momentum", optimizer.momentum, 0, 1, F_HASH, "sgd momentum"),
    ROW_BOOL("optimizer.nesterov", optimizer.nesterov, F_HASH, "sgd Nesterov momentum"),
    ROW_FLT("optimizer.weight_decay", optimizer.weight_decay, 0, 1, F_HASH,
            "L2 (sgd) or decoupled (adamw) weight decay"),
    ROW_BOOL("optimizer.no_weight_decay_on_bn_and_bias",
             optimizer.no_weight_decay_on_bn_and_bias, F_HASH,
             "exempt BN parameters and biases from weight decay"),
    {"optimizer.betas", K_FLOATS, OFF(optimizer.betas), 0, 0, 1, F_HI_OPEN | F_HASH, 2, 2, -1,
     NULL, 0, "adamw [beta1, beta2]"},
    ROW_FLT("optimizer.eps", optimizer.eps, 0, 1, F_LO_OPEN | F_HASH, "adamw epsilon"),
    ROW_FLT("optimizer.clip_grad_norm", optimizer.clip_grad_norm, 0, INF,
            F_LO_OPEN | F_NULLABLE | F_HASH | F_HASH_SET,
            "null | max global L2 norm of the gradient (torch.nn.utils.clip_grad_norm_)"),

    ROW_ENUM("schedule.name", schedule.name, SCHEDS, F_HASH, "constant | multistep | cosine"),
    {"schedule.milestones", K_INTS, OFF(schedule.milestones), 0, 1, 1000000,
     F_INCREASING | F_NULLABLE | F_HASH, 0, CFG_MAX_LIST, OFF(schedule.n_milestones), NULL, 0,
     "multistep: epochs where lr *= gamma (strictly increasing)"},
    ROW_FLT("schedule.gamma", schedule.gamma, 0, 1, F_LO_OPEN | F_HASH, "multistep factor"),
    ROW_FLT("schedule.warmup_epochs", schedule.warmup_epochs, 0, 1000000, F_HASH,
            "linear warm-up from 0, per step"),
    ROW_FLT("schedule.min_lr", schedule.min_lr, 0, INF, F_HASH, "cosine floor"),

    ROW_INT("train.epochs", train.epochs, 1, 1000000, F_HASH, "passes over the training set"),
    ROW_INT("train.batch_size", train.batch_size, 1, 16777216, F_HASH,
            "GLOBAL batch per optimizer step (all ranks, all micro-batches)"),
    ROW_INT("train.grad_accum", train.grad_accum, 1, 65536, F_HASH,
            "micro-batches per step on each rank"),
    ROW_FLT("train.label_smoothing", train.label_smoothing, 0, 1, F_HI_OPEN | F_HASH,
            "label smoothing epsilon"),
    {"train.max_steps", K_INT64, OFF(train.max_steps), 0, 1, INF,
     F_NULLABLE, 0, 0, -1, NULL, 0, "null | stop after this many optimizer steps"},
    ROW_INT("train.eval_every", train.eval_every, 1, 1000000, 0, "validate every N epochs"),
    ROW_BOOL("train.deterministic", train.deterministic, F_HASH,
             "bit-exact on CPU; deterministic algorithms on CUDA"),
    ROW_ENUM("train.cuda_graphs", train.cuda_graphs, GRAPHS, F_BOOLS,
             "false | true | auto: project key: record whole steps once per shape and replay them as "
             "CUDA graphs (auto: where bit-identical to false)"),
    ROW_FLT("train.ema.decay", train.ema.decay, 0, 1, F_LO_OPEN | F_HI_OPEN | F_NULLABLE | F_HASH | F_HASH_SET,
            "null | EMA of weights and BN buffers, timm ModelEmaV3 decay (e.g. 0.9998)"),
    ROW_BOOL("train.ema.warmup", train.ema.warmup, F_HASH | F_HASH_SET,
             "timm --model-ema-warmup: decay = min(decay, 1 - (1 + k/gamma)^-power)"),
    ROW_FLT("train.ema.warmup_gamma", train.ema.warmup_gamma, 0, INF, F_LO_OPEN | F_HASH | F_HASH_SET,
            "ModelEmaV3 warmup_gamma"),
    ROW_FLT("train.ema.warmup_power", train.ema.warmup_power, 0, INF, F_LO_OPEN | F_HASH | F_HASH_SET,
            "ModelEmaV3 warmup_power"),
    {"train.early_stopping.metric", K_ENUM, OFF(train.early_stopping.metric), 0, 0, 0, F_NULLABLE,
     0, 0, -1, NAMES(METRICS),
     "null | val_loss | val_top1 | val_top5 | val_*_ema | train_loss | train_top1"},
    ROW_INT("train.early_stopping.patience", train.early_stopping.patience, 1, 1000000, 0,
            "evaluations without improvement before stopping"),
    ROW_FLT("train.early_stopping.min_delta", train.early_stopping.min_delta, 0, INF, 0,
            "smallest change that counts as an improvement"),
    ROW_ENUM("train.early_stopping.mode", train.early_stopping.mode, STOP_MODES, 0,
             "auto (losses min, top-k max) | min | max"),
    ROW_BOOL("train.cpu_winograd", train.cpu_winograd, 0,
             "project key: Winograd for 3x3 filter gradients on the CPU where oneDNN has it "
             "(faster, ~10x less precise)"),
    {"train.cuda_fusion", K_STRS, OFF(train.cuda_fusion), SZ(train.cuda_fusion[0]), 0, 0, F_NULLABLE | F_UNIQUE,
     0, CFG_MAX_LIST, OFF(train.n_cuda_fusion), NAMES(FUSIONS),
     "project key: CUDA fusion options [graph_conv, conv_stats, dgrad_dbn, dgrad_accum, vec16, bn_remask, "
     "bn_wide_final, bn_fold_running, dgrad_accum_tune, bn_more_splits, pdl, heur_b, bn_mask_bits, bn_dual_add, "
     "wgrad_f32, bn_one_pass, bn_apply_tune, bn_persist]; all = [graph_conv, dgrad_accum, bn_remask, bn_wide_final, bn_fold_running, pdl, bn_mask_bits, "
     "bn_dual_add], the ones a GPU run showed exact "
     "and faster (the default); [] for none"},

    ROW_BOOL("amp.enabled", amp.enabled, F_HASH, "mixed precision"),
    ROW_ENUM("amp.dtype", amp.dtype, AMP_DTYPES, F_HASH,
             "fp16 (dynamic loss scaling) | bf16 (no scaling)"),
    ROW_FLT("amp.init_scale", amp.init_scale, 0, 1e10, F_LO_OPEN | F_HASH,
            "fp16 initial loss scale"),
    ROW_INT("amp.growth_interval", amp.growth_interval, 1, 1000000000, F_HASH,
            "fp16: clean steps before the scale doubles"),
    ROW_BOOL("amp.tf32", amp.tf32, F_HASH, "project key: TF32 tensor cores for fp32 on CUDA"),

    ROW_ENUM("parallel.mode", parallel.mode, MODES, F_HASH, "single | dp | ddp"),
    ROW_INT("parallel.world_size", parallel.world_size, 1, 4096, F_HASH,
            "processes (ddp) or devices (dp)"),
    {"parallel.devices", K_INTS, OFF(parallel.devices), 0, 0, 1023, F_NULLABLE | F_UNIQUE, 1,
     CFG_MAX_LIST, OFF(parallel.n_devices), NULL, 0,
     "null: the first visible devices | [0, 1, ..] per node"},
    ROW_ENUM("parallel.backend", parallel.backend, BACKENDS, 0,
             "auto | nccl | shm (auto: nccl on cuda, shm on cpu)"),
    ROW_FLT("parallel.bucket_mb", parallel.bucket_mb, 0, 1024, F_LO_OPEN,
            "gradient bucket size in MiB"),
    ROW_ENUM("parallel.grad_compression", parallel.grad_compression, PRECS, F_HASH,
             "none | fp16 | bf16 (all-reduce in half precision)"),
    ROW_BOOL("parallel.sync_bn", parallel.sync_bn, F_HASH, "batch statistics over all ranks"),
    ROW_INT("parallel.nnodes", parallel.nnodes, 1, 1024, 0, "hosts"),
    ROW_STR("parallel.master_addr", parallel.master_addr, F_NONEMPTY, "rendezvous host"),
    ROW_INT("parallel.master_port", parallel.master_port, 0, 65535, 0,
            "rendezvous port; 0: pick a free one"),
    ROW_FLT("parallel.timeout_s", parallel.timeout_s, 0, 604800, F_LO_OPEN,
            "a collective waiting longer fails"),
    ROW_INT("parallel.max_restarts", parallel.max_restarts, 0, 1000, 0,
            "ddp: restart every rank from the last checkpoint when one dies, up to N times"),

    ROW_INT("logging.print_every", logging.print_every, 1, 1000000000, 0, "steps between lines"),
    ROW_BOOL("logging.csv", logging.csv, 0, "metrics.csv and steps.csv"),
    ROW_BOOL("logging.tensorboard", logging.tensorboard, 0, "tensorboard/ event files"),
    ROW_ENUM("logging.wandb.mode", logging.wandb.mode, WANDB, 0,
             "disabled | online | offline (WANDB_MODE overrides)"),
    ROW_STR("logging.wandb.project", logging.wandb.project, F_NULLABLE, "null: WANDB_PROJECT"),
    ROW_STR("logging.wandb.entity", logging.wandb.entity, F_NULLABLE, "null: WANDB_ENTITY"),
    {"logging.wandb.tags", K_STRS, OFF(logging.wandb.tags), SZ(logging.wandb.tags[0]), 0, 0,
     F_NULLABLE | F_NONEMPTY, 0, CFG_MAX_LIST, OFF(logging.wandb.n_tags), NULL, 0,
     "list of strings"},
    ROW_STR("logging.wandb.group", logging.wandb.group, F_NULLABLE, "null: no group"),

    ROW_INT("checkpoint.every_epochs", checkpoint.every_epochs, 0, 1000000, 0,
            "epoch_<N>.ckpt every N epochs; 0: only last/best"),
    ROW_INT("checkpoint.every_steps", checkpoint.every_steps, 0, 1000000000, 0,
            "step_<N>.ckpt every N optimizer steps, written in the background; 0: off"),
    ROW_INT("checkpoint.keep_last", checkpoint.keep_last, 0, 1000000, 0,
            "epoch_<N>.ckpt files kept"),
    ROW_BOOL("checkpoint.keep_best", checkpoint.keep_best, 0, "best.ckpt by checkpoint.best_metric"),
    ROW_ENUM("checkpoint.best_metric", checkpoint.best_metric, METRICS, 0,
             "val_top1 | val_top1_ema | val_loss | ... (what best.ckpt is chosen by)"),
    ROW_STR("checkpoint.resume", checkpoint.resume, F_NONEMPTY | F_PATH,
            "auto | never | a run directory or .ckpt path"),

    ROW_STR("output.root", output.root, F_NONEMPTY | F_PATH, "run directories go under here"),
};
const int cfg_n_rows = (int)(sizeof cfg_rows / sizeof cfg_rows[0]);
/* K_ENUM rows store an int into the enum field */
_Static_assert(sizeof(device_t) == sizeof(int) && sizeof(par_mode_t) == sizeof(int) &&
                   sizeof(comm_backend_t) == sizeof(int) && sizeof(precision_t) == sizeof(int) &&
                   sizeof(optim_name_t) == sizeof(int) && sizeof(sched_name_t) == sizeof(int) &&
                   sizeof(wandb_mode_t) == sizeof(int) && sizeof(model_stem_t) == sizeof(int) &&
                   sizeof(init_head_t) == sizeof(int) && sizeof(metric_t) == sizeof(int) &&
                   sizeof(stop_mode_t) == sizeof(int) && sizeof(graphs_mode_t) == sizeof(int),
               "enum fields must be int-sized");
_Static_assert(sizeof cfg_rows / sizeof cfg_rows[0] <= CFG_MAX_ROWS, "raise CFG_MAX_ROWS");

/* Keys that are not rows but are valid at the top of a file. */
static const char *const EXTRA_KEYS[] = {"base", "matrix"};

const char *device_name(device_t d) {
    return (unsigned)d < 3 ? DEVICES[d] : "?";
}
const char *par_mode_name(par_mode_t m) {
    return (unsigned)m < 3 ? MODES[m] : "?";
}
const char *comm_backend_name(comm_backend_t b) {
    return (unsigned)b < 3 ? BACKENDS[b] : "?";
}
const char *precision_name(precision_t p) {
    return (unsigned)p < 3 ? PRECS[p] : "?";
}

const char *metric_name(metric_t m) {
    return (unsigned)m < METRIC_COUNT && METRICS[m] ? METRICS[m] : "none";
}
bool metric_minimised(metric_t m) {
    return m == METRIC_VAL_LOSS || m == METRIC_VAL_LOSS_EMA || m == METRIC_TRAIN_LOSS;
}

int cfg_row_find(const char *key) {
    for (int i = 0; i < cfg_n_rows; i++)
        if (!strcmp(cfg_rows[i].key, key)) return i;
    return -1;
}

bool cfg_is_section(const char *key) {
    size_t n = strlen(key);
    if (!n) return true;
    for (int i = 0; i < cfg_n_rows; i++)
        if (!strncmp(cfg_rows[i].key, key, n) && cfg_rows[i].key[n] == '.') return true;
    return false;
}

/* Edit distance counting a swap of two neighbours as one edit (optimal string alignment),
 * ASCII case-insensitive, on the first 127 bytes of each string. */
size_t cfg_edit_distance(const char *a, const char *b) {
    size_t la = strnlen(a, 127), lb = strnlen(b, 127);
    size_t r0[128], r1[128], r2[128]; /* rows i-2, i-1, i */
    size_t *pp = r0, *p = r1, *cur = r2;
    for (size_t j = 0; j <= lb; j++) p[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        int ca = tolower((unsigned char)a[i - 1]);
        for (size_t j = 1; j <= lb; j++) {
            int cb = tolower((unsigned char)b[j - 1]);
            size_t best = p[j - 1] + (ca != cb);
            if (p[j] + 1 < best) best = p[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && pp[j - 2] + 1 < best)
                best = pp[j - 2] + 1;
            cur[j] = best;
        }
        size_t *t = pp;
        pp = p, p = cur, cur = t;
    }
    return p[lb];
}

/* A typo is "close" when at most a third of the word (and at least 1, at most 3 edits). */
static size_t close_enough(const char *s) {
    size_t n = strlen(s) / 3;
    return n < 1 ? 1 : n > 3 ? 3 : n;
}

/* Words users write for a value that has another name here. */
static const char *const VALUE_ALIASES[][2] = {
    {"gpu", "cuda"},           {"nvidia", "cuda"},       {"half", "fp16"},
    {"fashion-mnist", "fashion_mnist"},                   {"mnist", "fashion_mnist"},
    {"fashionmnist", "fashion_mnist"},                    {"float16", "fp16"},
    {"bfloat16", "bf16"},      {"adam", "adamw"},        {"step", "multistep"},
    {"cos", "cosine"},         {"none", "constant"},     {"distributed", "ddp"},
    {"dataparallel", "dp"},    {"off", "disabled"},
};

const char *cfg_closest(const char *s, const char *const *names, int n) {
    for (size_t a = 0; a < sizeof VALUE_ALIASES / sizeof VALUE_ALIASES[0]; a++) {
        if (strcasecmp(s, VALUE_ALIASES[a][0])) continue;
        for (int i = 0; i < n; i++)
            if (names[i] && !strcmp(names[i], VALUE_ALIASES[a][1])) return names[i];
    }
    const char *best = NULL;
    size_t bd = (size_t)-1;
    for (int i = 0; i < n; i++) {
        if (!names[i]) continue;
        size_t d = cfg_edit_distance(s, names[i]);
        if (d < bd) bd = d, best = names[i];
    }
    return best && bd <= close_enough(s) ? best : NULL;
}

const char *config_closest_word(const char *s, const char *const *names, int n) {
    return cfg_closest(s, names, n);
}

/* The last component of a dotted key. */
static const char *leaf(const char *key) {
    const char *d = strrchr(key, '.');
    return d ? d + 1 : key;
}

/* Advice for an unknown key: the closest full key or section by edit distance; else the
 * same leaf name under another section ("lr" at the top -> optimizer.lr); else the valid
 * keys under the same parent. */
void cfg_suggest_key(const char *full, char *out, size_t cap) {
    char best[CFG_STR] = "", cand[CFG_STR];
    size_t bd = (size_t)-1;
    for (int i = 0; i < cfg_n_rows + 2; i++) {
        const char *k = i < cfg_n_rows ? cfg_rows[i].key : EXTRA_KEYS[i - cfg_n_rows];
        snprintf(cand, sizeof cand, "%s", k);
        for (;;) { /* the key, then each enclosing section */
            size_t d = cfg_edit_distance(full, cand);
            if (d < bd && strcmp(cand, full)) {
                bd = d;
                snprintf(best, sizeof best, "%s", cand);
            }
            char *dot = strrchr(cand, '.');
            if (!dot) break;
            *dot = '\0';
        }
    }
    if (best[0] && bd <= close_enough(leaf(full))) {
        snprintf(out, cap, "did you mean %s?", best);
        return;
    }
    /* an abbreviation of exactly one key under the same parent ("data.da" -> data.dataset) */
    size_t fl = strlen(full);
    const char *only = NULL;
    int matches = 0;
    if (strlen(leaf(full)) >= 2)
        for (int i = 0; i < cfg_n_rows; i++)
            if (!strncmp(cfg_rows[i].key, full, fl) && !strchr(cfg_rows[i].key + fl, '.'))
                only = cfg_rows[i].key, matches++;
    if (matches == 1) {
        snprintf(out, cap, "did you mean %s?", only);
        return;
    }
    /* the same leaf under another section */
    const char *lf = leaf(full);
    char list[512] = "";
    int found = 0;
    for (int i = 0; i < cfg_n_rows; i++)
        if (!strcmp(leaf(cfg_rows[i].key), lf) && strcmp(cfg_rows[i].key, full) && found < 3) {
            size_t l = strlen(list);
            snprintf(list + l, sizeof list - l, "%s%s", found ? " or " : "", cfg_rows[i].key);
            found++;
        }
    if (found) {
        snprintf(out, cap, "did you mean %s?", list);
        return;
    }
    /* list the valid keys under the parent */
    char parent[CFG_STR];
    snprintf(parent, sizeof parent, "%s", full);
    char *dot = strrchr(parent, '.');
    if (dot) *dot = '\0'; else parent[0] = '\0';
    size_t pl = strlen(parent);
    list[0] = '\0';
    char last[CFG_STR] = "";
    for (int i = 0; i < cfg_n_rows; i++) {
        const char *k = cfg_rows[i].key;
        if (pl && (strncmp(k, parent, pl) || k[pl] != '.')) continue;
        const char *rest = pl ? k + pl + 1 : k;
        char item[CFG_STR];
        snprintf(item, sizeof item, "%s", rest);
        char *d = strchr(item, '.');
        if (d) *d = '\0';
        if (!strcmp(item, last)) continue;
        snprintf(last, sizeof last, "%s", item);
        size_t l = strlen(list);
        if (l + strlen(item) + 8 >= sizeof list) break;
        snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", item);
    }
    snprintf(out, cap, "valid keys %s%s are: %s", pl ? "under " : "at the top level",
             pl ? parent : "", list);
}

const char *cfg_plain_name_problem(const char *s, char *buf, size_t cap) {
    size_t n = strlen(s);
    if (!n) return "is empty";
    if (n > CFG_MAX_NAME) {
        snprintf(buf, cap, "is %zu characters long; at most %d", n, (int)CFG_MAX_NAME);
        return buf;
    }
    if (!strcmp(s, ".") || !strcmp(s, "..")) return "is a directory reference";
    if (strchr(s, '/')) return "contains '/' (names one directory, not a path)";
    if (s[0] == '.') return "starts with a dot (a hidden directory)";
    if (s[0] == '-') return "starts with '-' (reads as a command-line option)";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || strchr("._-+=@,", *p)) continue;
        if (*p == '/') return "contains '/' (names one directory, not a path)";
        if (*p == ' ') return "contains a space";
        if (*p < 0x20 || *p == 0x7f) return "contains a control character";
        snprintf(buf, cap, "contains '%c'", *p >= 0x80 ? '?' : *p);
        if (*p >= 0x80) snprintf(buf, cap, "contains a non-ASCII character");
        return buf;
    }
    return NULL;
}
