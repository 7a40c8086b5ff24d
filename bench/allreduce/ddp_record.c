/* ddp_record.c: bench_allreduce's "ddp_step" record: real training steps of o->ddp_arch
 * through DDP with the bucket-ready profile (every grads_ready call of backward, CUDA
 * events on a GPU) and the last step's bucket timeline (see allreduce.c's header).
 */
#include "bench/allreduce/allreduce.h"

/* ---- DDP steps with a ready profile ---- */
typedef struct prof {
    ddp_t *ddp;
    backend_t *be;
    bool gpu;
    int n, cap;
    int64_t *off;       /* ready_from of each grads_ready call */
    double *host;       /* host seconds since backward start */
    double t0;
    bool oom;
#ifdef RUNNER_HAVE_CUDA
    cudaStream_t stream;
    cudaEvent_t *ev;    /* ev[i]: recorded at call i */
    cudaEvent_t ev_start, ev_bwd_end, ev_fin;
#endif
} prof_t;

/* The net's grads_ready hook: note the call, then hand it to DDP. */
static void prof_hook(void *ctx, size_t ready_from) {
    prof_t *p = ctx;
    if (p->n == p->cap && !p->oom) {
        int cap = p->cap ? 2 * p->cap : 256;
        int64_t *off = realloc(p->off, (size_t)cap * sizeof *off);
        if (off) p->off = off;
        double *host = realloc(p->host, (size_t)cap * sizeof *host);
        if (host) p->host = host;
        bool ok = off && host;
#ifdef RUNNER_HAVE_CUDA
        if (ok && p->gpu) {
            cudaEvent_t *ev = realloc(p->ev, (size_t)cap * sizeof *ev);
            if (ev) {
                p->ev = ev;
                for (int i = p->cap; i < cap; i++)
                    if (cudaEventCreate(&ev[i]) != cudaSuccess) ok = false;
            } else ok = false;
        }
#endif
        if (ok) p->cap = cap;
        else p->oom = true;
    }
    if (p->n < p->cap) {
        p->off[p->n] = (int64_t)ready_from;
        p->host[p->n] = now_s() - p->t0;
#ifdef RUNNER_HAVE_CUDA
        if (p->gpu) cudaEventRecord(p->ev[p->n], p->stream);
#endif
        p->n++;
    }
    ddp_grads_ready(p->ddp, ready_from);
}

static void prof_free(prof_t *p) {
#ifdef RUNNER_HAVE_CUDA
    if (p->gpu) {
        for (int i = 0; i < p->cap; i++) cudaEventDestroy(p->ev[i]);
        if (p->ev_start) cudaEventDestroy(p->ev_start);
        if (p->ev_bwd_end) cudaEventDestroy(p->ev_bwd_end);
        if (p->ev_fin) cudaEventDestroy(p->ev_fin);
    }
    free(p->ev);
#endif
    free(p->off);
    free(p->host);
}

/* Seconds from ev_start to ev on the device (after a sync). */
#ifdef RUNNER_HAVE_CUDA
static double ev_since(prof_t *p, cudaEvent_t ev) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, p->ev_start, ev) != cudaSuccess) return NAN;
    return ms * 1e-3;
}
#endif

