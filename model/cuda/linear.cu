/* linear.cu: y[n,out] = x[n,in] w[out,in]^T + b[out] and its gradients on cuBLASLt.
 *
 * Row-major tensors are read by cuBLASLt as their column-major transposes, so:
 *   forward  Y^T(out x n)  = W^T... : D = op_T(Wcm[in x out]) * Xcm[in x n]
 *   dx       dX^T(in x n)  = Wcm[in x out] * dYcm[out x n]
 *   dw       dW^T(in x out) += Xcm[in x n] * op_T(dYcm[out x n])      (beta = 1)
 * Every GEMM reads dt inputs (fp32, fp16 or bf16) and writes fp32 with fp32 accumulation
 * (TF32 tensor cores for fp32 inputs when allow_tf32). For half activations the fp32
 * result lands in the backend's staging buffer and one kernel adds the bias and rounds
 * once; fp32 results are written in place. db is a column sum in a small kernel.
 * Matmul descriptors, layouts and the heuristic's algorithm are cached per shape, type
 * and pointer alignment. Not here: bias epilogues (the classifier is tiny; one extra
 * pass over n x out values costs nothing measurable).
 */
#include "model/cuda/linear.cuh"

#include <stdlib.h>
#include <string.h>

#include "model/cuda/cuda_impl.cuh"

enum { LT_MAX_WS = 32 << 20 };

typedef struct lt_key {
    int ta, tb, m, n, k, lda, ldb, ldc;
    int abtype, compute;
    int align_a, align_b, align_c;
} lt_key_t;

struct lt_plan {
    lt_key_t key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
};

/* Largest power of two (<= 256) dividing the address. */
static int ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && (a % (uintptr_t)al) != 0) al /= 2;
    return al;
}

static void lt_plan_destroy(struct lt_plan *p) {
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
}

void cu_linear_free_plans(cuda_be_t *cb) {
    for (int i = 0; i < cb->n_lts; i++) lt_plan_destroy(&cb->lts[i]);
    free(cb->lts);
    cb->lts = NULL;
    cb->n_lts = cb->cap_lts = 0;
}

/* Builds descriptors and asks the heuristic for the best algorithm for key. */
static int lt_plan_make(cuda_be_t *cb, const lt_key_t *k, struct lt_plan *p) {
    memset(p, 0, sizeof *p);
    p->key = *k;
    cublasOperation_t ta = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t ab = (cudaDataType_t)k->abtype;
    CUBLAS_CHECK(cb, cublasLtMatmulDescCreate(&p->desc, (cublasComputeType_t)k->compute, CUDA_R_32F));
    CUBLAS_CHECK(cb, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cb, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CUBLAS_CHECK(cb, cublasLtMatrixLayoutCreate(&p->la, ab, k->ta ? k->k : k->m, k->ta ? k->m : k->k, k->lda));
    CUBLAS_CHECK(cb, cublasLtMatrixLayoutCreate(&p->lb, ab, k->tb ? k->n : k->k, k->tb ? k->k : k->n, k->ldb));
    CUBLAS_CHECK(cb, cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, k->m, k->n, k->ldc));

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cb, cublasLtMatmulPreferenceCreate(&pref));
    uint64_t max_ws = LT_MAX_WS;
    uint32_t aa = (uint32_t)k->align_a, abb = (uint32_t)k->align_b, ac = (uint32_t)k->align_c;
    cublasLtMatmulHeuristicResult_t res;
    int count = 0;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &abb, sizeof abb);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof ac);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(cb->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &count);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS)
        return cb_fail_call(cb, "cublasLtMatmulAlgoGetHeuristic", cublasLtGetStatusString(st), __FILE__, __LINE__);
    if (count < 1)
        return cb_fail(cb, "cuBLASLt has no algorithm for linear m=%d n=%d k=%d (type %d)", k->m, k->n, k->k, k->abtype);
    p->algo = res.algo;
    p->ws = res.workspaceSize;
    return 0;
}

