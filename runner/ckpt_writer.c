/* ckpt_writer.c: the background checkpoint writer (ckpt_writer.h) and the numbered-file
 * helpers (list, prune, hard links) the checkpoint cadence uses. */
#include "runner/ckpt_writer.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/rundir.h"
#include "util/fs.h"

struct ckpt_writer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy, quit, have_thread;
    ckpt_job_t job;
    err_t err;                 /* first failure not yet reported */
    ckpt_allocator_t alloc;
    void *buf;
    size_t cap;
};

int ckpt_link_over(const char *src, const char *dst, err_t *e) {
    char tmp[CKPT_PATH_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s.link-%ld", dst, (long)getpid());
    unlink(tmp);
    if (link(src, tmp) == 0) {
        if (rename(tmp, dst) == 0) {   /* durable: the directory is synced */
            if (fsync_parent_dir(dst) != 0) return err_errno(e, ERR_RUNTIME, "%s: cannot sync its directory", dst);
            return 0;
        }
        unlink(tmp);
    }
    return copy_file(src, dst, e);
}

int ckpt_list_numbered(const char *dir, const char *prefix, int64_t *nums, int max) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t pl = strlen(prefix);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < max) {
        if (strncmp(de->d_name, prefix, pl)) continue;
        char *end;
        long long v = strtoll(de->d_name + pl, &end, 10);
        if (end == de->d_name + pl || strcmp(end, ".ckpt") || v < 0) continue;
        nums[n++] = v;
    }
    closedir(d);
    for (int i = 1; i < n; i++)   /* insertion sort, descending */
        for (int j = i; j > 0 && nums[j - 1] < nums[j]; j--) {
            int64_t x = nums[j]; nums[j] = nums[j - 1]; nums[j - 1] = x;
        }
    return n;
}

void ckpt_prune_numbered(const char *dir, const char *prefix, int keep) {
    enum { MAX = 4096 };
    int64_t *nums = malloc(MAX * sizeof *nums);
    if (!nums) return;
    int n = ckpt_list_numbered(dir, prefix, nums, MAX);
    for (int i = keep; i < n; i++) {
        char p[CKPT_PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/%s%lld.ckpt", dir, prefix, (long long)nums[i]);
        unlink(p);
    }
    free(nums);
}

/* Writes one job: the file, its links, the pruning. */
static int run_job(ckpt_job_t *j, err_t *e) {
    if (ckpt_write(j->path, j->config_hash, j->sections, j->n, e)) return -1;
    for (int i = 0; i < 2; i++)
        if (j->links[i][0] && strcmp(j->links[i], j->path) && ckpt_link_over(j->path, j->links[i], e)) return -1;
    if (j->prune_dir[0]) ckpt_prune_numbered(j->prune_dir, j->prune_prefix, j->prune_keep);
    return 0;
}

static void free_owned(ckpt_job_t *j) {
    for (int i = 0; i < CKPT_JOB_OWNED; i++) {
        free(j->owned[i]);
        j->owned[i] = NULL;
    }
}

static void *writer_main(void *arg) {
    ckpt_writer_t *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->busy && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->busy && w->quit) break;
        pthread_mutex_unlock(&w->mu);
        err_t e = {0};
        int rc = run_job(&w->job, &e);   /* the file I/O runs unlocked */
        free_owned(&w->job);
        pthread_mutex_lock(&w->mu);
        if (rc && !w->err.code) w->err = e;
        w->busy = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Removes "<x>.tmp-<pid>" and "<x>.link-<pid>" files a killed writer left in dir. */
static void remove_leftovers(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strstr(de->d_name, ".ckpt.tmp-") && !strstr(de->d_name, ".ckpt.link-")) continue;
        char p[CKPT_PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
}

ckpt_writer_t *ckpt_writer_create(const ckpt_allocator_t *a, const char *dir, err_t *e) {
    ckpt_writer_t *w = calloc(1, sizeof *w);
    if (!w) {
        err_set(e, ERR_RUNTIME, "out of memory");
        return NULL;
    }
    if (a) w->alloc = *a;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        err_set(e, ERR_RUNTIME, "cannot start the checkpoint writer thread");
        ckpt_writer_free(w);
        return NULL;
    }
    w->have_thread = true;
    if (dir) remove_leftovers(dir);
    return w;
}

/* Waits for the thread to go idle; returns (and clears) a pending failure. Locked. */
static int wait_idle_locked(ckpt_writer_t *w, err_t *e) {
    while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
    if (w->err.code) {
        *e = w->err;
        err_clear(&w->err);
        return -1;
    }
    return 0;
}

void *ckpt_writer_buffer(ckpt_writer_t *w, size_t bytes, err_t *e) {
    pthread_mutex_lock(&w->mu);
    int rc = wait_idle_locked(w, e);
    pthread_mutex_unlock(&w->mu);
    if (rc) return NULL;
    if (bytes <= w->cap && w->buf) return w->buf;
    if (w->buf) {
        if (w->alloc.free) w->alloc.free(w->alloc.ctx, w->buf);
        else free(w->buf);
    }
    w->cap = 0;
    w->buf = w->alloc.alloc ? w->alloc.alloc(w->alloc.ctx, bytes ? bytes : 1) : malloc(bytes ? bytes : 1);
    if (!w->buf) {
        err_set(e, ERR_RUNTIME, "out of memory for a %zu-byte checkpoint snapshot", bytes);
        return NULL;
    }
    w->cap = bytes;
    return w->buf;
}

int ckpt_writer_submit(ckpt_writer_t *w, const ckpt_job_t *job, err_t *e) {
    pthread_mutex_lock(&w->mu);
    if (wait_idle_locked(w, e)) {
        pthread_mutex_unlock(&w->mu);
        ckpt_job_t tmp = *job;
        free_owned(&tmp);
        return -1;
    }
    w->job = *job;
    w->busy = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

int ckpt_writer_wait(ckpt_writer_t *w, err_t *e) {
    if (!w) return 0;
    pthread_mutex_lock(&w->mu);
    int rc = wait_idle_locked(w, e);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void ckpt_writer_free(ckpt_writer_t *w) {
    if (!w) return;
    if (w->have_thread) {
        pthread_mutex_lock(&w->mu);
        while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
        w->quit = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    if (w->buf) {
        if (w->alloc.free) w->alloc.free(w->alloc.ctx, w->buf);
        else free(w->buf);
    }
    free(w);
}
