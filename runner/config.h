/* config.h: the typed experiment (experiment_t) and the functions that load it from YAML.
 *
 * Every key of docs/experiment-files.md (the contract) has a field here with its
 * default; config.c holds the table that maps dotted keys to fields with types and
 * bounds. experiment_t is a plain value (fixed-size strings, no pointers) so it can be
 * copied freely: matrix expansion, DP replicas and checkpoints copy it.
 *
 * Errors (ERR_INPUT) read "file:line:col: what is wrong; what to do", with the closest
 * valid key suggested for a typo; every wrong key or value of a file is reported, one per
 * line of the message, in file order. Overrides given with --set read
 * "--set key=value: ...".
 */
#ifndef RUNNER_CONFIG_H
#define RUNNER_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CFG_STR = 256, CFG_PATH = 1024, CFG_MAX_LIST = 16, CFG_MAX_SETS = 64, CFG_MAX_MATRIX = 64 };
/* A matrix's repeats over seeds, and the runs (entries x repeats) one comparison may hold. */
enum { CFG_MAX_REPEATS = 100, CFG_MAX_MATRIX_RUNS = 256 };

typedef enum { DEVICE_AUTO = 0, DEVICE_CPU, DEVICE_CUDA } device_t;
typedef enum { PAR_SINGLE = 0, PAR_DP, PAR_DDP } par_mode_t;
typedef enum { COMM_AUTO = 0, COMM_NCCL, COMM_SHM } comm_backend_t;
typedef enum { PREC_NONE = 0, PREC_FP16, PREC_BF16 } precision_t; /* amp.dtype, grad_compression */
typedef enum { OPT_SGD = 0, OPT_ADAMW } optim_name_t;
typedef enum { SCHED_CONSTANT = 0, SCHED_MULTISTEP, SCHED_COSINE } sched_name_t;
typedef enum { WANDB_DISABLED = 0, WANDB_ONLINE, WANDB_OFFLINE } wandb_mode_t;
typedef enum { STEM_AUTO = 0, STEM_CIFAR, STEM_IMAGENET } model_stem_t;
typedef enum { INIT_HEAD_STRICT = 0, INIT_HEAD_REINIT } init_head_t;
/* train.early_stopping.metric and checkpoint.best_metric: which epoch number is watched.
 * Loss metrics are minimised, top-k maximised (mode auto). */
typedef enum {
    METRIC_NONE = 0, METRIC_VAL_LOSS, METRIC_VAL_TOP1, METRIC_VAL_TOP5, METRIC_VAL_LOSS_EMA,
    METRIC_VAL_TOP1_EMA, METRIC_VAL_TOP5_EMA, METRIC_TRAIN_LOSS, METRIC_TRAIN_TOP1, METRIC_COUNT
} metric_t;
typedef enum { STOP_MODE_AUTO = 0, STOP_MODE_MIN, STOP_MODE_MAX } stop_mode_t;
/* train.cuda_graphs: false | true | auto (the YAML words; true/false also yes/no/on/off) */
typedef enum { GRAPHS_FALSE = 0, GRAPHS_TRUE, GRAPHS_AUTO } graphs_mode_t;

