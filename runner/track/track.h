/* track.h: the metrics bus. The training loop reports every optimizer step and every
 * epoch here; the bus decides what goes where:
 *
 *   progress    every step on a terminal (one line redrawn with \r: epoch, step/steps,
 *               loss, images/s, ETA; during evaluation batch/batches, images/s, ETA),
 *               otherwise a plain line every print_every steps. In DDP rank 0's output
 *               reaches the terminal through the launcher (TRACK_PROGRESS_TEE).
 *   steps.csv   one row every print_every steps (and the last step), header exactly
 *               step,epoch,lr,loss,top1,images_per_second,step_seconds,compute_seconds,
 *               comm_exposed_seconds,data_wait_seconds,loss_scale,grad_norm
 *   timing.csv  one row per read-back window of steps (every step on the CPU and in DP),
 *               so the time of every step is on record, header exactly
 *               step,steps,epoch,since_start,images,seconds
 *   metrics.csv one row per epoch, header exactly
 *               epoch,step,lr,train_loss,train_top1,val_loss,val_top1,val_top5,
 *               epoch_seconds,images_per_second,peak_memory_bytes,val_loss_ema,
 *               val_top1_ema,val_top5_ema
 *               (fractions in [0,1]; empty cells for NaN = not evaluated that epoch)
 *   W&B         online (HTTP on a background thread, never blocking training) and/or the
 *               offline transaction log wandb/offline-run-<ts>-<id>/run-<id>.wandb
 *               (written in every mode except disabled, so `wandb sync` can upload it);
 *               history every print_every steps and every epoch, summary, console lines.
 *   TensorBoard tensorboard/events.out.tfevents.<unix time>.<host>, scalars every
 *               print_every steps and every epoch (logging.tensorboard: true).
 *
 * Only rank 0 opens sinks: on other ranks track_open returns a bus whose calls do nothing.
 * CSV rows are flushed one by one, so a crash loses at most the row being written.
 * On resume the CSVs are kept and appended to (rows with step > resume_step, written after
 * the checkpoint the run resumes from, are removed first), and W&B continues the same run
 * id from the step after resume_step.
 *
 * Environment (read by track_open, winning over the options where the SDK lets them):
 * WANDB_MODE (online|offline|dryrun|disabled), WANDB_PROJECT, WANDB_ENTITY, WANDB_RUN_ID,
 * WANDB_NAME, WANDB_TAGS (comma list), WANDB_RUN_GROUP, WANDB_BASE_URL (default
 * https://api.wandb.ai), WANDB_DIR, WANDB_API_KEY (else ~/.netrc or $NETRC, machine =
 * the host of WANDB_BASE_URL). The API key is never written to any file or message.
 *
 * A bus is used from one thread (the training loop's); the W&B sender runs on its own
 * thread behind it.
 *
 * Not here: checkpoints (the training loop stores track_wandb_run_id itself if it wants;
 * the bus also remembers it in <run_dir>/wandb/run_id), summary.json (written by runner/).
 */
#ifndef RUNNER_TRACK_TRACK_H
#define RUNNER_TRACK_TRACK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct track track_t;

typedef enum {
    TRACK_PROGRESS_AUTO = 0,  /* redrawn line when progress_out is a terminal, else plain */
    TRACK_PROGRESS_TTY,       /* always the redrawn line */
    TRACK_PROGRESS_PLAIN,     /* always plain lines every print_every steps */
    TRACK_PROGRESS_OFF,       /* no progress output (console lines go to W&B only) */
    TRACK_PROGRESS_TEE        /* the output is a pipe that the DDP launcher copies to a
                                 terminal and to logs/rank0.log (RUNNER_TTY=1): the redrawn
                                 line framed for the terminal only, the plain lines for the
                                 log only (TRACK_TEE_* below; launch.c separates them) */
} track_progress_t;

/* Framing of TRACK_PROGRESS_TEE output: TRACK_TEE_START, then TRACK_TEE_TERMINAL or
 * TRACK_TEE_LOG, the bytes for that destination only, then TRACK_TEE_END. Bytes outside a
 * frame go to both. The control characters never occur in the runner's own output. */
#define TRACK_TEE_START '\x1e'
#define TRACK_TEE_END '\x1f'
#define TRACK_TEE_TERMINAL 'T'
#define TRACK_TEE_LOG 'L'

enum { TRACK_MAX_TAGS = 16 };

/* Everything the bus needs, filled by runner/ from the experiment and the plan. Strings
 * are copied by track_open; NULL or "" means unset. */
