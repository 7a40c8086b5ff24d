/* ckpt_writer.h: checkpoints written off the training loop's critical path.
 *
 * The trainer snapshots its state into the writer's host buffer (on CUDA page-locked, so
 * each array is one device-to-host copy) and submits a job; a background thread then
 * writes the file (checkpoint.c: temporary file, fsync, rename, directory fsync), makes
 * the hard links the job asks for (last.ckpt, best.ckpt) and prunes old numbered files.
 * The buffer is reused, so a new snapshot waits only while the previous write is still
 * running. A write that fails (disk full) is reported by the next call of this API, so
 * the run fails at its next checkpoint or at its end, never silently.
 *
 * A crash or kill -9 during a write leaves at most a "<name>.tmp-<pid>" file, which resume
 * never reads; ckpt_writer_create removes such leftovers from the directory it is given.
 *
 * Numbered files: "<prefix><N>.ckpt" (epoch_12.ckpt, step_4000.ckpt). ckpt_list_numbered
 * lists them newest first; the job's prune keeps the newest `keep` of its prefix.
 *
 * One producer thread (the training loop) uses a writer.
 */
#ifndef RUNNER_CKPT_WRITER_H
#define RUNNER_CKPT_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/checkpoint.h"
#include "util/err.h"

enum { CKPT_PATH_MAX = 1200, CKPT_JOB_OWNED = 4 };

typedef struct ckpt_job {
    char path[CKPT_PATH_MAX];            /* the file written */
    char links[2][CKPT_PATH_MAX];        /* replaced by hard links to path afterwards; "" = none */
    char prune_dir[CKPT_PATH_MAX];       /* "" = no pruning */
    char prune_prefix[16];               /* "epoch_" or "step_" */
    int prune_keep;                      /* newest files of that prefix kept */
    uint64_t config_hash;
    int n;
    ckpt_section_t sections[CKPT_MAX_SECTIONS]; /* data: the writer's buffer or owned[] */
    void *owned[CKPT_JOB_OWNED];         /* malloc'd blocks freed after the write */
} ckpt_job_t;

typedef struct ckpt_writer ckpt_writer_t;

/* Host memory for the snapshot buffer (NULL: malloc/free); pinned memory on CUDA. */
typedef struct ckpt_allocator {
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p);
    void *ctx;
} ckpt_allocator_t;

/* Starts the writer thread. dir: the checkpoint directory, whose stale "*.tmp-*" files
 * from a killed writer are removed (NULL: none). */
ckpt_writer_t *ckpt_writer_create(const ckpt_allocator_t *a, const char *dir, err_t *e);

/* Waits for the running write (if any) and returns the snapshot buffer, grown to at least
 * bytes. Fails with the error of a previous write. */
void *ckpt_writer_buffer(ckpt_writer_t *w, size_t bytes, err_t *e);

/* Hands the job (copied; its owned blocks are taken over, also on failure) to the thread. */
int ckpt_writer_submit(ckpt_writer_t *w, const ckpt_job_t *job, err_t *e);

/* Waits until every submitted job is on disk; returns the first failure since the last
 * call (then cleared). */
int ckpt_writer_wait(ckpt_writer_t *w, err_t *e);

/* Waits, stops the thread, frees everything. NULL is fine. */
void ckpt_writer_free(ckpt_writer_t *w);

/* Replaces dst by a hard link to src (a temporary name, then rename); copies when links
 * are impossible. */
int ckpt_link_over(const char *src, const char *dst, err_t *e);

/* The N of every "<prefix><N>.ckpt" in dir, newest (largest) first, at most max. */
int ckpt_list_numbered(const char *dir, const char *prefix, int64_t *nums, int max);

/* Removes "<prefix><N>.ckpt" files of dir beyond the newest keep. */
void ckpt_prune_numbered(const char *dir, const char *prefix, int keep);

#endif
