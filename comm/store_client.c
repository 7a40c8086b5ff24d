/* store_client.c: the rendezvous store's blocking client (store.h): connecting with
 * retries until the timeout, the handshake (job id, rank, world; a refusal is ERR_INPUT
 * with the server's reason), requests whose answers must arrive within the timeout after
 * the wait the request asked for, barriers, the failure flag, and the job id. The wire
 * format and the server are in store.c.
 */
#include "comm/store_impl.h"
#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct barrier_count {
    char name[64];
    int64_t count;
} barrier_count_t;

struct store {
    int fd;
    int rank, world;
    double timeout_s;
    char addr[256];
    int port;
    int next_id;
    barrier_count_t barriers[32];
    int n_barriers;
};

/* Tries one non-blocking connect bounded by `left` seconds; returns the socket or -1. */
static int try_connect(const struct sockaddr_storage *sa, socklen_t sl, double left) {
    int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    if (connect(fd, (const struct sockaddr *)sa, sl) < 0) {
        if (errno != EINPROGRESS) { int k = errno; close(fd); errno = k; return -1; }
        struct pollfd p = { fd, POLLOUT, 0 };
        int ms = (int)(left * 1000);
        if (ms < 1) ms = 1;
        if (ms > 2000) ms = 2000;
        int r = poll(&p, 1, ms);
        int so = 0;
        socklen_t l = sizeof so;
        if (r <= 0) { close(fd); errno = ETIMEDOUT; return -1; }
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &l);
        if (so) { close(fd); errno = so; return -1; }
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int rpc(store_t *s, int op, const char *key, const void *val, size_t vlen, int64_t arg,
               double wait_s, int *status, void *out, size_t cap, size_t *len, err_t *e);

/* Sends the hello of s (see the top of the file); a refusal is ERR_INPUT with the
 * server's reason. */
static int hello(store_t *s, uint64_t job, err_t *e) {
    unsigned char v[HELLO_BYTES];
    int32_t r = s->rank, w = s->world;
    memcpy(v, &job, 8);
    memcpy(v + 8, &r, 4);
    memcpy(v + 12, &w, 4);
    int st = -1;
    char why[512];
    size_t n = 0;
    if (rpc(s, OP_HELLO, STORE_HELLO_KEY, v, sizeof v, 0, 0, &st, why, sizeof why - 1, &n, e) < 0)
        return err_wrap(e, "joining the rendezvous store (is something else listening on %s:%d?)", s->addr,
                        s->port);
    if (st == ST_OK) return 0;
    if (n > sizeof why - 1) n = sizeof why - 1;
    why[n] = '\0';
    for (size_t i = 0; i < n; i++)    /* the peer's text goes into a terminal */
        if ((unsigned char)why[i] < 0x20 || why[i] == 0x7f) why[i] = '?';
    return err_set(e, ERR_INPUT, "rank %d: the rendezvous store at %s:%d refused this rank: %s", s->rank,
                   s->addr, s->port, st == ST_REFUSED ? why : "unexpected answer to the handshake");
}

store_t *store_connect_fd_(int fd, int rank, int world, double timeout_s, uint64_t job_id, err_t *e) {
    store_t *s = calloc(1, sizeof *s);
    if (!s) { close(fd); err_set(e, ERR_RUNTIME, "out of memory"); return NULL; }
    s->fd = fd;
    s->rank = rank;
    s->world = world;
    s->timeout_s = timeout_s > 0 ? timeout_s : 300;
    snprintf(s->addr, sizeof s->addr, "(fd %d)", fd);
    if (hello(s, job_id, e)) {
        store_close(s);
        return NULL;
    }
    return s;
}

store_t *store_connect(const char *addr, int port, int rank, int world, double timeout_s,
                       err_t *e) {
    return store_connect_job(addr, port, rank, world, timeout_s, 0, e);
}

store_t *store_connect_job(const char *addr, int port, int rank, int world, double timeout_s,
                           uint64_t job_id, err_t *e) {
    if (world < 1 || rank < 0 || rank >= world) {
        err_set(e, ERR_INPUT, "store: rank %d is not within a world of %d", rank, world);
        return NULL;
    }
    if (timeout_s <= 0) timeout_s = 300;
    struct sockaddr_storage sa;
    socklen_t sl;
    if (store_resolve_(addr, port, false, &sa, &sl, e) < 0) return NULL;
    double t0 = now_s(), deadline = t0 + timeout_s;
    int fd = -1, last = 0;
    for (;;) {
        fd = try_connect(&sa, sl, deadline - now_s());
        if (fd >= 0) break;
        last = errno;
        if (now_s() + 0.05 >= deadline) break;
        usleep(50000);
    }
    if (fd < 0) {
        err_set(e, ERR_INPUT, "cannot reach the rendezvous store at %s:%d within %g s (%s); "
                "check MASTER_ADDR / MASTER_PORT (parallel.master_addr / master_port), that "
                "rank 0 is running, and that no firewall blocks the port",
                addr, port, timeout_s, strerror(last));
        return NULL;
    }
    store_t *s = calloc(1, sizeof *s);
    if (!s) { close(fd); err_set(e, ERR_RUNTIME, "out of memory"); return NULL; }
    s->fd = fd;
    s->rank = rank;
    s->world = world;
    s->timeout_s = timeout_s;
    snprintf(s->addr, sizeof s->addr, "%s", addr);
    s->port = port;
    if (hello(s, job_id, e)) {
        store_close(s);
        return NULL;
    }
    return s;
}

void store_close(store_t *s) {
    if (!s) return;
    close(s->fd);
    free(s);
}

int store_rank(const store_t *s) { return s->rank; }
int store_world(const store_t *s) { return s->world; }
double store_timeout(const store_t *s) { return s->timeout_s; }
int store_next_id(store_t *s) { return s->next_id++; }

/* Sends one request and reads the reply status and data (at most cap bytes kept; the
 * full length in *len). wait_s is how long the server may hold the request. */
static int rpc(store_t *s, int op, const char *key, const void *val, size_t vlen, int64_t arg,
               double wait_s, int *status, void *out, size_t cap, size_t *len, err_t *e) {
    size_t klen = strlen(key);
    if (klen >= STORE_MAX_KEY || vlen > STORE_MAX_VALUE)
        return err_set(e, ERR_RUNTIME, "store: key '%.64s' or its value is too long", key);
    /* the server may hold the request wait_s; a silent or half-answering peer is given up
     * within the timeout after that */
    double deadline = now_s() + wait_s + (s->timeout_s < 30 ? s->timeout_s : 30);
    unsigned char o = (unsigned char)op;
    uint16_t kl = (uint16_t)klen;
    uint32_t vl = (uint32_t)vlen;
    unsigned char h[5];
    if (store_io_full_(s->fd, &o, 1, true, deadline) < 0 || store_io_full_(s->fd, &kl, 2, true, deadline) < 0 ||
        store_io_full_(s->fd, (void *)key, klen, true, deadline) < 0 ||
        store_io_full_(s->fd, &vl, 4, true, deadline) < 0 ||
        (vlen && store_io_full_(s->fd, (void *)val, vlen, true, deadline) < 0) ||
        store_io_full_(s->fd, &arg, 8, true, deadline) < 0 || store_io_full_(s->fd, h, 5, false, deadline) < 0)
        return err_errno(e, ERR_RUNTIME, "lost the connection to the rendezvous store at %s:%d "
                         "(rank 0 exited?)", s->addr, s->port);
    uint32_t rl;
    memcpy(&rl, h + 1, 4);
    *status = h[0];
    if (rl > STORE_MAX_VALUE + 64)
        return err_set(e, ERR_RUNTIME, "the rendezvous store at %s:%d answered with %u bytes, more than "
                       "any answer has (STORE_MAX_VALUE): not a runner store?", s->addr, s->port, rl);
    size_t keep = 0;
    for (size_t got = 0; got < rl;) {
        unsigned char tmp[4096];
        size_t n = rl - got < sizeof tmp ? rl - got : sizeof tmp;
        if (store_io_full_(s->fd, tmp, n, false, deadline) < 0)
            return err_errno(e, ERR_RUNTIME, "lost the connection to the rendezvous store at "
                             "%s:%d", s->addr, s->port);
        if (out && keep < cap) {
            size_t c = cap - keep < n ? cap - keep : n;
            memcpy((char *)out + keep, tmp, c);
            keep += c;
        }
        got += n;
    }
    if (len) *len = rl;
    return 0;
}

/* Turns an ST_FAILED reply payload into the error message. */
static int failed_error(const unsigned char *buf, size_t n, err_t *e) {
    int32_t r = -1;
    if (n >= 4) memcpy(&r, buf, 4);
    return err_set(e, ERR_RUNTIME, "rank %d failed: %.*s", r, (int)(n > 4 ? n - 4 : 0),
                   (const char *)buf + 4);
}

int store_set(store_t *s, const char *key, const void *val, size_t len, err_t *e) {
    int st = -1;
    if (rpc(s, OP_SET, key, val, len, 0, 0, &st, NULL, 0, NULL, e) < 0) return -1;
    return st == ST_OK ? 0 : err_set(e, ERR_RUNTIME, "store: setting '%s' failed", key);
}

/* GET / WAIT with the failure-flag and timeout handling both share. */
static int get_or_wait(store_t *s, int op, const char *key, void *buf, size_t cap, size_t *len,
                       double timeout_s, err_t *e) {
    if (timeout_s < 0) timeout_s = s->timeout_s;
    unsigned char fb[1100];
    void *dst = buf;
    size_t dcap = cap, n = 0;
    if (op == OP_WAIT) { dst = fb; dcap = sizeof fb; }
    int st = -1;
    /* ask for a slightly larger buffer only to catch a failure payload */
    unsigned char *tmp = NULL;
    if (op == OP_GET && cap < sizeof fb) { tmp = fb; dst = fb; dcap = sizeof fb; }
    if (rpc(s, op, key, NULL, 0, (int64_t)(timeout_s * 1000), timeout_s, &st, dst, dcap, &n,
            e) < 0)
        return -1;
    if (st == ST_FAILED) return failed_error(dst, n < dcap ? n : dcap, e);
    if (st == ST_TIMEOUT)
        return err_set(e, ERR_RUNTIME, "rank %d timed out after %g s waiting for '%s' in the "
                       "rendezvous store (another rank did not arrive; raise "
                       "parallel.timeout_s if startup is slow)", s->rank, timeout_s, key);
    if (st != ST_OK) return err_set(e, ERR_RUNTIME, "store: reading '%s' failed", key);
    if (tmp && buf) memcpy(buf, fb, n < cap ? n : cap);
    if (len) *len = n;
    return 0;
}

int store_get(store_t *s, const char *key, void *buf, size_t cap, size_t *len,
              double timeout_s, err_t *e) {
    return get_or_wait(s, OP_GET, key, buf, cap, len, timeout_s, e);
}

int store_wait(store_t *s, const char *key, double timeout_s, err_t *e) {
    return get_or_wait(s, OP_WAIT, key, NULL, 0, NULL, timeout_s, e);
}

int store_check(store_t *s, const char *key, err_t *e) {
    int st = -1;
    if (rpc(s, OP_CHECK, key, NULL, 0, 0, 0, &st, NULL, 0, NULL, e) < 0) return -1;
    return st == ST_OK ? 1 : 0;
}

int store_add(store_t *s, const char *key, int64_t delta, int64_t *out, err_t *e) {
    int st = -1;
    int64_t v = 0;
    size_t n = 0;
    if (rpc(s, OP_ADD, key, NULL, 0, delta, 0, &st, &v, 8, &n, e) < 0) return -1;
    if (st != ST_OK || n != 8) return err_set(e, ERR_RUNTIME, "store: add on '%s' failed", key);
    if (out) *out = v;
    return 0;
}

int store_barrier(store_t *s, const char *name, err_t *e) {
    barrier_count_t *b = NULL;
    for (int i = 0; i < s->n_barriers; i++)
        if (!strcmp(s->barriers[i].name, name)) b = &s->barriers[i];
    if (!b) {
        if (s->n_barriers == (int)(sizeof s->barriers / sizeof s->barriers[0]))
            return err_set(e, ERR_RUNTIME, "store: too many distinct barrier names");
        b = &s->barriers[s->n_barriers++];
        snprintf(b->name, sizeof b->name, "%s", name);
        b->count = 0;
    }
    int64_t gen = ++b->count;
    char key[128], rk[STORE_MAX_KEY], dk[STORE_MAX_KEY];
    snprintf(key, sizeof key, "barrier/%.64s/%lld", name, (long long)gen);
    snprintf(rk, sizeof rk, "%s/rank%d", key, s->rank);
    snprintf(dk, sizeof dk, "%s/done", key);
    int64_t arrived;
    if (store_set(s, rk, "", 0, e) < 0 || store_add(s, key, 1, &arrived, e) < 0) return -1;
    if (arrived == s->world && store_set(s, dk, "", 0, e) < 0) return -1;
    err_t we = {0};
    if (store_wait(s, dk, -1, &we) == 0) return 0;
    /* Timed out (or failed): name the ranks that never arrived. */
    char missing[512] = "";
    size_t used = 0;
    for (int r = 0; r < s->world && used + 16 < sizeof missing; r++) {
        snprintf(rk, sizeof rk, "%s/rank%d", key, r);
        err_t ce = {0};
        if (store_check(s, rk, &ce) == 0)
            used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d",
                                     used ? ", " : "", r);
    }
    if (missing[0])
        return err_set(e, ERR_RUNTIME, "barrier '%s': rank(s) %s never arrived within %g s (%s)",
                       name, missing, s->timeout_s, we.msg);
    *e = we;
    return -1;
}

