/* conv.cu: convolutions on cuDNN's convolution API (cudnnConvolutionForward /
 * BackwardData / BackwardFilter, still part of cuDNN 9) in NHWC with KRSC filters
 * (cuDNN's NHWC filter layout), fp32 / fp16 / bf16 data with fp32 accumulation.
 *
 * Plans. The first call for a (shape, dtype, direction) builds the descriptors and
 * measures the candidate algorithms once with cudnnFind*AlgorithmEx on the real buffers
 * (like torch.backends.cudnn.benchmark), keeping the fastest one that succeeded and fits
 * the workspace limit. With deterministic, timing must not decide (two processes, e.g. a
 * run and its resume, could time differently and pick different algorithms, which differ
 * in the last bits): among the deterministic algorithms that succeeded, the one first in
 * the heuristic's order (cudnnGet*Algorithm_v7: a function of shape, device and library
 * only) is taken; where none is deterministic (an NHWC shape cuDNN lacks one for), the
 * fastest usable one is, with a line in the backend's notice that the trainer prints.
 * Not deterministic, the step's cost decides, not the kernel time alone: among the usable
 * algorithms at most COST_GPU_SLACK (1.25x) slower on the GPU than the fastest, each
 * call is issued a few times and its host time measured, and the one with the least
 * max(GPU time, host time) is taken. A step without CUDA graphs is bound by the host
 * (~600 calls; the first H200 run: 18 ms per ResNet-50 step issuing, 7.9 ms on the GPU),
 * and cudnnFind ranks only the kernels' time, so a multi-kernel algorithm (FFT,
 * Winograd-nonfused: offered for fp16 but not bf16) can win on the GPU by microseconds
 * and lose the step by its extra launches; replaying graphs, the slack bounds the GPU
 * time given up. conv_engine (cu_conv_describe) reports each choice with its numbers.
 * Later calls reuse the plan. The search uses a temporary workspace of up to 1 GiB (a
 * quarter of the free memory at most); the backend's shared workspace then grows to what
 * the chosen algorithms need, so nothing is allocated once every shape was seen once.
 *
 * Math: half data uses tensor cores (CUDNN_TENSOR_OP_MATH); fp32 uses TF32 tensor cores
 * only when allow_tf32 (CUDNN_DEFAULT_MATH), otherwise plain FMA (CUDNN_FMA_MATH).
 * Weight gradients: cuDNN writes dw in the data type of the filter descriptor, so the
 * result goes to the staging buffer (beta = 0) and one kernel adds it into the fp32 dw;
 * for half data this matches what autocast does (a half weight gradient cast to fp32).
 * Groups (conv_shape_t.groups): the filter descriptor holds c / groups input channels and
 * cudnnSetConvolutionGroupCount the count; cuDNN picks its grouped / depthwise kernels.
 * With the graph_conv fusion option (issue 25) each op first offers its call to the cuDNN
 * graph API (conv_graph.cu) and runs here only where that has no engine for the shape
 * (grouped convolutions always run here: the graph API path builds dense ones only).
 * Not here: bias (layers.cu), dilation.
 */
#include "model/cuda/conv.cuh"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/cuda/conv_graph.cuh"
#include "model/cuda/cuda_impl.cuh"
#include "model/cuda/elementwise.cuh"

enum { CONV_ALGO_MAX = 16, COST_CANDIDATES = 4, HOST_REPS = 4 };
static const size_t FIND_WS_CAP = (size_t)1 << 30;
static const float COST_GPU_SLACK = 1.25f;

struct conv_plan {
    conv_shape_t s;
    dtype_t dt;
    int align;                            /* pointer alignment class the algorithms were found for */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd[3];   /* fwd, bwd data, bwd filter: each its math type */
    bool found[3];
    int algo[3];
    size_t ws[3];
    /* how each choice was made, for conv_engine */
    int math[3];          /* cudnnMathType_t */
    float gpu_ms[3];      /* cudnnFind's time of the chosen algorithm */
    float host_us[3];     /* host time to issue one call (by cost), else -1 */
    int usable[3];        /* usable algorithms cudnnFind reported */
    char how[3];          /* 'c' least max(gpu, host); 'h' heuristic order (deterministic);
                             'f' fastest (deterministic had none) */
};

