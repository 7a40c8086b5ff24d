/* fuzz_store.c: the rendezvous store's message decoding (comm/store.c), both ways.
 * Byte 0 even: the bytes are what a peer sends to the server (handshake, then requests):
 * a server (job 42, world 2, timeout 10 ms) serves them over a socketpair in this thread,
 * exactly as its per-connection thread does. Byte 0 odd: the bytes are a server's answers
 * to a client that joins (job 42, rank 0 of 2) and then sets, gets, adds, checks, waits,
 * meets a barrier and asks for the failure flag.
 * Property: neither side crashes, leaks or waits past its deadlines (libFuzzer's timeout),
 * whatever arrives. */
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/store.h"
#include "tests/fuzz/fuzz.h"

/* Puts the input into one end of a fresh socketpair (as much as its buffer takes) and
 * ends that direction; returns the pair. */
static void feed(const uint8_t *p, size_t n, int sv[2]) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) abort();
    int fl = fcntl(sv[0], F_GETFL);
    fcntl(sv[0], F_SETFL, fl | O_NONBLOCK);
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(sv[0], p + off, n - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    shutdown(sv[0], SHUT_WR);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int sv[2];
    feed(data + 1, size - 1, sv);
    if (!(data[0] & 1)) {
        store_server_opts_t o = {42, 2, 0.01, NULL};
        store_server_t *s = store_server_create_(&o);
        if (!s) abort();
        store_server_serve_fd_(s, sv[1]);
        close(sv[0]);
        close(sv[1]);
        store_server_stop(s);
        return 0;
    }
    err_t e = {0};
    store_t *c = store_connect_fd_(sv[1], 0, 2, 0.01, 42, &e);
    if (!c) {
        FUZZ_ERR_OK(&e);
        close(sv[0]);
        return 0;
    }
    char buf[64];
    size_t len = 0;
    int64_t v = 0;
    int rank = -1;
    err_t x = {0};
    (void)store_set(c, "k", "v", 1, &x);
    (void)store_get(c, "k", buf, sizeof buf, &len, 0.01, &x);
    FUZZ_ASSERT(len <= STORE_MAX_VALUE + 64);
    (void)store_add(c, "n", 1, &v, &x);
    (void)store_check(c, "k", &x);
    (void)store_wait(c, "k", 0.01, &x);
    (void)store_barrier(c, "b", &x);
    (void)store_get_failed(c, &rank, buf, sizeof buf, &x);
    store_close(c);
    close(sv[0]);
    return 0;
}
