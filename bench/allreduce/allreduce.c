/* allreduce.c: all-reduce time and bandwidth for the ResNet-50 gradient, and the bucket
 * timeline of real DDP steps (issue #7 item 6). Results go to bench/results/allreduce.json;
 * bench/scaling_model.py turns them into a (clearly labelled) scaling model.
 *
 * One invocation measures one backend with `world` ranks, one forked process each:
 *   shm       comm/shm.c between CPU processes (CPU backend), default world 2;
 *   nccl      one process per visible GPU (world = GPU count; world 1 on a single GPU,
 *             where NCCL moves no data between GPUs: those rows are labelled so);
 *   shm-cuda  the shm comm with the CUDA backend, gradients staged through host memory
 *             (default world 2: two ranks on one GPU when only one is visible).
 * What each rank measures (rank 0's times are reported; every rank does the same work):
 *  1. "message" rows: one all-reduce (COMM_AVG) of a buffer holding an fp32 gradient of
 *     1 ... 100 MiB, as fp32 and as fp16 / bf16 (the same element count, half the
 *     bytes); median of reps after 2 warm-up runs, a barrier before each. shm: wall clock
 *     around comm_allreduce. nccl: its own NCCL communicator on its own stream, CUDA
 *     events around `iters` back-to-back ncclAllReduce calls (as nccl-tests time them;
 *     comm/nccl.c keeps its stream private). shm-cuda: wall clock around download to a
 *     host buffer (pinned, cudaHostAlloc; and pageable, malloc) + shm all-reduce + upload.
 *  2. "buckets" rows: the whole gradient of --arch (resnet50, CIFAR-100: counted from the
 *     built net, not hard-coded) through comm/ddp.c itself at bucket_mb 1, 5, 10, 25, 50,
 *     100 with compression none / fp16 / bf16: ddp_create on the real comm and backend,
 *     every bucket made ready at once (ddp_grads_ready(0)) and ddp_finish_step, wall clock
 *     (+ a device sync). This is the all-reduce cost DDP pays when nothing overlaps.
 *  3. one "ddp_step" record: --ddp-steps real training steps of --ddp-arch (GPU default
 *     resnet50 batch 128 per rank; CPU default resnet18 batch 16) through DDP at
 *     --ddp-bucket-mb: step / forward / backward times, comm_allreduce vs comm_exposed
 *     seconds (ddp_take_timing, as summary.json) and the hidden fraction, the last step's
 *     per-bucket timeline (ddp_last_timeline, host clock) and a ready profile: every
 *     grads_ready call of backward (gradient offset, seconds since backward started;
 *     CUDA events on a GPU, so device time, not the host's queueing time), median over
 *     the steps; plus the buckets ddp_plan_buckets makes for that net at each bucket_mb,
 *     so the model can replay any bucket size against the measured ready times.
 * algbw = bytes / seconds; busbw = algbw * 2(n-1)/n (nccl-tests' definition; 0 at n = 1).
 *
 * Output: rows are merged into --out (default bench/results/allreduce.json): existing
 * rows of the same device, backend and world are replaced, all others kept.
 *
 * Usage: bench_allreduce --backend shm|nccl|shm-cuda [--world N] [--out FILE]
 *          [--reps 7] [--max-mib 100] [--arch resnet50] [--classes 100]
 *          [--no-messages] [--no-buckets] [--no-ddp] [--ddp-arch A] [--ddp-batch B]
 *          [--ddp-steps 10] [--ddp-warmup 3] [--ddp-bucket-mb 25] [--precision fp32|tf32]
 *          [--threads T] [--commit C]
 * Not here: the model (bench/scaling_model.py), the driver (bench/allreduce_suite.sh).
 */
#include "bench/allreduce/allreduce.h"

const char *const bk_names[] = {"shm", "nccl", "shm-cuda"};

static const double msg_mib[] = {1, 2, 5, 10, 25, 50, 100};
const double bucket_mbs[N_BMB] = {1, 5, 10, 25, 50, 100};
enum { N_MSG = sizeof msg_mib / sizeof msg_mib[0] };
static const dtype_t dtypes[] = {DT_F32, DT_F16, DT_BF16};

int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of n values (sorts v). */
double median(double *v, int n) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void usage(void) {
    fputs("usage: bench_allreduce --backend shm|nccl|shm-cuda [--world N] [--out FILE] [--reps 7]\n"
          "         [--max-mib 100] [--arch resnet50] [--classes 100] [--no-messages] [--no-buckets]\n"
          "         [--no-ddp] [--ddp-arch A] [--ddp-batch B] [--ddp-steps 10] [--ddp-warmup 3]\n"
          "         [--ddp-bucket-mb 25] [--precision fp32|tf32] [--threads T] [--commit C]\n", stderr);
}

