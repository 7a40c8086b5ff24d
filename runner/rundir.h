/* rundir.h: run directories — naming, creation without ever overwriting another run,
 * finding the run to resume, atomic small-file writes and env.json.
 *
 * Layout (docs/architecture.md): <root>/<name>/<YYYYmmdd-HHMMSS>-<id6>/ with logs/ and
 * checkpoints/. Only rank 0 creates and writes it; other ranks write logs/rank<N>.log.
 */
#ifndef RUNNER_RUNDIR_H
#define RUNNER_RUNDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"
#include "util/fs.h"   /* mkdir_p, write_file_atomic */

/* Creates <root>/<name>/<timestamp>-<id>/ (and logs/, checkpoints/) with an exclusive
 * mkdir, retrying with a new id on collision; writes the path to out. */
int rundir_create(const char *root, const char *name, char *out, size_t len, err_t *e);


/* The checkpoint a resume of run starts from: checkpoints/last.ckpt when it is readable,
 * else the newest epoch_<N>.ckpt / step_<S>.ckpt (a run killed between writing its first
 * numbered checkpoint and linking last.ckpt to it). Returns 1 and writes the path to out,
 * or 0 (out then names last.ckpt) when the run has no checkpoint. */
int rundir_resume_checkpoint(const char *run, char *out, size_t len);

/* Finds the newest run under <root>/<name>/ that is unfinished (no summary.json with
 * "status": "completed") and has a checkpoint (rundir_resume_checkpoint) written by the configuration
 * with config_hash `hash` (or whose header cannot be read). Returns 1 and writes its path
 * to out, or 0 when there is none. other (may be NULL) gets the newest unfinished run
 * whose checkpoint has another hash, "" if none: the run a changed experiment does not
 * continue. */
int rundir_find_resumable(const char *root, const char *name, uint64_t hash, char *out, size_t len,
                          char *other, size_t other_len);

/* The newest run under <root>/<name>/ whose summary.json says "completed" and that has a
 * checkpoint: 1 and its path in out, or 0. */
int rundir_find_completed(const char *root, const char *name, char *out, size_t len);

/* The host's CPU model ("model name" of /proc/cpuinfo, as env.json's "cpu"); "" if unknown. */
void rundir_cpu_model(char *out, size_t len);

/* True when dir looks like a run directory (has resolved.yaml). */
bool rundir_is_run(const char *dir);

/* Copies src to dst (atomically). */
int copy_file(const char *src, const char *dst, err_t *e);

/* Writes <run_dir>/env.json: {"host", "os", "cpu", "cpu_cores", "gpus": [..], "driver",
 * "cuda", "cudnn", "cublaslt", "nccl" (versions; null without CUDA), "runner_version",
 * "runner_commit", "hosts": [..]} (docs/architecture.md); hosts lists every host of a
 * multi-host run (may be NULL). extra (may be NULL) adds keys of its own to the top-level
 * object (the trainer: "compute", the math libraries and kernels). */
struct jw;
int rundir_write_env(const char *run_dir, const char *const *hosts, int n_hosts,
                     void (*extra)(struct jw *w, void *ctx), void *ctx, err_t *e);

/* On resume, before resolved.yaml is replaced: compares run_dir/resolved.yaml (the
 * configuration so far) with now and, when any key differs, appends one JSON line to
 * run_dir/config_changes.jsonl: {"step", "epoch", "time", "changes": [{"key", "from",
 * "to", "hashed"}]} (values as resolved.yaml writes them), and writes "key a -> b, ..."
 * to summary. *total gets the number of records in the file afterwards. Returns 1 when a
 * change was recorded, 0 when nothing changed (or resolved.yaml is unreadable), -1. */
struct experiment;
int rundir_record_config_changes(const char *run_dir, const struct experiment *now, int64_t step, int epoch,
                                 char *summary, size_t summary_len, int *total, err_t *e);

/* The runner's version and git commit, fixed at build time. */
const char *runner_version(void);
const char *runner_commit(void);

#endif