int ddp_record(rank_ctx_t *c, err_t *e) {
    const opts_t *o = c->o;
    int batch = o->ddp_batch, rc = -1, steps = o->ddp_steps;
    net_t *net = resnet_build(o->ddp_arch, 3, o->classes, false, e);
    optim_t *opt = NULL;
    ddp_t *d = NULL;
    layout_t L = {0};
    prof_t p = {0};
    float *img = NULL;
    int32_t *labels = NULL;
    double *step_s = calloc((size_t)steps, sizeof(double)), *fwd_s = calloc((size_t)steps, sizeof(double));
    double *bwd_s = calloc((size_t)steps, sizeof(double)), *fin_s = calloc((size_t)steps, sizeof(double));
    double *comm_end_s = calloc((size_t)steps, sizeof(double));
    double *ready = NULL;   /* steps x calls */
    int calls = -1;
    bool same_calls = true;
    if (!step_s || !fwd_s || !bwd_s || !fin_s || !comm_end_s) { err_set(e, ERR_RUNTIME, "out of memory"); goto done; }
    if (!net || net_bind(net, c->be, batch, 32, 32, DT_F32, e) < 0 || net_init(net, 0, e) < 0) goto done;
    if (layout_of(net, &L, e) < 0) goto done;
    optim_opts_t oo = {0};
    oo.kind = OPTIM_SGD;
    oo.momentum = 0.9;
    oo.weight_decay = 5e-4;
    if (!(opt = optim_create(net, &oo, e))) goto done;
    ddp_opts_t dopt = {.bucket_mb = o->ddp_bucket_mb, .first_bucket_mb = 1};
    if (!(d = ddp_create(c->comm, c->be, net_grads(net), L.n, L.off, L.nt, &dopt, e))) goto done;
    if (ddp_broadcast_initial(d, net_params(net), L.n, net_buffers(net), (int64_t)net_num_buffers(net), e) < 0)
        goto done;
    size_t npix = (size_t)batch * 32 * 32 * 3;
    img = malloc(npix * sizeof *img);
    labels = malloc((size_t)batch * sizeof *labels);
    if (!img || !labels) { err_set(e, ERR_RUNTIME, "out of memory"); goto done; }
    rng_t r = rng_make(1, RNG_STREAM_MISC, (uint64_t)c->rank, 0);
    for (size_t i = 0; i < npix; i++) img[i] = rng_uniform(&r) * 4.0f - 2.0f;
    for (int i = 0; i < batch; i++) labels[i] = (int32_t)rng_below(&r, (uint32_t)o->classes);
    if (net_upload_input(net, img, batch, e) < 0) goto done;
    p.ddp = d;
    p.be = c->be;
    p.gpu = on_gpu(c);
#ifdef RUNNER_HAVE_CUDA
    if (p.gpu) {
        p.stream = (cudaStream_t)cuda_backend_stream(c->be);
        CUCHK(cudaEventCreate(&p.ev_start));
        CUCHK(cudaEventCreate(&p.ev_bwd_end));
        CUCHK(cudaEventCreate(&p.ev_fin));
    }
#endif
    net_hooks_t hooks = {.ctx = &p, .grads_ready = prof_hook};
    for (int s = -o->ddp_warmup; s < steps; s++) {
        if (s == 0) {
            ddp_timing_t junk;
            ddp_take_timing(d, &junk);
        }
        if (comm_barrier(c->comm, e) < 0) goto done;
        double t0 = now_s();
        net_loss_out_t out;
        if (net_zero_grads(net, e) < 0 ||
            ddp_sync_buffers(d, net_buffers(net), (int64_t)net_num_buffers(net), e) < 0 ||
            net_forward(net, net_input(net), batch, true, NULL, e) < 0 ||
            net_loss(net, labels, 0.0f, 1.0f / (float)batch, &out, e) < 0)
            goto done;
        if (c->be->ops->sync(c->be) < 0) { fail_be(c, e, "sync"); goto done; }
        double t1 = now_s();
        p.n = 0;
        p.t0 = t1;
        ddp_begin_backward(d);
#ifdef RUNNER_HAVE_CUDA
        if (p.gpu) CUCHK(cudaEventRecord(p.ev_start, p.stream));
#endif
        if (net_backward(net, &hooks, e) < 0) {
            if (ddp_last_error(d)->code) *e = *ddp_last_error(d);
            goto done;
        }
        double t2 = now_s();
#ifdef RUNNER_HAVE_CUDA
        if (p.gpu) CUCHK(cudaEventRecord(p.ev_bwd_end, p.stream));
#endif
        if (ddp_finish_step(d, e) < 0) goto done;
        double t3 = now_s();
#ifdef RUNNER_HAVE_CUDA
        if (p.gpu) CUCHK(cudaEventRecord(p.ev_fin, p.stream));
#endif
        if (optim_step(opt, 0.01, e) < 0) goto done;
        if (c->be->ops->sync(c->be) < 0) { fail_be(c, e, "sync"); goto done; }
        double t4 = now_s();
        if (p.oom) { err_set(e, ERR_RUNTIME, "out of memory (ready profile)"); goto done; }
        if (s < 0) continue;
        step_s[s] = t4 - t0;
        fwd_s[s] = t1 - t0;
        bwd_s[s] = t2 - t1;
        fin_s[s] = t3 - t2;
        comm_end_s[s] = t3 - t1;
        if (calls < 0) {
            calls = p.n;
            if (!(ready = calloc((size_t)steps * (size_t)(calls ? calls : 1), sizeof *ready))) {
                err_set(e, ERR_RUNTIME, "out of memory");
                goto done;
            }
        }
        if (p.n != calls) same_calls = false;
        for (int i = 0; i < calls && i < p.n; i++) ready[(size_t)i * steps + s] = p.host[i];
#ifdef RUNNER_HAVE_CUDA
        if (p.gpu) {   /* device times replace the host's queueing times */
            bwd_s[s] = ev_since(&p, p.ev_bwd_end);
            comm_end_s[s] = ev_since(&p, p.ev_fin);
            for (int i = 0; i < calls && i < p.n; i++) ready[(size_t)i * steps + s] = ev_since(&p, p.ev[i]);
        }
#endif
    }
    ddp_timing_t tm;
    ddp_take_timing(d, &tm);
    if (c->rank == 0) {
        int nb = ddp_bucket_count(d);
        ddp_bucket_time_t *bt = calloc((size_t)nb, sizeof *bt);
        ddp_step_times_t stt = {0};
        if (!bt) { err_set(e, ERR_RUNTIME, "out of memory"); goto done; }
        ddp_last_timeline(d, &stt, bt);
        double sum_step = 0;
        for (int s = 0; s < steps; s++) sum_step += step_s[s];
        FILE *f = c->rows;
        row_begin(c, "ddp_step");
        kstr(f, "arch", o->ddp_arch);
        kint(f, "classes", o->classes);
        kint(f, "batch_per_rank", batch);
        kstr(f, "precision", p.gpu ? (o->tf32 ? "tf32" : "fp32") : "fp32");
        knum(f, "bucket_mb", o->ddp_bucket_mb);
        kint(f, "params", L.n);
        kint(f, "steps", steps);
        kint(f, "warmup", o->ddp_warmup);
        kint(f, "threads_per_rank", c->be->threads);
        kstr(f, "clock", p.gpu ? "backward, ready_profile, comm_end: CUDA events on the compute stream; "
             "others host wall clock" : "host wall clock (the CPU backend runs synchronously)");
        double allreduce_per_step = tm.allreduce_s / steps, exposed_per_step = tm.exposed_s / steps;
        knum(f, "step_seconds", median(step_s, steps));
        knum(f, "forward_seconds", median(fwd_s, steps));
        knum(f, "backward_seconds", median(bwd_s, steps));
        knum(f, "finish_wait_seconds", median(fin_s, steps));
        knum(f, "comm_end_seconds", median(comm_end_s, steps));
        knum(f, "comm_allreduce_seconds", tm.allreduce_s);
        knum(f, "comm_exposed_seconds", tm.exposed_s);
        knum(f, "allreduce_seconds_per_step", allreduce_per_step);
        knum(f, "exposed_seconds_per_step", exposed_per_step);
        knum(f, "comm_exposed_fraction", sum_step > 0 ? tm.exposed_s / sum_step : NAN);
        knum(f, "hidden_fraction", tm.allreduce_s > 0 ? fmax(0.0, 1.0 - tm.exposed_s / tm.allreduce_s) : NAN);
        kint(f, "buckets_per_step", steps ? tm.buckets / steps : 0);
        fprintf(f, ", \"ready_profile\": [");
        if (calls > 0 && !same_calls) calls = p.n < calls ? p.n : calls;
        for (int i = 0; i < calls; i++) {
            double v = median(ready + (size_t)i * steps, steps);
            fprintf(f, "%s[%lld, %.6g]", i ? ", " : "", (long long)p.off[i], v);
        }
        fprintf(f, "], \"bucket_timeline_last_step\": {\"finish_enter_s\": %.6g, \"finish_exit_s\": %.6g, "
                "\"clock\": \"host, seconds since ddp_begin_backward (called just before net_backward)\", "
                "\"buckets\": [", stt.finish_enter_s, stt.finish_exit_s);
        for (int i = 0; i < nb; i++) {
            int64_t b, en;
            ddp_bucket_range(d, i, &b, &en);
            fprintf(f, "%s{\"begin\": %lld, \"end\": %lld, \"ready_s\": %.6g, \"started_s\": %.6g, "
                    "\"op_s\": %.6g, \"done_s\": %.6g}", i ? ", " : "", (long long)b, (long long)en,
                    bt[i].ready_s, bt[i].started_s, bt[i].op_s, bt[i].done_s);
        }
        fprintf(f, "]}, \"buckets_by_mb\": {");
        int64_t *bb = calloc((size_t)L.nt + 2, sizeof *bb), *be_ = calloc((size_t)L.nt + 2, sizeof *be_);
        for (int k = 0; k < N_BMB && bb && be_; k++) {
            int n = ddp_plan_buckets(L.n, L.off, L.nt, 1, bucket_mbs[k], bb, be_);
            fprintf(f, "%s\"%g\": [", k ? ", " : "", bucket_mbs[k]);
            for (int i = 0; i < n; i++) fprintf(f, "%s[%lld, %lld]", i ? ", " : "", (long long)bb[i], (long long)be_[i]);
            fputs("]", f);
        }
        free(bb);
        free(be_);
        fputs("}}", f);
        fflush(f);
        printf("  %-8s ddp %s batch %d x %d ranks, bucket %g MiB: step %.1f ms (forward %.1f, backward %.1f, "
               "finish wait %.1f); all-reduce %.1f ms/step, exposed %.1f ms/step, hidden %.0f%%\n",
               comm_label(c), o->ddp_arch, batch, c->world, o->ddp_bucket_mb, median(step_s, steps) * 1e3,
               median(fwd_s, steps) * 1e3, median(bwd_s, steps) * 1e3, median(fin_s, steps) * 1e3,
               allreduce_per_step * 1e3, exposed_per_step * 1e3,
               tm.allreduce_s > 0 ? 100.0 * fmax(0.0, 1.0 - tm.exposed_s / tm.allreduce_s) : 0.0);
        fflush(stdout);
        free(bt);
    }
    rc = 0;
done:
    prof_free(&p);
    free(ready);
    free(step_s);
    free(fwd_s);
    free(bwd_s);
    free(fin_s);
    free(comm_end_s);
    free(img);
    free(labels);
    free(L.off);
    ddp_free(d);
    optim_free(opt);
    net_free(net);
    return rc;
}