enum { DIR_FWD = 0, DIR_BWD_DATA = 1, DIR_BWD_FILTER = 2 };

static cudnnDataType_t cudnn_type(dtype_t dt) {
    return dt == DT_F32 ? CUDNN_DATA_FLOAT : (dt == DT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16);
}

static void plan_destroy(struct conv_plan *p) {
    if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
    if (p->wd) cudnnDestroyFilterDescriptor(p->wd);
    for (int i = 0; i < 3; i++)
        if (p->cd[i]) cudnnDestroyConvolutionDescriptor(p->cd[i]);
}

void cu_conv_free_plans(cuda_be_t *cb) {
    for (int i = 0; i < cb->n_convs; i++) plan_destroy(&cb->convs[i]);
    free(cb->convs);
    cb->convs = NULL;
    cb->n_convs = cb->cap_convs = 0;
}

/* Fills the descriptors of a fresh plan and checks cuDNN's output size against s. */
static int plan_init(cuda_be_t *cb, const conv_shape_t *s, dtype_t dt, struct conv_plan *p) {
    memset(p, 0, sizeof *p);
    p->s = *s;
    p->dt = dt;
    cudnnDataType_t t = cudnn_type(dt);
    CUDNN_CHECK(cb, cudnnCreateTensorDescriptor(&p->xd));
    CUDNN_CHECK(cb, cudnnCreateTensorDescriptor(&p->yd));
    CUDNN_CHECK(cb, cudnnCreateFilterDescriptor(&p->wd));
    CUDNN_CHECK(cb, cudnnSetTensor4dDescriptor(p->xd, CUDNN_TENSOR_NHWC, t, s->n, s->c, s->h, s->w));
    CUDNN_CHECK(cb, cudnnSetTensor4dDescriptor(p->yd, CUDNN_TENSOR_NHWC, t, s->n, s->k, s->p, s->q));
    /* grouped: the filter holds c / groups input channels, the descriptor the group count */
    int g = conv_groups(s);
    CUDNN_CHECK(cb, cudnnSetFilter4dDescriptor(p->wd, t, CUDNN_TENSOR_NHWC, s->k, s->c / g, s->r, s->s));
    cudnnMathType_t math = dt != DT_F32 ? CUDNN_TENSOR_OP_MATH
                                        : (cb->allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
    for (int i = 0; i < 3; i++) {
        CUDNN_CHECK(cb, cudnnCreateConvolutionDescriptor(&p->cd[i]));
        CUDNN_CHECK(cb, cudnnSetConvolution2dDescriptor(p->cd[i], s->pad, s->pad, s->stride, s->stride,
                                                        1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        CUDNN_CHECK(cb, cudnnSetConvolutionMathType(p->cd[i], math));
        if (g > 1) CUDNN_CHECK(cb, cudnnSetConvolutionGroupCount(p->cd[i], g));
    }
    int on, oc, oh, ow;
    CUDNN_CHECK(cb, cudnnGetConvolution2dForwardOutputDim(p->cd[0], p->xd, p->wd, &on, &oc, &oh, &ow));
    if (on != s->n || oc != s->k || oh != s->p || ow != s->q)
        return cb_fail(cb, "conv shape mismatch: n%d h%d w%d c%d k%d r%d s%d stride %d pad %d gives "
                       "%dx%d output, the caller expects %dx%d", s->n, s->h, s->w, s->c, s->k, s->r,
                       s->s, s->stride, s->pad, oh, ow, s->p, s->q);
    return 0;
}

/* Largest power of two <= 16 dividing the address. */
static int ptr_align16(const void *p) {
    int al = 16;
    while (al > 1 && !cb_aligned(p, (size_t)al)) al /= 2;
    return al;
}

/* The alignment class of three pointers: the largest power of two <= 16 that divides all
 * three (kernels may need 16, 8 or 4 bytes). A plan is found with pointers of its class,
 * so layers of one shape whose weights sit at offsets of another alignment get their own
 * plan rather than an algorithm that may reject their pointers. */
static int align_class(const void *a, const void *b, const void *c) {
    int x = ptr_align16(a), y = ptr_align16(b), z = ptr_align16(c);
    int m = x < y ? x : y;
    return m < z ? m : z;
}

/* The cached plan for (s, dt, align), created on first use; NULL with the error set. */
static struct conv_plan *plan_get(cuda_be_t *cb, const conv_shape_t *s, dtype_t dt, int align) {
    for (int i = 0; i < cb->n_convs; i++) {
        struct conv_plan *p = &cb->convs[i];
        if (p->dt == dt && p->align == align && !memcmp(&p->s, s, sizeof *s)) return p;
    }
    if (s->n <= 0 || s->c <= 0 || s->k <= 0 || s->h <= 0 || s->w <= 0 || s->r <= 0 || s->s <= 0 ||
        s->stride <= 0 || s->pad < 0 || s->groups < 0 || s->c % conv_groups(s) || s->k % conv_groups(s)) {
        cb_fail(cb, "conv: invalid shape n%d h%d w%d c%d k%d r%d s%d stride %d pad %d groups %d", s->n, s->h,
                s->w, s->c, s->k, s->r, s->s, s->stride, s->pad, s->groups);
        return NULL;
    }
    if (cb->n_convs == cb->cap_convs) {
        int cap = cb->cap_convs ? cb->cap_convs * 2 : 32;
        struct conv_plan *np = (struct conv_plan *)realloc(cb->convs, (size_t)cap * sizeof *np);
        if (!np) {
            cb_fail(cb, "out of memory for the convolution plan cache");
            return NULL;
        }
        cb->convs = np;
        cb->cap_convs = cap;
    }
    struct conv_plan fresh;
    if (plan_init(cb, s, dt, &fresh)) {
        plan_destroy(&fresh);
        return NULL;
    }
    fresh.align = align;
    cb->convs[cb->n_convs] = fresh;
    return &cb->convs[cb->n_convs++];
}

template <typename P>
static bool usable(const P &r, size_t ws_limit, bool deterministic) {
    return r.status == CUDNN_STATUS_SUCCESS && r.memory <= ws_limit &&
           (!deterministic || r.determinism == CUDNN_DETERMINISTIC);
}

/* Index into found (cudnnFind's results, fastest first) of the algorithm to use, or -1.
 * Not deterministic: the fastest usable one. Deterministic: the usable one that comes
 * first in heur (the heuristic's order, independent of timing), matching algorithm and
 * math type, then algorithm only; failing both, the usable one with the lowest algorithm
 * number. The choice then depends on nothing measured. */
template <typename P>
static int pick_algo(const P *found, int nfound, const P *heur, int nheur, size_t ws_limit,
                     bool deterministic) {
    if (!deterministic) {
        for (int i = 0; i < nfound; i++)
            if (usable(found[i], ws_limit, false)) return i;
        return -1;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int h = 0; h < nheur; h++)
            for (int i = 0; i < nfound; i++)
                if (usable(found[i], ws_limit, true) && found[i].algo == heur[h].algo &&
                    (pass == 1 || found[i].mathType == heur[h].mathType))
                    return i;
    int best = -1;
    for (int i = 0; i < nfound; i++)
        if (usable(found[i], ws_limit, true) &&
            (best < 0 || (int)found[i].algo < (int)found[best].algo ||
             ((int)found[i].algo == (int)found[best].algo &&
              (int)found[i].mathType < (int)found[best].mathType)))
            best = i;
    return best;
}

/* The workspace the search may use: the largest need among the heuristic's candidates,
 * capped at FIND_WS_CAP and a quarter of the free memory. */
template <typename P>
static size_t find_ws_size(const P *res, int count) {
    size_t need = 0, free_b = 0, total_b = 0;
    for (int i = 0; i < count; i++)
        if (res[i].status == CUDNN_STATUS_SUCCESS && res[i].memory > need) need = res[i].memory;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        free_b = 0;
        cudaGetLastError();
    }
    size_t cap = free_b / 4 < FIND_WS_CAP ? free_b / 4 : FIND_WS_CAP;
    return need < cap ? need : cap;
}

/* The math type a result is run with (fp32 never gets TF32 by accident). */
template <typename P>
static cudnnMathType_t run_math(const cuda_be_t *cb, const struct conv_plan *p, const P &r) {
    return p->dt == DT_F32 && !cb->allow_tf32 ? CUDNN_FMA_MATH : r.mathType;
}

/* Records the choice res[i] in plan direction dir and grows the shared workspace. */
template <typename P>
static int plan_commit(cuda_be_t *cb, struct conv_plan *p, int dir, const P &r) {
    cudnnMathType_t math = run_math(cb, p, r);
    CUDNN_CHECK(cb, cudnnSetConvolutionMathType(p->cd[dir], math));
    if (cb_grow(cb, &cb->ws, r.memory, "cuDNN workspace")) return -1;   /* found only once it fits */
    p->algo[dir] = (int)r.algo;
    p->ws[dir] = r.memory;
    p->math[dir] = (int)math;
    p->gpu_ms[dir] = r.time;
    p->found[dir] = true;
    return 0;
}

static const char *dir_name(int dir) {
    return dir == DIR_FWD ? "forward" : (dir == DIR_BWD_DATA ? "backward data" : "backward filter");
}

/* Fails naming the shape, and what cudnnFind reported for each algorithm (status,
 * workspace, determinism), so a NOT_SUPPORTED on a new GPU or library shows at once
 * which constraint excluded what. */
template <typename P>
static int no_algo(cuda_be_t *cb, const struct conv_plan *p, int dir, const P *res, int count,
                   size_t ws_limit) {
    const conv_shape_t *s = &p->s;
    char detail[640];
    size_t used = 0;
    detail[0] = '\0';
    for (int i = 0; i < count && used + 1 < sizeof detail; i++) {
        int w = snprintf(detail + used, sizeof detail - used, "%s algo %d: %s, %zu B%s%s", i ? ";" : "",
                         (int)res[i].algo, cudnnGetErrorString(res[i].status), (size_t)res[i].memory,
                         res[i].memory > ws_limit ? " (over the limit)" : "",
                         res[i].determinism == CUDNN_DETERMINISTIC ? "" : ", non-deterministic");
        if (w < 0) break;
        used += (size_t)w;
        if (used >= sizeof detail) used = sizeof detail - 1;
    }
    return cb_fail(cb, "cuDNN has no usable %s algorithm for conv n%d h%d w%d c%d k%d r%d s%d stride %d "
                   "pad %d (%s, pointer alignment %d, workspace limit %zu B)%s; cudnnFind reported:%s",
                   dir_name(dir), s->n, s->h, s->w, s->c, s->k, s->r, s->s, s->stride, s->pad,
                   dtype_names[p->dt], p->align, ws_limit,
                   cb->deterministic ? "; set train.deterministic: false to allow non-deterministic ones" : "",
                   count ? detail : " nothing");
}

/* Adds one line to the backend's notice (once per text; dropped when full). */
static void add_notice(cuda_be_t *cb, const char *text) {
    char *n = cb->base.notice;
    size_t used = strlen(n), len = strlen(text);
    if (strstr(n, text) || used + len + 3 > sizeof cb->base.notice) return;
    snprintf(n + used, sizeof cb->base.notice - used, "%s%s", used ? "; " : "", text);
}

/* One call of direction dir with algorithm algo on the plan's descriptors (a, b: the
 * inputs, out: the output, as plan_find takes them; beta 0). */
static int conv_call(cuda_be_t *cb, struct conv_plan *p, int dir, int algo, const void *a, const void *b,
                     void *out, void *ws, size_t ws_bytes) {
    float alpha = 1.0f, beta = 0.0f;
    if (dir == DIR_FWD)
        CUDNN_CHECK(cb, cudnnConvolutionForward(cb->cudnn, &alpha, p->xd, a, p->wd, b, p->cd[0],
                                                (cudnnConvolutionFwdAlgo_t)algo, ws, ws_bytes, &beta, p->yd, out));
    else if (dir == DIR_BWD_DATA)
        CUDNN_CHECK(cb, cudnnConvolutionBackwardData(cb->cudnn, &alpha, p->wd, b, p->yd, a, p->cd[1],
                                                     (cudnnConvolutionBwdDataAlgo_t)algo, ws, ws_bytes, &beta,
                                                     p->xd, out));
    else
        CUDNN_CHECK(cb, cudnnConvolutionBackwardFilter(cb->cudnn, &alpha, p->xd, a, p->yd, b, p->cd[2],
                                                       (cudnnConvolutionBwdFilterAlgo_t)algo, ws, ws_bytes, &beta,
                                                       p->wd, out));
    return 0;
}

static double host_now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* Not deterministic: index into found of the usable algorithm, at most COST_GPU_SLACK x
 * the fastest one's GPU time, whose call costs the step least, max(GPU time, host time
 * to issue it); the host time is the least of HOST_REPS - 1 calls after a first one.
 * *host_us gets the chosen one's; -1 when nothing is usable; -2 on a failed call. */
template <typename P>
static int pick_by_cost(cuda_be_t *cb, struct conv_plan *p, int dir, const P *found, int nfound, size_t ws_limit,
                        const void *a, const void *b, void *out, void *ws, float *host_us) {
    int first = -1, best = -1, tried = 0;
    float best_cost = 0;
    for (int i = 0; i < nfound && first < 0; i++)
        if (usable(found[i], ws_limit, false)) first = i;
    for (int i = first; i >= 0 && i < nfound && tried < COST_CANDIDATES; i++) {
        if (!usable(found[i], ws_limit, false) || found[i].time > found[first].time * COST_GPU_SLACK) continue;
        tried++;
        cudnnStatus_t ms = cudnnSetConvolutionMathType(p->cd[dir], run_math(cb, p, found[i]));
        if (ms != CUDNN_STATUS_SUCCESS) {
            cb_fail_call(cb, "cudnnSetConvolutionMathType", cudnnGetErrorString(ms), __FILE__, __LINE__);
            return -2;
        }
        double least = 1e30;
        for (int rep = 0; rep < HOST_REPS; rep++) {
            double t0 = host_now_us();
            if (conv_call(cb, p, dir, (int)found[i].algo, a, b, out, ws, found[i].memory)) return -2;
            double t = host_now_us() - t0;
            if (rep > 0 && t < least) least = t;
        }
        cudaError_t ss = cudaStreamSynchronize(cb->stream);
        if (ss != cudaSuccess) {
            cb_fail_call(cb, "cudaStreamSynchronize", cudaGetErrorString(ss), __FILE__, __LINE__);
            return -2;
        }
        float cost = found[i].time * 1e3f > (float)least ? found[i].time * 1e3f : (float)least;
        if (best < 0 || cost < best_cost) {
            best = i;
            best_cost = cost;
            *host_us = (float)least;
        }
    }
    return best;
}

/* The common tail of a search: the choice among found (cudnnFind's results) given heur
 * (the heuristic's): its index, or -1 with the failure naming what was found.
 * Deterministic with no deterministic algorithm (cuDNN may have none for some NHWC
 * shapes, e.g. the weight gradient of a 3-channel 7x7 stem): rather than fail the run,
 * take the fastest usable one and say so in the backend's notice; the run then repeats
 * to rounding, not bit for bit. Not deterministic: pick_by_cost, issuing calls on a, b,
 * out with the search's workspace ws. */
template <typename P>
static int plan_choose(cuda_be_t *cb, struct conv_plan *p, int dir, const P *found, int nfound,
                       const P *heur, int nheur, size_t wsz, const void *a, const void *b, void *out, void *ws) {
    float host_us = -1.0f;
    char how = 'h';
    int i;
    if (!cb->deterministic) {
        how = 'c';
        if ((i = pick_by_cost(cb, p, dir, found, nfound, wsz, a, b, out, ws, &host_us)) == -2) return -1;
    } else if ((i = pick_algo(found, nfound, heur, nheur, wsz, true)) < 0 &&
               (i = pick_algo(found, nfound, heur, nheur, wsz, false)) >= 0) {
        how = 'f';
        const conv_shape_t *s = &p->s;
        char text[256];
        snprintf(text, sizeof text, "cuDNN has no deterministic %s algorithm for the %dx%d conv %d->%d "
                 "channels stride %d (%s); using a non-deterministic one (algo %d), so this layer repeats "
                 "to rounding, not bit for bit", dir_name(dir), s->r, s->s, s->c, s->k, s->stride,
                 dtype_names[p->dt], (int)found[i].algo);
        add_notice(cb, text);
    }
    if (i < 0) return no_algo(cb, p, dir, found, nfound, wsz);
    int n_usable = 0;
    for (int k = 0; k < nfound; k++) n_usable += usable(found[k], wsz, how == 'h');
    p->how[dir] = how;
    p->host_us[dir] = host_us;
    p->usable[dir] = n_usable;
    return i;
}

/* After cudnnFind*Ex returned st: the choice (plan_choose), the search's workspace freed,
 * then the choice committed (the shared workspace grown: never both at once). */
template <typename P>
static int find_done(cuda_be_t *cb, struct conv_plan *p, int dir, cudnnStatus_t st, const char *call,
                     const P *found, int nfound, const P *heur, int nheur, size_t wsz, const void *a,
                     const void *b, void *out, void *ws) {
    int i = st != CUDNN_STATUS_SUCCESS ? cb_fail_call(cb, call, cudnnGetErrorString(st), __FILE__, __LINE__)
                                       : plan_choose(cb, p, dir, found, nfound, heur, nheur, wsz, a, b, out, ws);
    cudaStreamSynchronize(cb->stream);   /* the cost measurement's calls may still use ws */
    cb_free(cb, ws);
    return i < 0 ? -1 : plan_commit(cb, p, dir, found[i]);
}

/* Searches the algorithm of one direction on the real buffers (a, b: inputs; out: an
 * output the search may overwrite). */
static int plan_find(cuda_be_t *cb, struct conv_plan *p, int dir, const void *a, const void *b,
                     void *out) {
    int nheur = 0, nfound = 0;
    CUDA_CHECK(cb, cudaStreamSynchronize(cb->stream));
    if (dir == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t heur[CONV_ALGO_MAX], found[CONV_ALGO_MAX];
        CUDNN_CHECK(cb, cudnnGetConvolutionForwardAlgorithm_v7(cb->cudnn, p->xd, p->wd, p->cd[0], p->yd,
                                                               CONV_ALGO_MAX, &nheur, heur));
        size_t wsz = find_ws_size(heur, nheur);
        void *ws = wsz ? cb_malloc(cb, wsz, "cuDNN algorithm search") : NULL;
        if (wsz && !ws) return -1;
        cudnnStatus_t st = cudnnFindConvolutionForwardAlgorithmEx(cb->cudnn, p->xd, a, p->wd, b, p->cd[0],
                                                                  p->yd, out, CONV_ALGO_MAX, &nfound, found,
                                                                  ws, wsz);
        return find_done(cb, p, dir, st, "cudnnFindConvolutionForwardAlgorithmEx", found, nfound, heur, nheur,
                         wsz, a, b, out, ws);
    }
    if (dir == DIR_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t heur[CONV_ALGO_MAX], found[CONV_ALGO_MAX];
        CUDNN_CHECK(cb, cudnnGetConvolutionBackwardDataAlgorithm_v7(cb->cudnn, p->wd, p->yd, p->cd[1], p->xd,
                                                                    CONV_ALGO_MAX, &nheur, heur));
        size_t wsz = find_ws_size(heur, nheur);
        void *ws = wsz ? cb_malloc(cb, wsz, "cuDNN algorithm search") : NULL;
        if (wsz && !ws) return -1;
        cudnnStatus_t st = cudnnFindConvolutionBackwardDataAlgorithmEx(cb->cudnn, p->wd, b, p->yd, a, p->cd[1],
                                                                       p->xd, out, CONV_ALGO_MAX, &nfound,
                                                                       found, ws, wsz);
        return find_done(cb, p, dir, st, "cudnnFindConvolutionBackwardDataAlgorithmEx", found, nfound, heur,
                         nheur, wsz, a, b, out, ws);
    }
    cudnnConvolutionBwdFilterAlgoPerf_t heur[CONV_ALGO_MAX], found[CONV_ALGO_MAX];
    CUDNN_CHECK(cb, cudnnGetConvolutionBackwardFilterAlgorithm_v7(cb->cudnn, p->xd, p->yd, p->cd[2], p->wd,
                                                                  CONV_ALGO_MAX, &nheur, heur));
    size_t wsz = find_ws_size(heur, nheur);
    void *ws = wsz ? cb_malloc(cb, wsz, "cuDNN algorithm search") : NULL;
    if (wsz && !ws) return -1;
    cudnnStatus_t st = cudnnFindConvolutionBackwardFilterAlgorithmEx(cb->cudnn, p->xd, a, p->yd, b, p->cd[2],
                                                                     p->wd, out, CONV_ALGO_MAX, &nfound,
                                                                     found, ws, wsz);
    return find_done(cb, p, dir, st, "cudnnFindConvolutionBackwardFilterAlgorithmEx", found, nfound, heur, nheur,
                     wsz, a, b, out, ws);
}

int cu_conv2d_fwd(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *w,
                  void *y) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    if (cb->fusion & BACKEND_FUSE_GRAPH_CONV) {   /* issue 25: 0 ran, 1 no graph engine, -1 error */
        int r = cu_conv_graph_fwd(cb, s, dt, x, w, y);
        if (r <= 0) return r;
    }
    struct conv_plan *p = plan_get(cb, s, dt, align_class(x, w, y));
    if (!p) return -1;
    if (!p->found[DIR_FWD] && plan_find(cb, p, DIR_FWD, x, w, y)) return -1;
    float alpha = 1.0f, beta = 0.0f;
    CUDNN_CHECK(cb, cudnnConvolutionForward(cb->cudnn, &alpha, p->xd, x, p->wd, w, p->cd[DIR_FWD],
                                            (cudnnConvolutionFwdAlgo_t)p->algo[DIR_FWD], cb->ws.p,
                                            p->ws[DIR_FWD], &beta, p->yd, y));
    return 0;
}

