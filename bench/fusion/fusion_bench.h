/* fusion_bench.h: the issue-25 modes of bench_gpu_bench (bench/gpu_bench.c): host
 * microseconds per convolution call, legacy API against the cuDNN graph API
 * (--conv-host-us), and the byte model's prediction for a configuration (--predict).
 * Both print JSON lines on stdout and return the process exit code (0 or 1).
 */
#ifndef RUNNER_BENCH_FUSION_FUSION_BENCH_H
#define RUNNER_BENCH_FUSION_FUSION_BENCH_H

#include "model/backend.h"

/* Every conv layer of arch (CIFAR stem, batch rows of 32x32) issued in order on a CUDA
 * backend, passes times per direction after two warm-up passes, the device synchronized
 * between passes, only the issuing timed; first with the legacy API (no fusion options),
 * then with graph_conv. One line per (api, direction):
 *   {"bench": "conv_host_us", "api": "legacy"|"graph", "dir": "fwd"|"bwd_data"|"bwd_filter",
 *    "host_us_per_call": ..., "calls": ..., "graph_calls": ...}
 * (graph_calls: calls the graph API ran; the rest fell back to legacy). */
int fusion_bench_conv_host_us(const char *arch, int classes, int batch, const char *precision, int device,
                              int passes, dtype_t dt);

/* The byte model (model/net_fusion.h) for arch at batch, 32x32, dt, SGD, fusion options
 * fusion: one line with the bytes per step of each category, their total, the conv
 * epilogues' reads and how many nodes each fusion applies to. No device needed. */
int fusion_bench_predict(const char *arch, int classes, int batch, const char *precision, unsigned fusion,
                         dtype_t dt);

#endif
