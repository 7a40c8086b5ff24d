/* cpu_dnnl.c: convolutions through oneDNN for the CPU backend.
 *
 * Activations are passed to oneDNN as they are (NHWC, oneDNN's "acdb"), weights are
 * reordered from KRSC into whatever blocked layout the chosen primitive prefers. One
 * primitive per (shape, direction) is created on first use and cached in the context;
 * later calls only swap data pointers. Backward filter writes a private buffer that a
 * reorder with a sum post-op adds into the caller's KRSC gradient (dw += ...).
 * oneDNN's direct algorithm is used (never Winograd), with OpenMP's static scheduling,
 * so results are the same bits every run. Not here: AMP rounding (cpu_conv.c).
 */
#ifdef RUNNER_HAVE_DNNL
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "model/cpu/cpu_impl.h"

#define DNNL_OK(call, e) do { dnnl_status_t st_ = (call); if (st_ != dnnl_success) \
    return err_set((e), ERR_RUNTIME, "oneDNN: %s failed (status %d) at %s:%d", #call, \
                   (int)st_, __FILE__, __LINE__); } while (0)

/* One cached convolution: the primitive, the weight reorder, and memory objects whose
 * data handles are set on each call. */
typedef struct dnnl_entry {
    conv_shape_t s;
    int which;                    /* 0 fwd, 1 bwd data, 2 bwd filter */
    dnnl_primitive_t conv, reorder;   /* reorder NULL when the layout is KRSC already */
    dnnl_memory_t act_in, act_out;    /* fwd: src, dst; bwd data: diff_dst, diff_src;
                                       * bwd filter: src, diff_dst */
    dnnl_memory_t wt, wt_user;    /* weights in the primitive's layout / in KRSC */
    size_t wt_bytes;
} dnnl_entry_t;

struct cpu_dnnl {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_entry_t *entries;
    int count, cap;
    void *wbuf;                   /* weights in a blocked layout, grow-only */
    size_t wbuf_bytes;
};

static void entry_free(dnnl_entry_t *en) {
    if (en->conv) dnnl_primitive_destroy(en->conv);
    if (en->reorder) dnnl_primitive_destroy(en->reorder);
    if (en->act_in) dnnl_memory_destroy(en->act_in);
    if (en->act_out) dnnl_memory_destroy(en->act_out);
    if (en->wt) dnnl_memory_destroy(en->wt);
    if (en->wt_user) dnnl_memory_destroy(en->wt_user);
}

cpu_dnnl_t *cpu_dnnl_create(int threads, err_t *e) {
    (void)threads;   /* oneDNN follows OpenMP's thread count, set by cpu_backend.c */
    cpu_dnnl_t *d = calloc(1, sizeof *d);
    if (!d) {
        err_set(e, ERR_RUNTIME, "cpu backend: out of memory");
        return NULL;
    }
    if (dnnl_engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags) != dnnl_success) {
        err_set(e, ERR_RUNTIME, "oneDNN: cannot create the CPU engine/stream");
        cpu_dnnl_free(d);
        return NULL;
    }
    return d;
}

void cpu_dnnl_free(cpu_dnnl_t *d) {
    if (!d) return;
    for (int i = 0; i < d->count; i++) entry_free(&d->entries[i]);
    free(d->entries);
    if (d->stream) dnnl_stream_destroy(d->stream);
    if (d->engine) dnnl_engine_destroy(d->engine);
    free(d->wbuf);
    free(d);
}

/* Memory descriptors of the three tensors of s in the caller's layouts. */
static int user_mds(const conv_shape_t *s, dnnl_memory_desc_t *x, dnnl_memory_desc_t *w,
                    dnnl_memory_desc_t *y, dnnl_memory_desc_t *w_any, err_t *e) {
    dnnl_dims_t xd = {s->n, s->c, s->h, s->w}, wd = {s->k, s->c, s->r, s->s};
    dnnl_dims_t yd = {s->n, s->k, s->p, s->q};
    DNNL_OK(dnnl_memory_desc_init_by_tag(x, 4, xd, dnnl_f32, dnnl_nhwc), e);
    DNNL_OK(dnnl_memory_desc_init_by_tag(w, 4, wd, dnnl_f32, dnnl_ohwi), e);
    DNNL_OK(dnnl_memory_desc_init_by_tag(y, 4, yd, dnnl_f32, dnnl_nhwc), e);
    DNNL_OK(dnnl_memory_desc_init_by_tag(w_any, 4, wd, dnnl_f32, dnnl_format_tag_any), e);
    return 0;
}

