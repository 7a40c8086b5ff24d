/* peer.cu: device-to-device copies between two CUDA backends (cuda_copy_peer in
 * cuda_backend.h), for DataParallel's replicate and gradient reduction (comm/dp.c).
 *
 * A copy first waits for the source backend's stream (so the source holds its final
 * values; DP synchronises per micro-batch anyway), then enqueues cudaMemcpyPeerAsync on
 * the destination backend's stream. That works between any two devices: directly over
 * NVLink/PCIe when peer access is enabled, staged through the host by the driver
 * otherwise; on one device it is an ordinary device copy. Peer access is enabled once
 * per ordered device pair (and direction) where cudaDeviceCanAccessPeer allows it.
 * Every CUDA call is checked; failures land in the destination backend's err_t.
 * Not here: events or stream-to-stream waits (the copy is ordered by host waits only).
 */
#include "model/cuda/cuda_backend.h"

#include <pthread.h>

#include "model/cuda/cuda_impl.cuh"

/* peer_done[a][b]: device a may access device b's memory (or was found unable to), so
 * nothing needs to be tried again. Devices beyond PEER_MAX are tried on every copy
 * (harmless: an already enabled pair reports cudaErrorPeerAccessAlreadyEnabled). */
enum { PEER_MAX = 64 };
static pthread_mutex_t peer_mu = PTHREAD_MUTEX_INITIALIZER;
static bool peer_done[PEER_MAX][PEER_MAX];

/* Lets device a access device b's memory where the hardware allows it. Errors other than
 * "already enabled" and "too many peers" (the copy then goes through the host, still
 * correct) are reported in cb. Called with peer_mu held. Leaves device a current. */
static int enable_peer(cuda_be_t *cb, int a, int b) {
    if (a == b) return 0;
    bool table = a < PEER_MAX && b < PEER_MAX;
    if (table && peer_done[a][b]) return 0;
    int can = 0;
    CUDA_CHECK(cb, cudaDeviceCanAccessPeer(&can, a, b));
    if (can) {
        CUDA_CHECK(cb, cudaSetDevice(a));
        cudaError_t st = cudaDeviceEnablePeerAccess(b, 0);
        if (st == cudaErrorPeerAccessAlreadyEnabled || st == cudaErrorTooManyPeers) {
            cudaGetLastError();   /* not sticky; clear it so later checks do not see it */
        } else if (st != cudaSuccess) {
            cudaGetLastError();
            return cb_fail_call(cb, "cudaDeviceEnablePeerAccess", cudaGetErrorString(st), __FILE__,
                                __LINE__);
        }
    }
    if (table) peer_done[a][b] = true;
    return 0;
}

static int enable_pair(cuda_be_t *cb, int a, int b) {
    pthread_mutex_lock(&peer_mu);
    int rc = enable_peer(cb, a, b);
    if (rc == 0) rc = enable_peer(cb, b, a);
    pthread_mutex_unlock(&peer_mu);
    return rc;
}

extern "C" int cuda_copy_peer(backend_t *dst_be, void *dst, backend_t *src_be, const void *src,
                              size_t bytes) {
    if (!dst_be) return -1;
    if (dst_be->kind != BACKEND_CUDA || !src_be || src_be->kind != BACKEND_CUDA)
        return err_set(&dst_be->err, ERR_RUNTIME,
                       "cuda_copy_peer: both backends must be cuda backends");
    cuda_be_t *dc = cb_of(dst_be), *sc = cb_of(src_be);
    if (!bytes) return 0;
    if (!dst || !src)
        return cb_fail(dc, "cuda_copy_peer of %zu bytes with a NULL %s pointer", bytes,
                       dst ? "source" : "destination");
    if (dst == src && dst_be->device == src_be->device) return 0;
    /* the source is final once its own stream has run everything queued on it */
    CUDA_CHECK(dc, cudaSetDevice(src_be->device));
    CUDA_CHECK(dc, cudaStreamSynchronize(sc->stream));
    if (enable_pair(dc, dst_be->device, src_be->device) < 0) return -1;
    CB_ENTER(dc);
    CUDA_CHECK(dc, cudaMemcpyPeerAsync(dst, dst_be->device, src, src_be->device, bytes, dc->stream));
    return 0;
}
