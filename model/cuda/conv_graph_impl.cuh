/* conv_graph_impl.cuh: what conv_graph.cu (plans, engines, execution) and
 * conv_graph_ops.cu (the descriptors of each graph kind) share. Private to those two.
 */
#ifndef RUNNER_MODEL_CUDA_CONV_GRAPH_IMPL_CUH
#define RUNNER_MODEL_CUDA_CONV_GRAPH_IMPL_CUH

#include <cudnn.h>

#include "model/backend.h"
#include "model/cuda/conv_graph.cuh"

typedef cudnnBackendDescriptor_t bd_t;

enum { CG_MAX_T = 8, CG_MAX_D = 48 };

/* The descriptors of one graph build; the first failure sticks and later calls do nothing. */
typedef struct cg_build {
    bd_t d[CG_MAX_D];
    int n;
    cudnnStatus_t st;
    char what[96];
} cg_build_t;

/* A new descriptor of type t kept in b (NULL once b failed). */
bd_t cg_new(cg_build_t *b, cudnnBackendDescriptorType_t t, const char *what);
/* cudnnBackendSetAttribute / Finalize, recording the first failure in b. */
void cg_set(cg_build_t *b, bd_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
          const void *v, const char *what);
#define BSET(b, d, attr, type, n, v) cg_set((b), (d), attr, type, (n), (v), #attr)
void cg_fin(cg_build_t *b, bd_t d, const char *what);
/* Destroys b's descriptors. */
void cg_free(cg_build_t *b);
/* Builds and finalizes the operations of graph kind on shape s in dt with tensor
 * alignments al (bytes, pointer order of cg_kind_t) into ops (at most 8; descriptors in
 * b); deterministic asks reductions to be (CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC). Their
 * count, or -1 (b->st and b->what say why; a grouped shape is refused). */
int cg_build_ops(cg_build_t *b, int kind, const conv_shape_t *s, dtype_t dt, const unsigned char *al, bool det,
              bd_t *ops);

#endif
