/* train_bench.h: the trainer's own optimizer step, driven without a run: for the model-only
 * benchmark (bench/gpu_bench.c) and the tests of what it measures.
 *
 * train_bench_step is trainer_step (runner/train_step.c) on a trainer that has no data
 * source: the host writes the learning rate into the step control, then the step's device
 * work — zero grads, forward, loss, backward, unscale and inf check, the optimizer with
 * the learning rate read from device memory, the step-control (loss scale) update — runs
 * through trainer_graph_run (runner/train_graph.c). With graphs on, that is
 * train.cuda_graphs exactly: the first step of the shape runs normally, the second is
 * recorded whole and launched, every later one is one launch. Every step trains on the
 * batch already in the net's input and label buffer (the caller uploads it once); a net
 * with dropout gets a new key each step, as the trainer keys micro-batches.
 *
 * What it is not: single mode only, one micro-batch per step, no EMA, clipping, label
 * smoothing or mixup, no evaluation, tracking, run directory or checkpoints.
 */
#ifndef RUNNER_TRAIN_BENCH_H
#define RUNNER_TRAIN_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "model/net.h"
#include "model/optim.h"
#include "util/err.h"

typedef struct train_bench train_bench_t;

/* A trainer around net n (bound on its backend for batch samples of activation dtype dt)
 * and optimizer o (made for n): a loss scaler like amp's defaults (fp16: initial scale
 * 65536, growth interval 2000), the step record, dropout's key slot, and the graph cache.
 * graphs: record and replay steps (needs the backend's graph ops: CUDA, or the cpu
 * backend under RUNNER_CPU_GRAPHS=1; refused otherwise). seed keys dropout. n and o stay
 * the caller's. NULL with e set on failure. */
train_bench_t *train_bench_create(net_t *n, optim_t *o, int batch, dtype_t dt, bool graphs, uint64_t seed,
                                  err_t *e);

/* One optimizer step at learning rate lr, enqueued without waiting for the device. */
int train_bench_step(train_bench_t *b, double lr, err_t *e);

/* Whether steps still record and replay (a recording that fails turns graphs off for
 * good, as in a run, silently here: the backend's err says why), and how many recordings
 * and launches there were. */
bool train_bench_graphs(const train_bench_t *b);
int64_t train_bench_recordings(const train_bench_t *b);
int64_t train_bench_launches(const train_bench_t *b);

/* The last step's loss sum over its batch and top-1 hits, read from its record (waits for
 * the device). */
int train_bench_last(train_bench_t *b, double *loss_sum, int64_t *correct, err_t *e);

void train_bench_free(train_bench_t *b);

#endif
