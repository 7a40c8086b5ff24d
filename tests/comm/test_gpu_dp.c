/* test_gpu_dp.c: DataParallel over CUDA replicas (comm/dp.c's device-to-device path) and
 * the peer copy under it (cuda_copy_peer, model/cuda/peer.cu). Skipped (77) without a GPU.
 *
 * cuda_copy_peer: a buffer of 1 MiB + 13 bytes goes A -> B -> A (and a 100-byte piece at
 * odd offsets) and comes back bit for bit; on one device (two backends, and one backend
 * onto itself), and between devices 0 and 1 both ways when two GPUs are visible. Zero
 * bytes is a no-op; a NULL pointer or a cpu backend fails with a message in dst's err.
 *
 * DP: resnet20 (32x32, fp32, TF32 off, deterministic algorithms) over replicas on the
 * listed devices, two micro-batches accumulated, against a reference computed chunk by
 * chunk on one more CUDA net on replica 0's device: the gradient after each micro-batch
 * is previous + (g_chunk0 + g_chunk1 + ...), the loss/hit counts are the sums over the
 * chunks, replica 0's BN running stats are the reference's after chunk 0. (With BN the
 * gradient of DP is not the gradient of one net on the whole batch: every replica
 * normalises with its own chunk's statistics, as torch's DataParallel does; the chunked
 * reference is that computation.) Replicas 1.. start from other weights, so the
 * replicate copy is checked too: afterwards their parameters equal replica 0's bit for
 * bit. Running the same two micro-batches again gives the same gradients bit for bit.
 *
 * Tolerances (reference and replicas use the same deterministic algorithms on the same
 * device model, so they should agree to the last bit or nearly; anything broken, a
 * missing or doubled replica, a copy racing its source, is off by O(1)):
 *   gradients and buffers: every element |got - want| <= 1e-3 * (|want| + rms(want)) and
 *   relative L2 error <= 1e-4; loss sum relative 1e-5; top-1 / top-5 counts exact.
 *
 * Configurations: devices {0}, {0, 0} (7 samples: chunks 4, 3), {0, 0, 0} with 2 samples
 * (chunks 1, 1, 0: the third replica idle); with two GPUs also {0, 1} and {1, 0, 1}
 * (replica 0 on device 1).
 */
#include "comm/dp.h"
#include "model/cuda/cuda_backend.h"
#include "model/arch/resnet.h"
#include "util/rng.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>

enum { H = 32, W = 32, CIN = 3, CLASSES = 10, MAX_WORLD = 3, MICRO = 2 };

#define FAIL_IF(cond, msg) do { if (cond) { fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, \
    __LINE__, #cond, (msg)); exit(1); } } while (0)

static backend_t *gpu_backend(int device) {
    err_t e = {0};
    backend_opts_t o = {0};
    o.kind = BACKEND_CUDA;
    o.device = device;
    o.deterministic = true;
    o.allow_tf32 = false;
    backend_t *be = backend_create(&o, &e);
    FAIL_IF(!be, e.msg);
    return be;
}

static net_t *make_net(backend_t *be, int max_batch) {
    err_t e = {0};
    net_t *n = resnet_build("resnet20", CIN, CLASSES, false, &e);
    FAIL_IF(!n, e.msg);
    FAIL_IF(net_bind(n, be, max_batch, H, W, DT_F32, &e) != 0, e.msg);
    return n;
}

/* ---- cuda_copy_peer ---- */

