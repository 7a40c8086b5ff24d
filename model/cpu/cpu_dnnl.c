/* cpu_dnnl.c: convolutions through oneDNN for the CPU backend.
 *
 * One primitive per (shape, direction, variant) is created on first use and cached in the
 * context; later calls only swap data pointers. Variants: direct convolution on NHWC;
 * direct with activations in oneDNN's blocked layout; Winograd (blocked). The caller's
 * tensors are NHWC activations (oneDNN "acdb") and KRSC weights ("ohwi", or "gohwi"
 * with groups: the 5-D (g, k/g, c/g, r, s) weights of a grouped convolution); each of the
 * three tensors of a call is reordered into the layout the primitive prefers when that
 * differs (always for weights, which change every step; for activations only in the
 * blocked variants; cpu_conv.c says when each variant is used). Backward filter writes a
 * private buffer that a reorder with a sum post-op adds into the caller's gradient
 * (dw += ...). oneDNN's OpenMP loops are statically scheduled, so every variant gives the
 * same bits on every run with the same thread count.
 * Not here: AMP rounding and the choice of engine (cpu_conv.c).
 */
#ifdef RUNNER_HAVE_DNNL
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "model/cpu/cpu_impl.h"

#define DNNL_OK(call, e) do { dnnl_status_t st_ = (call); if (st_ != dnnl_success) \
    return err_set((e), ERR_RUNTIME, "oneDNN: %s failed (status %d) at %s:%d", #call, \
                   (int)st_, __FILE__, __LINE__); } while (0)

/* One tensor of a cached convolution. */
typedef struct dnnl_slot {
    int arg;                      /* DNNL_ARG_* of the convolution */
    bool output;
    dnnl_memory_t user, prim;     /* caller layout / primitive layout (same object if equal) */
    dnnl_primitive_t reorder;     /* user->prim (input) or prim->user (output); NULL if equal */
    size_t prim_bytes;
} dnnl_slot_t;

typedef struct dnnl_entry {
    conv_shape_t s;
    int which;                    /* 0 fwd, 1 bwd data, 2 bwd filter */
    int variant;                  /* CPU_DNNL_* */
    bool ok;                      /* false: oneDNN has no (non-reference) kernel for it */
    char impl[48];                /* oneDNN's implementation name ("jit:avx2", ...) */
    dnnl_primitive_t conv;
    dnnl_slot_t slot[3];          /* the two inputs, then the output */
} dnnl_entry_t;

struct cpu_dnnl {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_entry_t *entries;
    int count, cap;
    void *buf[3];                 /* per slot: data in the primitive's layout, grow-only */
    size_t buf_bytes[3];
    int threads;
    void (*omp_set_num_threads)(int);   /* libgomp's, looked up at run time; may be NULL */
};

static void entry_free(dnnl_entry_t *en) {
    if (en->conv) dnnl_primitive_destroy(en->conv);
    for (int i = 0; i < 3; i++) {
        dnnl_slot_t *sl = &en->slot[i];
        if (sl->reorder) dnnl_primitive_destroy(sl->reorder);
        if (sl->prim && sl->prim != sl->user) dnnl_memory_destroy(sl->prim);
        if (sl->user) dnnl_memory_destroy(sl->user);
    }
}

cpu_dnnl_t *cpu_dnnl_create(int threads, err_t *e) {
    cpu_dnnl_t *d = calloc(1, sizeof *d);
    if (!d) {
        err_set(e, ERR_RUNTIME, "cpu backend: out of memory");
        return NULL;
    }
    d->threads = threads;
    void *sym = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (sym) memcpy(&d->omp_set_num_threads, &sym, sizeof d->omp_set_num_threads);
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
    for (int i = 0; i < 3; i++) free(d->buf[i]);
    free(d);
}

/* Fills a slot: memory objects for the user layout and the primitive layout, and the
 * reorder between them when they differ (or always, with a sum post-op, when
 * accumulate is set). */