static int parse(int argc, char **argv, opts_t *o) {
    *o = (opts_t){.backend = BK_SHM, .out = "bench/results/allreduce.json", .arch = "resnet50",
                  .classes = 100, .reps = 7, .ddp_steps = 10, .ddp_warmup = 3, .max_mib = 100,
                  .ddp_bucket_mb = 25, .messages = true, .buckets = true, .ddp = true, .tf32 = true};
    bool have_backend = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--no-messages")) { o->messages = false; continue; }
        if (!strcmp(a, "--no-buckets")) { o->buckets = false; continue; }
        if (!strcmp(a, "--no-ddp")) { o->ddp = false; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); exit(0); }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v) { fprintf(stderr, "bench_allreduce: %s needs a value\n", a); return -1; }
        if (!strcmp(a, "--backend")) {
            int k = 0;
            while (k < 3 && strcmp(v, bk_names[k])) k++;
            if (k == 3) { fprintf(stderr, "bench_allreduce: --backend must be shm, nccl or shm-cuda\n"); return -1; }
            o->backend = (bk_t)k;
            have_backend = true;
        } else if (!strcmp(a, "--world")) o->world = atoi(v);
        else if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--reps")) o->reps = atoi(v);
        else if (!strcmp(a, "--max-mib")) o->max_mib = atof(v);
        else if (!strcmp(a, "--arch")) o->arch = v;
        else if (!strcmp(a, "--classes")) o->classes = atoi(v);
        else if (!strcmp(a, "--ddp-arch")) o->ddp_arch = v;
        else if (!strcmp(a, "--ddp-batch")) o->ddp_batch = atoi(v);
        else if (!strcmp(a, "--ddp-steps")) o->ddp_steps = atoi(v);
        else if (!strcmp(a, "--ddp-warmup")) o->ddp_warmup = atoi(v);
        else if (!strcmp(a, "--ddp-bucket-mb")) o->ddp_bucket_mb = atof(v);
        else if (!strcmp(a, "--threads")) o->threads = atoi(v);
        else if (!strcmp(a, "--commit")) o->commit = v;
        else if (!strcmp(a, "--precision")) {
            if (strcmp(v, "fp32") && strcmp(v, "tf32")) {
                fprintf(stderr, "bench_allreduce: --precision must be fp32 or tf32\n");
                return -1;
            }
            o->tf32 = !strcmp(v, "tf32");
        } else { fprintf(stderr, "bench_allreduce: unknown option %s\n", a); usage(); return -1; }
    }
    if (!have_backend) { usage(); return -1; }
    if (o->reps < 1 || o->max_mib < 1 || o->ddp_steps < 1 || o->ddp_warmup < 0 || o->classes < 2 ||
        o->world < 0 || o->world > 64) {
        fprintf(stderr, "bench_allreduce: --reps, --ddp-steps >= 1, --max-mib >= 1, --ddp-warmup >= 0, "
                "--classes >= 2, --world 1..64\n");
        return -1;
    }
    bool gpu = o->backend != BK_SHM;
    if (!o->ddp_arch) o->ddp_arch = gpu ? "resnet50" : "resnet18";
    if (o->ddp_batch < 1) o->ddp_batch = gpu ? 128 : 16;
    if (!o->commit) o->commit = runner_commit();
    return 0;
}

int layout_of(net_t *net, layout_t *L, err_t *e) {
    int nt = net_num_tensors(net), np = 0;
    L->off = calloc((size_t)nt + 1, sizeof *L->off);
    if (!L->off) return err_set(e, ERR_RUNTIME, "out of memory");
    for (int i = 0; i < nt; i++) {
        const net_tensor_t *t = net_tensor(net, i);
        if (t->store == NET_STORE_PARAM) L->off[np++] = (int64_t)t->offset;
    }
    for (int i = 1; i < np; i++)
        for (int j = i; j > 0 && L->off[j - 1] > L->off[j]; j--) {
            int64_t tmp = L->off[j]; L->off[j] = L->off[j - 1]; L->off[j - 1] = tmp;
        }
    L->n = (int64_t)net_num_params(net);
    L->off[np] = L->n;
    L->nt = np;
    return 0;
}

int layout_build(const char *arch, int classes, layout_t *L, err_t *e) {
    net_t *net = resnet_build(arch, 3, classes, false, e);
    if (!net) return -1;
    int rc = layout_of(net, L, e);
    net_free(net);
    return rc;
}

