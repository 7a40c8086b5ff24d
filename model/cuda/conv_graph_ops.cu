/* conv_graph_ops.cu: the cuDNN graph API descriptors of each graph kind of
 * conv_graph.cuh (tensors, the convolution, pointwise, reduction and genStats
 * operations), built and finalized on the host (no device needed), with sticky errors;
 * and the unit-test entry points of cuda_backend.h (cuda_conv_graph_kinds / _describe;
 * _kind_name is conv_graph.cu's, from its table of kinds). Layout conventions at the top
 * of conv_graph.cu. Not here: operation graphs, engines, plans and execution
 * (conv_graph.cu).
 */
#include "model/cuda/conv_graph_impl.cuh"

#include <stdio.h>
#include <string.h>

#include "model/cuda/cuda_backend.h"

/* ---- descriptor helpers (sticky errors) ---- */

bd_t cg_new(cg_build_t *b, cudnnBackendDescriptorType_t t, const char *what) {
    if (b->st != CUDNN_STATUS_SUCCESS) return NULL;
    if (b->n == CG_MAX_D) {
        b->st = CUDNN_STATUS_INTERNAL_ERROR;
        snprintf(b->what, sizeof b->what, "too many descriptors at %s", what);
        return NULL;
    }
    bd_t d = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(t, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        b->st = st;
        snprintf(b->what, sizeof b->what, "creating %s", what);
        return NULL;
    }
    b->d[b->n++] = d;
    return d;
}

void cg_set(cg_build_t *b, bd_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                 int64_t n, const void *v, const char *what) {
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    cudnnStatus_t st = cudnnBackendSetAttribute(d, a, t, n, v);
    if (st != CUDNN_STATUS_SUCCESS) {
        b->st = st;
        snprintf(b->what, sizeof b->what, "setting %s", what);
    }
}

void cg_fin(cg_build_t *b, bd_t d, const char *what) {
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS) {
        b->st = st;
        snprintf(b->what, sizeof b->what, "finalizing %s", what);
    }
}

void cg_free(cg_build_t *b) {
    while (b->n > 0) cudnnBackendDestroyDescriptor(b->d[--b->n]);
}

/* dims/strides of an NHWC-laid [n, c, h, w] tensor (also KRSC filters and [1, c, 1, 1]) */
static void nhwc(int64_t n, int64_t c, int64_t h, int64_t w, int64_t dim[4], int64_t str[4]) {
    dim[0] = n; dim[1] = c; dim[2] = h; dim[3] = w;
    str[0] = h * w * c; str[1] = 1; str[2] = w * c; str[3] = c;
}

