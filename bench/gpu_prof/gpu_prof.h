/* gpu_prof.h: where a training step's time goes on the CUDA backend, per op kind, for
 * bench_gpu_bench --profile (one device call gives the whole breakdown).
 *
 * gpu_prof_attach wraps the backend's op table: every op call is counted by kind (the
 * X-macro GPU_PROF_KINDS in gpu_prof.c: one line per backend op; a new op gets a line
 * and a wrapper with its bytes formula), its host time measured (the clock around the
 * call: what issuing it costs the CPU thread), and the bytes it must move through device
 * memory and the FLOPs it does computed from its arguments (shapes and dtypes; formulas
 * in gpu_prof.c). With timing on, each call also gets its GPU time: the call is
 * preceded by a spin kernel on the stream that keeps the GPU busy for a head start
 * longer than the call's own issue time, then bracketed by two events, so the events
 * measure the op's kernels back to back rather than the GPU waiting for the host to
 * launch them (calls whose host time exceeded the head start are counted as
 * "late": their GPU time may include such a gap). The spin touches no memory, so caches
 * hold what the previous op left, as in a normal step.
 *
 * With timing, the GPU time is also summed per (kind, rows, channels) for the convolution
 * and BN ops ("by shape": which layers cost what).
 *
 * The replayed mode (gpu_prof_replayed) times the calls inside a recorded CUDA graph
 * instead: the events become nodes of the graph, so each replay of the whole step gives
 * every op's GPU time there, without the eager mode's per-launch costs (a kernel issued
 * after an event, the spin) that make its small ops look slower than a replay runs them
 * (the H200 run of 2026-11-26: 9.30 ms of eager per-op time against a 7.89 ms replayed
 * step). The event nodes add their own small cost to the replay.
 * One backend per process (the wrappers find the profiler through a file-level pointer).
 * On a CPU backend it counts calls, host time, bytes and FLOPs (timing stays off): the
 * dry run that tests the counting without a GPU.
 * Not here: choosing what to run (bench/gpu_bench.c), the cuDNN algorithms (conv_engine).
 */
#ifndef RUNNER_BENCH_GPU_PROF_H
#define RUNNER_BENCH_GPU_PROF_H

#include <stdbool.h>
#include <stdio.h>

#include "model/backend.h"
#include "util/err.h"

typedef struct gpu_prof gpu_prof_t;

/* Wraps be's ops; head_start_us: the spin before each timed call. NULL with e set. */
gpu_prof_t *gpu_prof_attach(backend_t *be, double head_start_us, err_t *e);
/* GPU timing of each call (events and head start) on or off; host timing is always on. */
void gpu_prof_timing(gpu_prof_t *p, bool on);
/* The replayed mode (a CUDA backend only; reset first): each call made while the stream
 * is being captured into a CUDA graph is bracketed by two events recorded as graph nodes
 * (cudaEventRecordExternal), made beforehand for up to GPU_PROF_GRAPH_CALLS calls; calls
 * outside a capture are not counted. Every launch of the graph records them again, so
 * each collect after a replay (the stream synchronised) adds every recorded call once
 * more, its kind's calls, bytes and FLOPs and its GPU time in that replay: the op kinds'
 * GPU time inside the replayed step, with no host in between and no head start. Host
 * time is not measured (0). Off: the eager mode above. 0, or -1 with e set. */
enum { GPU_PROF_GRAPH_CALLS = 4096 };
int gpu_prof_replayed(gpu_prof_t *p, bool on, err_t *e);
/* Calls recorded in the replayed mode (those a graph carries events for). */
int gpu_prof_recorded_calls(const gpu_prof_t *p);
/* Forgets what was counted so far (and the replayed mode's recorded calls). */
void gpu_prof_reset(gpu_prof_t *p);
/* After the stream was synchronised: adds the events of the calls since the last collect
 * to the per-kind GPU times. 0, or -1 with e set. */
int gpu_prof_collect(gpu_prof_t *p, err_t *e);
/* The table, per step over `steps` profiled steps, to f (one line per kind that ran:
 * calls, GPU ms, host ms, MB, GB/s, TFLOP/s; totals; the memory-bound kinds' bytes). */
void gpu_prof_print(const gpu_prof_t *p, int steps, FILE *f);
/* The same as a JSON object, {"mode": "eager" | "replayed", "kinds": [{"kind", "calls", "gpu_ms", "host_ms", "bytes",
 * "flops", "late"}...], "gpu_ms", "host_ms", "nonconv_bytes", "nonconv_gpu_ms", "span_ms"
 * (the replayed mode: a replay's first event to its last, in which the calls' disjoint
 * intervals lie; 0 in the eager mode),
 * "head_start_us", "shapes": [{"kind", "rows", "channels", "calls", "gpu_ms", "bytes"}...]},
 * all per step; "shapes" has a line per (kind, rows, channels) of the timed calls whose
 * wrapper names its shape (the convolutions by output: n*p*q rows of k channels; the BN
 * ops: m rows of c; bn_update_running: 1 row of c), which the table prints the top of. */
void gpu_prof_json(const gpu_prof_t *p, int steps, FILE *f);
/* The backend it profiles. */
backend_t *gpu_prof_backend(const gpu_prof_t *p);
/* Restores the backend's own ops and frees the profiler. */
void gpu_prof_detach(gpu_prof_t *p);

#endif