/* Starts a row object with the fields every row has; the caller adds ", key: value"
 * pairs and row_end closes it. Only rank 0 writes. */
void row_begin(rank_ctx_t *c, const char *kind) {
    FILE *f = c->rows;
    fprintf(f, "%s\n{", c->n_rows++ ? "," : "");
    fprintf(f, "\"kind\": ");
    json_write_string(f, kind);
    fprintf(f, ", \"device\": ");
    json_write_string(f, c->device);
    fprintf(f, ", \"host_cpu\": ");
    json_write_string(f, c->host_cpu);
    fprintf(f, ", \"backend\": ");
    json_write_string(f, comm_label(c));
    fprintf(f, ", \"world\": %d, \"commit\": ", c->world);
    json_write_string(f, c->o->commit);
    fprintf(f, ", \"when\": \"%s\"", c->when);
}
void kstr(FILE *f, const char *k, const char *v) {
    fprintf(f, ", \"%s\": ", k);
    json_write_string(f, v);
}
void knum(FILE *f, const char *k, double v) {
    if (isfinite(v)) fprintf(f, ", \"%s\": %.6g", k, v);
    else fprintf(f, ", \"%s\": null", k);
}
void kint(FILE *f, const char *k, int64_t v) { fprintf(f, ", \"%s\": %lld", k, (long long)v); }

int fail_be(rank_ctx_t *c, err_t *e, const char *what) {
    *e = c->be->err;
    if (!e->code) e->code = ERR_RUNTIME;
    return err_wrap(e, "%s", what);
}

#ifdef RUNNER_HAVE_CUDA
static ncclDataType_t nccl_dt(dtype_t dt) {
    return dt == DT_F16 ? ncclFloat16 : dt == DT_BF16 ? ncclBfloat16 : ncclFloat32;
}

/* The bench's own NCCL communicator (message rows), id exchanged through the store. */
static int nccl_setup(rank_ctx_t *c, err_t *e) {
    ncclUniqueId id;
    if (c->rank == 0) {
        NCCHK(ncclGetUniqueId(&id));
        if (store_set(c->st, "bench/nccl_id", &id, sizeof id, e) < 0) return -1;
    } else {
        size_t len = 0;
        if (store_get(c->st, "bench/nccl_id", &id, sizeof id, &len, -1, e) < 0) return -1;
    }
    CUCHK(cudaSetDevice(c->be->device));
    NCCHK(ncclCommInitRank(&c->nc, c->world, id, c->rank));
    CUCHK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CUCHK(cudaEventCreate(&c->ev0));
    CUCHK(cudaEventCreate(&c->ev1));
    if (!(c->one = c->be->ops->alloc(c->be, 256))) return fail_be(c, e, "allocating");
    return 0;
}

static void nccl_teardown(rank_ctx_t *c) {
    if (c->nc) ncclCommDestroy(c->nc);
    if (c->ev0) cudaEventDestroy(c->ev0);
    if (c->ev1) cudaEventDestroy(c->ev1);
    if (c->stream) cudaStreamDestroy(c->stream);
    if (c->one) c->be->ops->release(c->be, c->one);
}

/* Seconds per all-reduce of count dt elements at dev: `iters` back-to-back calls between
 * two CUDA events on the bench's stream, after an NCCL barrier (one-float all-reduce). */
static int nccl_time(rank_ctx_t *c, void *dev, size_t count, dtype_t dt, int iters, double *sec, err_t *e) {
    NCCHK(ncclAllReduce(c->one, c->one, 1, ncclFloat32, ncclSum, c->nc, c->stream));
    CUCHK(cudaStreamSynchronize(c->stream));
    CUCHK(cudaEventRecord(c->ev0, c->stream));
    for (int i = 0; i < iters; i++)
        NCCHK(ncclAllReduce(dev, dev, count, nccl_dt(dt), ncclAvg, c->nc, c->stream));
    CUCHK(cudaEventRecord(c->ev1, c->stream));
    CUCHK(cudaEventSynchronize(c->ev1));
    float ms = 0;
    CUCHK(cudaEventElapsedTime(&ms, c->ev0, c->ev1));
    *sec = ms * 1e-3 / iters;
    return 0;
}
#endif

/* Repetitions for a size: more for small, cheap messages. */
static int reps_for(const opts_t *o, size_t bytes) {
    return bytes <= (8u << 20) ? 3 * o->reps : bytes <= (32u << 20) ? 2 * o->reps : o->reps;
}

