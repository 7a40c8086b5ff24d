/* test_fault_peers.c: hostile or broken peers on the rendezvous store's port (comm/store.c)
 * end that connection, or the run, with one clear message within the timeout, never a
 * crash or a hang: garbage bytes, an HTTP request, a half-sent handshake, a half-sent
 * request after joining, a silent connection, a rank of the same job with the wrong world
 * size (raises the failure flag: every rank stops), and a second job on the same port
 * (refused, not joined; and its rank 0 cannot bind the port). The server stays usable for
 * the real ranks throughout. */
#include "comm/store.h"
#include "tests/test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int raw_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { close(fd); return -1; }
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* Reads until the server closes the connection (or 5 s pass); returns the seconds it took
 * and the bytes of the answer in buf (NUL-terminated, at most cap - 1). */
static double until_closed(int fd, char *buf, size_t cap) {
    double t0 = now();
    size_t n = 0;
    for (;;) {
        char tmp[512];
        ssize_t r = recv(fd, tmp, sizeof tmp, 0);
        if (r <= 0) break;
        for (ssize_t i = 0; i < r && n + 1 < cap; i++) buf[n++] = tmp[i] ? tmp[i] : ' ';
    }
    buf[n] = 0;
    return now() - t0;
}

static const uint64_t JOB = 0x5eed;
static store_server_t *srv;
static int port;

/* The real ranks still work: rank 0 and 1 meet at a barrier and exchange a key. */
static void real_ranks_still_work(void) {
    err_t e = {0};
    store_t *a = store_connect_job("127.0.0.1", port, 0, 2, 5, JOB, &e);
    CHECK(a != NULL);
    if (!a) { fprintf(stderr, "%s\n", e.msg); return; }
    CHECK_INT(store_set(a, "hello", "x", 1, &e), 0);
    CHECK_INT(store_check(a, "hello", &e), 1);
    store_close(a);
}

/* Sends bytes that are no handshake: refused at once with a message, and the real
 * ranks go on. */
static void refused_at_once(const char *bytes, size_t n) {
    int fd = raw_connect(port);
    CHECK(fd >= 0);
    CHECK(send(fd, bytes, n, 0) > 0);
    char buf[1024];
    CHECK(until_closed(fd, buf, sizeof buf) < 0.5);
    CHECK_CONTAINS(buf, "not a runner rendezvous handshake");
    close(fd);
    real_ranks_still_work();
}

static void garbage_bytes(void) {
    const char junk[] = "\xff\xfe\x00\x13garbage garbage garbage\x01\x02\x03";
    refused_at_once(junk, sizeof junk);
}

static void http_request(void) {
    const char *req = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    refused_at_once(req, strlen(req));
}

/* Sends n bytes (maybe none) that start no complete handshake, then nothing: closed
 * after the server's timeout (1 s here) with a message, and the real ranks go on. */
static void closed_after_timeout(const void *bytes, size_t n) {
    int fd = raw_connect(port);
    if (n) CHECK(send(fd, bytes, n, 0) > 0);
    char buf[1024];
    double s = until_closed(fd, buf, sizeof buf);
    CHECK(s > 0.5 && s < 3.0);
    CHECK_CONTAINS(buf, "no complete handshake within parallel.timeout_s");
    close(fd);
    real_ranks_still_work();
}

static void half_sent_handshake(void) {
    const unsigned char part[] = {8, 14, 0, 'r', 'u', 'n'};
    closed_after_timeout(part, sizeof part);
}

static void silent_connection(void) { closed_after_timeout(NULL, 0); }

/* A joined client that sends half a request: that connection ends, the server goes on;
 * and a client whose server answers half a reply gives up within its timeout. */
