/* train_internal.h: the trainer's state, shared by train.c (setup and loop) and
 * train_state.c (checkpoint save/restore, summary). Not a public interface. */
#ifndef RUNNER_TRAIN_INTERNAL_H
#define RUNNER_TRAIN_INTERNAL_H

#include "comm/comm.h"
#include "comm/ddp.h"
#include "comm/dp.h"
#include "comm/store.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "model/amp.h"
#include "model/ema.h"
#include "model/net.h"
#include "model/optim.h"
#include "model/schedule.h"
#include "runner/ckpt_writer.h"
#include "runner/early_stop.h"
#include "runner/report/steady.h"
#include "runner/track/track.h"
#include "runner/train.h"
#include "util/clock.h"

enum { TRAIN_MAX_REPLICAS = 16, TRAIN_MAX_WINDOW = 32 };

/* What the host keeps of a step until its window of steps is read back (flush_window in
 * train.c); the loss, hits, loss scale and overflow flag stay on the device until then,
 * in the step's record of step_recs. */
typedef struct pending_step {
    double lr;
    int n_micro;
    int64_t samples;
    double data_wait_s, comm_exposed_s, comm_allreduce_s;
} pending_step_t;

/* train.cuda_graphs (train_graph.c): what a recording depends on. A training segment
 * (train_step.c): micro-batches [first, first + count) of a step of n_micro, the step's
 * last of n_last samples (0 when the segment does not hold it), bcast: DDP's BN buffer
 * broadcast first. An evaluation batch: its size. */
enum { GRAPH_TRAIN = 0, GRAPH_EVAL = 1 };
typedef struct graph_key {
    int kind;
    int first, count, n_micro, n_last;
    bool bcast;
    int batch;
} graph_key_t;

/* One key's graph: recorded on the key's second run (the first runs normally), then
 * replayed; delta is what the recorded calls advance the BN num_batches_tracked counters
 * by (host values, applied after each replay). */
typedef struct graph_entry {
    graph_key_t key;
    int runs;                               /* runs without a graph so far */
    void *graph;
    int64_t *delta;                         /* net_num_counters entries */
} graph_entry_t;

