/* graph.cuh: CUDA graph capture and replay on the backend's stream
 * (backend_ops_t.graph_capture_begin / _end, graph_launch, graph_free).
 * Not here: what to record (the trainer decides).
 */
#ifndef RUNNER_MODEL_CUDA_GRAPH_CUH
#define RUNNER_MODEL_CUDA_GRAPH_CUH

#include "model/backend.h"

int cu_graph_capture_begin(backend_t *be);
int cu_graph_capture_end(backend_t *be, void **graph);
int cu_graph_launch(backend_t *be, void *graph);
void cu_graph_free(backend_t *be, void *graph);

#endif