/* Creates primitive + reorder + memory objects for (s, which) into en. */
static int entry_build(cpu_dnnl_t *d, const conv_shape_t *s, int which, dnnl_entry_t *en,
                       err_t *e) {
    memset(en, 0, sizeof *en);
    en->s = *s;
    en->which = which;
    dnnl_memory_desc_t xmd, wmd, ymd, wany;
    if (user_mds(s, &xmd, &wmd, &ymd, &wany, e) != 0) return -1;
    dnnl_dims_t strides = {s->stride, s->stride}, pl = {s->pad, s->pad};
    /* right padding so that the output size matches p, q exactly */
    dnnl_dims_t pr = {(s->p - 1) * s->stride + s->r - s->h - s->pad,
                      (s->q - 1) * s->stride + s->s - s->w - s->pad};
    dnnl_convolution_desc_t fwd_desc, desc;
    DNNL_OK(dnnl_convolution_forward_desc_init(&fwd_desc, dnnl_forward_training,
                                               dnnl_convolution_direct, &xmd, &wany, NULL,
                                               &ymd, strides, pl, pr), e);
    dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
    DNNL_OK(dnnl_primitive_desc_create(&fwd_pd, &fwd_desc, NULL, d->engine, NULL), e);
    if (which == 0) {
        pd = fwd_pd;
        fwd_pd = NULL;
    } else {
        dnnl_status_t st;
        if (which == 1)
            st = dnnl_convolution_backward_data_desc_init(&desc, dnnl_convolution_direct, &xmd,
                                                          &wany, &ymd, strides, pl, pr);
        else
            st = dnnl_convolution_backward_weights_desc_init(&desc, dnnl_convolution_direct,
                                                             &xmd, &wany, NULL, &ymd, strides,
                                                             pl, pr);
        if (st == dnnl_success)
            st = dnnl_primitive_desc_create(&pd, &desc, NULL, d->engine, fwd_pd);
        dnnl_primitive_desc_destroy(fwd_pd);
        if (st != dnnl_success)
            return err_set(e, ERR_RUNTIME, "oneDNN: cannot create conv %s primitive (status %d)",
                           which == 1 ? "backward-data" : "backward-weights", (int)st);
    }
    dnnl_query_t wq = which == 2 ? dnnl_query_diff_weights_md : dnnl_query_weights_md;
    const dnnl_memory_desc_t *pw = dnnl_primitive_desc_query_md(pd, wq, 0);
    dnnl_memory_desc_t wprim = *pw;
    dnnl_status_t st = dnnl_primitive_create(&en->conv, pd);
    dnnl_primitive_desc_destroy(pd);
    DNNL_OK(st, e);
    DNNL_OK(dnnl_memory_create(&en->act_in, which == 1 ? &ymd : &xmd, d->engine,
                               DNNL_MEMORY_NONE), e);
    DNNL_OK(dnnl_memory_create(&en->act_out, which == 0 ? &ymd : which == 1 ? &xmd : &ymd,
                               d->engine, DNNL_MEMORY_NONE), e);
    DNNL_OK(dnnl_memory_create(&en->wt, &wprim, d->engine, DNNL_MEMORY_NONE), e);
    DNNL_OK(dnnl_memory_create(&en->wt_user, &wmd, d->engine, DNNL_MEMORY_NONE), e);
    en->wt_bytes = dnnl_memory_desc_get_size(&wprim);
    /* The reorder: KRSC -> primitive layout (fwd, bwd data), or primitive layout -> KRSC
     * adding into the destination (bwd filter). Needed for bwd filter even when the
     * layouts agree, because the primitive overwrites and the op accumulates. */
    bool same = dnnl_memory_desc_equal(&wprim, &wmd);
    if (which == 2 || !same) {
        dnnl_primitive_attr_t attr = NULL;
        dnnl_post_ops_t po = NULL;
        if (which == 2) {
            DNNL_OK(dnnl_primitive_attr_create(&attr), e);
            DNNL_OK(dnnl_post_ops_create(&po), e);
            DNNL_OK(dnnl_post_ops_append_sum(po, 1.0f), e);
            DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, po), e);
        }
        dnnl_primitive_desc_t rpd = NULL;
        st = which == 2
            ? dnnl_reorder_primitive_desc_create(&rpd, &wprim, d->engine, &wmd, d->engine, attr)
            : dnnl_reorder_primitive_desc_create(&rpd, &wmd, d->engine, &wprim, d->engine, attr);
        if (po) dnnl_post_ops_destroy(po);
        if (attr) dnnl_primitive_attr_destroy(attr);
        DNNL_OK(st, e);
        st = dnnl_primitive_create(&en->reorder, rpd);
        dnnl_primitive_desc_destroy(rpd);
        DNNL_OK(st, e);
    }
    return 0;
}

