/* conv_graph.cu: convolutions (and the fused conv + BN-statistics graphs) on cuDNN's
 * graph API, the C backend API of cudnn_graph.h (cudnnBackend*), not cudnn-frontend.
 *
 * Tensors. Activations NHWC as dims [n, c, h, w] with strides [h*w*c, 1, w*c, c];
 * filters KRSC as [k, c, r, s] with strides [r*s*c, 1, s*c, c]; per-channel vectors
 * [1, c, 1, 1]. Data fp32, fp16 or bf16, compute fp32 (conv, pointwise and reduction
 * ops), intermediates (virtual tensors) fp32. Each tensor's byte alignment is that of its
 * pointer (at most 16), so a plan is built per alignment pattern, as conv.cu's legacy
 * plans are; unique ids are 1..n in the pointer order of cg_kind_t, virtuals 100 + i.
 *
 * Plans. The first call of a (graph kind, shape, dtype, alignments) builds the operation
 * graph, asks the heuristics (CUDNN_HEUR_MODE_A, then FALLBACK if A gave nothing usable)
 * for engine configs and keeps those that pass the filters:
 *   - deterministic: no CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC (atomics in a reduction,
 *     split-K with atomic adds); deterministic mode thus keeps its meaning: the engine
 *     is the first usable one in the heuristic's order (a function of graph, device and
 *     library only), so every process picks the same one and repeats the bits. The
 *     kinds with per-channel reductions (CG_FPROP_STATS, CG_DGRAD_DBN,
 *     CG_DGRAD_DRELU_DBN) are not built at all in deterministic mode: the runtime-fusion
 *     engines add each thread block's partial sums into the zeroed outputs (hence the
 *     zeroing below, as cudnn-frontend's genStats sample does), an order that changes
 *     run to run, and carry no NONDETERMINISTIC note (the first GPU run: bf16 picked the
 *     same genStats engine with and without the filter, and a fused resnet20 step did not
 *     repeat its bits in fp16 / bf16, while fp32, where no such engine exists, did). The
 *     caller's unfused path, whose sums go in a fixed order, runs there;
 *   - never REDUCED_PRECISION_REDUCTION (half accumulation);
 *   - fp32 data without allow_tf32: no TENSOR_CORE or DOWN_CONVERT_INPUTS (TF32);
 * then finalizes execution plans in that order until one succeeds within the workspace
 * limit (1 GiB, at most a quarter of the free memory). Not deterministic: the first
 * CG_TUNE plans that finalize are timed on the given buffers (as cudnnFind does for the
 * legacy API) and the fastest kept; accumulating graphs (beta = 1) would add into their
 * output: the accumulating dgrad takes the first usable engine, or with the
 * dgrad_accum_tune option is timed into a zeroed scratch buffer of the output's size
 * (allocated for the timing only), and the fp32 wgrad (wgrad_f32, a weight-sized
 * output) always is. A runtime-compiled engine (the fusion engines:
 * NVRTC at finalize, about a second each) is taken only as the first candidate and then
 * alone, so a plan costs at most one compilation. A key with no usable engine is remembered as such
 * (cu_conv_graph_run returns 1, the caller runs its other path, and the backend's
 * notice says so once per graph kind).
 *
 * Variant packs. A layer's device pointers do not move after net_bind, so each distinct
 * (pointers, workspace) of a plan gets one finalized variant pack, kept with the plan and
 * reused on every later call: a call is one lookup and one cudnnBackendExecute. Packs are
 * rebuilt only when a pointer changes (a workspace that grew, a different layer). Nothing
 * allocates or synchronizes once every layer ran once, so steps can be recorded as CUDA
 * graphs. Reductions (genStats, sums) are zeroed (cudaMemsetAsync) before each run.
 *
 * Not here: the legacy API (conv.cu), what the fused sums become (fusion.cu), the
 * descriptors of each graph kind (conv_graph_ops.cu).
 */
#include "model/cuda/conv_graph.cuh"
#include "model/cuda/conv_graph_impl.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cuda/cuda_backend.h"
#include "model/cuda/cuda_impl.cuh"

enum { CG_MAX_PACKS = 64, CG_TUNE = 4, CG_MAX_CFG = 64, CG_MAX_NOTES = 16 };
static const size_t CG_WS_CAP = (size_t)1 << 30;

/* What each graph kind is, in cg_kind_t's order:
 *   tensors  its tensors in pointer order, a letter each (their count is the kind's
 *            pointer count; sizes in tensor_bytes): X the conv input, Y its output, W the
 *            filter (act dtype), F the filter in fp32, K / C fp32 vectors of k / c
 *            channels, c a vector of c channels in the act dtype (scale, bias);
 *   dir      the direction it computes (0 fwd, 1 bwd data, 2 bwd filter);
 *   reduces  its last two tensors are per-channel reductions over the batch (genStats,
 *            sums), zeroed before each run;
 *   tag      what conv_engine adds to the engine's name;
 *   key      its name for tests and the probe (cuda_conv_graph_kind_name);
 *   name     what the notices call it;
 *   option   the fusion option that measures it against the unfused ops (verdicts). */