/* D(m x n, fp32, column-major, ld ldc) = op(A) op(B) + beta * D, with the plan cached. */
static int lt_matmul(cuda_be_t *cb, bool ta, bool tb, int m, int n, int k, dtype_t dt,
                     const void *A, int lda, const void *B, int ldb, float *D, int ldc, float beta) {
    lt_key_t key;
    memset(&key, 0, sizeof key);
    key.ta = ta; key.tb = tb; key.m = m; key.n = n; key.k = k;
    key.lda = lda; key.ldb = ldb; key.ldc = ldc;
    key.abtype = dt == DT_F32 ? CUDA_R_32F : (dt == DT_F16 ? CUDA_R_16F : CUDA_R_16BF);
    key.compute = (dt == DT_F32 && cb->allow_tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    key.align_a = ptr_align(A); key.align_b = ptr_align(B); key.align_c = ptr_align(D);
    struct lt_plan *p = NULL;
    for (int i = 0; i < cb->n_lts; i++)
        if (!memcmp(&cb->lts[i].key, &key, sizeof key)) { p = &cb->lts[i]; break; }
    if (!p) {
        if (cb->n_lts == cb->cap_lts) {
            int cap = cb->cap_lts ? cb->cap_lts * 2 : 8;
            struct lt_plan *np = (struct lt_plan *)realloc(cb->lts, (size_t)cap * sizeof *np);
            if (!np) return cb_fail(cb, "out of memory for the cuBLASLt plan cache");
            cb->lts = np;
            cb->cap_lts = cap;
        }
        struct lt_plan fresh;
        if (lt_plan_make(cb, &key, &fresh)) { lt_plan_destroy(&fresh); return -1; }
        cb->lts[cb->n_lts++] = fresh;
        p = &cb->lts[cb->n_lts - 1];
    }
    if (cb_grow(cb, &cb->ws, p->ws, "cuBLASLt workspace")) return -1;
    float alpha = 1.0f;
    CUBLAS_CHECK(cb, cublasLtMatmul(cb->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D, p->lc, D,
                                    p->lc, &p->algo, cb->ws.p, p->ws, cb->stream));
    return 0;
}

/* y[i, j] = round(acc[i, j] + b[j]) (acc may equal y when T is float). */
template <typename T>
__global__ void bias_out_k(int64_t total, int out, const float *acc, const float *b, T *y) {
    pdl_enter();
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
        y[i] = from_f32<T>(acc[i] + (b ? b[i % out] : 0.0f));
}

/* db[j] += sum_i dy[i, j]. */
template <typename T>
__global__ void colsum_k(int n, int out, const T *dy, float *db) {
    pdl_enter();
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= out) return;
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += to_f32(dy[(int64_t)i * out + j]);
    db[j] += s;
}

int cu_linear_fwd(backend_t *be, int n, int in, int out, dtype_t dt, const void *x,
                  const void *w, const float *b, void *y) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0 || in <= 0 || out <= 0)
        return cb_fail(cb, "linear_fwd: empty shape (n %d, in %d, out %d)", n, in, out);
    CB_ENTER(cb);
    int64_t total = (int64_t)n * out;
    float *acc = (float *)y;
    if (dt != DT_F32) {
        if (cb_grow(cb, &cb->stage, (size_t)total * sizeof(float), "linear staging")) return -1;
        acc = (float *)cb->stage.p;
    }
    if (lt_matmul(cb, true, false, out, n, in, dt, w, in, x, in, acc, out, 0.0f)) return -1;
    if (dt != DT_F32 || b) {
        DISPATCH_DT(cb, dt, T, cb_launch(cb, (bias_out_k<T>), cb_blocks(cb, total, 256), 256, 0,
            total, out, acc, b, (T *)y));
        KERNEL_CHECK(cb, "bias_out_k");
    }
    return 0;
}

int cu_linear_bwd(backend_t *be, int n, int in, int out, dtype_t dt, const void *x,
                  const void *w, const void *dy, void *dx, float *dw, float *db) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0 || in <= 0 || out <= 0)
        return cb_fail(cb, "linear_bwd: empty shape (n %d, in %d, out %d)", n, in, out);
    CB_ENTER(cb);
    if (dx) {
        int64_t total = (int64_t)n * in;
        float *acc = (float *)dx;
        if (dt != DT_F32) {
            if (cb_grow(cb, &cb->stage, (size_t)total * sizeof(float), "linear staging")) return -1;
            acc = (float *)cb->stage.p;
        }
        if (lt_matmul(cb, false, false, in, n, out, dt, w, in, dy, out, acc, in, 0.0f)) return -1;
        if (dt != DT_F32) {
            DISPATCH_DT(cb, dt, T, cb_launch(cb, (bias_out_k<T>), cb_blocks(cb, total, 256), 256, 0,
                total, in, acc, (const float *)NULL, (T *)dx));
            KERNEL_CHECK(cb, "bias_out_k");
        }
    }
    if (dw && lt_matmul(cb, false, true, in, out, n, dt, x, in, dy, out, dw, in, 1.0f)) return -1;
    if (db) {
        DISPATCH_DT(cb, dt, T, cb_launch(cb, (colsum_k<T>), (out + 127) / 128, 128, 0,
            n, out, (const T *)dy, db));
        KERNEL_CHECK(cb, "colsum_k");
    }
    return 0;
}
