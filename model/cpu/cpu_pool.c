/* cpu_pool.c: the CPU backend's fixed thread pool (see cpu_impl.h for the contract).
 *
 * The calling thread and nthreads-1 workers claim chunks from one atomic ticket that
 * packs the call's generation with the next chunk index, so a worker that wakes late
 * can never claim a chunk of a later call with the function of an earlier one. The
 * caller returns once every chunk has finished; it waits only for chunks already
 * running, never for a worker that has not woken up yet (on a shared 2-core machine a
 * wake-up can take a scheduler tick). Workers spin briefly before sleeping, because ops
 * come back to back during a training step.
 *
 * Why not OpenMP's team (oneDNN's, through GOMP_parallel): an OpenMP region ends in a
 * barrier that waits for every thread of the team, including one the kernel has not
 * scheduled yet. On this shared 2-core machine that made the BN phases 5-7x slower in
 * wall time than this pool (bench/results/cpu_ops.md).
 * Not here: nested parallelism (a task must not call cpu_pool_run).
 */
#include "model/cpu/cpu_impl.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* Polls of the generation before a worker sleeps (~30 us): long enough to catch the next
 * phase of a BN or optimizer op, short enough not to take the core from oneDNN's OpenMP
 * threads when a convolution follows. */
#define SPIN_ROUNDS 1000

typedef struct worker_arg {
    cpu_pool_t *pool;
} worker_arg_t;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claims and runs chunks of generation gen until none is left. */
static void run_chunks(cpu_pool_t *p, uint32_t gen, cpu_task_fn fn, void *arg, int nchunks) {
    for (;;) {
        uint64_t t = __atomic_load_n(&p->ticket, __ATOMIC_ACQUIRE);
        for (;;) {
            if ((uint32_t)(t >> 32) != gen || (int)(uint32_t)t >= nchunks) return;
            if (__atomic_compare_exchange_n(&p->ticket, &t, t + 1, false, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE))
                break;
        }
        fn(arg, (int)(uint32_t)t);
        __atomic_fetch_add(&p->done, 1, __ATOMIC_RELEASE);
    }
}

/* A worker: waits for a new generation (spinning, then sleeping), helps, repeats. */
static void *worker_main(void *argp) {
    worker_arg_t *wa = argp;
    cpu_pool_t *p = wa->pool;
    free(wa);
    uint32_t seen = 0;
    for (;;) {
        uint32_t gen = seen;
        for (int i = 0; i < SPIN_ROUNDS; i++) {
            gen = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE);
            if (gen != seen) break;
            cpu_relax();
        }
        pthread_mutex_lock(&p->mu);
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->start_cv, &p->mu);
        if (p->quit) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        gen = p->generation;
        cpu_task_fn fn = p->fn;
        void *arg = p->arg;
        int nchunks = p->nchunks;
        pthread_mutex_unlock(&p->mu);
        seen = gen;
        run_chunks(p, gen, fn, arg, nchunks);
    }
}

/* Starts nthreads-1 workers (the caller is the last one). Returns 0 or -1 with e set. */
int cpu_pool_init(cpu_pool_t *p, int nthreads, err_t *e) {
    memset(p, 0, sizeof *p);
    if (nthreads < 1) nthreads = 1;
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start_cv, NULL);
    if (nthreads == 1) return 0;
    p->tids = calloc((size_t)nthreads, sizeof *p->tids);
    if (!p->tids) return err_set(e, ERR_RUNTIME, "cpu backend: out of memory for thread pool");
    for (int t = 1; t < nthreads; t++) {
        worker_arg_t *wa = malloc(sizeof *wa);
        if (wa) wa->pool = p;
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
}

void cpu_pool_run(cpu_pool_t *p, int nchunks, cpu_task_fn fn, void *arg) {
    if (nchunks <= 0) return;
    if (p->nthreads == 1 || nchunks == 1) {
        for (int i = 0; i < nchunks; i++) fn(arg, i);
        return;
    }
    pthread_mutex_lock(&p->mu);
    uint32_t gen = p->generation + 1;
    p->fn = fn;
    p->arg = arg;
    p->nchunks = nchunks;
    __atomic_store_n(&p->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->ticket, (uint64_t)gen << 32, __ATOMIC_RELEASE);
    __atomic_store_n(&p->generation, gen, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, gen, fn, arg, nchunks);
    /* every chunk is claimed; wait for the ones other threads are still running */
    for (int spins = 0; __atomic_load_n(&p->done, __ATOMIC_ACQUIRE) < nchunks; spins++) {
        if (spins < 1000) cpu_relax();
        else sched_yield();
    }
}