static bd_t btensor(cg_build_t *b, int64_t uid, cudnnDataType_t t, int64_t n, int64_t c, int64_t h,
                    int64_t w, int64_t align, bool virt) {
    int64_t dim[4], str[4];
    nhwc(n, c, h, w, dim, str);
    bd_t d = cg_new(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "a tensor");
    BSET(b, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t);
    BSET(b, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
    BSET(b, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str);
    BSET(b, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    BSET(b, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (virt) {
        bool v = true;
        BSET(b, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    }
    cg_fin(b, d, "a tensor");
    return d;
}

static bd_t bconv_desc(cg_build_t *b, const conv_shape_t *s) {
    bd_t d = cg_new(b, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "the convolution");
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t dims = 2, pad[2] = {s->pad, s->pad}, str[2] = {s->stride, s->stride}, dil[2] = {1, 1};
    BSET(b, d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    BSET(b, d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    BSET(b, d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    BSET(b, d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    BSET(b, d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    BSET(b, d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
    BSET(b, d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
    cg_fin(b, d, "the convolution");
    return d;
}

/* A convolution operation: dir 0 fprop (a x, w, o y), 1 dgrad (a dy, w, o dx), 2 wgrad
 * (a x, w dy, o dw). */
static bd_t bconv_op(cg_build_t *b, int dir, bd_t cd, bd_t a, bd_t w, bd_t o, float beta) {
    static const cudnnBackendDescriptorType_t T[3] = {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                                      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                                                      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    bd_t d = cg_new(b, T[dir], "the convolution operation");
    float alpha = 1.0f;
    if (dir == 0) {
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    } else if (dir == 1) {
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    } else {
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        BSET(b, d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    }
    cg_fin(b, d, "the convolution operation");
    return d;
}

/* A pointwise operation y = mode(x, bt) (bt NULL: unary); RELU_BWD: dx = y-slot, dy = x,
 * the forward activation = bt. */
static bd_t bpointwise(cg_build_t *b, cudnnPointwiseMode_t mode, bd_t x, bd_t bt, bd_t y) {
    bd_t pw = cg_new(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "a pointwise mode");
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    BSET(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    BSET(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    cg_fin(b, pw, "a pointwise mode");
    bd_t d = cg_new(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "a pointwise operation");
    BSET(b, d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    if (mode == CUDNN_POINTWISE_RELU_BWD) {
        BSET(b, d, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        BSET(b, d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bt);
        BSET(b, d, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    } else {
        BSET(b, d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        if (bt) BSET(b, d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bt);
        BSET(b, d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    }
    cg_fin(b, d, "a pointwise operation");
    return d;
}

/* y = sum of x over every dimension y has as 1 (here n, h, w). */
static bd_t breduce(cg_build_t *b, bd_t x, bd_t y, bool deterministic) {
    bd_t r = cg_new(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "a reduction mode");
    cudnnReduceTensorOp_t op = CUDNN_REDUCE_TENSOR_ADD;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    BSET(b, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op);
    BSET(b, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (deterministic) {
        bool det = true;
        BSET(b, r, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &det);
    }
    cg_fin(b, r, "a reduction mode");
    bd_t d = cg_new(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "a reduction");
    BSET(b, d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    BSET(b, d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    BSET(b, d, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r);
    cg_fin(b, d, "a reduction");
    return d;
}

static bd_t bgenstats(cg_build_t *b, bd_t x, bd_t sum, bd_t sq) {
    bd_t d = cg_new(b, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, "genStats");
    cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    BSET(b, d, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode);
    BSET(b, d, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    BSET(b, d, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    BSET(b, d, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum);
    BSET(b, d, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sq);
    cg_fin(b, d, "genStats");
    return d;
}

static cudnnDataType_t cudnn_dt(dtype_t dt) {
    return dt == DT_F32 ? CUDNN_DATA_FLOAT : (dt == DT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16);
}

/* Builds and finalizes the operations of graph kind on shape s in dt with tensor
 * alignments al into ops (descriptors in b; no device needed); their count, or -1 (b->st
 * says why). */
int cg_build_ops(cg_build_t *b, int kind, const conv_shape_t *s, dtype_t dt, const unsigned char *al, bool det,
                     bd_t *ops) {
    cudnnDataType_t t = cudnn_dt(dt), f = CUDNN_DATA_FLOAT;
    int nops = 0;
    if (conv_groups(s) > 1) {   /* the tensors below are those of a dense convolution */
        b->st = CUDNN_STATUS_BAD_PARAM;
        snprintf(b->what, sizeof b->what, "a grouped convolution (groups %d: the legacy API runs it)", s->groups);
        return -1;
    }
    bd_t cd = bconv_desc(b, s);
    switch (kind) {
    case CG_FPROP:
    case CG_FPROP_STATS: {
        bd_t x = btensor(b, 1, t, s->n, s->c, s->h, s->w, al[0], false);
        bd_t w = btensor(b, 2, t, s->k, s->c, s->r, s->s, al[1], false);
        bd_t y = btensor(b, 3, t, s->n, s->k, s->p, s->q, al[2], false);
        ops[nops++] = bconv_op(b, 0, cd, x, w, y, 0.0f);
        if (kind == CG_FPROP_STATS) {
            bd_t sum = btensor(b, 4, f, 1, s->k, 1, 1, al[3], false);
            bd_t sq = btensor(b, 5, f, 1, s->k, 1, 1, al[4], false);
            ops[nops++] = bgenstats(b, y, sum, sq);
        }
        break;
    }
    case CG_DGRAD:
    case CG_DGRAD_ACCUM: {
        bd_t dy = btensor(b, 1, t, s->n, s->k, s->p, s->q, al[0], false);
        bd_t w = btensor(b, 2, t, s->k, s->c, s->r, s->s, al[1], false);
        bd_t dx = btensor(b, 3, t, s->n, s->c, s->h, s->w, al[2], false);
        ops[nops++] = bconv_op(b, 1, cd, dy, w, dx, kind == CG_DGRAD_ACCUM ? 1.0f : 0.0f);
        break;
    }
    case CG_WGRAD:
    case CG_WGRAD_F32: {
        bool f32 = kind == CG_WGRAD_F32;
        bd_t x = btensor(b, 1, t, s->n, s->c, s->h, s->w, al[0], false);
        bd_t dy = btensor(b, 2, t, s->n, s->k, s->p, s->q, al[1], false);
        bd_t dw = btensor(b, 3, f32 ? f : t, s->k, s->c, s->r, s->s, al[2], false);
        ops[nops++] = bconv_op(b, 2, cd, x, dy, dw, f32 ? 1.0f : 0.0f);
        break;
    }
    case CG_DGRAD_DBN:
    case CG_DGRAD_DRELU_DBN: {
        bool relu = kind == CG_DGRAD_DRELU_DBN;
        int u = 1;   /* uids in pointer order: dy, w, g, [relu_y], bn_x, mean, s1, s2 */
        bd_t dy = btensor(b, u, t, s->n, s->k, s->p, s->q, al[u - 1], false); u++;
        bd_t w = btensor(b, u, t, s->k, s->c, s->r, s->s, al[u - 1], false); u++;
        bd_t g = btensor(b, u, t, s->n, s->c, s->h, s->w, al[u - 1], false); u++;
        bd_t ry = NULL;
        if (relu) { ry = btensor(b, u, t, s->n, s->c, s->h, s->w, al[u - 1], false); u++; }
        bd_t bx = btensor(b, u, t, s->n, s->c, s->h, s->w, al[u - 1], false); u++;
        bd_t mean = btensor(b, u, f, 1, s->c, 1, 1, al[u - 1], false); u++;
        bd_t s1 = btensor(b, u, f, 1, s->c, 1, 1, al[u - 1], false); u++;
        bd_t s2 = btensor(b, u, f, 1, s->c, 1, 1, al[u - 1], false);
        bd_t pre = relu ? btensor(b, 100, f, s->n, s->c, s->h, s->w, 16, true) : g;
        bd_t xc = btensor(b, 101, f, s->n, s->c, s->h, s->w, 16, true);
        bd_t gx = btensor(b, 102, f, s->n, s->c, s->h, s->w, 16, true);
        ops[nops++] = bconv_op(b, 1, cd, dy, w, pre, 0.0f);
        if (relu) ops[nops++] = bpointwise(b, CUDNN_POINTWISE_RELU_BWD, pre, ry, g);
        ops[nops++] = breduce(b, g, s1, det);
        ops[nops++] = bpointwise(b, CUDNN_POINTWISE_SUB, bx, mean, xc);
        ops[nops++] = bpointwise(b, CUDNN_POINTWISE_MUL, g, xc, gx);
        ops[nops++] = breduce(b, gx, s2, det);
        break;
    }
    case CG_SBR_FPROP:
    case CG_SBR_FPROP_STATS:
    case CG_SBR_WGRAD: {
        /* x * scale + bias, ReLU, then the convolution of that (virtual, fp32) with w
         * (fprop) or dy (wgrad): cuDNN's ConvBNfprop / ConvBNwgrad prologue */
        bool wgrad = kind == CG_SBR_WGRAD;
        bd_t x = btensor(b, 1, t, s->n, s->c, s->h, s->w, al[0], false);
        bd_t sc = btensor(b, 2, t, 1, s->c, 1, 1, al[1], false);
        bd_t bi = btensor(b, 3, t, 1, s->c, 1, 1, al[2], false);
        bd_t v1 = btensor(b, 101, f, s->n, s->c, s->h, s->w, 16, true);
        bd_t v2 = btensor(b, 102, f, s->n, s->c, s->h, s->w, 16, true);
        bd_t v3 = btensor(b, 103, f, s->n, s->c, s->h, s->w, 16, true);
        ops[nops++] = bpointwise(b, CUDNN_POINTWISE_MUL, x, sc, v1);
        ops[nops++] = bpointwise(b, CUDNN_POINTWISE_ADD, v1, bi, v2);
        ops[nops++] = bpointwise(b, CUDNN_POINTWISE_RELU_FWD, v2, NULL, v3);
        if (wgrad) {
            bd_t dy = btensor(b, 4, t, s->n, s->k, s->p, s->q, al[3], false);
            bd_t dw = btensor(b, 5, t, s->k, s->c, s->r, s->s, al[4], false);
            ops[nops++] = bconv_op(b, 2, cd, v3, dy, dw, 0.0f);
        } else {
            bd_t w = btensor(b, 4, t, s->k, s->c, s->r, s->s, al[3], false);
            bd_t y = btensor(b, 5, t, s->n, s->k, s->p, s->q, al[4], false);
            ops[nops++] = bconv_op(b, 0, cd, v3, w, y, 0.0f);
            if (kind == CG_SBR_FPROP_STATS) {
                bd_t sum = btensor(b, 6, f, 1, s->k, 1, 1, al[5], false);
                bd_t sq = btensor(b, 7, f, 1, s->k, 1, 1, al[6], false);
                ops[nops++] = bgenstats(b, y, sum, sq);
            }
        }
        break;
    }
    default:
        b->st = CUDNN_STATUS_BAD_PARAM;
        snprintf(b->what, sizeof b->what, "graph kind %d", kind);
        return -1;
    }
    return b->st == CUDNN_STATUS_SUCCESS ? nops : -1;
}

int cuda_conv_graph_kinds(void) { return CG_KIND_COUNT; }

int cuda_conv_graph_describe(int kind, const conv_shape_t *s, dtype_t dt, bool deterministic, char *why, size_t len) {
    cg_build_t b;
    memset(&b, 0, sizeof b);
    unsigned char al[CG_MAX_T];
    memset(al, 16, sizeof al);
    bd_t ops[8];
    int n = kind >= 0 && kind < CG_KIND_COUNT ? cg_build_ops(&b, kind, s, dt, al, deterministic, ops) : -1;
    if (n < 0 && !b.what[0]) snprintf(why, len, "graph kind %d does not exist", kind);
    else if (n < 0) snprintf(why, len, "%s: %s", b.what, cudnnGetErrorString(b.st));
    else snprintf(why, len, "%d operations", n);
    cg_free(&b);
    return n < 0 ? -1 : 0;
}