static double busbw_of(double algbw, int world) { return algbw * 2.0 * (world - 1) / world; }

/* Fills a host buffer of count dt values with small numbers (no denormals). */
static void fill_host(void *p, size_t count, dtype_t dt) {
    for (size_t i = 0; i < count; i++) {
        float v = (float)(i % 1000) * 1e-3f + 1e-3f;
        if (dt == DT_F32) ((float *)p)[i] = v;
        else ((uint16_t *)p)[i] = dt == DT_F16 ? f32_to_f16(v) : f32_to_bf16(v);
    }
}

/* One message configuration: rank 0 writes its row. staging: 0 none, 1 pinned, 2 pageable
 * (shm-cuda only). */
static int message_row(rank_ctx_t *c, dtype_t dt, double mib, int staging, err_t *e) {
    size_t count = (size_t)(mib * 1048576.0 / 4.0), es = dt == DT_F32 ? 4 : 2, bytes = count * es;
    int reps = reps_for(c->o, count * 4);
    double *t = calloc((size_t)reps, sizeof *t);
    void *host = NULL, *dev = NULL;
    int rc = -1, iters = 1;
    if (!t) return err_set(e, ERR_RUNTIME, "out of memory");
    if (c->o->backend == BK_SHM || staging == 2) {
        if (!(host = malloc(bytes))) { err_set(e, ERR_RUNTIME, "out of memory (%zu bytes)", bytes); goto done; }
    }
#ifdef RUNNER_HAVE_CUDA
    if (staging == 1 && !(host = cuda_host_alloc(bytes, e))) goto done;
#endif
    if (host) fill_host(host, count, dt);
    if (on_gpu(c)) {
        if (!(dev = c->be->ops->alloc(c->be, bytes))) { fail_be(c, e, "allocating a message"); goto done; }
        void *src = host;
        if (!src && !(src = malloc(bytes))) { err_set(e, ERR_RUNTIME, "out of memory"); goto done; }
        if (src != host) fill_host(src, count, dt);
        int up = c->be->ops->upload(c->be, dev, src, bytes);
        if (up == 0) up = c->be->ops->sync(c->be);
        if (src != host) free(src);
        if (up < 0) { fail_be(c, e, "uploading a message"); goto done; }
        iters = bytes <= (4u << 20) ? 20 : bytes <= (32u << 20) ? 5 : 2;
    }
    for (int i = -2; i < reps; i++) {
        double sec = 0;
        if (c->o->backend == BK_NCCL) {
#ifdef RUNNER_HAVE_CUDA
            if (nccl_time(c, dev, count, dt, iters, &sec, e) < 0) goto done;
#endif
        } else {
            if (comm_barrier(c->comm, e) < 0) goto done;
            double t0 = now_s();
            if (staging && c->be->ops->download(c->be, host, dev, bytes) < 0) { fail_be(c, e, "download"); goto done; }
            if (comm_allreduce(c->comm, host, count, dt, COMM_AVG, e) < 0) goto done;
            if (staging && (c->be->ops->upload(c->be, dev, host, bytes) < 0 || c->be->ops->sync(c->be) < 0)) {
                fail_be(c, e, "upload");
                goto done;
            }
            sec = now_s() - t0;
        }
        if (i >= 0) t[i] = sec;
    }
    if (c->rank == 0) {
        double med = median(t, reps), algbw = (double)bytes / med / 1e9;
        row_begin(c, "message");
        kstr(c->rows, "dtype", dtype_names[dt]);
        knum(c->rows, "fp32_mib", mib);
        kint(c->rows, "elements", (int64_t)count);
        kint(c->rows, "bytes", (int64_t)bytes);
        if (c->o->backend == BK_SHM_CUDA) kstr(c->rows, "staging", staging == 1 ? "pinned" : "pageable");
        knum(c->rows, "seconds", med);
        knum(c->rows, "seconds_min", t[0]);
        kint(c->rows, "reps", reps);
        if (c->o->backend == BK_NCCL) kint(c->rows, "iters_per_rep", iters);
        kstr(c->rows, "timer", c->o->backend == BK_NCCL ? "cuda events" : "wall clock");
        knum(c->rows, "algbw_GBps", algbw);
        knum(c->rows, "busbw_GBps", busbw_of(algbw, c->world));
        if (c->world == 1)
            kstr(c->rows, "note", "world 1: no data crosses between ranks; the time is the "
                 "library's per-call cost, busbw is 0 by definition");
        fputs("}", c->rows);
        fflush(c->rows);
        printf("  %-8s %-5s %6.1f MiB (%s%s): %9.3f ms  algbw %7.2f GB/s  busbw %7.2f GB/s\n",
               comm_label(c), dtype_names[dt], mib, c->o->backend == BK_NCCL ? "events" : "wall",
               staging == 1 ? ", pinned" : staging == 2 ? ", pageable" : "", med * 1e3, algbw,
               busbw_of(algbw, c->world));
        fflush(stdout);
    }
    rc = 0;
done:
    free(t);
    if (dev) c->be->ops->release(c->be, dev);
#ifdef RUNNER_HAVE_CUDA
    if (staging == 1) cuda_host_free(host);
    else
#endif
        free(host);
    return rc;
}