typedef struct track_opts {
    const char *run_dir;        /* the run directory (exists); required on rank 0 */
    const char *run_name;       /* display name; default: the last component of run_dir */
    const char *experiment;     /* experiment name (W&B project default), may be NULL */
    const char *config_json;    /* the resolved experiment as a JSON object (W&B config) */
    int print_every;            /* steps between csv rows / plain lines / scalars; >= 1 */
    bool csv;                   /* write steps.csv and metrics.csv */
    bool tensorboard;           /* write tensorboard/events.out.tfevents.* */
    track_progress_t progress;  /* default AUTO */
    FILE *progress_out;         /* where progress and console lines go; NULL = stdout */
    FILE *warn_out;             /* where warnings go (e.g. W&B unreachable); NULL = stderr */

    const char *wandb_mode;     /* "disabled" | "online" | "offline"; WANDB_MODE overrides */
    const char *wandb_project;  /* WANDB_PROJECT overrides; default: experiment name */
    const char *wandb_entity;   /* WANDB_ENTITY overrides; default: the key's user/team */
    const char *wandb_tags[TRACK_MAX_TAGS]; /* WANDB_TAGS overrides */
    int n_wandb_tags;
    const char *wandb_group;    /* WANDB_RUN_GROUP overrides */
    const char *host;           /* hostname shown in W&B and the event file name */
    const char *commit;         /* git commit of the runner, may be NULL */

    bool is_resume;             /* continuing an existing run directory */
    int64_t resume_step;        /* optimizer steps completed at the checkpoint */
    bool resume_mid_epoch;      /* that checkpoint ends inside an epoch: a metrics.csv row at
                                   resume_step (the partial epoch train.max_steps ended a run
                                   with) goes too, as that epoch's row comes when it ends */
    const char *wandb_run_id;   /* run id of the run being resumed; NULL = read
                                   <run_dir>/wandb/run_id, else WANDB_RUN_ID, else new */

    int64_t total_steps;        /* for the progress ETA; 0 = unknown */
    int total_epochs;           /* shown as epoch e/E; 0 = unknown */
    int rank;                   /* only rank 0 opens sinks */

    double wandb_timeout_s;     /* per HTTP request; 0 = 10 s */
    double close_timeout_s;     /* most track_close waits for W&B to drain; 0 = 10 s */
} track_opts_t;

/* One optimizer step. NaN in a field = not measured (empty CSV cell, not sent). */
typedef struct track_step {
    int64_t step;               /* optimizer steps completed, counting this one (1, 2, ...) */
    int epoch;                  /* the epoch this step belongs to (as the loop counts it) */
    double lr;
    double loss;
    double top1;                /* fraction in [0,1] */
    double images_per_second;
    double step_seconds;
    double compute_seconds;
    double comm_exposed_seconds;
    double data_wait_seconds;
    double loss_scale;          /* NaN without a loss scaler */
    double grad_norm;           /* global gradient norm before clipping; NaN without clipping */
} track_step_t;

/* One read-back window: consecutive optimizer steps whose results the trainer read back
 * together, with the wall time they took (a timing.csv row; runner/report/steady.h). */
typedef struct track_window {
    int64_t step;               /* the window's last optimizer step (1, 2, ...) */
    int64_t steps;              /* optimizer steps in the window */
    int epoch;                  /* 1-based */
    int64_t since_start;        /* steps this process ran in the epoch before the window's
                                   first (0: the epoch, or the run's resume, starts with it) */
    int64_t images;             /* images the window's steps trained, over all ranks */
    double seconds;             /* rank 0's wall time from issuing its first step to reading
                                   its last back; evaluation and checkpoints are outside */
} track_window_t;

/* One finished epoch. NaN = not evaluated this epoch (empty CSV cell). */
typedef struct track_epoch {
    int epoch;
    int64_t step;               /* optimizer steps completed at the end of the epoch */
    double lr;
    double train_loss, train_top1;
    double val_loss, val_top1, val_top5;
    double epoch_seconds;
    double images_per_second;
    int64_t peak_memory_bytes;  /* < 0 = unknown (empty cell) */
    double val_loss_ema, val_top1_ema, val_top5_ema; /* the EMA weights; NaN without train.ema */
} track_epoch_t;

/* Fills o with defaults: print_every 50, csv on, W&B disabled, progress AUTO, rank 0. */
void track_opts_init(track_opts_t *o);

/* Opens the sinks o asks for. Returns the bus (free it with track_close) or NULL with e
 * filled (ERR_INPUT: an unreadable CSV to resume, a bad WANDB_MODE; ERR_RUNTIME: the run
 * directory cannot be written). A W&B service that cannot be reached is NOT an error:
 * the run goes on and one warning is printed. */
track_t *track_open(const track_opts_t *o, err_t *e);

/* Reports one optimizer step. Returns 0, or -1 with e filled if a local file cannot be
 * written (disk full). Never waits on the network. */
int track_step(track_t *t, const track_step_t *row, err_t *e);

/* Reports one read-back window (a timing.csv row; nothing else). Returns 0 or -1 as
 * track_step. */
int track_window(track_t *t, const track_window_t *w, err_t *e);

/* Reports one finished epoch (metrics.csv row, W&B history, TensorBoard scalars).
 * Returns 0 or -1 as track_step. */
int track_epoch(track_t *t, const track_epoch_t *row, err_t *e);

/* Evaluation progress (rank 0): batch of batches done (0 when it starts), images
 * evaluated so far over all ranks. A terminal gets a redrawn line (epoch, batch/batches, images/s, ETA), at most
 * about ten times a second; logs and pipes get nothing (the epoch line follows). */
void track_eval_progress(track_t *t, int epoch, int64_t batch, int64_t batches, int64_t images);

/* Sets a W&B summary value (wandb-summary.json; the offline log's summary record). */
void track_summary(track_t *t, const char *key, double value);
void track_summary_str(track_t *t, const char *key, const char *value);

/* Prints a line to the progress stream (clearing a redrawn progress line first) and sends
 * it to W&B's output.log. line has no trailing newline. */
void track_console(track_t *t, const char *line);

/* The W&B run id ("" when W&B is disabled or rank != 0). Valid until track_close. */
const char *track_wandb_run_id(const track_t *t);

/* Finishes the run: last buffered rows, the final W&B request (complete: true, exitcode),
 * the offline exit record, flushes and closes every file, frees t. Waits at most
 * close_timeout_s for the network. Returns 0, or -1 with e filled if a local write failed.
 * t may be NULL. */
int track_close(track_t *t, int exit_code, err_t *e);

#ifdef __cplusplus
}
#endif
#endif
