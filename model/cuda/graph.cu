/* graph.cu: CUDA graphs for the backend's graph_* ops (model/backend.h): stream capture
 * of the ops issued on the backend's stream, instantiation, replay, and the staleness
 * rule that keeps a replay from touching freed memory.
 *
 * Capture uses cudaStreamCaptureModeThreadLocal: the loader and communicator threads
 * may keep calling CUDA while the training thread records. A recording bakes in the
 * device pointers it saw, among them the shared workspace and scratch buffers, which
 * cb_grow may replace later (a new shape in evaluation needing a larger cuDNN
 * workspace); every such replacement advances cb->mem_gen, and a graph recorded under
 * an older generation is reported stale (1) instead of being launched.
 * Not here: deciding what to record (the trainer), host-side state of what was recorded
 * (net_graph_replayed in model/net_run.c).
 */
#include "model/cuda/graph.cuh"

#include <stdlib.h>

#include "model/cuda/cuda_impl.cuh"

typedef struct cb_graph {
    cudaGraphExec_t exec;
    uint64_t mem_gen;
} cb_graph_t;

int cu_graph_capture_begin(backend_t *be) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    CUDA_CHECK(cb, cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeThreadLocal));
    cb->capturing = true;
    cb->capture_gen = cb->mem_gen;
    return 0;
}

int cu_graph_capture_end(backend_t *be, void **graph) {
    cuda_be_t *cb = cb_of(be);
    *graph = NULL;
    cudaSetDevice(be->device);
    cudaGraph_t g = NULL;
    cudaError_t st = cudaStreamEndCapture(cb->stream, &g);
    cb->capturing = false;
    if (st != cudaSuccess || !g) {
        cudaGetLastError();   /* an invalidated capture is not a sticky error */
        if (g) cudaGraphDestroy(g);
        /* keep the first failure (the op that broke the recording) if there was one */
        return be->err.code ? -1
                            : cb_fail_call(cb, "cudaStreamEndCapture", cudaGetErrorString(st), __FILE__, __LINE__);
    }
    if (cb->mem_gen != cb->capture_gen) {   /* a workspace grew while recording */
        cudaGraphDestroy(g);
        return cb_fail(cb, "graph capture: a workspace was reallocated while recording");
    }
    cb_graph_t *h = (cb_graph_t *)calloc(1, sizeof *h);
    if (!h) {
        cudaGraphDestroy(g);
        return cb_fail(cb, "graph capture: out of memory");
    }
    st = cudaGraphInstantiate(&h->exec, g, 0);
    cudaGraphDestroy(g);
    if (st != cudaSuccess) {
        cudaGetLastError();
        free(h);
        return cb_fail_call(cb, "cudaGraphInstantiate", cudaGetErrorString(st), __FILE__, __LINE__);
    }
    h->mem_gen = cb->capture_gen;
    *graph = h;
    return 0;
}

int cu_graph_launch(backend_t *be, void *graph) {
    cuda_be_t *cb = cb_of(be);
    cb_graph_t *h = (cb_graph_t *)graph;
    if (!h) return cb_fail(cb, "graph_launch: no graph");
    if (h->mem_gen != cb->mem_gen) return 1;
    CB_ENTER(cb);
    CUDA_CHECK(cb, cudaGraphLaunch(h->exec, cb->stream));
    return 0;
}

void cu_graph_free(backend_t *be, void *graph) {
    cb_graph_t *h = (cb_graph_t *)graph;
    if (!h) return;
    cudaSetDevice(be->device);
    cudaGraphExecDestroy(h->exec);
    free(h);
}