/* The whole gradient of L through comm/ddp.c at one bucket size and compression. grads:
 * backend memory of L->n floats. */
static int bucket_row(rank_ctx_t *c, const layout_t *L, float *grads, dtype_t comp, double bucket_mb,
                      err_t *e) {
    ddp_opts_t dopt = {.bucket_mb = bucket_mb, .first_bucket_mb = 1, .compression = comp};
    ddp_t *d = ddp_create(c->comm, c->be, grads, L->n, L->off, L->nt, &dopt, e);
    if (!d) return -1;
    int reps = c->o->reps, rc = -1, nb = ddp_bucket_count(d);
    double *t = calloc((size_t)reps, sizeof *t);
    ddp_bucket_time_t *bt = calloc((size_t)nb, sizeof *bt);
    if (!t || !bt) { err_set(e, ERR_RUNTIME, "out of memory"); goto done; }
    for (int i = -2; i < reps; i++) {
        if (comm_barrier(c->comm, e) < 0) goto done;
        double t0 = now_s();
        ddp_begin_backward(d);
        ddp_grads_ready(d, 0);
        if (ddp_finish_step(d, e) < 0) goto done;
        if (c->be->ops->sync(c->be) < 0) { fail_be(c, e, "sync"); goto done; }
        if (i >= 0) t[i] = now_s() - t0;
    }
    ddp_last_timeline(d, NULL, bt);
    if (c->rank == 0) {
        double med = median(t, reps);
        int64_t bytes = L->n * (comp == DT_F32 ? 4 : 2);
        double algbw = (double)bytes / med / 1e9;
        FILE *f = c->rows;
        row_begin(c, "buckets");
        kstr(f, "dtype", dtype_names[comp]);
        kstr(f, "arch", c->o->arch);
        knum(f, "bucket_mb", bucket_mb);
        kint(f, "elements", L->n);
        kint(f, "bytes", bytes);
        kint(f, "n_buckets", nb);
        knum(f, "seconds", med);
        knum(f, "seconds_min", t[0]);
        kint(f, "reps", reps);
        kstr(f, "timer", "wall clock, ddp_grads_ready(0) .. ddp_finish_step + device sync");
        knum(f, "algbw_GBps", algbw);
        knum(f, "busbw_GBps", busbw_of(algbw, c->world));
        if (c->o->backend == BK_SHM_CUDA) kstr(f, "staging", "ddp.c host copy (malloc, pageable)");
        fprintf(f, ", \"bucket_elements\": [");
        for (int i = 0; i < nb; i++) {
            int64_t b, en;
            ddp_bucket_range(d, i, &b, &en);
            fprintf(f, "%s%lld", i ? ", " : "", (long long)(en - b));
        }
        fprintf(f, "], \"bucket_op_seconds_last_rep\": [");
        for (int i = 0; i < nb; i++) fprintf(f, "%s%.6g", i ? ", " : "", bt[i].op_s);
        fputs("]}", f);
        fflush(f);
        printf("  %-8s buckets %5.0f MiB %-5s (%3d buckets): %9.3f ms  algbw %7.2f GB/s  busbw %7.2f GB/s\n",
               comm_label(c), bucket_mb, dtype_names[comp], nb, med * 1e3, algbw, busbw_of(algbw, c->world));
        fflush(stdout);
    }
    rc = 0;
done:
    free(t);
    free(bt);
    ddp_free(d);
    return rc;
}