typedef struct experiment {
    char name[CFG_STR];           /* default: the file's stem */
    char source_path[CFG_PATH];   /* the file it was loaded from (absolute) */
    uint64_t seed;                /* 0 */
    device_t device;              /* auto */

    struct {
        char dataset[32];         /* cifar10 | cifar100 | fashion_mnist | synthetic |
                                     image_folder (required) */
        char root[CFG_PATH];      /* default depends on dataset; relative paths resolve
                                     against the current directory, as users expect.
                                     config_load fills the dataset's default in. */
        bool download;            /* false */
        bool on_device;           /* true (project key: CUDA keeps the train split on the GPU) */
        char download_url[CFG_PATH]; /* "" = the dataset's official URL */
        char download_md5[64];    /* "" = the official md5 */
        bool shuffle;             /* true */
        int workers;              /* 2, [0, 64]; -1 = auto (the plan decides; the default for
                                     image_folder) */
        struct {
            bool random_crop;     /* true */
            int crop_size;        /* 32; config_load sets the image side (28 for
                                     fashion_mnist, synthetic.image[1]) when not given */
            int crop_padding;     /* 4 */
            bool horizontal_flip; /* true */
            double rotation;      /* 15 degrees; 0 = off */
            /* issue 17: torchvision auto-augment, timm random erasing */
            int auto_kind;        /* data.augment.auto: 0 null, 1 randaugment, 2 trivialaugment */
            int ra_num_ops;       /* data.augment.randaugment.num_ops: 2 */
            int ra_magnitude;     /* data.augment.randaugment.magnitude: 9 (of bins 0..30) */
            double erase_prob;    /* data.augment.random_erasing.prob: 0 = off */
            int erase_mode;       /* .mode: 0 const, 1 rand, 2 pixel (default pixel) */
            int erase_count;      /* .count: 1 */
            /* issue 16: image_folder's RandomResizedCrop (rotation: 0 for image_folder) */
            bool random_resized_crop; /* image_folder: true; others: false (refused) */
            double rrc_scale[2];  /* 0.08, 1.0 */
            double rrc_ratio[2];  /* 0.75, 1.3333 */
        } augment;
        struct {                  /* issue 17: timm Mixup / CutMix (off while both alphas are 0) */
            double alpha;         /* 0 */
            double cutmix_alpha;  /* 0 */
            double prob;          /* 1 */
            double switch_prob;   /* 0.5 */
            int mode;             /* 0 batch, 1 pair, 2 elem */
        } mixup;
        /* image_folder (issue 16) */
        char train_dir[CFG_PATH]; /* "train", relative to root */
        char val_dir[CFG_PATH];   /* "val" */
        int image_size;           /* 224: training and evaluation crop side */
        int resize;               /* evaluation shorter side; config_load fills
                                     round(image_size / 0.875) when not given */
        int image_mode;           /* 0 rgb (convert("RGB")), 1 grayscale (convert("L")) */
        int bad_images;           /* 0 error, 1 skip */
        bool jpeg_dct_scaling;    /* true (project key) */
        int n_norm;               /* entries in mean/std; 0 = no normalisation */
        double mean[4], std[4];   /* default: the dataset's (config_load fills them in:
                                     n_norm 3 for CIFAR, 1 for fashion_mnist, 0 synthetic) */
        bool norm_set;            /* normalize given explicitly (or normalize: false);
                                     always true after a resolved.yaml round trip */
        struct {
            int train_size, val_size; /* 1024, 256 */
            int image[3];         /* C, H, W: 3, 32, 32 */
            int classes;          /* 10 */
        } synthetic;
    } data;

    struct {
        char arch[32];            /* required */
        int num_classes;          /* 0 = the dataset's; config_load resolves 0 to the
                                     dataset's count, so loaded experiments hold > 0 */
        bool zero_init_residual;  /* false */
        char init_from[CFG_PATH]; /* "" = none */
        model_stem_t stem;        /* auto: imagenet for inputs larger than 64 px (plan.c) */
        init_head_t init_head;    /* strict: fc.* must match init_from; reinit: fresh fc */
        double width;             /* 0 (null) = the arch's own (model/arch/arch_table.h) */
        int groups;               /* 0 = the arch's own */
        double dropout;           /* -1 (null) = the arch's own */
    } model;

    struct {
        optim_name_t name;        /* sgd */
        double lr;                /* 0.1 */
        double momentum;          /* 0.9 */
        bool nesterov;            /* false */
        double weight_decay;      /* 5e-4 */
        bool no_weight_decay_on_bn_and_bias; /* false */
        double betas[2];          /* 0.9, 0.999 */
        double eps;               /* 1e-8 */
        double clip_grad_norm;    /* 0 = null (off); torch.nn.utils.clip_grad_norm_ max_norm */
    } optimizer;

    struct {
        sched_name_t name;        /* multistep */
        int n_milestones;
        int milestones[CFG_MAX_LIST]; /* 60, 120, 160 (epochs, increasing) */
        double gamma;             /* 0.2 */
        double warmup_epochs;     /* 1 */
        double min_lr;            /* 0 */
    } schedule;

    struct {
        int epochs;               /* 200 */
        int batch_size;           /* 128: global per optimizer step */
        int grad_accum;           /* 1 */
        double label_smoothing;   /* 0 */
        int64_t max_steps;        /* -1 = null */
        int eval_every;           /* 1 */
        bool deterministic;       /* true */
        graphs_mode_t cuda_graphs;/* false (project key: record whole steps as CUDA graphs);
                                     auto: where bit-identical (plan.c plan_cuda_graphs) */
        struct {                  /* timm ModelEmaV3 of params and BN buffers */
            double decay;         /* 0 = null (off); else in (0, 1) */
            bool warmup;          /* false: timm's --model-ema-warmup */
            double warmup_gamma;  /* 1.0 (ModelEmaV3 warmup_gamma) */
            double warmup_power;  /* 2/3 (ModelEmaV3 warmup_power) */
        } ema;
        struct {                  /* Lightning's EarlyStopping over evaluated epochs */
            metric_t metric;      /* none (null): off */
            int patience;         /* 3 */
            double min_delta;     /* 0 */
            stop_mode_t mode;     /* auto: loss min, top-k max */
        } early_stopping;
        bool cpu_winograd;        /* false (project key: Winograd 3x3 filter gradients on the CPU) */
        int n_cuda_fusion;        /* 0 = null */
        char cuda_fusion[CFG_MAX_LIST][32]; /* null (project key: CUDA fusion options, issue 25) */
    } train;

    struct {
        bool enabled;             /* false */
        precision_t dtype;        /* fp16 */
        double init_scale;        /* 65536 */
        int growth_interval;      /* 2000 */
        bool tf32;                /* true (project key: TF32 for fp32 on CUDA) */
    } amp;

    struct {
        par_mode_t mode;          /* ddp */
        int world_size;           /* 2; config_load sets 1 for mode single */
        int n_devices;            /* 0 = null */
        int devices[CFG_MAX_LIST];
        comm_backend_t backend;   /* auto */
        double bucket_mb;         /* 25 */
        precision_t grad_compression; /* none */
        bool sync_bn;             /* false */
        int nnodes;               /* 1 */
        char master_addr[CFG_STR];/* 127.0.0.1 */
        int master_port;          /* 0 = pick a free port */
        double timeout_s;         /* 300 */
        int max_restarts;         /* 0: a dead rank ends the run (torchrun --max-restarts) */
    } parallel;

    struct {
        int print_every;          /* 50 */
        bool csv;                 /* true */
        bool tensorboard;         /* false */
        struct {
            wandb_mode_t mode;    /* disabled */
            char project[CFG_STR];/* "" = null */
            char entity[CFG_STR];
            int n_tags;
            char tags[CFG_MAX_LIST][64];
            char group[CFG_STR];
        } wandb;
    } logging;

    struct {
        int every_epochs;         /* 1 */
        int every_steps;          /* 0 = off; step_<N>.ckpt every N optimizer steps */
        int keep_last;            /* 2 */
        bool keep_best;           /* true */
        metric_t best_metric;     /* val_top1: what best.ckpt is chosen by */
        char resume[CFG_PATH];    /* "auto" | "never" | a path */
    } checkpoint;

    struct {
        char root[CFG_PATH];      /* runs */
    } output;
} experiment_t;