static void check_round_trip(backend_t *a, backend_t *b) {
    size_t bytes = ((size_t)1 << 20) + 13;
    unsigned char *src = malloc(bytes), *back = malloc(bytes), *mid = malloc(bytes);
    FAIL_IF(!src || !back || !mid, "out of memory");
    rng_t r = rng_make(7, RNG_STREAM_MISC, (uint64_t)a->device * 16 + (uint64_t)b->device, 0);
    for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)rng_below(&r, 256);
    void *da = a->ops->alloc(a, bytes), *da2 = a->ops->alloc(a, bytes), *db = b->ops->alloc(b, bytes);
    FAIL_IF(!da || !da2 || !db, "device alloc failed");
    FAIL_IF(a->ops->upload(a, da, src, bytes) != 0, a->err.msg);
    FAIL_IF(b->ops->zero(b, db, bytes) != 0, b->err.msg);
    CHECK_INT(cuda_copy_peer(b, db, a, da, bytes), 0);
    CHECK_INT(cuda_copy_peer(a, da2, b, db, bytes), 0);
    if (b->err.code) fprintf(stderr, "  %s\n", b->err.msg);
    if (a->err.code) fprintf(stderr, "  %s\n", a->err.msg);
    FAIL_IF(b->ops->download(b, mid, db, bytes) != 0, b->err.msg);
    FAIL_IF(a->ops->download(a, back, da2, bytes) != 0, a->err.msg);
    CHECK_INT(memcmp(mid, src, bytes), 0);
    CHECK_INT(memcmp(back, src, bytes), 0);

    /* a piece at odd offsets: only [1, 101) of db changes */
    FAIL_IF(b->ops->zero(b, db, bytes) != 0, b->err.msg);
    CHECK_INT(cuda_copy_peer(b, (char *)db + 1, a, (const char *)da + 3, 100), 0);
    FAIL_IF(b->ops->download(b, mid, db, 128) != 0, b->err.msg);
    CHECK_INT(mid[0], 0);
    CHECK_INT(memcmp(mid + 1, src + 3, 100), 0);
    CHECK_INT(mid[101], 0);

    /* onto itself (one backend, one stream) */
    FAIL_IF(a->ops->zero(a, da2, bytes) != 0, a->err.msg);
    CHECK_INT(cuda_copy_peer(a, da2, a, da, bytes), 0);
    FAIL_IF(a->ops->download(a, back, da2, bytes) != 0, a->err.msg);
    CHECK_INT(memcmp(back, src, bytes), 0);

    a->ops->release(a, da);
    a->ops->release(a, da2);
    b->ops->release(b, db);
    free(src);
    free(back);
    free(mid);
}

static void test_copy_peer(void) {
    backend_t *a = gpu_backend(0), *b = gpu_backend(0);
    check_round_trip(a, b);
    fprintf(stderr, "  device 0 -> 0 -> 0: ok\n");

    /* no-op and refusals */
    void *p = a->ops->alloc(a, 256);
    FAIL_IF(!p, a->err.msg);
    CHECK_INT(cuda_copy_peer(b, p, a, NULL, 0), 0);
    memset(&b->err, 0, sizeof b->err);
    CHECK_INT(cuda_copy_peer(b, NULL, a, p, 16), -1);
    CHECK_CONTAINS(b->err.msg, "NULL destination");
    err_t e = {0};
    backend_opts_t co = {0};
    co.kind = BACKEND_CPU;
    co.threads = 1;
    backend_t *cpu = backend_create(&co, &e);
    FAIL_IF(!cpu, e.msg);
    CHECK_INT(cuda_copy_peer(cpu, p, a, p, 16), -1);
    CHECK_CONTAINS(cpu->err.msg, "cuda backends");
    backend_free(cpu);
    a->ops->release(a, p);
    backend_free(b);

    if (backend_cuda_device_count() >= 2) {
        backend_t *c = gpu_backend(1);
        check_round_trip(a, c);
        check_round_trip(c, a);
        fprintf(stderr, "  device 0 <-> 1: ok\n");
        backend_free(c);
    } else {
        fprintf(stderr, "  one GPU: the copy between devices 0 and 1 is not tested\n");
    }
    backend_free(a);
}

/* ---- DP against the chunked reference ---- */

static double rel_l2(const float *got, const float *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Elements with |got - want| > tol * (|want| + rms(want)); prints the worst. */
static size_t count_off(const char *what, const float *got, const float *want, size_t n, double tol) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)want[i] * want[i];
    double rms = n ? sqrt(ss / (double)n) : 0;
    size_t bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]), lim = tol * (fabs(want[i]) + rms);
        if (!(err <= lim)) {
            bad++;
            double ratio = lim > 0 ? err / lim : INFINITY;
            if (ratio > worst_ratio) { worst_ratio = ratio; worst = i; }
        }
    }
    if (bad)
        fprintf(stderr, "  %s: %zu of %zu elements off (tol %g, rms %g); worst [%zu] got %.9g want %.9g\n",
                what, bad, n, tol, rms, worst, (double)got[worst], (double)want[worst]);
    return bad;
}

