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

/* The pattern probe (cuda_conv_graph_probe): for each distinct conv shape of arch (CIFAR
 * stem, batch rows of 32x32, dt; biggest share of the step first) and each graph kind
 * of the MLPerf-style fusions (fprop, fprop + genStats, the scale-bias-ReLU prologue on
 * fprop with and without genStats, wgrad, the prologue on wgrad, wgrad accumulating into an
 * fp32 gradient with beta = 1), what cuDNN offers on
 * this device (engine configs, usable ones, runtime-compiled ones) and the fastest of the
 * first pre-compiled plans, ms; rtc_budget runtime-compiled engines (~1 s each to build)
 * are also built and timed, the prologue kinds first. One line per (shape, kind):
 *   {"bench": "conv_patterns", "shape": "3x3 c64 k64 s1 32x32", "layers": ..., "sbr_layers": ...,
 *    "kind": ..., "configs": ..., "usable": ..., "runtime": ..., "pre_ms": ..., "pre_engine": ...,
 *    "rtc_ms": ..., "rtc_engine": ..., "why": ...}
 * then per shape the unfused ops the prologue would replace, timed with events
 * ({"bench": "conv_patterns_bn", "bn_apply_in_ms", "bn_stats_out_ms"}), and a last line
 * with the totals over the layers where the prologue applies (input a BN + ReLU with
 * one consumer: sbr_layers): unfused (bn_apply of the input + fprop + bn_stats of the
 * output) against the best fused fprop + genStats, ms per step; and over every layer,
 * fprop + wgrad with the first usable pre-compiled engine (deterministic mode's pick)
 * against the fastest of the first 4 (fprop_wgrad_first_ms, fprop_wgrad_best_ms). */
int fusion_bench_patterns(const char *arch, int classes, int batch, const char *precision, int device, int rtc_budget,
                          bool deterministic, dtype_t dt);

/* The probes' CUDA backend on device (its name into dev): TF32 unless precision is fp32,
 * the fusion options, deterministic mode's filters or not. NULL with e set. */
backend_t *fusion_bench_backend(int device, const char *precision, unsigned fusion, bool deterministic, char *dev,
                                size_t len, err_t *e);

/* The BN geometry sweep (bn_sweep.c, --bn-sweep REPS): for each distinct BN shape of arch
 * (rows x channels at batch, 32x32 input; layers counted) and each of the four BN row ops
 * (bn_stats, bn_apply, bn_bwd_reduce, bn_bwd_apply: the relu layers' paths, the mask
 * recomputed under bn_remask as `all` runs them), the op's time inside a CUDA graph of 20
 * calls replayed REPS times, under the default launch geometry and a grid of overrides
 * (cuda_backend_bn_geometry: rows_min, blocks_per_sm, v_max, one_pass). One line per (op,
 * shape, geometry):
 *   {"bench": "bn_sweep", "fusion", "op", "rows", "channels", "layers", "rows_min", "blocks_per_sm",
 *    "v_max", "one_pass", "us", "gb_s", "vs_default", "same_bits", "max_rel_diff"}
 * (same_bits: the output, y / dx or the two reduced vectors, against the default
 * geometry's; max_rel_diff: the reductions' largest relative difference), then per op
 * {"bench": "bn_sweep_total", "fusion", "op", "default_ms", "best_per_shape_ms", "best_single_ms",
 * "best_single": [rows_min, blocks_per_sm, v_max, one_pass]}: per step, layers counted; and a table
 * on stderr. fusion: the backend's options (default all). CUDA builds only. */
int fusion_bench_bn_sweep(const char *arch, int classes, int batch, const char *precision, int device,
                          unsigned fusion, int reps, dtype_t dt);

/* The byte model (model/net_fusion.h) for arch at batch, 32x32, dt, SGD, fusion options
 * fusion: one line with the bytes per step of each category, their total, the conv
 * epilogues' reads and how many nodes each fusion applies to. No device needed. */
int fusion_bench_predict(const char *arch, int classes, int batch, const char *precision, unsigned fusion,
                         dtype_t dt);

#endif