static void half_sent_request(void) {
    int sv[2];
    CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    /* the client's side: a "server" that accepts the hello and then says half a reply */
    const unsigned char ok[] = {0, 0, 0, 0, 0}, half[] = {0, 8, 0};
    CHECK(write(sv[0], ok, sizeof ok) == sizeof ok);
    err_t e = {0};
    store_t *c = store_connect_fd_(sv[1], 0, 2, 1.0, JOB, &e);
    CHECK(c != NULL);
    if (!c) return;
    CHECK(write(sv[0], half, sizeof half) == sizeof half);
    double t0 = now();
    int64_t v;
    CHECK_INT(store_add(c, "n", 1, &v, &e), -1);
    CHECK(now() - t0 < 3.0);
    CHECK_CONTAINS(e.msg, "lost the connection to the rendezvous store");
    store_close(c);
    close(sv[0]);
    /* the server's side: a joined peer that stops in the middle of a SET */
    int fd = raw_connect(port);
    unsigned char hello[64];
    size_t n = 0;
    hello[n++] = 8;
    uint16_t kl = 14;
    memcpy(hello + n, &kl, 2), n += 2;
    memcpy(hello + n, "runner-store/1", 14), n += 14;
    uint32_t vl = 16;
    memcpy(hello + n, &vl, 4), n += 4;
    uint64_t job = JOB;
    int32_t rank = 1, world = 2;
    memcpy(hello + n, &job, 8), n += 8;
    memcpy(hello + n, &rank, 4), n += 4;
    memcpy(hello + n, &world, 4), n += 4;
    int64_t arg = 0;
    memcpy(hello + n, &arg, 8), n += 8;
    CHECK(send(fd, hello, n, 0) == (ssize_t)n);
    unsigned char rep[5];
    CHECK(recv(fd, rep, 5, MSG_WAITALL) == 5 && rep[0] == 0);   /* joined */
    const unsigned char set_half[] = {1, 3, 0, 'k', 'e'};
    CHECK(send(fd, set_half, sizeof set_half, 0) > 0);
    char buf[64];
    double s = until_closed(fd, buf, sizeof buf);
    CHECK(s > 0.5 && s < 3.0);
    close(fd);
    real_ranks_still_work();
}

/* A second job on the same port: its rank 0 cannot bind, its other ranks are refused
 * (ERR_INPUT naming both job ids) instead of joining the first job. */
static void second_job_refused(void) {
    err_t e = {0};
    store_server_t *other = store_server_start_opts("127.0.0.1", port, &(store_server_opts_t){0x0bad, 2, 1.0, NULL}, &e);
    CHECK(other == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "is another run using the port?");
    err_t ce = {0};
    double t0 = now();
    store_t *c = store_connect_job("127.0.0.1", port, 1, 2, 5, 0x0bad, &ce);
    CHECK(c == NULL);
    CHECK(now() - t0 < 2.0);
    CHECK_INT(ce.code, ERR_INPUT);
    CHECK_CONTAINS(ce.msg, "refused this rank");
    CHECK_CONTAINS(ce.msg, "two jobs were started on the same MASTER_PORT");
    CHECK_CONTAINS(ce.msg, "0000000000000bad");
    real_ranks_still_work();
}

/* A rank of this job with another world size: refused, and the failure flag stops the
 * ranks that are waiting (they would otherwise wait out their timeout). */
static void wrong_world_size_ends_run(void) {
    err_t e = {0};
    store_server_t *s = store_server_start_opts("127.0.0.1", 0, &(store_server_opts_t){JOB, 2, 30, NULL}, &e);
    CHECK(s != NULL);
    if (!s) return;
    int p = store_server_port(s);
    store_t *r0 = store_connect_job("127.0.0.1", p, 0, 2, 30, JOB, &e);
    CHECK(r0 != NULL);
    err_t ce = {0};
    store_t *bad = store_connect_job("127.0.0.1", p, 1, 3, 30, JOB, &ce);
    CHECK(bad == NULL);
    CHECK_INT(ce.code, ERR_INPUT);
    CHECK_CONTAINS(ce.msg, "rank 1 joined with world size 3, but this job has world size 2");
    double t0 = now();
    err_t be = {0};
    CHECK_INT(store_barrier(r0, "start", &be), -1);   /* would wait 30 s for rank 1 */
    CHECK(now() - t0 < 2.0);
    CHECK_CONTAINS(be.msg, "world size 3");
    store_close(r0);
    store_server_stop(s);
}

/* A negative wait used to make the server's waiting thread spin forever. */
static void negative_wait_is_bounded(void) {
    err_t e = {0};
    store_t *c = store_connect_job("127.0.0.1", port, 0, 2, 5, JOB, &e);
    CHECK(c != NULL);
    if (!c) return;
    double t0 = now();
    CHECK_INT(store_get(c, "never-set", NULL, 0, NULL, -0.5 /* the client's timeout */, &e), -1);
    CHECK(now() - t0 < 1.5);   /* the server's own timeout (1 s) bounds it */
    store_close(c);
}

int main(void) {
    err_t e = {0};
    srv = store_server_start_opts("127.0.0.1", 0, &(store_server_opts_t){JOB, 2, 1.0, NULL}, &e);
    if (!srv) { fprintf(stderr, "%s\n", e.msg); return 1; }
    port = store_server_port(srv);
    TEST_RUN(garbage_bytes);
    TEST_RUN(http_request);
    TEST_RUN(half_sent_handshake);
    TEST_RUN(silent_connection);
    TEST_RUN(half_sent_request);
    TEST_RUN(second_job_refused);
    TEST_RUN(wrong_world_size_ends_run);
    TEST_RUN(negative_wait_is_bounded);
    store_server_stop(srv);
    return test_main_end();
}
