/* runlock.h: one writer per run directory.
 *
 * A run directory is written by one process tree at a time: the process that owns it
 * (the runner the user started: single/dp training, the DDP launcher of host 0, a compare
 * member, or rank 0 under torchrun/srun) holds an exclusive lock on <run_dir>/.lock for
 * as long as anything writes the directory, and a second process that wants to write it
 * stops with exit 2 before touching any file of it, naming the holder.
 *
 * The lock is an open-file-description lock (fcntl F_OFD_SETLK, whole file): it belongs
 * to the open file, not to a process, so
 *   - it is released by the kernel when the last descriptor of that open file closes,
 *     whatever ended the holder (SIGKILL, OOM killer, a crash): there is no stale lock to
 *     clean up, and no pid to check for liveness;
 *   - a descriptor passed to a child across fork+exec (the launcher's ranks, a compare
 *     member; RUNNER_LOCK_FD=<fd> names it) shares the lock: the directory stays locked
 *     until the holder and every process it handed the lock to have exited, and those
 *     children take it over without a conflict (run_lock_take);
 *   - another open of the file, in any process (even the same one), conflicts.
 * On NFS (v3 with lockd, v4) the kernel forwards these locks to the server, so they hold
 * across hosts; a host that crashes keeps its locks until the server's lease expires
 * (NFSv4: ~90 s). A file system that cannot lock (ENOLCK, EOPNOTSUPP) gets a warning and
 * no lock (docs/multi-host.md).
 *
 * <run_dir>/.lock holds, while locked, one JSON line about the holder: {"pid", "host",
 * "started", "command"}; it stays behind (unlocked) when the holder ends.
 *
 * It does not: wait for a lock (a busy directory is an error, not a queue), or lock the
 * parent directories (a new run's directory is created with an exclusive mkdir).
 */
#ifndef RUNNER_RUNLOCK_H
#define RUNNER_RUNLOCK_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

typedef struct run_lock {
    int fd;              /* the lock file, locked; -1 when none is held */
    bool inherited;      /* taken over from a parent (RUNNER_LOCK_FD) */
    char warning[512];   /* "" or why the directory could not be locked (no lock held) */
} run_lock_t;

/* Locks run_dir for this process. When RUNNER_LOCK_FD names an open descriptor of
 * run_dir/.lock (a parent passed its lock on) that descriptor is used and the variable is
 * removed from the environment; otherwise run_dir/.lock is opened (created) and locked,
 * and the holder line (this pid, the host, the time, command) written into it.
 * Returns 0 when held (or when the file system cannot lock: l->warning says so, l->fd is
 * -1); -1 with ERR_INPUT when another process holds it: the message names the directory,
 * the holder's pid, host, start time and command, and what to do. Creates nothing else. */
int run_lock_take(const char *run_dir, const char *command, run_lock_t *l, err_t *e);

/* Takes over the lock a parent passed on (RUNNER_LOCK_FD naming an open descriptor of
 * run_dir/.lock): 1 and l->fd set, the descriptor closed on exec from now on; 0 (l->fd
 * -1) when there is none. Locks nothing itself: for the processes that share the
 * directory's lock but must not take one of their own (DDP ranks other than 0). The
 * variable is removed from the environment either way. */
int run_lock_adopt(const char *run_dir, run_lock_t *l);

/* Who holds run_dir's lock, without taking it or creating anything (for the plan).
 * Returns 1 and "pid N on host H, since T: COMMAND" in out when some process holds it,
 * 0 when it is free or there is no lock file. */
int run_lock_holder(const char *run_dir, char *out, size_t len);

/* "RUNNER_LOCK_FD=<fd>" for the environment of a child that takes the lock over (the
 * child must also get the descriptor open across its exec: launch_opts_t.lock_fd);
 * "RUNNER_LOCK_FD=" when none is held. */
void run_lock_env(const run_lock_t *l, char *out, size_t len);

/* Closes the descriptor (the lock ends when no other process shares it). */
void run_lock_release(run_lock_t *l);

#endif