static int slot_build(cpu_dnnl_t *d, dnnl_slot_t *sl, int arg, bool output, bool accumulate,
                      const dnnl_memory_desc_t *user_md, const dnnl_memory_desc_t *prim_md,
                      err_t *e) {
    sl->arg = arg;
    sl->output = output;
    sl->prim_bytes = dnnl_memory_desc_get_size(prim_md);
    DNNL_OK(dnnl_memory_create(&sl->user, user_md, d->engine, DNNL_MEMORY_NONE), e);
    if (!accumulate && dnnl_memory_desc_equal(user_md, prim_md)) {
        sl->prim = sl->user;
        return 0;
    }
    DNNL_OK(dnnl_memory_create(&sl->prim, prim_md, d->engine, DNNL_MEMORY_NONE), e);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (accumulate) {
        DNNL_OK(dnnl_primitive_attr_create(&attr), e);
        DNNL_OK(dnnl_post_ops_create(&po), e);
        DNNL_OK(dnnl_post_ops_append_sum(po, 1.0f), e);
        DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, po), e);
    }
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_status_t st = output
        ? dnnl_reorder_primitive_desc_create(&rpd, prim_md, d->engine, user_md, d->engine, attr)
        : dnnl_reorder_primitive_desc_create(&rpd, user_md, d->engine, prim_md, d->engine, attr);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    DNNL_OK(st, e);
    st = dnnl_primitive_create(&sl->reorder, rpd);
    dnnl_primitive_desc_destroy(rpd);
    DNNL_OK(st, e);
    return 0;
}

/* Whether oneDNN's implementation name is one of its reference (plain C loop) kernels:
 * correct but 10-100x slower than im2col + OpenBLAS, so such a shape falls back. */
static bool is_reference_impl(const char *impl) {
    return !strncmp(impl, "ref", 3) || strstr(impl, ":ref") != NULL;
}

/* Creates the primitive and its three slots for (s, which, variant) into en. When oneDNN
 * implements it only with a reference kernel or not at all (Winograd below AVX-512, some
 * directions at SSE4.1, ...), en->ok stays false and 0 is returned: the caller falls
 * back to another variant or engine. */
