/* allreduce.h: what the two halves of bench_allreduce share (bench/allreduce/): options,
 * the rank context, the row writer and the gradient layout. allreduce.c holds the
 * command line, the message and bucket rows, each rank's driver and the JSON merge;
 * ddp_record.c the DDP steps with the bucket-ready profile. The program's description is
 * at the top of allreduce.c.
 */
#ifndef RUNNER_BENCH_ALLREDUCE_H
#define RUNNER_BENCH_ALLREDUCE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/ddp.h"
#include "model/backend.h"
#include "model/net.h"
#include "model/optim.h"
#include "model/arch/resnet.h"
#include "runner/rundir.h"
#include "util/clock.h"
#include "util/half.h"
#include "util/json.h"
#include "util/rng.h"

#ifdef RUNNER_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/nccl.h"
#include "model/cuda/cuda_backend.h"
#endif

typedef enum { BK_SHM = 0, BK_NCCL, BK_SHM_CUDA } bk_t;
extern const char *const bk_names[];  /* "shm", "nccl", "shm-cuda" */

typedef struct opts {
    bk_t backend;
    int world;
    const char *out, *arch, *ddp_arch, *commit;
    int classes, reps, ddp_batch, ddp_steps, ddp_warmup, threads;
    double max_mib, ddp_bucket_mb;
    bool messages, buckets, ddp, tf32;
} opts_t;

/* ---- the gradient layout of an architecture: parameter tensor offsets, as the trainer
 * hands them to ddp_create (runner/train.c setup_ddp) ---- */
typedef struct layout {
    int64_t n;        /* parameters */
    int64_t *off;     /* nt + 1 increasing offsets */
    int nt;
} layout_t;

/* The bucket sizes (MiB) of the "buckets" rows and the DDP record's bucket plans. */
enum { N_BMB = 6 };
extern const double bucket_mbs[N_BMB];

int layout_of(net_t *net, layout_t *L, err_t *e);
int layout_build(const char *arch, int classes, layout_t *L, err_t *e);

/* ---- one rank ---- */
typedef struct rank_ctx {
    const opts_t *o;
    int rank, world;
    store_t *st;
    backend_t *be;
    comm_t *comm;
    FILE *rows;               /* rank 0: the rows file (a JSON array being written) */
    int n_rows;
    const char *device, *host_cpu;
    char when[32];
#ifdef RUNNER_HAVE_CUDA
    ncclComm_t nc;            /* nccl backend: the bench's own communicator for messages */
    cudaStream_t stream;
    cudaEvent_t ev0, ev1;
    float *one;               /* one device float for barriers */
#endif
} rank_ctx_t;

static inline bool on_gpu(const rank_ctx_t *c) { return c->o->backend != BK_SHM; }

static inline const char *comm_label(const rank_ctx_t *c) { return bk_names[c->o->backend]; }

/* Row writer (rank 0): row_begin starts a row object with the common fields, the k*
 * helpers append ", key: value", the caller closes it with "}". */
void row_begin(rank_ctx_t *c, const char *kind);
void kstr(FILE *f, const char *k, const char *v);
void knum(FILE *f, const char *k, double v);
void kint(FILE *f, const char *k, int64_t v);
/* The backend's error as this rank's, wrapped with what. */
int fail_be(rank_ctx_t *c, err_t *e, const char *what);
int cmp_d(const void *a, const void *b);
double median(double *v, int n);

#ifdef RUNNER_HAVE_CUDA
#define CUCHK(x) do { cudaError_t s_ = (x); if (s_ != cudaSuccess) \
    return err_set(e, ERR_RUNTIME, "%s failed: %s (%s:%d)", #x, cudaGetErrorString(s_), __FILE__, __LINE__); } while (0)
#define NCCHK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) \
    return err_set(e, ERR_RUNTIME, "%s failed: %s (%s:%d)", #x, ncclGetErrorString(r_), __FILE__, __LINE__); } while (0)
#endif

/* ddp_record.c: the "ddp_step" record (o->ddp_steps training steps through DDP). */
int ddp_record(rank_ctx_t *c, err_t *e);

#endif