/* Everything one rank does; rank 0 writes rows to rows_path. */
static int rank_main(const opts_t *o, int rank, int world, int port, int n_gpus, const char *device,
                     const char *host_cpu, const char *rows_path, err_t *e) {
    rank_ctx_t c = {.o = o, .rank = rank, .world = world, .device = device, .host_cpu = host_cpu};
    layout_t L = {0};
    float *grads = NULL;
    int rc = -1;
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(c.when, sizeof c.when, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    if (!(c.st = store_connect("127.0.0.1", port, rank, world, 600, e))) return -1;
    backend_opts_t bo = {0};
    if (o->backend == BK_SHM) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        bo.kind = BACKEND_CPU;
        bo.threads = o->threads > 0 ? o->threads : (int)(cores / world > 0 ? cores / world : 1);
    } else {
        bo.kind = BACKEND_CUDA;
        bo.device = n_gpus > 0 ? rank % n_gpus : 0;
        bo.allow_tf32 = o->tf32;
    }
    if (!(c.be = backend_create(&bo, e))) goto done;
#ifdef RUNNER_HAVE_CUDA
    /* this thread's CUDA calls (events, the bench's NCCL stream) go to the rank's GPU */
    if (bo.kind == BACKEND_CUDA && cudaSetDevice(bo.device) != cudaSuccess) {
        err_set(e, ERR_RUNTIME, "cudaSetDevice(%d) failed", bo.device);
        goto done;
    }
#endif
#ifdef RUNNER_HAVE_CUDA
    if (o->backend == BK_NCCL) c.comm = comm_nccl_create(c.st, c.be, e);
    else
#endif
        c.comm = comm_shm_create(c.st, e);
    if (!c.comm) goto done;
#ifdef RUNNER_HAVE_CUDA
    if (o->backend == BK_NCCL && nccl_setup(&c, e) < 0) goto done;
#endif
    if (rank == 0) {
        if (!(c.rows = fopen(rows_path, "w"))) { err_set(e, ERR_RUNTIME, "cannot write %s", rows_path); goto done; }
        fputs("[", c.rows);
    }
    if (layout_build(o->arch, o->classes, &L, e) < 0) goto done;
    if (rank == 0) {
        printf("bench_allreduce: backend %s, world %d, device %s; %s (%d classes): %lld gradient values "
               "(%.1f MiB fp32)\n", comm_label(&c), world, device, o->arch, o->classes, (long long)L.n,
               (double)L.n * 4 / 1048576.0);
        fflush(stdout);
    }
    if (o->messages) {
        for (int k = 0; k < 3; k++)
            for (int m = 0; m < N_MSG; m++) {
                if (msg_mib[m] > o->max_mib) continue;
                if (o->backend == BK_SHM_CUDA) {
                    if (message_row(&c, dtypes[k], msg_mib[m], 1, e) < 0 ||
                        message_row(&c, dtypes[k], msg_mib[m], 2, e) < 0)
                        goto done;
                } else if (message_row(&c, dtypes[k], msg_mib[m], 0, e) < 0) {
                    goto done;
                }
            }
    }
    if (o->buckets) {
        size_t bytes = (size_t)L.n * 4;
        grads = c.be->ops->alloc(c.be, bytes);
        float *h = malloc(bytes);
        if (!grads || !h) { free(h); err_set(e, ERR_RUNTIME, "out of memory (gradient of %zu bytes)", bytes); goto done; }
        fill_host(h, (size_t)L.n, DT_F32);
        int up = c.be->ops->upload(c.be, grads, h, bytes);
        free(h);
        if (up < 0) { fail_be(&c, e, "upload"); goto done; }
        for (int k = 0; k < 3; k++)
            for (int b = 0; b < N_BMB; b++)
                if (bucket_row(&c, &L, grads, dtypes[k], bucket_mbs[b], e) < 0) goto done;
        c.be->ops->release(c.be, grads);
        grads = NULL;
    }
    if (o->ddp && ddp_record(&c, e) < 0) goto done;
    rc = 0;
done:
    if (rc < 0 && c.comm) comm_abort(c.comm, e->msg);
    if (rc < 0 && c.st) store_set_failed(c.st, e->msg);
    if (c.rows) {
        fputs("\n]\n", c.rows);
        if (fclose(c.rows) != 0 && rc == 0) rc = err_set(e, ERR_RUNTIME, "writing %s failed", rows_path);
    }
    if (grads) c.be->ops->release(c.be, grads);
    free(L.off);
#ifdef RUNNER_HAVE_CUDA
    if (o->backend == BK_NCCL) nccl_teardown(&c);
#endif
    comm_free(c.comm);
    backend_free(c.be);
    store_close(c.st);
    return rc;
}

/* ---- the parent: device names, fork, merge ---- */

/* "AMD EPYC, 2 cores" from /proc/cpuinfo. */
static void cpu_name(char *buf, size_t len) {
    char line[512], model[256] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        v[strcspn(v, "\n")] = '\0';
        snprintf(model, sizeof model, "%s", v);
        break;
    }
    if (f) fclose(f);
    snprintf(buf, len, "%s, %ld cores", model, sysconf(_SC_NPROCESSORS_ONLN));
}

