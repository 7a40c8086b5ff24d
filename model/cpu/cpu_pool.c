/* cpu_pool.c: the CPU backend's fixed thread pool (see cpu_impl.h for the contract).
 *
 * Worker t of T runs chunks t, t+T, t+2T, ...; the calling thread is worker 0. The static
 * assignment keeps every result independent of timing. Not here: work stealing, nested
 * parallelism (a task must not call cpu_pool_run).
 */
#include "model/cpu/cpu_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct worker_arg {
    cpu_pool_t *pool;
    int index;
} worker_arg_t;

/* Runs this worker's share of the current call's chunks. */
static void run_share(cpu_pool_t *p, int index) {
    for (int i = index; i < p->nchunks; i += p->nthreads) p->fn(p->arg, i);
}

/* A worker: waits for a new generation, runs its share, reports done, repeats. */
static void *worker_main(void *argp) {
    worker_arg_t *wa = argp;
    cpu_pool_t *p = wa->pool;
    int index = wa->index;
    free(wa);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->start_cv, &p->mu);
        if (p->quit) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_share(p, index);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Starts nthreads-1 workers (the caller is the last one). Returns 0 or -1 with e set. */
int cpu_pool_init(cpu_pool_t *p, int nthreads, err_t *e) {
    memset(p, 0, sizeof *p);
    if (nthreads < 1) nthreads = 1;
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    if (nthreads == 1) return 0;
    p->tids = calloc((size_t)nthreads, sizeof *p->tids);
    if (!p->tids) return err_set(e, ERR_RUNTIME, "cpu backend: out of memory for thread pool");
    for (int t = 1; t < nthreads; t++) {
        worker_arg_t *wa = malloc(sizeof *wa);
        if (wa) {
            wa->pool = p;
            wa->index = t;
        }
        if (!wa || pthread_create(&p->tids[t], NULL, worker_main, wa) != 0) {
            free(wa);
            p->nthreads = t;   /* deinit joins the ones started */
            cpu_pool_deinit(p);
            return err_set(e, ERR_RUNTIME, "cpu backend: cannot start worker thread %d of %d",
                           t, nthreads);
        }
    }
    return 0;
}

/* Stops and joins the workers. */
void cpu_pool_deinit(cpu_pool_t *p) {
    if (p->tids) {
        pthread_mutex_lock(&p->mu);
        p->quit = true;
        pthread_cond_broadcast(&p->start_cv);
        pthread_mutex_unlock(&p->mu);
        for (int t = 1; t < p->nthreads; t++) pthread_join(p->tids[t], NULL);
        free(p->tids);
        p->tids = NULL;
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start_cv);
    pthread_cond_destroy(&p->done_cv);
}

void cpu_pool_run(cpu_pool_t *p, int nchunks, cpu_task_fn fn, void *arg) {
    if (nchunks <= 0) return;
    if (p->nthreads == 1 || nchunks == 1) {
        for (int i = 0; i < nchunks; i++) fn(arg, i);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->nchunks = nchunks;
    p->pending = p->nthreads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    run_share(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