static size_t count_bits_differ(const float *a, const float *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], 4) != 0;
    return k;
}

static void fill_batch(float *img, int32_t *lab, int n, uint64_t seed) {
    rng_t r = rng_make(seed, RNG_STREAM_MISC, 0, 0);
    for (size_t i = 0; i < (size_t)n * H * W * CIN; i++) img[i] = rng_uniform(&r) * 2.0f - 1.0f;
    for (int i = 0; i < n; i++) lab[i] = (int32_t)rng_below(&r, CLASSES);
}

static void check_dp(const int *devs, int world, int n) {
    fprintf(stderr, "  devices {");
    for (int i = 0; i < world; i++) fprintf(stderr, "%s%d", i ? ", " : "", devs[i]);
    fprintf(stderr, "}, %d samples per micro-batch:\n", n);
    err_t e = {0};
    int chunk = (n + world - 1) / world;
    backend_t *bes[MAX_WORLD], *rbe = gpu_backend(devs[0]);
    net_t *nets[MAX_WORLD], *ref = make_net(rbe, chunk);
    for (int i = 0; i < world; i++) {
        bes[i] = gpu_backend(devs[i]);
        nets[i] = make_net(bes[i], chunk);
        /* replicas 1.. start from other weights: only the replicate copy makes them equal */
        FAIL_IF(net_init(nets[i], i == 0 ? 11 : 500 + (uint64_t)i, &e) != 0, e.msg);
    }
    FAIL_IF(net_init(ref, 11, &e) != 0, e.msg);
    size_t np = net_num_params(ref), nb = net_num_buffers(ref);
    float *want = calloc(np, 4), *got = calloc(np, 4), *g = calloc(np, 4), *sum = calloc(np, 4);
    float *first = calloc(np, 4), *p0 = calloc(np, 4), *pi = calloc(np, 4);
    float *buf0 = calloc(nb, 4), *cur_buf = calloc(nb, 4), *next_buf = calloc(nb, 4), *got_buf = calloc(nb, 4);
    float *img = calloc((size_t)n * H * W * CIN, 4);
    int32_t *lab = calloc((size_t)n, 4);
    FAIL_IF(!want || !got || !g || !sum || !first || !p0 || !pi || !buf0 || !cur_buf || !next_buf ||
            !got_buf || !img || !lab, "out of memory");
    FAIL_IF(net_download_buffers(ref, buf0, &e) != 0, e.msg);
    memcpy(cur_buf, buf0, nb * 4);
    dp_t *d = dp_create(nets, world, H, W, &e);
    FAIL_IF(!d, e.msg);

    for (int pass = 0; pass < 2; pass++) {
        /* pass 1 repeats pass 0 from the same state: the same bits */
        FAIL_IF(net_upload_buffers(nets[0], buf0, &e) != 0 || net_zero_grads(nets[0], &e) != 0, e.msg);
        for (int mb = 0; mb < MICRO; mb++) {
            fill_batch(img, lab, n, 100 + (uint64_t)mb);
            net_loss_out_t out;
            int rc = dp_forward_backward(d, img, lab, NULL, n, n * MICRO, 0.1f, 1.0f, &out, &e);
            CHECK_INT(rc, 0);
            FAIL_IF(rc != 0, e.msg);
            if (pass == 1) continue;
            /* reference: chunk by chunk on one net, summed in replica order */
            double loss = 0;
            int64_t c1 = 0, c5 = 0;
            for (int q = 0; q < world; q++) {
                int start, count;
                dp_chunk(n, world, q, &start, &count);
                if (count == 0) continue;
                net_loss_out_t lo;
                FAIL_IF(net_zero_grads(ref, &e) || net_upload_buffers(ref, cur_buf, &e) ||
                        net_upload_input(ref, img + (size_t)start * H * W * CIN, count, &e) ||
                        net_forward(ref, net_input(ref), count, true, NULL, &e) ||
                        net_loss(ref, lab + start, 0.1f, 1.0f / (float)(n * MICRO), &lo, &e) ||
                        net_backward(ref, NULL, &e) || net_download_grads(ref, g, &e), e.msg);
                for (size_t k = 0; k < np; k++) sum[k] = q ? sum[k] + g[k] : g[k];
                loss += lo.loss_sum;
                c1 += lo.correct1;
                c5 += lo.correct5;
                if (q == 0) FAIL_IF(net_download_buffers(ref, next_buf, &e) != 0, e.msg);
            }
            memcpy(cur_buf, next_buf, nb * 4);
            for (size_t k = 0; k < np; k++) want[k] = want[k] + sum[k];

            FAIL_IF(net_download_grads(nets[0], got, &e) != 0, e.msg);
            FAIL_IF(net_download_buffers(nets[0], got_buf, &e) != 0, e.msg);
            double gl2 = rel_l2(got, want, np), bl2 = rel_l2(got_buf, next_buf, nb);
            fprintf(stderr, "    micro-batch %d: grads rel L2 %.3g (%zu of %zu differ in bits), buffers "
                    "rel L2 %.3g, loss %.7g vs %.7g\n", mb, gl2, count_bits_differ(got, want, np), np,
                    bl2, out.loss_sum, loss);
            CHECK_INT(count_off("grads", got, want, np, 1e-3), 0);
            CHECK(gl2 <= 1e-4);
            CHECK_INT(count_off("buffers", got_buf, next_buf, nb, 1e-3), 0);
            CHECK(bl2 <= 1e-4);
            CHECK_NEAR(out.loss_sum, loss, 0.0, 1e-5);
            CHECK_INT(out.correct1, c1);
            CHECK_INT(out.correct5, c5);
            CHECK(out.loss_sum > 0);
            double gn = 0;
            for (size_t k = 0; k < np; k++) gn += fabs(want[k]);
            CHECK(gn > 0);
            /* every replica that had data computed with replica 0's weights */
            FAIL_IF(net_download_params(nets[0], p0, &e) != 0, e.msg);
            for (int i = 1; i < world; i++) {
                int start, count;
                dp_chunk(n, world, i, &start, &count);
                if (count == 0) continue;
                FAIL_IF(net_download_params(nets[i], pi, &e) != 0, e.msg);
                CHECK_INT(count_bits_differ(pi, p0, np), 0);
            }
        }
        if (pass == 0) {
            FAIL_IF(net_download_grads(nets[0], first, &e) != 0, e.msg);
            dp_timing_t t;
            dp_take_timing(d, &t);
            fprintf(stderr, "    timing: replicate %.3g s, compute %.3g s, reduce %.3g s\n",
                    t.replicate_s, t.compute_s, t.reduce_s);
            CHECK(t.compute_s > 0);
            CHECK(t.replicate_s >= 0 && t.reduce_s >= 0);
        } else {
            FAIL_IF(net_download_grads(nets[0], got, &e) != 0, e.msg);
            CHECK_INT(count_bits_differ(got, first, np), 0);
        }
    }

    dp_free(d);
    for (int i = 0; i < world; i++) {
        net_free(nets[i]);
        backend_free(bes[i]);
    }
    net_free(ref);
    backend_free(rbe);
    free(want); free(got); free(g); free(sum); free(first); free(p0); free(pi);
    free(buf0); free(cur_buf); free(next_buf); free(got_buf); free(img); free(lab);
}

static void test_dp_one_device(void) {
    int one[] = { 0 }, two[] = { 0, 0 }, three[] = { 0, 0, 0 };
    check_dp(one, 1, 5);
    check_dp(two, 2, 7);
    check_dp(three, 3, 2);
}

static void test_dp_two_devices(void) {
    if (backend_cuda_device_count() < 2) {
        fprintf(stderr, "  one GPU: DP across devices 0 and 1 is not tested\n");
        return;
    }
    int two[] = { 0, 1 }, three[] = { 1, 0, 1 };
    check_dp(two, 2, 7);
    check_dp(three, 3, 7);
}

int main(void) {
    if (backend_cuda_device_count() < 1) test_skip("no CUDA GPU");
    TEST_RUN(test_copy_peer);
    TEST_RUN(test_dp_one_device);
    TEST_RUN(test_dp_two_devices);
    return test_main_end();
}