/* Fills e with every default (data.dataset and model.arch stay empty). */
void config_defaults(experiment_t *e);

/* Loads path (following base: chains), applies the n_sets "dotted.key=value" overrides
 * in order, fills defaults, validates everything, and writes the result to out.
 * Files larger than 1 MiB, duplicate keys, alias bombs, deep nesting, unknown keys, wrong
 * types, out-of-range values, base cycles and bad run names are errors (ERR_INPUT). */
int config_load(const char *path, const char *const *sets, int n_sets, experiment_t *out,
                err_t *e);

/* Writes e as YAML with every key present (resolved.yaml). The output loads back to an
 * equal experiment. */
int config_write_yaml(const experiment_t *e, FILE *f);

/* The same YAML in a malloc'd, NUL-terminated string (length in *len); NULL when out of
 * memory. The caller frees it. */
char *config_yaml_string(const experiment_t *e, size_t *len);

/* A 64-bit hash of the settings that define the numbers a run produces (model, data,
 * optimizer, schedule, train, amp, seed, parallel semantics) but not of logging, output
 * or checkpoint cadence. Checkpoints store it; checkpoint.resume: auto continues only a
 * run whose checkpoint has the same hash (a changed experiment starts a new run
 * directory); `runner resume DIR --set ...` continues with changes and records them. */