static const struct {
    const char *tensors;
    int dir;
    bool reduces;
    const char *tag, *key, *name, *option;
} KINDS[CG_KIND_COUNT] = {
    {"XWY", 0, false, "", "fprop", "fprop", ""},
    {"YWX", 1, false, "", "dgrad", "dgrad", ""},
    {"XYW", 2, false, "", "wgrad", "wgrad", ""},
    {"YWX", 1, false, " beta=1", "dgrad_accum", "dgrad (beta 1)", ""},
    {"XWYKK", 0, true, " +genstats", "fprop_stats", "fprop + genStats", "conv_stats"},
    {"YWXXCCC", 1, true, " +dbn-sums", "dgrad_dbn", "dgrad + dBN sums", "dgrad_dbn"},
    {"YWXXXCCC", 1, true, " +drelu+dbn-sums", "dgrad_drelu_dbn", "dgrad + dReLU + dBN sums", "dgrad_dbn"},
    {"XccWY", 0, false, " sbr+", "sbr_fprop", "scale-bias-ReLU + fprop", ""},
    {"XccWYKK", 0, true, " sbr+ +genstats", "sbr_fprop_stats", "scale-bias-ReLU + fprop + genStats", ""},
    {"XccYW", 2, false, " sbr+", "sbr_wgrad", "scale-bias-ReLU + wgrad", ""},
    {"XYF", 2, false, " fp32 beta=1", "wgrad_f32", "wgrad into fp32 (beta 1)", ""},
};

const char *cuda_conv_graph_kind_name(int kind) {
    return kind >= 0 && kind < CG_KIND_COUNT ? KINDS[kind].key : NULL;
}

/* The kind's pointer count. */
static int kind_nt(int kind) { return (int)strlen(KINDS[kind].tensors); }

/* Bytes of tensor i of kind on s in dt (the letters of KINDS). */
static size_t tensor_bytes(int kind, const conv_shape_t *s, dtype_t dt, int i) {
    size_t e = dt_size(dt);
    switch (KINDS[kind].tensors[i]) {
    case 'X': return (size_t)s->n * s->h * s->w * s->c * e;
    case 'Y': return (size_t)s->n * s->p * s->q * s->k * e;
    case 'W': return (size_t)s->k * s->r * s->s * s->c * e;
    case 'F': return (size_t)s->k * s->r * s->s * s->c * 4;
    case 'K': return (size_t)s->k * 4;
    case 'C': return (size_t)s->c * 4;
    default: return (size_t)s->c * e;
    }
}

/* One finalized variant pack: the pointers and workspace it was built for. */
typedef struct cg_pack {
    void *ptrs[CG_MAX_T];
    void *ws;
    bd_t vp;
} cg_pack_t;

struct cg_plan {
    int kind;
    conv_shape_t s;
    dtype_t dt;
    unsigned char align[CG_MAX_T];
    bool ready;                  /* false: no usable engine, the caller's other path runs */
    int verdict;                 /* fused kinds: 0 not measured, 1 faster than unfused, -1 slower */
    cg_build_t b;                /* the graph's descriptors (kept while the plan lives) */
    bd_t cfg, plan;              /* the chosen engine config and its execution plan */
    int64_t ws;
    char engine[128];
    cg_pack_t packs[CG_MAX_PACKS];
    int n_packs, next_pack;      /* round robin once all slots are taken */
};

/* Builds and finalizes the operation graph of p (descriptors in p->b); the graph or NULL
 * (p->b.st says why). */
static bd_t build_graph(cuda_be_t *cb, struct cg_plan *p) {
    cg_build_t *b = &p->b;
    bd_t ops[8];
    int nops = cg_build_ops(b, p->kind, &p->s, p->dt, p->align, cb->deterministic, ops);
    if (nops < 0) return NULL;
    bd_t og = cg_new(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "the operation graph");
    BSET(b, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops);
    BSET(b, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &cb->cudnn);
    cg_fin(b, og, "the operation graph");
    return b->st == CUDNN_STATUS_SUCCESS ? og : NULL;
}

/* ---- engine selection ---- */