static int entry_build(cpu_dnnl_t *d, const conv_shape_t *s, int which, int variant,
                       dnnl_entry_t *en, err_t *e) {
    memset(en, 0, sizeof *en);
    en->s = *s;
    en->which = which;
    en->variant = variant;
    bool blocked = variant != CPU_DNNL_NHWC;
    dnnl_alg_kind_t alg = variant == CPU_DNNL_WINOGRAD ? dnnl_convolution_winograd
                                                       : dnnl_convolution_direct;
    /* grouped: weights (g, k/g, c/g, r, s), our KRSC being oneDNN's gohwi */
    int g = conv_groups(s), wnd = g > 1 ? 5 : 4;
    dnnl_dims_t xd = {s->n, s->c, s->h, s->w}, wd = {s->k, s->c, s->r, s->s};
    dnnl_dims_t wgd = {g, s->k / g, s->c / g, s->r, s->s};
    dnnl_dims_t yd = {s->n, s->k, s->p, s->q};
    dnnl_memory_desc_t xu, wu, yu, xa, wa, ya;
    dnnl_format_tag_t act = blocked ? dnnl_format_tag_any : dnnl_nhwc;
    DNNL_OK(dnnl_memory_desc_init_by_tag(&xu, 4, xd, dnnl_f32, dnnl_nhwc), e);
    DNNL_OK(dnnl_memory_desc_init_by_tag(&wu, wnd, g > 1 ? wgd : wd, dnnl_f32,
                                         g > 1 ? dnnl_gohwi : dnnl_ohwi), e);
    DNNL_OK(dnnl_memory_desc_init_by_tag(&yu, 4, yd, dnnl_f32, dnnl_nhwc), e);
    DNNL_OK(dnnl_memory_desc_init_by_tag(&xa, 4, xd, dnnl_f32, act), e);
    DNNL_OK(dnnl_memory_desc_init_by_tag(&wa, wnd, g > 1 ? wgd : wd, dnnl_f32, dnnl_format_tag_any), e);
    DNNL_OK(dnnl_memory_desc_init_by_tag(&ya, 4, yd, dnnl_f32, act), e);
    dnnl_dims_t strides = {s->stride, s->stride}, pl = {s->pad, s->pad};
    /* right padding so that the output size is exactly p x q */
    dnnl_dims_t pr = {(s->p - 1) * s->stride + s->r - s->h - s->pad,
                      (s->q - 1) * s->stride + s->s - s->w - s->pad};
    dnnl_convolution_desc_t fwd_desc, desc;
    dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
    dnnl_status_t st = dnnl_convolution_forward_desc_init(&fwd_desc, dnnl_forward_training, alg,
                                                          &xa, &wa, NULL, &ya, strides, pl, pr);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&fwd_pd, &fwd_desc, NULL, d->engine, NULL);
    if (st == dnnl_success && which == 0) {
        pd = fwd_pd;
    } else if (st == dnnl_success) {
        st = which == 1
            ? dnnl_convolution_backward_data_desc_init(&desc, alg, &xa, &wa,
                                                       &ya, strides, pl, pr)
            : dnnl_convolution_backward_weights_desc_init(&desc, alg, &xa,
                                                          &wa, NULL, &ya, strides, pl, pr);
        if (st == dnnl_success)
            st = dnnl_primitive_desc_create(&pd, &desc, NULL, d->engine, fwd_pd);
        dnnl_primitive_desc_destroy(fwd_pd);
    }
    if (st == dnnl_unimplemented) return 0;
    if (st != dnnl_success)
        return err_set(e, ERR_RUNTIME, "oneDNN: cannot create the conv %s primitive descriptor "
                       "(status %d)", which == 0 ? "forward" : which == 1 ? "backward-data"
                       : "backward-weights", (int)st);
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
        !impl)
        impl = "?";
    snprintf(en->impl, sizeof en->impl, "%s", impl);
    if (is_reference_impl(en->impl)) {
        dnnl_primitive_desc_destroy(pd);
        return 0;
    }
    const dnnl_memory_desc_t *src = dnnl_primitive_desc_query_md(
        pd, which == 1 ? dnnl_query_diff_src_md : dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *dst = dnnl_primitive_desc_query_md(
        pd, which == 0 ? dnnl_query_dst_md : dnnl_query_diff_dst_md, 0);
    const dnnl_memory_desc_t *wts = dnnl_primitive_desc_query_md(
        pd, which == 2 ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
    dnnl_memory_desc_t srcm = *src, dstm = *dst, wtsm = *wts;
    st = dnnl_primitive_create(&en->conv, pd);
    dnnl_primitive_desc_destroy(pd);
    DNNL_OK(st, e);
    int rc = 0;
    if (which == 0) {
        rc |= slot_build(d, &en->slot[0], DNNL_ARG_SRC, false, false, &xu, &srcm, e);
        rc |= slot_build(d, &en->slot[1], DNNL_ARG_WEIGHTS, false, false, &wu, &wtsm, e);
        rc |= slot_build(d, &en->slot[2], DNNL_ARG_DST, true, false, &yu, &dstm, e);
    } else if (which == 1) {
        rc |= slot_build(d, &en->slot[0], DNNL_ARG_DIFF_DST, false, false, &yu, &dstm, e);
        rc |= slot_build(d, &en->slot[1], DNNL_ARG_WEIGHTS, false, false, &wu, &wtsm, e);
        rc |= slot_build(d, &en->slot[2], DNNL_ARG_DIFF_SRC, true, false, &xu, &srcm, e);
    } else {
        rc |= slot_build(d, &en->slot[0], DNNL_ARG_SRC, false, false, &xu, &srcm, e);
        rc |= slot_build(d, &en->slot[1], DNNL_ARG_DIFF_DST, false, false, &yu, &dstm, e);
        rc |= slot_build(d, &en->slot[2], DNNL_ARG_DIFF_WEIGHTS, true, true, &wu, &wtsm, e);
    }
    if (rc) return -1;
    en->ok = true;
    return 0;
}

/* The cached entry for (s, which, variant), building it on first use. */
static dnnl_entry_t *entry_get(cpu_dnnl_t *d, const conv_shape_t *s, int which, int variant,
                               err_t *e) {
    for (int i = 0; i < d->count; i++) {
        dnnl_entry_t *en = &d->entries[i];
        if (en->which == which && en->variant == variant && !memcmp(&en->s, s, sizeof *s))
            return en;
    }
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
    if (entry_build(d, s, which, variant, en, e) != 0) {
        entry_free(en);
        return NULL;
    }
    d->count++;
    return en;
}

/* Slot i's buffer for data in the primitive's layout. */
static void *slot_buffer(cpu_dnnl_t *d, int i, size_t bytes, err_t *e) {
    if (bytes <= d->buf_bytes[i]) return d->buf[i];
    free(d->buf[i]);
    d->buf_bytes[i] = 0;
    d->buf[i] = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!d->buf[i]) {
        err_set(e, ERR_RUNTIME, "cpu backend: out of memory (%zu-byte conv buffer)", bytes);
        return NULL;
    }
    d->buf_bytes[i] = bytes;
    return d->buf[i];
}