typedef struct trainer {
    const experiment_t *e;
    const plan_t *p;
    const train_env_t *env;
    bool rank0;
    bool ddp_mode, dp_mode;
    char run_dir[CFG_PATH];

    backend_t *be;                          /* this rank's backend (dp: replica 0's) */
    backend_t *replica_be[TRAIN_MAX_REPLICAS];
    net_t *replica_net[TRAIN_MAX_REPLICAS];
    dataset_t *train_ds, *val_ds;
    loader_t *train_ld, *val_ld;
    net_t *net;                             /* dp: replica 0 */
    dp_t *dp;
    optim_t *opt;
    loss_scaler_t scaler;
    schedule_t sched;
    dtype_t act_dt;

    store_server_t *srv;
    store_t *store;
    comm_t *comm;
    ddp_t *ddp;
    float *comm_scratch;                    /* backend memory for small all-reduces */
    net_hooks_t hooks;

    /* data on the GPU (cuda, single/ddp): the train split uploaded once, batches
     * augmented on the device from the same sampler indices the CPU loader would use */
    bool gpu_data;
    uint8_t *gpu_pixels;                    /* backend memory, the whole train split */
    int64_t *gpu_indices;                   /* backend memory, grad_accum slots of one
                                               micro-batch of indices */
    int64_t *gpu_epoch;                     /* backend memory: the epoch the kernel draws for */
    int32_t *gpu_labels;                    /* backend memory, the train split's labels */
    struct cuda_stager *stager;             /* cuda, CPU loader: the copy stream's uploads */
    sampler_t gpu_sampler;
    bool gpu_sampler_ready;
    int64_t gpu_batch;                      /* next micro-batch of the epoch */
    loader_opts_t train_opts;               /* what the CPU loader was given */
    /* issue 17 data recipe (train_aug.c): mixup's soft targets; GPU data path buffers */
    bool mix;                               /* mixup on: soft-target loss */
    float mix_on, mix_off;                  /* its target values */
    void *gpu_aa_table;                     /* auto-augment op table (backend memory) */
    uint8_t *gpu_aa_scratch;                /* 2 x micro-batch uint8 images between ops */
    float *gpu_mix_in;                      /* the micro-batch in fp32 before mixing */
    void *gpu_mix_samples;                  /* mix_sample_t x micro-batch x grad_accum slots
                                               (backend memory) */
    mix_sample_t *mix_host;                 /* their host copy */

    track_t *track;
    char wandb_run_id[64];

    /* progress */
    int64_t step;                           /* optimizer steps done */
    int epoch;                              /* current epoch (0-based) */
    int64_t start_batch;                    /* micro-batch to start the epoch at (resume) */
    double ep_loss_sum, ep_seconds;
    int64_t ep_correct, ep_samples;
    double best_val_top1;
    int best_epoch;
    double train_loss, train_top1, val_loss, val_top1, val_top5;
    bool evaluated;
    bool already_finished;                  /* resumed a run that had no steps left */
    bool loop_started;                      /* setup done, the epoch loop began */
    bool ckpt_hash_differs;                 /* resumed from a checkpoint of another config hash */
    int config_changes;                     /* records in config_changes.jsonl */
    steady_sums_t steady;                   /* every read-back window's time (summary.json;
                                               kept in checkpoints, so a resume counts on) */
    int64_t seg_steps;                      /* steps this process ran in the current epoch */
    /* steps issued but not yet read back: each writes its loss, hits, loss scale and
     * overflow flag into its record on the device (step_recs); flush_window reads a whole
     * window at once, so the host waits for the device once per window, not per step */
    int window;                             /* steps per read-back: 1 on the CPU */
    int n_pending;
    pending_step_t *pending;                /* window entries */
    double *pending_loss;                   /* window entries: the steps' loss sums */
    int32_t *step_recs;                     /* backend memory: window records */
    void *rng_keys;                         /* backend memory: dropout_key_t x grad_accum, one
                                               per micro-batch of a step (nets with dropout) */
    int32_t *host_recs;                     /* their host copy */
    double window_t0;                       /* when the window's first step was issued */
    /* train.cuda_graphs (train_graph.c): recorded step segments and evaluation batches */
    bool graphs;                            /* on for this run (the plan's cuda_graphs) */
    graph_entry_t *gcache;                  /* one entry per key seen */
    int n_gcache, cap_gcache;
    int32_t *graph_rec;                     /* backend memory: the record a recorded step
                                               writes (copied to the window's slot) */
    float *eval_out;                        /* backend memory: an evaluation batch's loss, hits */
    int64_t graph_recordings, graph_launches; /* this process's (summary.json) */
    double sum_step_s, sum_comm_exposed_s;  /* this process's steps (not restored on resume) */
    double sum_comm_allreduce_s;            /* ddp: seconds the bucket all-reduces ran */
    double wall_start;
    char **hosts;                           /* rank 0: distinct hosts of all ranks */
    int n_hosts;
    double epoch_seconds_sum;
    int epochs_timed;
    /* recipe features (issue 17) */
    ema_t *ema;                             /* train.ema.decay set: averaged weights */
    double val_loss_ema, val_top1_ema, val_top5_ema, best_val_top1_ema;
    double best_value;                      /* checkpoint.best_metric's best, at */
    int best_value_epoch;                   /*   this epoch (0: none yet) */
    early_stop_t stop;                      /* train.early_stopping */
    bool buffers_synced;                    /* ddp + ema: BN buffers broadcast after the last step */
    ckpt_writer_t *writer;                  /* rank 0: writes checkpoints in the background */
    struct train_skipped *skipped;          /* data.bad_images: skip: the files skipped */
    /* train_bench.c: no data source; every step trains on the batch already in the net's
     * input and labels (host_batch only keys dropout, micro-batch resident_batch of the
     * epoch) */
    bool resident;
    int64_t resident_batch;
} trainer_t;

/* What stopped the loop after a window: nothing, SIGINT, or a scheduler's SIGTERM/SIGUSR1. */
enum { TRAINER_STOP_NONE = 0, TRAINER_STOP_INTERRUPT = 1, TRAINER_STOP_PREEMPT = 2 };

/* Which checkpoint (train_state.c): last.ckpt only (a stop, max_steps); the epoch's
 * (epoch_<N>.ckpt, linked as last.ckpt and, when improved, best.ckpt); step_<N>.ckpt
 * (checkpoint.every_steps, linked as last.ckpt). */
typedef enum { TRAINER_CKPT_LAST, TRAINER_CKPT_EPOCH, TRAINER_CKPT_STEP } trainer_ckpt_kind_t;

/* train_state.c */
/* Rank 0: snapshots the trainer's state (one download per array into the writer's host
 * buffer) and hands the file to the background writer; ckpt_writer_wait(t->writer) waits
 * until it is on disk. */
int trainer_checkpoint(trainer_t *t, trainer_ckpt_kind_t kind, bool improved, err_t *e);
int trainer_restore(trainer_t *t, err_t *e);
/* On resume, before resolved.yaml is rewritten: records a changed configuration in
 * config_changes.jsonl and says so (rundir_record_config_changes). */
int trainer_record_config_changes(trainer_t *t, err_t *e);
/* Rank 0 at the start: config.yaml (new runs), resolved.yaml, plan.json, env.json. */
int trainer_write_run_files(trainer_t *t, err_t *e);
int trainer_write_summary(trainer_t *t, const char *status, int exit_code, const char *error, err_t *e);

