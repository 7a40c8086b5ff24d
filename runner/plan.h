/* plan.h: the resolved plan of a run — everything decided before anything starts.
 *
 * plan_build turns an experiment into concrete numbers: the device and how many of them,
 * the mode and world size, per-rank micro-batch x accumulation x ranks = global batch,
 * dataset sizes, steps per epoch and in total, the learning rate at the end of warm-up
 * and after each milestone, parameter count, memory estimates, the run directory and
 * whether it resumes. `runner plan` prints it; the same object drives the run, and
 * plan.json in the run directory is it. Building a plan starts, writes and downloads
 * nothing.
 */
#ifndef RUNNER_PLAN_H
#define RUNNER_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/arch/arch.h"
#include "data/dataset.h"
#include "data/image_transform.h"
#include "runner/config.h"
#include "util/err.h"
#include "util/json.h"

enum { PLAN_MAX_MILESTONES = CFG_MAX_LIST };

typedef struct plan {
    /* where */
    char device[8];            /* "cpu" | "cuda" */
    int gpus_visible;
    char gpu_name[256];        /* first GPU used, "" on cpu */
    char mode[8];              /* "single" | "dp" | "ddp" */
    int world_size;            /* ranks (ddp) or replicas (dp); 1 for single */
    int nnodes;
    int local_world_size;      /* ranks on this host */
    char comm_backend[8];      /* "nccl" | "shm" | "none" */
    int threads_per_rank;      /* cpu backend threads per rank / replica */
    int cpu_cores;             /* cores this process may use (its affinity mask) */
    bool oversubscribed;       /* cpu: ranks x threads on this host > cpu_cores */
    char warning[512];         /* "" or one line the plan and the run print (oversubscription) */
    bool read_only;            /* planned for `runner plan` (plan_request_t.read_only) */
    char precision[8];         /* "fp32" | "fp16" | "bf16" */
    bool cuda_graphs;          /* train.cuda_graphs resolved: whole steps recorded as graphs */
    char cuda_graphs_why[320]; /* which value gave it and why (auto: where it is exact) */
    /* data */
    char dataset[32];
    char data_root[CFG_PATH];
    bool data_present;         /* files already there */
    bool will_download;
    int64_t train_size, val_size;
    int channels, height, width; /* network input (after crop) */
    int num_classes;
    /* batch */
    int global_batch;
    int grad_accum;
    int micro_batch;           /* per rank (ddp) / per process (single, dp) per micro-step */
    int per_device_batch;      /* micro_batch / world (dp), micro_batch otherwise */
    /* steps */
    int64_t samples_per_rank;  /* per epoch (DistributedSampler padding included) */
    int64_t batches_per_epoch; /* micro-batches per epoch per rank */
    int64_t steps_per_epoch;   /* optimizer steps */
    int epochs;                /* epochs that will run (max_steps may cut the last) */
    int64_t total_steps;
    /* learning rate */
    double lr_base;
    int64_t warmup_steps;
    double lr_warmup_end;      /* lr at step warmup_steps (first step after warm-up) */
    int n_milestones;
    int64_t milestone_steps[PLAN_MAX_MILESTONES];
    double lr_after_milestone[PLAN_MAX_MILESTONES];
    double lr_final;           /* lr of the last step */
    /* model */
    char arch[32];
    arch_stem_t stem;          /* model.stem resolved (auto: by the input size): the variant */
    char stem_reason[160];     /* why, for the plan: "auto: 224x224 inputs are larger than 64 px" */
    double arch_width;         /* model.width / groups / dropout resolved (the arch's own where */
    int arch_groups;           /* not given; 0, 0, -1 where it has no such setting) */
    double arch_dropout;
    int64_t param_count;
    double forward_gflops_per_sample;
    int64_t activation_bytes;  /* per rank, for micro_batch */
    int64_t state_bytes;       /* params + grads + optimizer state + buffers per rank */
    /* memory the run needs against what the machine has (plan_build refuses more) */
    int64_t data_bytes;        /* both splits in memory (pixels + labels), per process */
    int64_t host_bytes;        /* everything on this host: all its ranks/replicas */
    int64_t host_total_bytes;  /* physical memory (or the cgroup limit, if lower) */
    int64_t device_bytes;      /* cuda: per GPU; 0 on cpu */
    int64_t device_total_bytes;/* cuda: the GPU's total memory; 0 on cpu */
    /* run directory (plan_rundir.c) */
    char run_dir[CFG_PATH];    /* the directory the run writes; "" in the plan of a new run
                                  (created when the run starts) */
    char run_parent[CFG_PATH + CFG_STR]; /* a new run: <output.root>/<name>, where it is created as
                                  <YYYYmmdd-HHMMSS>-<id>, named by its start time */
    bool resumes;
    char resume_from[CFG_PATH + 128]; /* checkpoint file resumed from */
    char extends[512];         /* resumes a completed run further: what grew and the steps
                                  ("train.max_steps 6 -> 10, from step 6 to 10"); else "" */
    char note[2048];           /* why the newest completed run of the name is not continued
                                  (and what would continue it), where that may surprise */
    char busy[1024];           /* the run to resume is being written by another runner now
                                  (runlock.h): who; "" otherwise */
    /* how long the steps will take (plan_estimate.c) */
    double est_seconds;        /* NAN when unknown */
    char est_source[2048];     /* where the rate comes from, or why there is none */
    /* checkpoint.resume: auto found an unfinished run of this name written by another
     * configuration (hashed keys), so this is a new run: which, what changed, and the
     * --set options that would continue it with the change (`runner resume DIR ...`) */
    char changed_from[CFG_PATH];
    char changes[1024];
    char change_sets[1024];
    /* loader (plan_images.c) */
    int loader_workers;        /* data.workers, auto resolved */
    char workers_why[512];     /* how it was chosen */
    struct plan_images *images;/* image_folder: classes, counts, notes; NULL otherwise.
                                  Copies of a plan share it; plan_free frees it once. */
} plan_t;