void store_set_failed(store_t *s, const char *msg) {
    if (!s) return;
    int st = -1;
    err_t e = {0};
    rpc(s, OP_FAIL_SET, "fail", msg, strlen(msg) < 1000 ? strlen(msg) : 1000, s->rank, 0, &st,
        NULL, 0, NULL, &e);
}

int store_get_failed(store_t *s, int *rank, char *msg, size_t cap, err_t *e) {
    int st = -1;
    unsigned char buf[1100];
    size_t n = 0;
    if (rpc(s, OP_FAIL_GET, "fail", NULL, 0, 0, 0, &st, buf, sizeof buf, &n, e) < 0) return -1;
    if (st != ST_FAILED) return 0;
    if (n > sizeof buf) n = sizeof buf;
    int32_t r = -1;
    if (n >= 4) memcpy(&r, buf, 4);
    if (rank) *rank = r;
    if (msg && cap) snprintf(msg, cap, "%.*s", (int)(n > 4 ? n - 4 : 0), (const char *)buf + 4);
    return 1;
}

/* FNV-1a over a string, continuing from h. */
static uint64_t fnv(uint64_t h, const char *s) {
    for (; s && *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull;
}

uint64_t store_job_id(const char *run_dir, uint64_t salt) {
    uint64_t h = 0xcbf29ce484222325ull ^ salt;
    static const char *const vars[] = {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID",
                                       "OMPI_MCA_ess_base_jobid", NULL};
    h = fnv(h, run_dir);
    for (int i = 0; vars[i]; i++) h = fnv(h, getenv(vars[i]));
    return h ? h : 1;
}
