/* compare.h: orchestration of `runner compare MATRIX.yaml`.
 *
 * A comparison runs the members of an expanded matrix (experiment_matrix_t, loaded by the
 * caller with config_load_matrix) one after another through a caller-supplied run
 * function, then writes one report (report.h) into the comparison's parent directory:
 *
 *   runs/<matrix name>/<YYYYmmdd-HHMMSS>-<id6>/     the parent
 *     compare.json       state, rewritten atomically after every change
 *     <entry name>/      each member's own, normal run directory; with repeats: N (N >= 2)
 *                        <entry name>/seed<S>/ for each seed S = seed, ..., seed + N - 1
 *     report.html  comparison.csv  comparison.md
 *
 * Every run of the comparison is a member here (an entry's repeats are members named
 * "<entry>/seed<S>"). They run round by round: every entry with its first seed, then
 * every entry with the next, so a slow drift of the machine touches all entries alike and
 * the first round is a complete comparison.
 *
 * compare.json: {"matrix", "source", "status", "created", "updated", "members": [{"name",
 * "entry", "seed", "status", "exit_code", "run_dir", "attempts", "message"}]}; "run_dir"
 * is relative to the parent; "entry" is the matrix entry the member runs (absent in files
 * from before repeats: the name), "seed" its seed (a number, or a string above 2^53).
 * Member status: pending | running | completed | failed | interrupted. Comparison
 * status: running | interrupted | completed (every member completed) | failed (every
 * member ran, some failed).
 *
 * A member that fails (non-zero exit) is recorded with its exit code and message and the
 * others still run. A member that returns 130 (interrupted) stops the comparison at once.
 * Running the same command again resumes the newest unfinished comparison of that matrix
 * (compare_find_unfinished): completed and failed members are skipped; the interrupted (or,
 * after a kill, "running") member is run again with the same member_dir, and the run
 * function continues it from its own checkpoint.
 * compare_run holds an flock on <parent>/.compare.lock while it runs, so a second
 * process on the same comparison fails at once instead of running members twice.
 * This module does not load YAML or train.
 */
#ifndef RUNNER_REPORT_COMPARE_H
#define RUNNER_REPORT_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runner/config.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs one member. member_dir is <parent>/<entry name>; it may not exist yet (the run
 * function creates it) or may hold an interrupted run (the run function resumes it).
 * Returns the run's exit code (0 completed, 130 interrupted, else failed) and, when
 * non-zero, may leave the reason in e. Without one, the failure's message is the last
 * line of member_dir/logs/rank0.log, or "exited with code N". */
typedef int (*compare_run_fn)(void *ctx, const experiment_t *exp, const char *member_dir, err_t *e);

typedef enum {
    MEMBER_PENDING = 0, MEMBER_RUNNING, MEMBER_COMPLETED, MEMBER_FAILED, MEMBER_INTERRUPTED
} member_status_t;

typedef struct compare_member {
    char name[CFG_STR];       /* "<entry>" or, with repeats, "<entry>/seed<S>" */
    char entry[CFG_STR];      /* the matrix entry */
    uint64_t seed;
    bool has_seed;            /* false: an older compare.json that did not record it */
    member_status_t status;
    int exit_code;            /* -1 until the member has run */
    int attempts;             /* how many times it was started */
    char message[1024];       /* the failure's message; "" if none */
} compare_member_t;

typedef struct compare_state {
    char matrix[CFG_STR];
    char source[CFG_PATH];    /* the matrix file */
    char parent[CFG_PATH];    /* where compare.json lives (not stored in the file) */
    char status[32];          /* running | interrupted | completed | failed */
    char created[32], updated[32];   /* UTC, ISO 8601 */
    int n;
    compare_member_t members[CFG_MAX_MATRIX_RUNS];
} compare_state_t;

const char *compare_member_status_name(member_status_t s);

/* The members of m: entries x repeats (repeats 0 counts as 1). */
int compare_member_count(const experiment_matrix_t *m);

/* Member j of m: its name, entry index and seed (round j / m->n, entry j % m->n). */
void compare_member_of(const experiment_matrix_t *m, int j, compare_member_t *out, int *entry);

/* Reads parent/compare.json into s. ERR_INPUT naming the file (and line/column or key)
 * when it is missing or malformed. Returns 0 / -1. */
int compare_state_load(const char *parent, compare_state_t *s, err_t *e);

/* Writes s to s->parent/compare.json through a temporary file, fsync and rename. */
int compare_state_save(compare_state_t *s, err_t *e);

/* Looks in matrix_root (runs/<matrix name>/) for the newest comparison (by directory
 * name, which starts with its creation time) whose compare.json is unfinished (status
 * running or interrupted) and lists exactly m's member names in order. Returns 1 and
 * writes its path to out, 0 when there is none (or matrix_root does not exist), -1 on an
 * error (an unreadable compare.json: ERR_INPUT naming it). */
int compare_find_unfinished(const char *matrix_root, const experiment_matrix_t *m, char *out,
                            size_t cap, err_t *e);

/* Creates a fresh parent matrix_root/<YYYYmmdd-HHMMSS>-<id6> (local time, parents
 * created as needed) and writes its path to out. Returns 0 / -1. */
int compare_new_parent(const char *matrix_root, char *out, size_t cap, err_t *e);

/* Runs (or resumes) the comparison of m in parent, then writes the report there.
 * parent/compare.json is created when absent; when present it must list m's member names
 * in order (else ERR_INPUT). Progress lines go to log (may be NULL), and at the end the
 * verdict's lines (report_print_verdict). Returns 0 when
 * every member completed. Otherwise -1 with e->code: ERR_INTERRUPT (130) when a member
 * was interrupted (no report yet; run again to resume), ERR_RUNTIME (1) when some
 * members failed (the report is written, failed rows marked), ERR_INPUT (2) when the
 * parent or its compare.json is unusable or another process is running it. */
int compare_run(const experiment_matrix_t *m, const char *parent, compare_run_fn run, void *ctx,
                FILE *log, err_t *e);

/* The `runner compare` verb after loading: matrix_root is
 * <m->runs[0].output.root>/<m->name>; resumes the newest unfinished comparison there or
 * starts a new one, and runs it (compare_run). The parent used is written to parent_out
 * (may be NULL). Returns as compare_run. */
int compare_main(const experiment_matrix_t *m, compare_run_fn run, void *ctx, FILE *log,
                 char *parent_out, size_t cap, err_t *e);

#ifdef __cplusplus
}
#endif
#endif