int cu_conv2d_bwd_data(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                       const void *w, void *dx) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    if (cb->fusion & BACKEND_FUSE_GRAPH_CONV) {   /* issue 25: 0 ran, 1 no graph engine, -1 error */
        int r = cu_conv_graph_dgrad(cb, s, dt, dy, w, dx);
        if (r <= 0) return r;
    }
    return cu_conv_legacy_bwd_data(be, s, dt, dy, w, dx, 0.0f);
}

int cu_conv_legacy_bwd_data(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                            const void *w, void *dx, float beta) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    struct conv_plan *p = plan_get(cb, s, dt, align_class(dy, w, dx));
    if (!p) return -1;
    if (!p->found[DIR_BWD_DATA]) {
        /* with beta != 0 dx holds a gradient the search must not overwrite: search on a
         * buffer with dx's address bits modulo 256 (the same alignment class) */
        void *tmp = NULL, *out = dx;
        if (beta != 0.0f) {
            size_t bytes = (size_t)s->n * s->h * s->w * s->c * dt_size(dt);
            if (!(tmp = cb_malloc(cb, bytes + 256, "conv search output"))) return -1;
            out = (char *)tmp + ((uintptr_t)dx & 255);
        }
        int r = plan_find(cb, p, DIR_BWD_DATA, dy, w, out);
        cb_free(cb, tmp);
        if (r) return -1;
    }
    float alpha = 1.0f;
    CUDNN_CHECK(cb, cudnnConvolutionBackwardData(cb->cudnn, &alpha, p->wd, w, p->yd, dy, p->cd[DIR_BWD_DATA],
                                                 (cudnnConvolutionBwdDataAlgo_t)p->algo[DIR_BWD_DATA],
                                                 cb->ws.p, p->ws[DIR_BWD_DATA], &beta, p->xd, dx));
    return 0;
}