/* train_aug.c: auto-augment, random erasing and mixup in the trainer. */
void trainer_aug_opts(const experiment_t *x, int classes, loader_opts_t *lo);
int trainer_aug_soft_targets(trainer_t *t, err_t *e);   /* after the nets are bound */
void trainer_aug_free(trainer_t *t);
#ifdef RUNNER_HAVE_CUDA
int trainer_aug_setup_gpu(trainer_t *t, err_t *e);      /* GPU data path buffers */
/* Host side of mixup on the GPU data path: draws micro-batch `batch`'s mixing (n samples)
 * and uploads it into sample slot `slot`. */
int trainer_aug_mix_draw(trainer_t *t, int n, int64_t batch, int slot, err_t *e);
/* Device side of micro-batch slot m of the step (n samples; indices and mixing already in
 * their slots): the augmentation kernel into the net's input (or, with mixup, gpu_mix_in,
 * then mixed into the input and soft targets). Reads the epoch from gpu_epoch. */
int trainer_gpu_batch(trainer_t *t, int m, int n, err_t *e);
#endif

/* train_step.c: one optimizer step, the window read-back, and what both need. */
/* Sums n small values over all ranks (host in/out), through backend memory when the
 * communicator works on device memory; nothing without a communicator. */
int trainer_allreduce_small(trainer_t *t, float *vals, int n, err_t *e);
/* 32-bit words of one step record in step_recs. */
int trainer_step_rec_words(int grad_accum);
/* Uploads n host labels into the net's label buffer, each checked to be a class. */
int trainer_upload_labels(trainer_t *t, const int32_t *labels, int n, err_t *e);
/* Starts the training epoch t->epoch at micro-batch t->start_batch (loader or GPU sampler). */
int trainer_start_epoch(trainer_t *t, err_t *e);
/* Enqueues one optimizer step of n_micro micro-batches at lr; its numbers go to the
 * device record rec, the host's to ps. */
int trainer_step(trainer_t *t, int n_micro, double lr, int32_t *rec, pending_step_t *ps, err_t *e);
/* Reads back the t->n_pending steps issued since the last call, agrees with the other
 * ranks (stop flags, global loss/accuracy) and tracks every step; *stop: TRAINER_STOP_*
 * that some rank received (SIGINT wins over a preemption signal). */
int trainer_flush_window(trainer_t *t, int *stop, err_t *e);

/* train_graph.c: train.cuda_graphs. trainer_graph_run runs fn(t, arg) — device work only,
 * nothing on the host that changes between runs of key k — directly when graphs are off;
 * with graphs, the key's first run directly, its second recorded and launched, later ones
 * launched (DDP: every rank records the same steps and agrees before using a recording).
 * trainer_graphs_setup allocates what recorded steps use (train.c, after the nets and the
 * DDP state); trainer_graphs_free frees the recordings. */
int trainer_graph_run(trainer_t *t, const graph_key_t *k, int (*fn)(trainer_t *t, void *arg, err_t *e), void *arg,
                      err_t *e);
int trainer_graphs_setup(trainer_t *t, err_t *e);
void trainer_graphs_free(trainer_t *t);
/* One evaluation batch of n (its images in the net's input, labels in its label buffer):
 * forward and loss, recorded per batch size like a step; *out gets the loss sum and hits. */
int trainer_eval_batch(trainer_t *t, int n, net_loss_out_t *out, err_t *e);

/* train_loop.c: the epochs (evaluation, metrics rows, checkpoints, early stopping, stops);
 * returns 0, ERR_INTERRUPT or ERR_PREEMPTED, or -1. */
int trainer_loop(trainer_t *t, err_t *e);
/* A line in a non-zero rank's log (rank 0 has the console). */
void trainer_note(const trainer_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* train_skipped.c: the image files data.bad_images: skip left out (while indexing) or
 * replaced (failed to decode), listed in skipped_images.jsonl and named on the console.
 * start: after tracking is set up (rank 0 names the index-time ones, a resume reads the
 * earlier list); sync: at each point every rank reaches alike (end of an epoch's steps,
 * a step checkpoint, a stop), before the checkpoint; rank 0 gathers the ranks' new
 * decode-time finds and rewrites the list. No-ops for other datasets and error mode. */
typedef struct train_skipped train_skipped_t;
int trainer_skipped_start(trainer_t *t, err_t *e);
int trainer_skipped_sync(trainer_t *t, err_t *e);
/* Rank 0's totals so far: files found bad while indexing, files that failed to decode. */
void trainer_skipped_counts(const trainer_t *t, int64_t *indexing, int64_t *decoding);
/* Rank 0 at the end: one console line with both counts (nothing when none). */
void trainer_skipped_report(const trainer_t *t);
void trainer_skipped_free(trainer_t *t);

#endif
