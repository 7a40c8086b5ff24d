/* err.h: how every module reports failure.
 *
 * Library code never exits or aborts on bad input. A function that can fail returns
 * an int: 0 on success, -1 on failure after filling the caller's err_t with an exit
 * code and one message. Only main() turns an err_t into output and an exit code.
 *
 * Exit codes are part of the CLI contract:
 *   ERR_INPUT (2)     bad input: experiment file, CLI, dataset file, checkpoint, network.
 *                     The message names the file, the place and the fix.
 *   ERR_RUNTIME (1)   something failed that is not the user's input (a rank died, OOM).
 *   ERR_INTERRUPT (130) stopped by SIGINT after saving a checkpoint.
 *   ERR_PREEMPTED (75)  stopped by SIGTERM/SIGUSR1 (a scheduler's preemption or time-limit
 *                     warning) after saving a checkpoint: run the same command again to
 *                     continue (75 is sysexits' EX_TEMPFAIL, "try again later"; Slurm can
 *                     requeue on it, see docs/multi-host.md).
 */
#ifndef RUNNER_UTIL_ERR_H
#define RUNNER_UTIL_ERR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { ERR_OK = 0, ERR_RUNTIME = 1, ERR_INPUT = 2, ERR_PREEMPTED = 75, ERR_INTERRUPT = 130 };

typedef struct err {
    int code;        /* one of ERR_* above; 0 while no error is recorded */
    char msg[2048];  /* one message, no trailing newline */
} err_t;

/* Records code and a printf-style message in e (e may be NULL). Returns -1 so that
 * callers can write `return err_set(e, ERR_INPUT, "...")`. */
int err_set(err_t *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to the message already in e, keeping its code. Returns -1. */
int err_wrap(err_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like err_set, appending ": strerror(errno)" for the current errno. */
int err_errno(err_t *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

void err_clear(err_t *e);

/* malloc/calloc that record "out of memory (N bytes) at file:line" on failure. */
void *xmalloc_(size_t n, err_t *e, const char *file, int line);
void *xcalloc_(size_t count, size_t size, err_t *e, const char *file, int line);
#define xmalloc(n, e) xmalloc_((n), (e), __FILE__, __LINE__)
#define xcalloc(c, s, e) xcalloc_((c), (s), (e), __FILE__, __LINE__)

#ifdef __cplusplus
}
#endif
#endif