int cu_conv2d_bwd_filter(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x,
                         const void *dy, float *dw) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    struct conv_plan *p = plan_get(cb, s, dt, align_class(x, dy, dy));
    if (!p) return -1;
    int64_t nw = (int64_t)s->k * s->r * s->s * (s->c / conv_groups(s));
    if (cb_grow(cb, &cb->stage, (size_t)nw * dt_size(dt), "conv weight-gradient staging")) return -1;
    if ((cb->fusion & BACKEND_FUSE_WGRAD_F32) && (cb->fusion & BACKEND_FUSE_GRAPH_CONV)) {
        /* wgrad_f32: added into the fp32 gradient by the convolution (beta = 1), no staging */
        void *t[3] = {(void *)x, (void *)dy, dw};
        int r = cu_conv_graph_run(cb, CG_WGRAD_F32, s, dt, t);
        if (r <= 0) return r;
    }
    if (cb->fusion & BACKEND_FUSE_GRAPH_CONV) {   /* issue 25: 0 ran, 1 no graph engine, -1 error */
        int r = cu_conv_graph_wgrad(cb, s, dt, x, dy, cb->stage.p);
        if (r < 0) return -1;
        if (r == 0) return cu_accumulate(be, nw, dt, cb->stage.p, dw);
    }
    if (!p->found[DIR_BWD_FILTER] && plan_find(cb, p, DIR_BWD_FILTER, x, dy, cb->stage.p)) return -1;
    float alpha = 1.0f, beta = 0.0f;
    CUDNN_CHECK(cb, cudnnConvolutionBackwardFilter(cb->cudnn, &alpha, p->xd, x, p->yd, dy, p->cd[DIR_BWD_FILTER],
                                                   (cudnnConvolutionBwdFilterAlgo_t)p->algo[DIR_BWD_FILTER],
                                                   cb->ws.p, p->ws[DIR_BWD_FILTER], &beta, p->wd,
                                                   cb->stage.p));
    return cu_accumulate(be, nw, dt, cb->stage.p, dw);
}

