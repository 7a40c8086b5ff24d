/* launch.h: start one worker process per local rank (parallel.mode ddp), watch them, and
 * end the whole group when any of them fails; and recognise, inside a worker, the
 * environment a launcher (this one, torchrun or Slurm) gave it.
 *
 * The launcher re-executes a program (normally /proc/self/exe with the same argv) once
 * per local rank with the torchrun environment contract: RANK, LOCAL_RANK, WORLD_SIZE,
 * LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GROUP_RANK, NODE_RANK (global rank =
 * node_rank * nproc_per_node + local_rank). Each worker is the leader of its own process
 * group; its stdout/stderr go to <run_dir>/logs/rank<N>.log, and global rank 0's output is
 * also copied to the launcher's stdout (a pipe the launcher reads). Because rank 0 then
 * writes into a pipe, the launcher sets RUNNER_TTY=1 in rank 0's environment when its
 * own output is a terminal, so rank 0 can still draw its progress line; rank 0 then frames
 * what is for the terminal only (the redrawn line) and for the log only (the plain
 * periodic lines), runner/track/track.h TRACK_TEE_*, and the launcher sends each frame
 * to its place (launch_tee_split).
 *
 * Failure: when a rank exits non-zero or dies from a signal, the others get SIGTERM (to
 * their whole process group), then SIGKILL after grace_s; everything is reaped, and
 * launch_run returns ERR_RUNTIME with a message naming the rank, its exit status or
 * signal, and the last lines of its log.
 * Interrupt: SIGINT/SIGTERM/SIGUSR1 to the launcher are forwarded to every rank (they
 * finish the step, rank 0 checkpoints, all exit 130 after SIGINT or 75 after SIGTERM/
 * SIGUSR1); the launcher then returns the same code. Ranks that exit 130 or 75 on their
 * own (a scheduler signalled them, not the launcher) count as stopped, not failed. A
 * second SIGINT kills every rank at once. The launcher handles signals through a signalfd
 * while it runs (it blocks SIGINT/SIGTERM/SIGUSR1/SIGCHLD for the duration and restores the
 * mask after).
 *
 * Restarts: with max_restarts N > 0 a failed group (a rank killed, out of memory, failed
 * after a hung peer's timeout) is started again up to N times, as torchrun --max-restarts
 * does: every rank gets RUNNER_RESTARTS=<k> and, when there is a checkpoint to resume
 * (restart_resume: a checkpoint file, or with restart_checkpoint a run directory whose newest
 * checkpoint counts),
 * RUNNER_RESUME_FROM=<that checkpoint>; <run_dir>/restarts.jsonl gets one JSON line per
 * restart (restart, rank, pid, exit_status, signal, cause, resume_from, unix_time). A rank
 * that exits 2 (bad input) or a stop that was asked for is never restarted.
 *
 * It does not: parse the CLI (the lead's main.c fills launch_opts_t) or start remote
 * nodes (run the launcher once per node, as with torchrun).
 *
 * Use in main():
 *     launch_env_t env;
 *     int w = launch_worker_env(&env, &e);           // -1: malformed env -> exit 2
 *     if (w == 1) { ...this process is rank env.rank: train... }
 *     else if (mode == ddp) { code = launch_run(&opts, argv, &e); exit(code) }
 */
#ifndef RUNNER_LAUNCH_H
#define RUNNER_LAUNCH_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { LAUNCH_MAX_RANKS = 256 };

typedef struct launch_opts {
    int nproc_per_node;      /* local ranks to start (world_size / nnodes), >= 1 */
    int nnodes;              /* 1 */
    int node_rank;           /* 0 */
    char master_addr[256];   /* "" = 127.0.0.1 */
    int master_port;         /* 0 = pick a free port (only with nnodes == 1) */
    const char *run_dir;     /* logs go to <run_dir>/logs/rank<N>.log (created) */
    const char *exe;         /* program to start; NULL = /proc/self/exe */
    double grace_s;          /* SIGTERM -> SIGKILL delay after a rank failed; 0 = 5 */
    double stop_timeout_s;   /* after forwarding SIGINT, SIGKILL after this; 0 = 600 */
    const char *const *extra_env; /* NULL-terminated "KEY=VALUE" added to each worker */
    FILE *tee;               /* where rank 0's output is copied; NULL = stdout */
    pid_t *pids_out;         /* optional: receives the worker pids (nproc_per_node) */
    int max_restarts;        /* restarts of the group after a failure; 0 = none */
    const char *restart_resume; /* a checkpoint file or run directory a restarted group resumes from */
    /* optional: finds the checkpoint to resume in restart_resume at restart time (1 and the
     * path, or 0 for none yet); NULL: restart_resume is the checkpoint file */
    int (*restart_checkpoint)(const char *where, char *out, size_t len);
    int lock_fd;             /* > 2: the run directory's lock (runner/runlock.h), left open
                                across every rank's exec (name it in extra_env as
                                RUNNER_LOCK_FD), so the directory stays locked until the
                                launcher and all its ranks have exited; else ignored */
} launch_opts_t;

/* Starts the workers with argv (argv[0] is passed through as the program name; the
 * program run is o->exe), waits for all of them, and returns the exit code to use:
 * 0 when every rank exited 0; 130 after an interrupt (e->code ERR_INTERRUPT); 75 after a
 * preemption signal (ERR_PREEMPTED); 1 when a rank failed (e filled as described above)
 * and no restart is left, or 2 when the first rank to fail exited with 2 (its input was
 * bad; its message is in the log tail quoted in e); 2 for bad options (ERR_INPUT). */
int launch_run(const launch_opts_t *o, char *const argv[], err_t *e);

/* What a worker learns from its environment. */
typedef struct launch_env {
    int rank, local_rank, world_size, local_world_size, node_rank;
    char master_addr[256];
    int master_port;
    bool slurm;              /* taken from SLURM_* variables */
} launch_env_t;

/* Detects whether this process is a worker. Returns 1 and fills out when RANK and
 * WORLD_SIZE are set (torchrun contract; LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT, GROUP_RANK/NODE_RANK optional with defaults 0/WORLD_SIZE/127.0.0.1/29500/0)
 * or SLURM_PROCID and SLURM_NTASKS are set (SLURM_LOCALID, SLURM_NODEID,
 * SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE; master from MASTER_ADDR, else
 * SLURM_LAUNCH_NODE_IPADDR; port MASTER_PORT, else 29500). Returns 0 when none is set.
 * A malformed or inconsistent value (or RANK without WORLD_SIZE) is ERR_INPUT naming the
 * variable and returns -1. Note: inside an sbatch script Slurm already sets SLURM_PROCID
 * and SLURM_NTASKS, so start the runner there with srun (one task per rank). */
int launch_worker_env(launch_env_t *out, err_t *e);

/* Picks a free TCP port on addr by binding port 0; returns it or -1 with e set. */
int launch_free_port(const char *addr, err_t *e);

#ifdef __cplusplus
}
#endif
/* Splits n bytes of rank 0's tee output: bytes framed for the terminal go to tty_out
 * only, those framed for the log to log_out only, the rest to both (each out at least n
 * bytes; lengths in *log_n, *tty_n). *state (0 at the start) carries a frame that
 * continues in the next read. */
void launch_tee_split(const char *buf, size_t n, int *state, char *log_out, size_t *log_n, char *tty_out,
                      size_t *tty_n);

#endif