/* Whether the engine compiles its kernel at finalize (runtime fusion engines, ~1 s). */
static bool runtime_compiled(bd_t engine) {
    cudnnBackendBehaviorNote_t notes[CG_MAX_NOTES];
    int64_t n = 0;
    if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, CG_MAX_NOTES, &n,
                                 notes) != CUDNN_STATUS_SUCCESS)
        return false;
    for (int64_t i = 0; i < n && i < CG_MAX_NOTES; i++)
        if (notes[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return true;
    return false;
}

/* Whether an engine's notes allow it here (see the top of the file). */
static bool engine_usable(const cuda_be_t *cb, dtype_t dt, bd_t engine) {
    cudnnBackendNumericalNote_t notes[CG_MAX_NOTES];
    int64_t n = 0;
    if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CG_MAX_NOTES, &n, notes) != CUDNN_STATUS_SUCCESS)
        return false;
    for (int64_t i = 0; i < n && i < CG_MAX_NOTES; i++) {
        if (notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) return false;
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC && cb->deterministic) return false;
        if (dt == DT_F32 && !cb->allow_tf32 &&
            (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
            return false;
    }
    return true;
}

/* "cudnn-graph eng<N> k<type>=<value> ...<tag>" for an engine config. */
static void describe(bd_t cfg, bd_t engine, int kind, char *buf, size_t len) {
    int64_t id = -1, n = 0;
    cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &id);
    size_t used = (size_t)snprintf(buf, len, "cudnn-graph eng%lld", (long long)id);
    bd_t knobs[24];
    int nk = 0;
    for (; nk < 24; nk++)
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[nk]) != CUDNN_STATUS_SUCCESS) break;
    int64_t got = 0;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, nk, &got,
                                 knobs) != CUDNN_STATUS_SUCCESS)
        got = 0;
    for (int64_t i = 0; i < got && i < nk && used + 1 < len; i++) {
        cudnnBackendKnobType_t type;
        int64_t value = 0, c1 = 0, c2 = 0;
        if (cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &c1,
                                     &type) != CUDNN_STATUS_SUCCESS ||
            cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &c2,
                                     &value) != CUDNN_STATUS_SUCCESS)
            continue;
        int w = snprintf(buf + used, len - used, " k%d=%lld", (int)type, (long long)value);
        if (w > 0) used += (size_t)w < len - used ? (size_t)w : len - used - 1;
    }
    for (int i = 0; i < nk; i++) cudnnBackendDestroyDescriptor(knobs[i]);
    if (used + 1 < len) snprintf(buf + used, len - used, "%s", KINDS[kind].tag);
}

/* The workspace a plan may use: 1 GiB, at most a quarter of the free memory. */
static int64_t ws_limit(void) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        free_b = 0;
    }
    size_t cap = free_b / 4 < CG_WS_CAP ? free_b / 4 : CG_WS_CAP;
    return (int64_t)cap;
}

/* A finalized variant pack for ptrs and workspace ws, or NULL with *st set. */
static bd_t make_pack(const struct cg_plan *p, void *const *ptrs, void *ws, cudnnStatus_t *st) {
    int nt = kind_nt(p->kind);
    int64_t uids[CG_MAX_T];
    void *data[CG_MAX_T];
    for (int i = 0; i < nt; i++) {
        uids[i] = i + 1;
        data[i] = ptrs[i];
    }
    bd_t vp = NULL;
    if ((*st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp)) != CUDNN_STATUS_SUCCESS)
        return NULL;
    if ((*st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, nt, uids)) ||
        (*st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, nt, data)) ||
        (*st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws)) ||
        (*st = cudnnBackendFinalize(vp))) {
        cudnnBackendDestroyDescriptor(vp);
        return NULL;
    }
    return vp;
}

/* The per-channel outputs a kind's reduction ops accumulate into (zeroed before a run). */
static int zero_sums(cuda_be_t *cb, const struct cg_plan *p, void *const *ptrs) {
    if (!KINDS[p->kind].reduces) return 0;
    for (int nt = kind_nt(p->kind), i = nt - 2; i < nt; i++)
        CUDA_CHECK(cb, cudaMemsetAsync(ptrs[i], 0, tensor_bytes(p->kind, &p->s, p->dt, i), cb->stream));
    return 0;
}

/* Milliseconds per run of plan on vp (2 runs after one warm-up), or -1 if it failed. */
static float time_plan(cuda_be_t *cb, const struct cg_plan *p, bd_t plan, bd_t vp, void *const *ptrs) {
    cudaEvent_t a = NULL, z = NULL;
    float ms = -1.0f;
    if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&z) != cudaSuccess) goto done;
    if (zero_sums(cb, p, ptrs) || cudnnBackendExecute(cb->cudnn, plan, vp) != CUDNN_STATUS_SUCCESS) goto done;
    cudaEventRecord(a, cb->stream);
    for (int i = 0; i < 2; i++)
        if (zero_sums(cb, p, ptrs) || cudnnBackendExecute(cb->cudnn, plan, vp) != CUDNN_STATUS_SUCCESS) goto done;
    cudaEventRecord(z, cb->stream);
    if (cudaEventSynchronize(z) == cudaSuccess && cudaEventElapsedTime(&ms, a, z) == cudaSuccess) ms /= 2.0f;
    else ms = -1.0f;
