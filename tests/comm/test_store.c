/* test_store.c: the TCP rendezvous store: set/get/add/check, waits that time out, many
 * clients and a barrier, a server that starts after its client, an unreachable master,
 * the failure flag waking a waiter, and a barrier naming the missing rank. */
#include "comm/store.h"
#include "tests/test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A port nobody listens on, held for the test: bound (SO_REUSEADDR, never listening) to a
 * port the kernel chose, so no other process of a parallel test run can be given it, while
 * the store server (SO_REUSEADDR too) can still bind and listen on it. *fd: close it after
 * the test. (Bound to 0 and closed at once, as before, the port could be handed to another
 * test's listener in between, and this test's client would meet a stranger.) */
static int held_port(int *fd) {
    *fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    bind(*fd, (struct sockaddr *)&a, sizeof a);
    socklen_t l = sizeof a;
    getsockname(*fd, (struct sockaddr *)&a, &l);
    return ntohs(a.sin_port);
}

static int wait_child(pid_t p) {
    int st = 0;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_set_get_add_timeout(void) {
    err_t e = {0};
    store_server_t *srv = store_server_start("127.0.0.1", 0, &e);
    CHECK(srv != NULL);
    if (!srv) return;
    int port = store_server_port(srv);
    CHECK(port > 0);
    store_t *c = store_connect("127.0.0.1", port, 0, 1, 5, &e);
    CHECK(c != NULL);
    if (!c) { store_server_stop(srv); return; }
    CHECK_INT(store_set(c, "greeting", "hello", 5, &e), 0);
    char buf[32] = {0};
    size_t len = 0;
    CHECK_INT(store_get(c, "greeting", buf, sizeof buf, &len, 1, &e), 0);
    CHECK_INT(len, 5);
    CHECK_STR(buf, "hello");
    /* overwrite, and a value longer than the caller's buffer reports its full length */
    CHECK_INT(store_set(c, "greeting", "good morning", 12, &e), 0);
    memset(buf, 0, sizeof buf);
    CHECK_INT(store_get(c, "greeting", buf, 4, &len, 1, &e), 0);
    CHECK_INT(len, 12);
    CHECK_STR(buf, "good");
    CHECK_INT(store_check(c, "greeting", &e), 1);
    CHECK_INT(store_check(c, "absent", &e), 0);
    int64_t v = 0;
    CHECK_INT(store_add(c, "ctr", 5, &v, &e), 0);
    CHECK_INT(v, 5);
    CHECK_INT(store_add(c, "ctr", -2, &v, &e), 0);
    CHECK_INT(v, 3);
    /* waiting for a key nobody sets times out in about the time asked for */
    double t0 = now_s();
    err_t we = {0};
    CHECK_INT(store_wait(c, "never-set", 0.3, &we), -1);
    double dt = now_s() - t0;
    CHECK(dt >= 0.29 && dt < 10.0);   /* the upper bound: a loaded 2-core machine, not a speed test */
    CHECK_INT(we.code, ERR_RUNTIME);
    CHECK_CONTAINS(we.msg, "never-set");
    CHECK_CONTAINS(we.msg, "timed out after 0.3 s");
    int fr = -5;
    CHECK_INT(store_get_failed(c, &fr, NULL, 0, &e), 0);
    store_close(c);
    store_server_stop(srv);
}

/* 8 client processes each add 1 and pass a barrier twice; the counter ends at 16. */
static void test_many_clients_barrier(void) {
    err_t e = {0};
    store_server_t *srv = store_server_start("127.0.0.1", 0, &e);
    CHECK(srv != NULL);
    if (!srv) return;
    int port = store_server_port(srv);
    enum { N = 8 };
    pid_t kids[N];
    for (int r = 0; r < N; r++) {
        kids[r] = fork();
        if (kids[r] == 0) {
            err_t ce = {0};
            store_t *c = store_connect("127.0.0.1", port, r, N, 10, &ce);
            if (!c) _exit(10);
            for (int round = 0; round < 2; round++) {
                int64_t v;
                if (store_add(c, "count", 1, &v, &ce) < 0) _exit(11);
                if (store_barrier(c, "step", &ce) < 0) _exit(12);
                /* after barrier `round`, every rank has added round + 1 times */
                if (store_add(c, "count", 0, &v, &ce) < 0 || v < (round + 1) * N) _exit(13);
                if (store_barrier(c, "step", &ce) < 0) _exit(14);
            }
            store_close(c);
            _exit(0);
        }
    }
    for (int r = 0; r < N; r++) CHECK_INT(wait_child(kids[r]), 0);
    store_t *c = store_connect("127.0.0.1", port, 0, 1, 5, &e);
    int64_t v = 0;
    CHECK_INT(store_add(c, "count", 0, &v, &e), 0);
    CHECK_INT(v, 2 * N);
    store_close(c);
    store_server_stop(srv);
}

/* The client starts first and retries until the server (in a child) comes up 0.5 s later. */
static void test_server_starts_late(void) {
    int hold, port = held_port(&hold);
    pid_t kid = fork();
    if (kid == 0) {
        close(hold);
        usleep(500000);
        err_t ce = {0};
        store_server_t *srv = store_server_start("127.0.0.1", port, &ce);
        if (!srv) _exit(20);
        store_t *c = store_connect("127.0.0.1", port, 0, 2, 10, &ce);
        if (!c) _exit(21);
        int ok = store_set(c, "from_server_side", "yes", 3, &ce) == 0 &&
                 store_wait(c, "client_done", 10, &ce) == 0;
        store_close(c);
        store_server_stop(srv);
        _exit(ok ? 0 : 22);
    }
    err_t e = {0};
    double t0 = now_s();
    store_t *c = store_connect("127.0.0.1", port, 1, 2, 10, &e);
    CHECK(c != NULL);
    CHECK(now_s() - t0 >= 0.4);
    if (c) {
        char buf[8] = {0};
        CHECK_INT(store_get(c, "from_server_side", buf, sizeof buf, NULL, 5, &e), 0);
        CHECK_STR(buf, "yes");
        CHECK_INT(store_set(c, "client_done", "", 0, &e), 0);
        store_close(c);
    }
    CHECK_INT(wait_child(kid), 0);
    close(hold);
}

/* Nobody listens: connect fails after its timeout, naming the address and the fix. */
static void test_unreachable_master(void) {
    int hold, port = held_port(&hold);
    err_t e = {0};
    double t0 = now_s();
    store_t *c = store_connect("127.0.0.1", port, 1, 2, 1.0, &e);
    double dt = now_s() - t0;
    CHECK(c == NULL);
    CHECK(dt >= 0.9 && dt < 10.0);
    CHECK_INT(e.code, ERR_INPUT);
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", port);
    CHECK_CONTAINS(e.msg, where);
    CHECK_CONTAINS(e.msg, "MASTER_ADDR");
    CHECK_CONTAINS(e.msg, "MASTER_PORT");
    CHECK_CONTAINS(e.msg, "firewall");
    close(hold);
}

/* A rank waiting for a key is woken by another rank raising the failure flag. */
static void test_failure_flag_wakes_waiter(void) {
    err_t e = {0};
    store_server_t *srv = store_server_start("127.0.0.1", 0, &e);
    if (!srv) { CHECK(srv != NULL); return; }
    int port = store_server_port(srv);
    pid_t kid = fork();
    if (kid == 0) {
        err_t ce = {0};
        store_t *c = store_connect("127.0.0.1", port, 1, 2, 10, &ce);
        if (!c) _exit(30);
        double t0 = now_s();
        int rc = store_wait(c, "never", 20, &ce);
        double dt = now_s() - t0;
        store_close(c);
        /* expected: fails in well under the 20 s timeout with rank 0's message */
        _exit(rc == -1 && dt < 12 && strstr(ce.msg, "rank 0 failed: disk on fire") ? 0 : 31);
    }
    store_t *c = store_connect("127.0.0.1", port, 0, 2, 10, &e);
    usleep(300000);
    store_set_failed(c, "disk on fire");
    store_set_failed(c, "a later failure does not replace the first");
    CHECK_INT(wait_child(kid), 0);
    int fr = -1;
    char msg[64];
    CHECK_INT(store_get_failed(c, &fr, msg, sizeof msg, &e), 1);
    CHECK_INT(fr, 0);
    CHECK_STR(msg, "disk on fire");
    store_close(c);
    store_server_stop(srv);
}

/* World 3, only ranks 0 and 1 arrive: the barrier times out naming rank 2. */
static void test_barrier_names_missing_rank(void) {
    err_t e = {0};
    store_server_t *srv = store_server_start("127.0.0.1", 0, &e);
    if (!srv) { CHECK(srv != NULL); return; }
    int port = store_server_port(srv);
    pid_t kid = fork();
    if (kid == 0) {
        err_t ce = {0};
        store_t *c = store_connect("127.0.0.1", port, 1, 3, 0.5, &ce);
        int rc = c ? store_barrier(c, "start", &ce) : 0;
        store_close(c);
        _exit(rc == -1 && strstr(ce.msg, "rank(s) 2 never arrived") ? 0 : 40);
    }
    store_t *c = store_connect("127.0.0.1", port, 0, 3, 0.5, &e);
    double t0 = now_s();
    CHECK_INT(store_barrier(c, "start", &e), -1);
    CHECK(now_s() - t0 < 10.0);   /* promptly: the barrier waits 0.5 s; room for a loaded machine */
    CHECK_CONTAINS(e.msg, "barrier 'start': rank(s) 2 never arrived within 0.5 s");
    CHECK_INT(wait_child(kid), 0);
    store_close(c);
    store_server_stop(srv);
}

/* A port already in use is bad input naming it. */
static void test_port_in_use(void) {
    err_t e = {0};
    store_server_t *a = store_server_start("127.0.0.1", 0, &e);
    if (!a) { CHECK(a != NULL); return; }
    err_t e2 = {0};
    store_server_t *b = store_server_start("127.0.0.1", store_server_port(a), &e2);
    CHECK(b == NULL);
    CHECK_INT(e2.code, ERR_INPUT);
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", store_server_port(a));
    CHECK_CONTAINS(e2.msg, where);
    store_server_stop(a);
}

int main(void) {
    TEST_RUN(test_set_get_add_timeout);
    TEST_RUN(test_many_clients_barrier);
    TEST_RUN(test_server_starts_late);
    TEST_RUN(test_unreachable_master);
    TEST_RUN(test_failure_flag_wakes_waiter);
    TEST_RUN(test_barrier_names_missing_rank);
    TEST_RUN(test_port_in_use);
    return test_main_end();
}
