/* train.h: one rank's training run — setup, the loop, evaluation, checkpoints, summary.
 *
 * train_run executes the plan in this process: rank r of world w (w = 1 for single and
 * dp; dp drives its replicas from this process). It builds the backend, data, net,
 * optimizer, loss scaler and (ddp) the store, communicator and DDP state, restores a
 * checkpoint when the plan resumes, then trains: per optimizer step grad_accum
 * micro-batches, DDP bucket all-reduces overlapped with backward, AMP unscale/skip, the
 * optimizer step at the scheduled LR; evaluation every eval_every epochs over the whole
 * validation set (and of the EMA weights); checkpoints every every_epochs epochs, every
 * checkpoint.every_steps steps (written in the background), at max_steps, and on a stop
 * signal; early stopping.
 *
 * Rank 0 writes the run directory (docs/architecture.md); other ranks write nothing but
 * their log. The return value is the process exit code: 0 finished (or stopped early),
 * 130 interrupted and 75 preempted after a checkpoint; on failure -1 with err filled (its
 * code is the exit code).
 */
#ifndef RUNNER_TRAIN_H
#define RUNNER_TRAIN_H

#include <stdbool.h>

#include "runner/config.h"
#include "runner/plan.h"
#include "util/err.h"

typedef struct train_env {
    int rank, world_size;             /* ddp: global rank / world; else 0 / 1 */
    int local_rank, local_world_size;
    char master_addr[256];
    int master_port;
    const char *run_dir;              /* rank 0: exists (created by the caller); other ranks:
                                         NULL means "ask rank 0 through the store" */
    const char *config_text_path;     /* the experiment file as given (copied to config.yaml) */
} train_env_t;

/* Installs the SIGINT/SIGTERM/SIGUSR1 handlers: the first signal asks the loop to stop
 * after the current step and write a checkpoint; SIGINT then exits 130 ("interrupted"),
 * SIGTERM or SIGUSR1 (a scheduler's preemption or time-limit warning, e.g. Slurm's
 * --signal=USR1@90) exit 75 ("preempted": run the same command again to continue). A
 * second SIGINT exits at once with 130; repeated SIGTERM/SIGUSR1 change nothing. */
void train_install_signal_handlers(void);

/* True once SIGINT/SIGTERM/SIGUSR1 arrived. */
bool train_stop_requested(void);
/* Which: 1 SIGINT (it wins), 2 SIGTERM/SIGUSR1 only, 0 none. */
int train_stop_kind(void);

int train_run(const experiment_t *e, const plan_t *p, const train_env_t *env, err_t *err);

#endif