/* How the CLI asks for the plan. */
typedef struct plan_request {
    const char *resume_dir;    /* `runner resume DIR`: resume exactly this run dir */
    bool for_worker;           /* a DDP worker: no run dir proposal / search of its own */
    bool read_only;            /* `runner plan`: write nothing (an image_folder index is built
                                  in memory, its cache read but not written) */
} plan_request_t;

/* Builds the plan for e. Errors (ERR_INPUT): a GPU asked for but absent, more devices
 * than visible, an indivisible batch, a dataset too small for one batch, a run whose
 * planned memory exceeds the host's physical memory or the GPU's (the message names both
 * figures and the keys that change it), ... */
int plan_build(const experiment_t *e, const plan_request_t *req, plan_t *p, err_t *err);

/* Whether e's dataset files are in place under root (e's data.root or the dataset's
 * default, written to root). When some are missing: a download that can fetch them is
 * planned (*will_download), or ERR_INPUT with the one message saying what was looked for
 * where and how to get it. Reads no file; `runner compare` checks every member with it
 * before the first one starts. */
int plan_data_files(const experiment_t *e, char *root, size_t cap, bool *present, bool *will_download, err_t *err);
/* After data.download fetched the files: plans the data, steps, model and memory again
 * from the files themselves (their sizes may differ from the official ones the plan
 * assumed), keeping the devices and the run directory. Errors as plan_build. */
int plan_after_download(const experiment_t *e, plan_t *p, err_t *err);

/* What arch_build builds for this experiment and plan (arch, stem, sizes, model.* keys). */
void plan_arch_opts(const experiment_t *e, const plan_t *p, arch_opts_t *o);

/* ---- plan_rundir.c ---- */
/* Which run directory, and whether it resumes (plan_rundir.c's comment has the rules);
 * fills run_dir / run_parent, resumes, resume_from, extends, note, busy, changed_from. */
int plan_rundir(const experiment_t *e, const plan_request_t *req, plan_t *p, err_t *err);

/* ---- plan_estimate.c ---- */
/* The expected duration of the run's steps (est_seconds, est_source): from the training
 * rate a finished run of the same setup measured (summary.json's images_per_second; the
 * same experiment first, else any run under output.root with the same device, mode,
 * world size, precision, model, input, batch and host CPU), else NAN and the compute the
 * steps need. Reads run directories only. */
void plan_estimate(const experiment_t *e, plan_t *p);

/* The schedule_t the trainer uses for this experiment. */
struct schedule;
void plan_schedule(const experiment_t *e, struct schedule *s);

/* The human-readable plan (`runner plan`). */
void plan_print(const plan_t *p, const experiment_t *e, FILE *f);

/* plan.json (`runner plan --json`, and in the run directory). */
void plan_write_json(const plan_t *p, FILE *f);

/* Releases what plan_build allocated (the image_folder details). */
void plan_free(plan_t *p);

/* ---- plan_images.c (image_folder) ---- */
/* The dataset options / transform the run uses for an image_folder split. */
void plan_folder_opts(const experiment_t *x, dataset_opts_t *o, data_split_t split,
                      const char *root);
void plan_image_tf(const experiment_t *x, img_tf_opts_t *tf);
int plan_images_data(const experiment_t *e, plan_t *p, int *classes, err_t *err);
int plan_images_workers(const experiment_t *e, plan_t *p, err_t *err);
void plan_images_print(const plan_t *p, const experiment_t *e, FILE *f);
void plan_images_json(const plan_t *p, jw_t *w);
void plan_images_free(plan_t *p);
/* classes.txt: one class name per line in label order (image_folder; else nothing). */
int plan_images_write_classes(const plan_t *p, const char *path, err_t *e);

#endif