done:
    if (a) cudaEventDestroy(a);
    if (z) cudaEventDestroy(z);
    cudaGetLastError();
    cb->base.err.code = ERR_OK;   /* a candidate that fails to run is just not chosen */
    return ms;
}

/* Adds one line to the backend's notice (once per text; dropped when full). */
static void cg_notice(cuda_be_t *cb, const char *text) {
    char *n = cb->base.notice;
    size_t used = strlen(n), len = strlen(text);
    if (strstr(n, text) || used + len + 3 > sizeof cb->base.notice) return;
    snprintf(n + used, sizeof cb->base.notice - used, "%s%s", used ? "; " : "", text);
}

/* The engine configs heuristics mode `mode` lists for og, at most CG_MAX_CFG, into cfgs;
 * how many descriptors were made (the caller destroys them; NULL entries skipped), with
 * *got of them filled (0 when the query failed). */
static int heur_list(bd_t og, cudnnBackendHeurMode_t mode, bd_t *cfgs, int64_t *got) {
    bd_t heur = NULL;
    int64_t count = 0;
    int ncfg = 0;
    *got = 0;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) != CUDNN_STATUS_SUCCESS) return 0;
    if (cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendFinalize(heur) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL) ==
            CUDNN_STATUS_SUCCESS) {
        for (; ncfg < count && ncfg < CG_MAX_CFG; ncfg++)
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[ncfg]) != CUDNN_STATUS_SUCCESS)
                break;
        if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ncfg, got,
                                     cfgs) != CUDNN_STATUS_SUCCESS)
            *got = 0;
        if (*got > ncfg) *got = ncfg;
    }
    cudnnBackendDestroyDescriptor(heur);
    return ncfg;
}

/* cfg's engine (caller destroys it) or NULL. */
static bd_t cfg_engine(bd_t cfg) {
    bd_t eng = NULL;
    int64_t one = 0;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) return NULL;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &one, &eng) !=
        CUDNN_STATUS_SUCCESS) {
        cudnnBackendDestroyDescriptor(eng);
        return NULL;
    }
    return eng;
}

/* An execution plan of cfg, finalized (a runtime-compiled engine compiles here), with its
 * workspace size in *ws; NULL when it does not finalize or needs more than limit. */
static bd_t plan_finalize(const cuda_be_t *cb, bd_t cfg, int64_t limit, int64_t *ws) {
    bd_t plan = NULL;
    int64_t one = 0;
    *ws = 0;
    bool ok = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) == CUDNN_STATUS_SUCCESS &&
              cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &cb->cudnn) ==
                  CUDNN_STATUS_SUCCESS &&
              cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                       &cfg) == CUDNN_STATUS_SUCCESS &&
              cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS &&
              cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &one, ws) ==
                  CUDNN_STATUS_SUCCESS &&
              *ws <= limit;
    if (!ok && plan) {
        cudnnBackendDestroyDescriptor(plan);
        plan = NULL;
    }
    return plan;
}

/* Builds p's graph and chooses its plan (p->ready), or leaves p not ready with the
 * reason in the notice. -1 only on a CUDA error. */