uint64_t config_hash(const experiment_t *e);

/* One key whose value differs between two experiments, as resolved.yaml writes it. */
typedef struct config_change {
    const char *key;              /* the dotted key (a string of the schema table) */
    bool hashed;                  /* part of config_hash */
    char before[1100], after[1100];   /* a path or a list, as resolved.yaml writes it */
} config_change_t;

/* Lists the keys whose values differ between before and after (only the hashed ones when
 * hashed_only), in resolved.yaml order, writing at most max to out. Returns how many
 * differ (possibly more than max). */
int config_diff(const experiment_t *before, const experiment_t *after, bool hashed_only,
                config_change_t *out, int max);
/* The name of a metric ("val_top1_ema"; "none") and whether it is minimised under mode
 * auto (losses) or maximised (top-k). */
const char *metric_name(metric_t m);
bool metric_minimised(metric_t m);

/* A matrix file (a `matrix:` list of {name, dotted.key: value, ...}) expands into runs.
 * The base experiment is the file without `matrix:`; each entry's overrides apply on top
 * (after the file, before --set). Errors name the entry ("matrix[2]") and its line.
 * Each run's experiment name is its entry name (runs[i].name == entry_names[i], unique
 * plain names); the matrix's own name (the file's name: or its stem) is the parent, so the
 * caller writes runs under <output.root>/<matrix name>/<entry name>/... --set name=... is
 * refused for a matrix.
 * `repeats: N` (top level of the matrix file only, or --set repeats=N) runs every entry N
 * times, with seeds seed, seed + 1, ..., seed + N - 1 (runner/report/compare.h lays them
 * out); 1 to CFG_MAX_REPEATS, and at most CFG_MAX_MATRIX_RUNS runs in all. */
typedef struct experiment_matrix {
    char name[CFG_STR];           /* the matrix file's name (parent run directory) */
    int n;
    int repeats;                  /* runs of each entry over seeds; 1 without repeats: */
    char entry_names[CFG_MAX_MATRIX][CFG_STR];
    experiment_t runs[CFG_MAX_MATRIX];
} experiment_matrix_t;

/* Returns a heap-allocated matrix (free with free()), or NULL with e set. A file without
 * `matrix:` is an error that says to use `runner EXP` instead. */
experiment_matrix_t *config_load_matrix(const char *path, const char *const *sets, int n_sets,
                                        err_t *e);

/* config_load / config_load_matrix on an experiment given as text (len bytes, label names
 * it in messages): the same checks, with the base: chain off (a base: key is an error).
 * The fuzz harness (tests/fuzz/fuzz_config.c) loads through these. */
int config_load_text(const char *label, const char *text, size_t len, const char *const *sets,
                     int n_sets, experiment_t *out, err_t *e);
experiment_matrix_t *config_load_matrix_text(const char *label, const char *text, size_t len,
                                             const char *const *sets, int n_sets, err_t *e);

/* Names of enum values, for printing and YAML output. */
/* The word of names[] closest to s (case-insensitive edit distance, transpositions
 * counting one) when it is close enough to be a typo of it, else NULL: the suggestion
 * config errors give, for other parts of the command line. */
const char *config_closest_word(const char *s, const char *const *names, int n);
const char *device_name(device_t d);
const char *par_mode_name(par_mode_t m);
const char *comm_backend_name(comm_backend_t b);
const char *precision_name(precision_t p);   /* "none", "fp16", "bf16" */

#ifdef __cplusplus
}
#endif
#endif