/* GPU count and GPU 0's name, asked in a child so that this process never initialises
 * CUDA (forked ranks could not use it then). Returns the count (0: none or no CUDA). */
static int probe_gpus(char *name, size_t len) {
    int fd[2];
    name[0] = '\0';
    if (pipe(fd) < 0) return 0;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        char msg[320];
        int n = backend_cuda_device_count();
        char dev[256] = "";
        if (n > 0) backend_cuda_device_name(0, dev, sizeof dev);
        int k = snprintf(msg, sizeof msg, "%d %s", n, dev);
        if (write(fd[1], msg, (size_t)k) < 0) _exit(1);
        _exit(0);
    }
    close(fd[1]);
    char msg[320] = "";
    ssize_t got = 0, k;
    while (pid > 0 && (k = read(fd[0], msg + got, sizeof msg - 1 - (size_t)got)) > 0) got += k;
    close(fd[0]);
    if (pid > 0) waitpid(pid, NULL, 0);
    msg[got > 0 ? got : 0] = '\0';
    int n = atoi(msg);
    const char *sp = strchr(msg, ' ');
    snprintf(name, len, "%s", sp ? sp + 1 : "");
    return n > 0 ? n : 0;
}

/* Writes a parsed JSON value compactly (numbers with up to 10 significant digits). */
static void emit(FILE *f, const json_t *j) {
    switch (j->type) {
    case JSON_NULL: fputs("null", f); break;
    case JSON_BOOL: fputs(j->boolean ? "true" : "false", f); break;
    case JSON_NUMBER:
        if (j->number == floor(j->number) && fabs(j->number) < 1e15) fprintf(f, "%.0f", j->number);
        else fprintf(f, "%.10g", j->number);
        break;
    case JSON_STRING: json_write_string(f, j->string); break;
    case JSON_ARRAY:
        fputc('[', f);
        for (size_t i = 0; i < j->count; i++) {
            if (i) fputs(", ", f);
            emit(f, j->items[i]);
        }
        fputc(']', f);
        break;
    case JSON_OBJECT:
        fputc('{', f);
        for (size_t i = 0; i < j->count; i++) {
            if (i) fputs(", ", f);
            json_write_string(f, j->keys[i]);
            fputs(": ", f);
            emit(f, j->items[i]);
        }
        fputc('}', f);
        break;
    }
}

static bool same_run(const json_t *a, const json_t *b) {
    return !strcmp(json_get_string(a, "device", ""), json_get_string(b, "device", "")) &&
           !strcmp(json_get_string(a, "backend", ""), json_get_string(b, "backend", "")) &&
           json_get_number(a, "world", -1) == json_get_number(b, "world", -2);
}

static const char about[] =
    "bench/allreduce/ (issue #7 item 6). MEASURED rows. kind message: one all-reduce (avg) of an "
    "fp32 gradient of fp32_mib MiB, sent as dtype (fp16/bf16: same elements, half the bytes); "
    "seconds = median; nccl timed with CUDA events on the bench's own communicator, shm and "
    "shm-cuda with the wall clock (shm-cuda: download + shm all-reduce + upload, staging in "
    "pinned or pageable host memory). kind buckets: the whole gradient of arch through comm/ddp.c "
    "at bucket_mb with compression dtype, all buckets ready at once (no overlap), wall clock. "
    "kind ddp_step: real DDP training steps with the per-call ready profile and the last step's "
    "bucket timeline. algbw = bytes/seconds, busbw = algbw*2(n-1)/n (nccl-tests). world 1 rows "
    "move no data between GPUs. The scaling figures derived from these rows are a MODEL: "
    "bench/scaling_model.py, docs/benchmarks.md.";

/* Merges the rows of rows_path into out (replacing rows of the same device, backend and
 * world), written through a temporary file and rename. */
