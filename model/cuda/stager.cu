/* stager.cu: the copy stream of the CPU loader's path (cuda_backend.h, cuda_stager_*):
 * uploads of host batches that overlap the compute stream's work.
 *
 * Two fp32 staging buffers on the device. Upload k goes to slot k % 2 on the copy stream,
 * after the event `free[slot]` (recorded on the compute stream once the batch that used
 * the slot two uploads ago was consumed, cuda_stager_release), and records `done[slot]`;
 * the compute stream waits for `done[slot]` before anything it enqueues later, and the
 * host waits for `done[slot]` before returning, so the caller's (pinned) source may be
 * recycled at once. The host thus waits for one copy (about 0.1 ms for a CIFAR batch),
 * never for the compute stream. Not here: conversion to the net's dtype (net.c), the
 * loader (data/loader.c).
 */
#include <stdlib.h>

#include "model/cuda/cuda_backend.h"
#include "model/cuda/cuda_impl.cuh"

struct cuda_stager {
    backend_t *be;
    cudaStream_t copy;
    cudaEvent_t free_ev[2], done[2];
    bool free_recorded[2];
    void *buf[2];
    size_t bytes;
    int next, in_use;
};

void cuda_stager_free(cuda_stager_t *s) {
    if (!s) return;
    cudaSetDevice(s->be->device);
    if (s->copy) cudaStreamSynchronize(s->copy);
    for (int i = 0; i < 2; i++) {
        if (s->free_ev[i]) cudaEventDestroy(s->free_ev[i]);
        if (s->done[i]) cudaEventDestroy(s->done[i]);
        if (s->buf[i]) s->be->ops->release(s->be, s->buf[i]);
    }
    if (s->copy) cudaStreamDestroy(s->copy);
    free(s);
}

/* Records "call failed: status at file:line" in e and returns -1. */
static int stager_fail(err_t *e, const char *call, cudaError_t st, int line) {
    cudaGetLastError();
    return err_set(e, ERR_RUNTIME, "%s failed: %s at %s:%d", call, cudaGetErrorString(st), __FILE__, line);
}

#define ST_CHECK(x) do { cudaError_t s_ = (x); if (s_ != cudaSuccess) return stager_fail(e, #x, s_, __LINE__); } while (0)

cuda_stager_t *cuda_stager_create(backend_t *be, size_t bytes, err_t *e) {
    bytes += 512;   /* room for a second part's alignment */
    if (!be || be->kind != BACKEND_CUDA) {
        err_set(e, ERR_RUNTIME, "cuda_stager_create: not a cuda backend");
        return NULL;
    }
    cuda_stager_t *s = (cuda_stager_t *)calloc(1, sizeof *s);
    if (!s) {
        err_set(e, ERR_RUNTIME, "cuda_stager_create: out of memory");
        return NULL;
    }
    s->be = be;
    s->bytes = bytes;
    cudaError_t st = cudaSetDevice(be->device);
    if (st == cudaSuccess) st = cudaStreamCreateWithFlags(&s->copy, cudaStreamNonBlocking);
    for (int i = 0; i < 2 && st == cudaSuccess; i++) {
        st = cudaEventCreateWithFlags(&s->free_ev[i], cudaEventDisableTiming);
        if (st == cudaSuccess) st = cudaEventCreateWithFlags(&s->done[i], cudaEventDisableTiming);
    }
    if (st != cudaSuccess) {
        stager_fail(e, "cuda_stager_create (stream/events)", st, __LINE__);
        cuda_stager_free(s);
        return NULL;
    }
    for (int i = 0; i < 2; i++)
        if (!(s->buf[i] = be->ops->alloc(be, bytes ? bytes : 4))) {
            err_set(e, ERR_RUNTIME, "cuda_stager_create: %s", be->err.msg);
            cuda_stager_free(s);
            return NULL;
        }
    return s;
}

/* Where the second part starts in a slot: after the first, 256-byte aligned. */
static size_t part2_offset(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

void *cuda_stager_upload(cuda_stager_t *s, const void *host_src, size_t bytes, const void *src2, size_t bytes2,
                         void **dev2, err_t *e) {
    if (part2_offset(bytes) + bytes2 > s->bytes) {
        err_set(e, ERR_RUNTIME, "cuda_stager_upload: %zu + %zu bytes, staging holds %zu", bytes, bytes2, s->bytes);
        return NULL;
    }
    int k = s->next;
    cudaStream_t compute = (cudaStream_t)cuda_backend_stream(s->be);
    cudaError_t st = cudaSetDevice(s->be->device);
    const char *call = "cudaSetDevice";
    if (st == cudaSuccess && s->free_recorded[k]) {
        call = "cudaStreamWaitEvent(copy, free)";
        st = cudaStreamWaitEvent(s->copy, s->free_ev[k], 0);
    }
    if (st == cudaSuccess) {
        call = "cudaMemcpyAsync (copy stream)";
        st = cudaMemcpyAsync(s->buf[k], host_src, bytes, cudaMemcpyHostToDevice, s->copy);
    }
    if (st == cudaSuccess && bytes2) {
        call = "cudaMemcpyAsync (copy stream, second part)";
        st = cudaMemcpyAsync((char *)s->buf[k] + part2_offset(bytes), src2, bytes2, cudaMemcpyHostToDevice, s->copy);
    }
    if (st == cudaSuccess) {
        call = "cudaEventRecord(done)";
        st = cudaEventRecord(s->done[k], s->copy);
    }
    if (st == cudaSuccess) {
        call = "cudaStreamWaitEvent(compute, done)";
        st = cudaStreamWaitEvent(compute, s->done[k], 0);
    }
    if (st == cudaSuccess) {
        call = "cudaEventSynchronize(done)";   /* the source may be recycled on return */
        st = cudaEventSynchronize(s->done[k]);
    }
    if (st != cudaSuccess) {
        stager_fail(e, call, st, __LINE__);
        return NULL;
    }
    s->in_use = k;
    s->next = 1 - k;
    if (dev2) *dev2 = bytes2 ? (char *)s->buf[k] + part2_offset(bytes) : NULL;
    return s->buf[k];
}

int cuda_stager_release(cuda_stager_t *s, err_t *e) {
    int k = s->in_use;
    ST_CHECK(cudaSetDevice(s->be->device));
    ST_CHECK(cudaEventRecord(s->free_ev[k], (cudaStream_t)cuda_backend_stream(s->be)));
    s->free_recorded[k] = true;
    return 0;
}
