/* spin.cu: the head-start kernel of gpu_prof.c: one thread that waits `cycles` SM clock
 * cycles on the given stream and touches no memory, so the host can queue the next
 * call's kernels before the GPU reaches them. */
#include <cuda_runtime.h>

__global__ void gpu_prof_spin_kernel(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

extern "C" int gpu_prof_spin(void *stream, long long cycles) {
    gpu_prof_spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(cycles);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