static int merge(const char *rows_path, const char *out, err_t *e) {
    json_t *fresh = json_parse_file(rows_path, (size_t)1 << 28, e);
    if (!fresh) return -1;
    if (fresh->type != JSON_ARRAY) { json_free(fresh); return err_set(e, ERR_RUNTIME, "%s: not an array", rows_path); }
    json_t *old = NULL;
    if (access(out, F_OK) == 0 && !(old = json_parse_file(out, (size_t)1 << 28, e))) {
        json_free(fresh);
        return err_wrap(e, "reading the existing results (fix or remove the file)");
    }
    const json_t *old_rows = old ? json_get(old, "rows") : NULL;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", out, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        json_free(fresh);
        json_free(old);
        return err_set(e, ERR_RUNTIME, "cannot write %s", tmp);
    }
    fputs("{\"about\": ", f);
    json_write_string(f, about);
    fputs(",\n\"rows\": [", f);
    int n = 0, kept = 0;
    for (size_t i = 0; old_rows && old_rows->type == JSON_ARRAY && i < old_rows->count; i++) {
        const json_t *r = old_rows->items[i];
        bool replaced = false;
        for (size_t k = 0; k < fresh->count && !replaced; k++) replaced = same_run(r, fresh->items[k]);
        if (replaced) continue;
        fputs(n++ ? ",\n" : "\n", f);
        emit(f, r);
        kept++;
    }
    for (size_t k = 0; k < fresh->count; k++) {
        fputs(n++ ? ",\n" : "\n", f);
        emit(f, fresh->items[k]);
    }
    fputs("\n]}\n", f);
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    printf("bench_allreduce: %zu new rows, %d kept, in %s\n", fresh->count, kept, out);
    json_free(fresh);
    json_free(old);
    if (bad || rename(tmp, out) != 0) {
        unlink(tmp);
        return err_set(e, ERR_RUNTIME, "writing %s failed", out);
    }
    return 0;
}

int main(int argc, char **argv) {
    /* libgomp (oneDNN's OpenMP) reads OMP_WAIT_POLICY once at load: re-execute with
     * passive when unset, as runner/main.c does (spinning teams starve the ranks). */
    if (!getenv("OMP_WAIT_POLICY") && setenv("OMP_WAIT_POLICY", "passive", 1) == 0)
        execv("/proc/self/exe", argv);
    opts_t o;
    if (parse(argc, argv, &o) < 0) return 2;
    char host_cpu[300], gpu[256], device[300];
    cpu_name(host_cpu, sizeof host_cpu);
    int n_gpus = 0;
    if (o.backend != BK_SHM) {
        n_gpus = probe_gpus(gpu, sizeof gpu);
        if (n_gpus < 1) {
            fprintf(stderr, "bench_allreduce: --backend %s needs a visible CUDA GPU (and a build with "
                    "CUDA); none found\n", bk_names[o.backend]);
            return 2;
        }
        snprintf(device, sizeof device, "%s", gpu);
    } else {
        snprintf(device, sizeof device, "%s", host_cpu);
    }
    int world = o.world > 0 ? o.world : o.backend == BK_NCCL ? n_gpus : 2;
    if (o.backend == BK_NCCL && world > n_gpus) {
        fprintf(stderr, "bench_allreduce: nccl needs one GPU per rank (%d visible, --world %d)\n", n_gpus, world);
        return 2;
    }
    err_t e = {0};
    store_server_t *srv = store_server_start("127.0.0.1", 0, &e);
    if (!srv) { fprintf(stderr, "bench_allreduce: %s\n", e.msg); return 1; }
    char rows_path[] = "/tmp/bench_allreduce_rows_XXXXXX";
    int fd = mkstemp(rows_path);
    if (fd < 0) { fprintf(stderr, "bench_allreduce: cannot create a temporary file\n"); return 1; }
    close(fd);
    fflush(stdout);
    pid_t kids[64];
    for (int r = 0; r < world; r++) {
        kids[r] = fork();
        if (kids[r] < 0) { fprintf(stderr, "bench_allreduce: fork failed\n"); return 1; }
        if (kids[r] == 0) {
            err_t ce = {0};
            int rc = rank_main(&o, r, world, store_server_port(srv), n_gpus, device, host_cpu, rows_path, &ce);
            if (rc < 0) fprintf(stderr, "bench_allreduce: rank %d: %s\n", r, ce.msg);
            fflush(stdout);
            _exit(rc < 0 ? 1 : 0);
        }
    }
    int bad = 0;
    for (int r = 0; r < world; r++) {
        int s;
        waitpid(kids[r], &s, 0);
        bad |= !WIFEXITED(s) || WEXITSTATUS(s);
    }
    store_server_stop(srv);
    int rc = 0;
    if (bad) {
        fprintf(stderr, "bench_allreduce: a rank failed; %s left unchanged\n", o.out);
        rc = 1;
    } else if (merge(rows_path, o.out, &e) < 0) {
        fprintf(stderr, "bench_allreduce: %s\n", e.msg);
        rc = 1;
    }
    unlink(rows_path);
    return rc;
}