static int plan_build(cuda_be_t *cb, struct cg_plan *p, void *const *ptrs) {
    /* the engine lists asked for, in order, until one gives a usable plan; with heur_b
     * cuDNN's neural-net heuristic (mode B) first, which falls back to mode A's ranking
     * itself where it has no model, then A and the fallback list as without it */
    static const cudnnBackendHeurMode_t MODES[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    static const cudnnBackendHeurMode_t MODES_B[3] = {CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    bool heur_b = (cb->fusion & BACKEND_FUSE_HEUR_B) != 0;
    const cudnnBackendHeurMode_t *modes = heur_b ? MODES_B : MODES;
    int nmodes = heur_b ? 3 : 2;
    if (cb->capturing)
        return cb_fail(cb, "cudnn graph: a %s plan for a new shape cannot be built while recording a CUDA graph",
                       KINDS[p->kind].name);
    if (cb->deterministic && KINDS[p->kind].reduces) {   /* see the top of the file */
        char text[256];
        snprintf(text, sizeof text, "deterministic: %s runs unfused (cuDNN's fused statistics add partial sums "
                 "across thread blocks in no fixed order, and their engines carry no NONDETERMINISTIC note)",
                 KINDS[p->kind].name);
        cg_notice(cb, text);
        p->ready = false;
        return 0;
    }
    CUDA_CHECK(cb, cudaStreamSynchronize(cb->stream));
    bd_t og = build_graph(cb, p);
    char why[160] = "";
    if (!og) snprintf(why, sizeof why, "%s: %s", p->b.what, cudnnGetErrorString(p->b.st));
    int64_t limit = ws_limit();
    bd_t cand[CG_TUNE], cand_cfg[CG_TUNE], cand_eng[CG_TUNE];
    int64_t cand_ws[CG_TUNE];
    /* an accumulating graph is timed only with dgrad_accum_tune, into a scratch output */
    bool tune_accum = (cb->fusion & BACKEND_FUSE_DGRAD_ACCUM_TUNE) != 0;
    int ncand = 0, want = cb->deterministic || (p->kind == CG_DGRAD_ACCUM && !tune_accum) ? 1 : CG_TUNE;
    for (int m = 0; og && m < nmodes && ncand == 0; m++) {
        bd_t cfgs[CG_MAX_CFG];
        int64_t got = 0;
        int ncfg = heur_list(og, modes[m], cfgs, &got);
        for (int64_t i = 0; i < got && ncand < want; i++) {
            bd_t eng = cfg_engine(cfgs[i]), plan = NULL;
            int64_t ws = 0;
            bool ok = eng && engine_usable(cb, p->dt, eng);
            /* a runtime-compiled engine costs a compilation to finalize: only as the
             * first candidate, and then it is the only one */
            bool rtc = ok && runtime_compiled(eng);
            ok = ok && !(rtc && ncand > 0) && (plan = plan_finalize(cb, cfgs[i], limit, &ws)) != NULL;
            if (!ok) {
                if (eng) cudnnBackendDestroyDescriptor(eng);
                continue;
            }
            cand[ncand] = plan;
            cand_cfg[ncand] = cfgs[i];
            cand_eng[ncand] = eng;
            cand_ws[ncand] = ws;
            cfgs[i] = NULL;   /* kept */
            ncand++;
            if (rtc) want = ncand;
        }
        for (int i = 0; i < ncfg; i++)
            if (cfgs[i]) cudnnBackendDestroyDescriptor(cfgs[i]);
        if (!ncand && !why[0]) snprintf(why, sizeof why, "no engine passed the filters");
    }
    cudaGetLastError();
    if (!ncand) {
        const conv_shape_t *s = &p->s;
        char text[320];
        snprintf(text, sizeof text, "cudnn graph API: no %s%s engine for %s (first: %dx%d conv %d->%d stride %d, %s); "
                 "the unfused path runs there", cb->deterministic ? "deterministic " : "", KINDS[p->kind].name,
                 dtype_names[p->dt], s->r, s->s, s->c, s->k, s->stride, why);
        cg_notice(cb, text);
        cg_free(&p->b);   /* nothing will run on this graph */
        p->ready = false;
        return 0;
    }
    int best = 0;
    if (ncand > 1) {   /* time them on the real buffers, keep the fastest */
        int64_t most = 0;
        for (int i = 0; i < ncand; i++) most = cand_ws[i] > most ? cand_ws[i] : most;
        if (cb_grow(cb, &cb->ws, (size_t)most, "cuDNN workspace")) return -1;
        /* an accumulating graph adds into its output: timed into a zeroed scratch copy of
         * the output's size instead (256-byte aligned, so any plan's alignment holds) */
        void *tptrs[CG_MAX_T], *scratch = NULL;
        memcpy(tptrs, ptrs, sizeof tptrs);
        if (p->kind == CG_DGRAD_ACCUM || p->kind == CG_WGRAD_F32) {
            size_t bytes = tensor_bytes(p->kind, &p->s, p->dt, 2);
            CUDA_CHECK(cb, cudaMalloc(&scratch, bytes));
            if (cudaMemsetAsync(scratch, 0, bytes, cb->stream) != cudaSuccess) {
                cudaFree(scratch);
                return cb_fail(cb, "cudnn graph: zeroing the timing scratch of %zu bytes failed", bytes);
            }
            tptrs[2] = scratch;
        }
        cudnnStatus_t st;
        bd_t vp = make_pack(p, tptrs, cb->ws.p, &st);
        float best_ms = -1.0f;
        for (int i = 0; vp && i < ncand; i++) {
            float ms = time_plan(cb, p, cand[i], vp, tptrs);
            if (ms >= 0 && (best_ms < 0 || ms < best_ms)) {
                best_ms = ms;
                best = i;
            }
        }
        if (vp) cudnnBackendDestroyDescriptor(vp);
        cudaError_t ss = cudaStreamSynchronize(cb->stream);
        if (scratch) cudaFree(scratch);
        CUDA_CHECK(cb, ss);
    }
    p->plan = cand[best];
    p->cfg = cand_cfg[best];
    p->ws = cand_ws[best];
    describe(p->cfg, cand_eng[best], p->kind, p->engine, sizeof p->engine);
    for (int i = 0; i < ncand; i++) {
        cudnnBackendDestroyDescriptor(cand_eng[i]);
        if (i == best) continue;
        cudnnBackendDestroyDescriptor(cand[i]);
        cudnnBackendDestroyDescriptor(cand_cfg[i]);
    }
    if (cb_grow(cb, &cb->ws, (size_t)p->ws, "cuDNN workspace")) return -1;
    p->ready = true;
    return 0;
}

/* ---- the cache and the calls ---- */

static unsigned char align_of(const void *ptr) {
    unsigned char al = 16;
    while (al > 1 && !cb_aligned(ptr, al)) al /= 2;
    return al;
}

static void plan_destroy(struct cg_plan *p) {
    for (int i = 0; i < p->n_packs; i++) cudnnBackendDestroyDescriptor(p->packs[i].vp);
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    if (p->cfg) cudnnBackendDestroyDescriptor(p->cfg);
    cg_free(&p->b);
}

void cu_conv_graph_free(cuda_be_t *cb) {
    for (int i = 0; i < cb->n_gplans; i++) plan_destroy(&cb->gplans[i]);
    free(cb->gplans);
    cb->gplans = NULL;
    cb->n_gplans = cb->cap_gplans = 0;
}

/* The plan of this key if it exists (al: the pointers' alignments), else NULL. */
static struct cg_plan *plan_lookup(cuda_be_t *cb, int kind, const conv_shape_t *s, dtype_t dt,
                                   const unsigned char *al) {
    for (int i = 0; i < cb->n_gplans; i++) {
        struct cg_plan *p = &cb->gplans[i];
        if (p->kind == kind && p->dt == dt && !memcmp(&p->s, s, sizeof *s) && !memcmp(p->align, al, CG_MAX_T))
            return p;
    }
    return NULL;
}

static void alignments(int kind, void *const *ptrs, unsigned char *al) {
    memset(al, 0, CG_MAX_T);
    for (int i = 0, nt = kind_nt(kind); i < nt; i++) al[i] = align_of(ptrs[i]);
}

/* The plan of this key, built on first use; NULL with the error set. */
static struct cg_plan *plan_get(cuda_be_t *cb, int kind, const conv_shape_t *s, dtype_t dt, void *const *ptrs) {
    unsigned char al[CG_MAX_T];
    alignments(kind, ptrs, al);
    struct cg_plan *found = plan_lookup(cb, kind, s, dt, al);
    if (found) return found;
    if (cb->n_gplans == cb->cap_gplans) {
        int cap = cb->cap_gplans ? cb->cap_gplans * 2 : 32;
        struct cg_plan *np = (struct cg_plan *)realloc(cb->gplans, (size_t)cap * sizeof *np);
        if (!np) {
            cb_fail(cb, "out of memory for the cuDNN graph plan cache");
            return NULL;
        }
        cb->gplans = np;
        cb->cap_gplans = cap;
    }
    struct cg_plan *p = &cb->gplans[cb->n_gplans];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->s = *s;
    p->dt = dt;
    memcpy(p->align, al, sizeof al);
    cb->n_gplans++;
    if (plan_build(cb, p, ptrs) < 0) return NULL;
    return p;
}

/* The variant pack of p for ptrs and the current workspace, made on first use. */
static bd_t pack_get(cuda_be_t *cb, struct cg_plan *p, void *const *ptrs) {
    int nt = kind_nt(p->kind);
    for (int i = 0; i < p->n_packs; i++) {
        cg_pack_t *k = &p->packs[i];
        if (k->ws == cb->ws.p && !memcmp(k->ptrs, ptrs, (size_t)nt * sizeof(void *))) return k->vp;
    }
    cudnnStatus_t st;
    bd_t vp = make_pack(p, ptrs, cb->ws.p, &st);
    if (!vp) {
        cb_fail_call(cb, "cudnnBackendFinalize(variant pack)", cudnnGetErrorString(st), __FILE__, __LINE__);
        return NULL;
    }
    cg_pack_t *k;
    if (p->n_packs < CG_MAX_PACKS) {
        k = &p->packs[p->n_packs++];
    } else {   /* more layers of one shape than slots: replace the oldest */
        k = &p->packs[p->next_pack++ % CG_MAX_PACKS];
        cudnnBackendDestroyDescriptor(k->vp);
    }
    memset(k->ptrs, 0, sizeof k->ptrs);
    memcpy(k->ptrs, ptrs, (size_t)nt * sizeof(void *));
    k->ws = cb->ws.p;
    k->vp = vp;
    return vp;
}

int cu_conv_graph_run(cuda_be_t *cb, int kind, const conv_shape_t *s, dtype_t dt, void *const *ptrs) {
    if (kind < 0 || kind >= CG_KIND_COUNT) return cb_fail(cb, "cudnn graph: unknown graph kind %d", kind);
    if (s->n <= 0 || s->c <= 0 || s->k <= 0 || s->h <= 0 || s->w <= 0 || s->r <= 0 || s->s <= 0 || s->stride <= 0 ||
        s->pad < 0 || s->p <= 0 || s->q <= 0)
        return 1;   /* the legacy path reports the bad shape */
    if (conv_groups(s) > 1) return 1;   /* grouped / depthwise: the legacy API's kernels */
    struct cg_plan *p = plan_get(cb, kind, s, dt, ptrs);
    if (!p) return -1;
    if (!p->ready) return 1;
    if ((size_t)p->ws > cb->ws.bytes) {   /* released by cuda_backend_clear_caches */
        if (cb->capturing) return cb_fail(cb, "cudnn graph: the workspace must grow while recording a CUDA graph");
        if (cb_grow(cb, &cb->ws, (size_t)p->ws, "cuDNN workspace")) return -1;
    }
    bd_t vp = pack_get(cb, p, ptrs);
    if (!vp || zero_sums(cb, p, ptrs)) return -1;
    cudnnStatus_t st = cudnnBackendExecute(cb->cudnn, p->plan, vp);
    if (st != CUDNN_STATUS_SUCCESS)
        return cb_fail_call(cb, "cudnnBackendExecute", cudnnGetErrorString(st), __FILE__, __LINE__);
    return 0;
}

int cu_conv_graph_verdict(cuda_be_t *cb, int kind, const conv_shape_t *s, dtype_t dt, void *const *ptrs) {
    if (kind < 0 || kind >= CG_KIND_COUNT) return 0;
    unsigned char al[CG_MAX_T];
    alignments(kind, ptrs, al);
    const struct cg_plan *p = plan_lookup(cb, kind, s, dt, al);
    return p ? p->verdict : 0;
}

void cu_conv_graph_set_verdict(cuda_be_t *cb, int kind, const conv_shape_t *s, dtype_t dt, void *const *ptrs,
                               int verdict) {
    if (kind < 0 || kind >= CG_KIND_COUNT) return;
    unsigned char al[CG_MAX_T];
    alignments(kind, ptrs, al);
    struct cg_plan *p = plan_lookup(cb, kind, s, dt, al);
    if (!p) return;
    p->verdict = verdict;
    if (verdict < 0 && p->ready) {   /* measured slower: the caller's unfused path from now on */
        p->ready = false;
        char text[200];
        snprintf(text, sizeof text, "%s: the unfused ops measured faster than the fused graph on some layers "
                 "(first: %dx%d conv %d->%d stride %d), which run unfused", KINDS[kind].option, s->r, s->s, s->c, s->k,
                 s->stride);
        cg_notice(cb, text);
    }
}

int cu_conv_graph_engine(cuda_be_t *cb, const conv_shape_t *s, int which, char *buf, size_t len) {
    const struct cg_plan *best = NULL;
    for (int i = 0; i < cb->n_gplans; i++) {   /* the fused kinds are what training runs */
        const struct cg_plan *p = &cb->gplans[i];
        if (p->ready && KINDS[p->kind].dir == which && !memcmp(&p->s, s, sizeof *s) && (!best || p->kind > best->kind))
            best = p;
    }
    if (!best) return 1;
    snprintf(buf, len, "%s", best->engine);
    return 0;
}

int cu_conv_graph_fwd(cuda_be_t *cb, const conv_shape_t *s, dtype_t dt, const void *x, const void *w, void *y) {
    void *t[3] = {(void *)x, (void *)w, y};
    return cu_conv_graph_run(cb, CG_FPROP, s, dt, t);
}

int cu_conv_graph_dgrad(cuda_be_t *cb, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w, void *dx) {
    void *t[3] = {(void *)dy, (void *)w, dx};
    return cu_conv_graph_run(cb, CG_DGRAD, s, dt, t);
}

int cu_conv_graph_wgrad(cuda_be_t *cb, const conv_shape_t *s, dtype_t dt, const void *x, const void *dy,
                        void *stage) {
    void *t[3] = {(void *)x, (void *)dy, stage};
    return cu_conv_graph_run(cb, CG_WGRAD, s, dt, t);
}

int cuda_conv_graph_engine(backend_t *be, const conv_shape_t *s, int which, char *buf, size_t len) {
    return cu_conv_graph_engine(cb_of(be), s, which, buf, len);
}

/* ---- the pattern probe (cuda_backend.h) ---- */

int cuda_conv_graph_probe(backend_t *be, int kind, const conv_shape_t *s, dtype_t dt, bool rtc,
                          cuda_graph_probe_t *r) {
    cuda_be_t *cb = cb_of(be);
    memset(r, 0, sizeof *r);
    r->pre_ms = r->rtc_ms = r->first_ms = -1.0f;
    if (kind < 0 || kind >= CG_KIND_COUNT) return cb_fail(cb, "cudnn graph probe: unknown graph kind %d", kind);
    CB_ENTER(cb);
    struct cg_plan p;
    memset(&p, 0, sizeof p);
    p.kind = kind;
    p.s = *s;
    p.dt = dt;
    memset(p.align, 16, sizeof p.align);
    bd_t og = build_graph(cb, &p);
    if (!og) {
        snprintf(r->why, sizeof r->why, "%s: %s", p.b.what, cudnnGetErrorString(p.b.st));
        cg_free(&p.b);
        return 0;
    }
    if (cb->deterministic && KINDS[kind].reduces)
        snprintf(r->why, sizeof r->why, "deterministic: a fused reduction is never built");
    void *ptrs[CG_MAX_T] = {0}, *ws = NULL;
    int nt = kind_nt(kind), rc = 0;
    for (int i = 0; i < nt && !rc; i++) {
        size_t bytes = tensor_bytes(kind, s, dt, i);
        if (cudaMalloc(&ptrs[i], bytes) != cudaSuccess || cudaMemsetAsync(ptrs[i], 0, bytes, cb->stream) != cudaSuccess)
            rc = cb_fail(cb, "cudnn graph probe: %zu bytes for tensor %d", bytes, i);
    }
    int64_t limit = ws_limit(), ws_bytes = 0;
    int timed = 0;
    static const cudnnBackendHeurMode_t MODES[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int m = 0; m < 2 && !rc; m++) {
        bd_t cfgs[CG_MAX_CFG];
        int64_t got = 0;
        int ncfg = heur_list(og, MODES[m], cfgs, &got);
        for (int64_t i = 0; i < got && !rc; i++) {
            r->configs++;
            bd_t eng = cfg_engine(cfgs[i]), plan = NULL;
            int64_t wsz = 0;
            bool usable = eng && engine_usable(cb, dt, eng) && !(cb->deterministic && KINDS[kind].reduces);
            bool is_rtc = usable && runtime_compiled(eng);
            r->usable += usable;
            r->runtime += is_rtc;
            bool try_it = usable && (is_rtc ? rtc && r->rtc_ms < 0 && !r->rtc_engine[0] : timed < CG_TUNE);
            if (try_it && (plan = plan_finalize(cb, cfgs[i], limit, &wsz)) != NULL) {
                if (wsz > ws_bytes) {
                    if (ws) cudaFree(ws);
                    ws = NULL;
                    if (cudaMalloc(&ws, (size_t)wsz) != cudaSuccess) rc = cb_fail(cb, "cudnn graph probe: workspace");
                    ws_bytes = wsz;
                }
                cudnnStatus_t st;
                bd_t vp = rc ? NULL : make_pack(&p, ptrs, ws, &st);
                float ms = vp ? time_plan(cb, &p, plan, vp, ptrs) : -1.0f;
                if (vp) cudnnBackendDestroyDescriptor(vp);
                char name[128];
                describe(cfgs[i], eng, kind, name, sizeof name);
                if (is_rtc) {
                    r->rtc_ms = ms;
                    snprintf(r->rtc_engine, sizeof r->rtc_engine, "%s", name);
                } else {
                    if (timed++ == 0) r->first_ms = ms;
                    if (ms >= 0 && (r->pre_ms < 0 || ms < r->pre_ms)) {
                        r->pre_ms = ms;
                        snprintf(r->pre_engine, sizeof r->pre_engine, "%s", name);
                    }
                }
            } else if (try_it && is_rtc) {
                snprintf(r->rtc_engine, sizeof r->rtc_engine, "(did not finalize)");
            }
            if (plan) cudnnBackendDestroyDescriptor(plan);
            if (eng) cudnnBackendDestroyDescriptor(eng);
        }
        for (int i = 0; i < ncfg; i++) cudnnBackendDestroyDescriptor(cfgs[i]);
    }
    cudaError_t ss = cudaStreamSynchronize(cb->stream);
    for (int i = 0; i < nt; i++)
        if (ptrs[i]) cudaFree(ptrs[i]);
    if (ws) cudaFree(ws);
    cudaGetLastError();
    cg_free(&p.b);
    if (!rc && ss != cudaSuccess) rc = cb_fail(cb, "cudnn graph probe: %s", cudaGetErrorString(ss));
    return rc ? -1 : 0;
}