/* ---- what ran (the conv_engine op) ---- */

static const char *algo_name(int dir, int algo) {
    static const char *const fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT",
                                      "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    static const char *const bwd_data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    static const char *const bwd_filter[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                             "FFT_TILING"};
    if (dir == DIR_FWD && algo >= 0 && algo < 8) return fwd[algo];
    if (dir == DIR_BWD_DATA && algo >= 0 && algo < 6) return bwd_data[algo];
    if (dir == DIR_BWD_FILTER && algo >= 0 && algo < 7) return bwd_filter[algo];
    return "?";
}

static const char *math_name(int math) {
    switch (math) {
    case CUDNN_TENSOR_OP_MATH: return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor_op_conv";
    case CUDNN_FMA_MATH: return "fma";
    default: return "default";
    }
}

/* One plan direction in words, e.g. "cudnn fwd IMPLICIT_PRECOMP_GEMM tensor_op, ws 12.0 MB,
 * gpu 0.123 ms, host 9 us; by gpu+host cost of 5 usable". */
static int describe_dir(const struct conv_plan *p, int dir, char *buf, size_t len) {
    static const char *const dn[3] = {"fwd", "bwd_data", "bwd_filter"};
    static const char *const how[3][2] = {{"c", "by gpu+host cost"}, {"h", "deterministic, heuristic order"},
                                          {"f", "fastest: no deterministic one"}};
    const char *why = "";
    for (int i = 0; i < 3; i++)
        if (p->how[dir] == how[i][0][0]) why = how[i][1];
    char host[32] = "";
    if (p->host_us[dir] >= 0) snprintf(host, sizeof host, ", host %.0f us", (double)p->host_us[dir]);
    return snprintf(buf, len, "cudnn %s %s %s, ws %.1f MB, gpu %.3f ms%s; %s of %d usable", dn[dir],
                    algo_name(dir, p->algo[dir]), math_name(p->math[dir]), (double)p->ws[dir] / (1 << 20),
                    (double)p->gpu_ms[dir], host, why, p->usable[dir]);
}