/* The cached entry for (s, which), building it on first use. */
static dnnl_entry_t *entry_get(cpu_dnnl_t *d, const conv_shape_t *s, int which, err_t *e) {
    for (int i = 0; i < d->count; i++)
        if (d->entries[i].which == which && !memcmp(&d->entries[i].s, s, sizeof *s))
            return &d->entries[i];
    if (d->count == d->cap) {
        int cap = d->cap ? 2 * d->cap : 32;
        dnnl_entry_t *ne = realloc(d->entries, (size_t)cap * sizeof *ne);
        if (!ne) {
            err_set(e, ERR_RUNTIME, "cpu backend: out of memory for the oneDNN cache");
            return NULL;
        }
        d->entries = ne;
        d->cap = cap;
    }
    dnnl_entry_t *en = &d->entries[d->count];
    if (entry_build(d, s, which, en, e) != 0) {
        entry_free(en);
        return NULL;
    }
    d->count++;
    return en;
}

/* A buffer for weights in the primitive's layout. */
static void *weight_buffer(cpu_dnnl_t *d, size_t bytes, err_t *e) {
    if (bytes <= d->wbuf_bytes) return d->wbuf;
    free(d->wbuf);
    d->wbuf_bytes = 0;
    d->wbuf = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!d->wbuf) {
        err_set(e, ERR_RUNTIME, "cpu backend: out of memory (%zu bytes of conv weights)", bytes);
        return NULL;
    }
    d->wbuf_bytes = bytes;
    return d->wbuf;
}

static int exec(cpu_dnnl_t *d, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args,
                err_t *e) {
    DNNL_OK(dnnl_primitive_execute(p, d->stream, nargs, args), e);
    DNNL_OK(dnnl_stream_wait(d->stream), e);
    return 0;
}

int cpu_dnnl_conv(cpu_backend_t *c, int which, const conv_shape_t *s, const float *a,
                  const float *b, float *out) {
    cpu_dnnl_t *d = c->dnnl;
    err_t *e = &c->base.err;
    dnnl_entry_t *en = entry_get(d, s, which, e);
    if (!en) return -1;
    if (which == 2) {
        /* a = x, b = dy, out = dw (KRSC, accumulated) */
        void *wb = weight_buffer(d, en->wt_bytes, e);
        if (!wb) return -1;
        DNNL_OK(dnnl_memory_set_data_handle(en->act_in, (void *)a), e);
        DNNL_OK(dnnl_memory_set_data_handle(en->act_out, (void *)b), e);
        DNNL_OK(dnnl_memory_set_data_handle(en->wt, wb), e);
        DNNL_OK(dnnl_memory_set_data_handle(en->wt_user, out), e);
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, en->act_in}, {DNNL_ARG_DIFF_DST, en->act_out},
                                   {DNNL_ARG_DIFF_WEIGHTS, en->wt}};
        if (exec(d, en->conv, 3, args, e) != 0) return -1;
        dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, en->wt}, {DNNL_ARG_TO, en->wt_user}};
        return exec(d, en->reorder, 2, rargs, e);
    }
    /* fwd: a = x, b = w, out = y; bwd data: a = dy, b = w, out = dx */
    DNNL_OK(dnnl_memory_set_data_handle(en->wt_user, (void *)b), e);
    dnnl_memory_t wt = en->wt_user;
    if (en->reorder) {
        void *wb = weight_buffer(d, en->wt_bytes, e);
        if (!wb) return -1;
        DNNL_OK(dnnl_memory_set_data_handle(en->wt, wb), e);
        dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, en->wt_user}, {DNNL_ARG_TO, en->wt}};
        if (exec(d, en->reorder, 2, rargs, e) != 0) return -1;
        wt = en->wt;
    }
    DNNL_OK(dnnl_memory_set_data_handle(en->act_in, (void *)a), e);
    DNNL_OK(dnnl_memory_set_data_handle(en->act_out, out), e);
    dnnl_exec_arg_t args[3] = {
        {which == 0 ? DNNL_ARG_SRC : DNNL_ARG_DIFF_DST, en->act_in},
        {DNNL_ARG_WEIGHTS, wt},
        {which == 0 ? DNNL_ARG_DST : DNNL_ARG_DIFF_SRC, en->act_out}};
    return exec(d, en->conv, 3, args, e);
}
#else
typedef int cpu_dnnl_unused_t;   /* keeps the translation unit non-empty without oneDNN */
#endif