static int exec(cpu_dnnl_t *d, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args,
                err_t *e) {
    DNNL_OK(dnnl_primitive_execute(p, d->stream, nargs, args), e);
    DNNL_OK(dnnl_stream_wait(d->stream), e);
    return 0;
}

int cpu_dnnl_conv(cpu_backend_t *c, int which, const conv_shape_t *s, int variant,
                  const float *a, const float *b, float *out) {
    cpu_dnnl_t *d = c->dnnl;
    err_t *e = &c->base.err;
    /* oneDNN sizes its parallel regions by the calling thread's OpenMP setting, which
     * another backend in the process may have changed */
    if (d->omp_set_num_threads) d->omp_set_num_threads(d->threads);
    dnnl_entry_t *en = entry_get(d, s, which, variant, e);
    if (!en) return -1;
    if (!en->ok)
        return err_set(e, ERR_RUNTIME, "oneDNN: no kernel for this conv %s (variant %d); the "
                       "engine choice should have fallen back", which == 0 ? "forward"
                       : which == 1 ? "backward-data" : "backward-weights", variant);
    void *ptr[3] = {(void *)a, (void *)b, out};
    dnnl_exec_arg_t args[3];
    for (int i = 0; i < 3; i++) {
        dnnl_slot_t *sl = &en->slot[i];
        DNNL_OK(dnnl_memory_set_data_handle(sl->user, ptr[i]), e);
        if (sl->prim != sl->user) {
            void *buf = slot_buffer(d, i, sl->prim_bytes, e);
            if (!buf) return -1;
            DNNL_OK(dnnl_memory_set_data_handle(sl->prim, buf), e);
            if (!sl->output) {
                dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, sl->user}, {DNNL_ARG_TO, sl->prim}};
                if (exec(d, sl->reorder, 2, r, e) != 0) return -1;
            }
        }
        args[i].arg = sl->arg;
        args[i].memory = sl->prim;
    }
    if (exec(d, en->conv, 3, args, e) != 0) return -1;
    dnnl_slot_t *o = &en->slot[2];
    if (o->prim != o->user) {
        dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, o->prim}, {DNNL_ARG_TO, o->user}};
        if (exec(d, o->reorder, 2, r, e) != 0) return -1;
    }
    return 0;
}
int cpu_dnnl_query(cpu_dnnl_t *d, const conv_shape_t *s, int which, int variant,
                   const char **impl, err_t *e) {
    /* oneDNN splits a primitive's work for the thread count in force when it is created:
     * created here with another count, it would sum in another order than the same shape
     * created by a conv call, and results would depend on which came first */
    if (d->omp_set_num_threads) d->omp_set_num_threads(d->threads);
    dnnl_entry_t *en = entry_get(d, s, which, variant, e);
    if (!en) return -1;
    if (impl) *impl = en->impl;
    return en->ok ? 1 : 0;
}

const char *cpu_dnnl_isa_name(void) {
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "all";   /* no x86 ISA restriction reported (other architectures) */
    }
}
bool cpu_dnnl_isa_is_avx2(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return isa == dnnl_cpu_isa_avx || isa == dnnl_cpu_isa_avx2 || isa == dnnl_cpu_isa_avx2_vnni;
}
const char *cpu_dnnl_version(void) {
#define DNNL_STR_(x) #x
#define DNNL_STR(x) DNNL_STR_(x)
    /* the headers' version; the library loaded at run time is the same package's */
    return DNNL_STR(DNNL_VERSION_MAJOR) "." DNNL_STR(DNNL_VERSION_MINOR) "."
           DNNL_STR(DNNL_VERSION_PATCH);
}
#else
typedef int cpu_dnnl_unused_t;   /* keeps the translation unit non-empty without oneDNN */
#endif