int cu_conv_describe(backend_t *be, const conv_shape_t *s, int which, char *buf, size_t len) {
    cuda_be_t *cb = cb_of(be);
    if (!buf || !len) return -1;
    buf[0] = '\0';
    if (which < 0 || which > 2) return -1;
    int matches = 0;
    for (int i = 0; i < cb->n_convs; i++)
        matches += cb->convs[i].found[which] && !memcmp(&cb->convs[i].s, s, sizeof *s);
    size_t used = 0;
    for (int i = 0; i < cb->n_convs && used + 1 < len; i++) {
        const struct conv_plan *p = &cb->convs[i];
        if (!p->found[which] || memcmp(&p->s, s, sizeof *s)) continue;
        char one[256];
        describe_dir(p, which, one, sizeof one);
        if (strstr(buf, one)) continue;   /* the same choice at another pointer alignment */
        int w = snprintf(buf + used, len - used, "%s%s%s%s", used ? " | " : "", matches > 1 ? dtype_names[p->dt] : "",
                         matches > 1 ? ": " : "", one);
        if (w < 0) break;
        used += (size_t)w < len - used ? (size_t)w : len - used - 1;
    }
    if (!used) snprintf(buf, len, "not planned yet (no call of this shape and direction so far)");
    return used ? 0 : -1;
}
