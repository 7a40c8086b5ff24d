/* store.c: the TCP rendezvous store of store.h: a server thread (one more thread per
 * connected client) holding a key -> bytes table; the blocking client is store_client.c.
 *
 * Wire format (both directions little-endian as on every supported host):
 *   request:  u8 op | u16 key_len | key | u32 val_len | val | i64 arg
 *   response: u8 status | u32 len | data
 * arg is the delta of ADD and the wait in milliseconds of GET/WAIT. status is ST_OK,
 * ST_TIMEOUT, ST_FAILED (data = i32 rank + message of the failure flag), ST_MISSING,
 * ST_BAD (data = why) or ST_REFUSED (data = why; the server closes the connection).
 *
 * Handshake: a connection's first request must be OP_HELLO with key STORE_HELLO_KEY and a
 * 16-byte value {u64 job id, i32 rank, i32 world}, within the server's timeout. Anything
 * else (garbage, a port scanner, an HTTP request, silence) is answered ST_REFUSED where
 * possible and closed, and never touches the table. A hello of another job id (a second
 * job started on the same port) is refused with a message naming both ids; a hello of
 * this job with another world size, or a rank outside it, is refused and raises the
 * failure flag, so every rank of the misconfigured job stops at once.
 *
 * Peers are untrusted: after the first byte of a request the rest must arrive within the
 * server's timeout (a half-sent message closes that connection), waits are clamped to
 * [0, STORE_MAX_WAIT_MS], and the table holds at most STORE_MAX_KEYS keys and
 * STORE_MAX_BYTES bytes, the server at most STORE_MAX_CONNS connections.
 *
 * It does not: survive the server's process, order clients fairly, or authenticate
 * clients beyond the job id (anyone who can reach the port and knows it may join).
 */
#include "comm/store_impl.h"
#include "util/clock.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>


/* ---------------------------------------------------------------- common I/O */

int store_io_full_(int fd, void *buf, size_t n, bool writing, double deadline) {
    char *p = buf;
    while (n > 0) {
        if (deadline > 0) {
            double left = deadline - now_s();
            if (left <= 0) { errno = ETIMEDOUT; return -1; }
            struct pollfd pfd = { fd, writing ? POLLOUT : POLLIN, 0 };
            int ms = (int)(left * 1000) + 1;
            int r = poll(&pfd, 1, ms);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return -1;
            if (r == 0) { errno = ETIMEDOUT; return -1; }
        }
        ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k < 0) return -1;
        if (k == 0) { errno = EPIPE; return -1; }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* ---------------------------------------------------------------- server */

typedef struct kv {
    char key[STORE_MAX_KEY];
    unsigned char *val;
    size_t len;
} kv_t;

typedef struct client_conn {
    int fd;
    pthread_t thread;
    struct store_server *srv;
    bool done;
} client_conn_t;

struct store_server {
    store_server_opts_t o;
    int listen_fd;
    int port;
    size_t bytes;           /* values held, against STORE_MAX_BYTES */
    pthread_t accept_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* signalled on every set/add/fail and on stop */
    bool stopping;
    kv_t *kv;
    int n_kv, cap_kv;
    client_conn_t **clients;
    int n_clients, cap_clients;
    int failed_rank;        /* -1: no failure */
    char failed_msg[1024];
};

/* Returns the entry for key or NULL; caller holds mu. */
static kv_t *kv_find(store_server_t *s, const char *key) {
    for (int i = 0; i < s->n_kv; i++)
        if (!strcmp(s->kv[i].key, key)) return &s->kv[i];
    return NULL;
}

/* Sets key to a copy of val; caller holds mu. Returns 0 or -1 (out of memory). */
static int kv_put(store_server_t *s, const char *key, const void *val, size_t len) {
    kv_t *k = kv_find(s, key);
    if (!k) {
        if (s->n_kv == s->cap_kv) {
            int nc = s->cap_kv ? 2 * s->cap_kv : 64;
            kv_t *nk = realloc(s->kv, (size_t)nc * sizeof *nk);
            if (!nk) return -1;
            s->kv = nk;
            s->cap_kv = nc;
        }
        k = &s->kv[s->n_kv++];
        snprintf(k->key, sizeof k->key, "%s", key);
        k->val = NULL;
        k->len = 0;
    }
    unsigned char *v = malloc(len ? len : 1);
    if (!v) return -1;
    memcpy(v, val, len);
    s->bytes = s->bytes - k->len + len;
    free(k->val);
    k->val = v;
    k->len = len;
    return 0;
}

/* Whether setting key to len bytes stays within the table's bounds; caller holds mu. */
static bool kv_fits(store_server_t *s, const char *key, size_t len) {
    kv_t *k = kv_find(s, key);
    if (!k) return s->n_kv < STORE_MAX_KEYS && s->bytes + len <= STORE_MAX_BYTES;
    return s->bytes - k->len + len <= STORE_MAX_BYTES;
}

static int send_reply(store_server_t *s, int fd, int status, const void *data, uint32_t len) {
    unsigned char h[5];
    h[0] = (unsigned char)status;
    memcpy(h + 1, &len, 4);
    if (store_io_full_(fd, h, 5, true, now_s() + s->o.timeout_s) < 0) return -1;
    if (len && store_io_full_(fd, (void *)data, len, true, now_s() + s->o.timeout_s) < 0) return -1;
    return 0;
}

/* Tells the peer why it is refused (best effort), logs it, and returns -1 (close). */
static int refuse(store_server_t *s, int fd, const char *why) {
    send_reply(s, fd, ST_REFUSED, why, (uint32_t)strlen(why));
    if (s->o.log) {
        fprintf(s->o.log, "runner: rendezvous store: closed a connection: %s\n", why);
        fflush(s->o.log);
    }
    return -1;
}

/* Replies ST_FAILED with the failure record; caller holds mu (released before I/O). */
static int reply_failed_locked(store_server_t *s, int fd) {
    char buf[4 + sizeof s->failed_msg];
    int32_t r = s->failed_rank;
    memcpy(buf, &r, 4);
    size_t ml = strlen(s->failed_msg);
    memcpy(buf + 4, s->failed_msg, ml);
    pthread_mutex_unlock(&s->mu);
    return send_reply(s, fd, ST_FAILED, buf, (uint32_t)(4 + ml));
}

/* One request as read from a peer. */
typedef struct request {
    unsigned char op;
    char key[STORE_MAX_KEY];
    uint32_t vlen;
    unsigned char *val;     /* malloc'd, vlen bytes */
    int64_t arg;
} request_t;

/* Reads one request. The first byte may take first_wait seconds (<= 0: as long as it
 * takes: a joined client is idle between requests); the rest must follow within the
 * server's timeout. Returns 0, or -1 (connection closed, garbage, half-sent, too long). */
static int read_request(store_server_t *s, int fd, double first_wait, request_t *r) {
    uint16_t klen;
    r->val = NULL;
    if (store_io_full_(fd, &r->op, 1, false, first_wait > 0 ? now_s() + first_wait : 0) < 0) return -1;
    double dl = now_s() + s->o.timeout_s;
    if (store_io_full_(fd, &klen, 2, false, dl) < 0 || klen >= STORE_MAX_KEY) return -1;
    if (store_io_full_(fd, r->key, klen, false, dl) < 0) return -1;
    r->key[klen] = '\0';
    if (store_io_full_(fd, &r->vlen, 4, false, dl) < 0 || r->vlen > STORE_MAX_VALUE) return -1;
    if (!(r->val = malloc(r->vlen ? r->vlen : 1))) return -1;
    if (store_io_full_(fd, r->val, r->vlen, false, dl) < 0 || store_io_full_(fd, &r->arg, 8, false, dl) < 0) {
        free(r->val);
        r->val = NULL;
        return -1;
    }
    return 0;
}

/* The handshake (see the top of the file). 0: joined; -1: refused and to be closed. */
static int serve_hello(store_server_t *s, int fd) {
    static const char *not_hello = "not a runner rendezvous handshake (another program, or a runner "
                                   "of another version, on this port)";
    /* the fixed prefix first, so that garbage is refused at its first wrong byte instead
     * of being read as a length to wait for */
    const size_t kl = strlen(STORE_HELLO_KEY);
    unsigned char pre[3 + sizeof STORE_HELLO_KEY];
    unsigned char want[3 + sizeof STORE_HELLO_KEY] = {OP_HELLO, (unsigned char)kl, 0};
    memcpy(want + 3, STORE_HELLO_KEY, kl);
    double dl = now_s() + s->o.timeout_s;
    for (size_t i = 0; i < 3 + kl; i++) {
        if (store_io_full_(fd, pre + i, 1, false, dl) < 0)
            return refuse(s, fd, "no complete handshake within parallel.timeout_s (not a runner rank?)");
        if (pre[i] != want[i]) return refuse(s, fd, not_hello);
    }
    request_t r = {.op = OP_HELLO};
    if (store_io_full_(fd, &r.vlen, 4, false, dl) < 0)
        return refuse(s, fd, "no complete handshake within parallel.timeout_s (not a runner rank?)");
    if (r.vlen != HELLO_BYTES) return refuse(s, fd, not_hello);
    unsigned char v[HELLO_BYTES];
    r.val = v;
    if (store_io_full_(fd, v, HELLO_BYTES, false, dl) < 0 || store_io_full_(fd, &r.arg, 8, false, dl) < 0)
        return refuse(s, fd, "no complete handshake within parallel.timeout_s (not a runner rank?)");
    char why[256];
    int rc = 0;
    uint64_t job = 0;
    int32_t rank = -1, world = -1;
    memcpy(&job, r.val, 8);
    memcpy(&rank, r.val + 8, 4);
    memcpy(&world, r.val + 12, 4);
    if (job != s->o.job_id) {
        snprintf(why, sizeof why, "this port belongs to job %016llx, not to job %016llx: two jobs "
                 "were started on the same MASTER_PORT / parallel.master_port; give each its own "
                 "port", (unsigned long long)s->o.job_id, (unsigned long long)job);
        rc = refuse(s, fd, why);
        goto out;
    }
    if (s->o.world > 0 && (world != s->o.world || rank < 0 || rank >= world)) {
        snprintf(why, sizeof why, "rank %d joined with world size %d, but this job has world size %d; "
                 "start every rank with the same WORLD_SIZE / parallel.world_size", rank, world,
                 s->o.world);
        pthread_mutex_lock(&s->mu);
        if (s->failed_rank < 0) {
            s->failed_rank = rank >= 0 && rank < (1 << 20) ? rank : 0;
            snprintf(s->failed_msg, sizeof s->failed_msg, "%s", why);
        }
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        rc = refuse(s, fd, why);
        goto out;
    }
    rc = send_reply(s, fd, ST_OK, NULL, 0);
out:
    return rc;
}

/* Serves one request on a joined connection; returns -1 when the connection should close. */
static int serve_one(store_server_t *s, int fd) {
    request_t r;
    if (read_request(s, fd, 0, &r) < 0) return -1;
    unsigned char op = r.op, *val = r.val;
    const char *key = r.key;
    uint32_t vlen = r.vlen;
    int64_t arg = r.arg;
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    switch (op) {
    case OP_SET:
        if (!kv_fits(s, key, vlen) || kv_put(s, key, val, vlen) < 0) {
            pthread_mutex_unlock(&s->mu);
            rc = send_reply(s, fd, ST_BAD, "store full", 10);
            break;
        }
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        rc = send_reply(s, fd, ST_OK, NULL, 0);
        break;
    case OP_GET:
    case OP_WAIT: {
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        /* a wait is the asking client's timeout, which is parallel.timeout_s like the
         * server's: never more than that, never negative (an invalid deadline made the
         * wait below spin) */
        int64_t most = (int64_t)(s->o.timeout_s * 1000) + 1;
        if (most > STORE_MAX_WAIT_MS) most = STORE_MAX_WAIT_MS;
        if (arg < 0) arg = 0;
        if (arg > most) arg = most;
        int64_t ns = dl.tv_nsec + (arg % 1000) * 1000000;
        dl.tv_sec += (time_t)(arg / 1000) + (time_t)(ns / 1000000000);
        dl.tv_nsec = (long)(ns % 1000000000);
        kv_t *k;
        for (;;) {
            if (s->failed_rank >= 0) { rc = reply_failed_locked(s, fd); goto out; }
            if ((k = kv_find(s, key)) != NULL || s->stopping) break;
            if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) != 0) break;
        }
        if (!k) {
            pthread_mutex_unlock(&s->mu);
            rc = send_reply(s, fd, ST_TIMEOUT, NULL, 0);
        } else if (op == OP_WAIT) {
            pthread_mutex_unlock(&s->mu);
            rc = send_reply(s, fd, ST_OK, NULL, 0);
        } else {
            size_t len = k->len;
            unsigned char *copy = malloc(len ? len : 1);
            if (copy) memcpy(copy, k->val, len);
            pthread_mutex_unlock(&s->mu);
            rc = copy ? send_reply(s, fd, ST_OK, copy, (uint32_t)len) : -1;
            free(copy);
        }
        break;
    }
    case OP_CHECK: {
        bool have = kv_find(s, key) != NULL;
        pthread_mutex_unlock(&s->mu);
        rc = send_reply(s, fd, have ? ST_OK : ST_MISSING, NULL, 0);
        break;
    }
    case OP_ADD: {
        kv_t *k = kv_find(s, key);
        int64_t v = 0;
        if (k && k->len == 8) memcpy(&v, k->val, 8);
        /* wraps like the two's complement it is; a peer's huge delta is not undefined behaviour */
        v = (int64_t)((uint64_t)v + (uint64_t)arg);
        int ok = kv_fits(s, key, 8) ? kv_put(s, key, &v, 8) : -1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        rc = ok == 0 ? send_reply(s, fd, ST_OK, &v, 8) : send_reply(s, fd, ST_BAD, "store full", 10);
        break;
    }
    case OP_FAIL_SET:
        if (s->failed_rank < 0) {
            s->failed_rank = arg >= 0 && arg < (1 << 20) ? (int)arg : 0;
            size_t n = vlen < sizeof s->failed_msg - 1 ? vlen : sizeof s->failed_msg - 1;
            memcpy(s->failed_msg, val, n);
            s->failed_msg[n] = '\0';
        }
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        rc = send_reply(s, fd, ST_OK, NULL, 0);
        break;
    case OP_FAIL_GET:
        if (s->failed_rank >= 0) { rc = reply_failed_locked(s, fd); break; }
        pthread_mutex_unlock(&s->mu);
        rc = send_reply(s, fd, ST_OK, NULL, 0);
        break;
    default:
        pthread_mutex_unlock(&s->mu);
        rc = -1;
    }
out:
    free(val);
    return rc;
}

void store_server_serve_fd_(store_server_t *s, int fd) {
    if (serve_hello(s, fd) == 0)
        while (serve_one(s, fd) == 0) {}
}

static void *client_main(void *arg) {
    client_conn_t *c = arg;
    store_server_serve_fd_(c->srv, c->fd);
    shutdown(c->fd, SHUT_RDWR);   /* the peer sees the end now; the fd closes when reaped */
    pthread_mutex_lock(&c->srv->mu);
    c->done = true;
    pthread_mutex_unlock(&c->srv->mu);
    return NULL;
}

/* Accepts connections until the listening socket is shut down. */
static void *accept_main(void *arg) {
    store_server_t *s = arg;
    for (;;) {
        int fd = accept(s->listen_fd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            pthread_mutex_lock(&s->mu);
            bool stop = s->stopping;
            pthread_mutex_unlock(&s->mu);
            if (stop) break;
            usleep(10000);   /* EMFILE and friends: back off rather than spin */
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        client_conn_t *c = calloc(1, sizeof *c);
        pthread_mutex_lock(&s->mu);
        if (!c || s->stopping) {
            pthread_mutex_unlock(&s->mu);
            free(c);
            close(fd);
            if (c) break;
            continue;
        }
        /* connections that ended (a peer refused, a rank gone) give back their slot */
        int kept = 0;
        for (int i = 0; i < s->n_clients; i++) {
            client_conn_t *x = s->clients[i];
            if (x->done) {
                pthread_join(x->thread, NULL);
                close(x->fd);
                free(x);
            } else {
                s->clients[kept++] = x;
            }
        }
        s->n_clients = kept;
        if (s->n_clients >= STORE_MAX_CONNS) {
            pthread_mutex_unlock(&s->mu);
            free(c);
            close(fd);
            continue;
        }
        if (s->n_clients == s->cap_clients) {
            int nc = s->cap_clients ? 2 * s->cap_clients : 16;
            client_conn_t **ncs = realloc(s->clients, (size_t)nc * sizeof *ncs);
            if (!ncs) { pthread_mutex_unlock(&s->mu); free(c); close(fd); continue; }
            s->clients = ncs;
            s->cap_clients = nc;
        }
        c->fd = fd;
        c->srv = s;
        if (pthread_create(&c->thread, NULL, client_main, c) != 0) {
            pthread_mutex_unlock(&s->mu);
            free(c);
            close(fd);
            continue;
        }
        s->clients[s->n_clients++] = c;
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

int store_resolve_(const char *addr, int port, bool passive, struct sockaddr_storage *out,
                   socklen_t *out_len, err_t *e) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (passive) hints.ai_flags = AI_PASSIVE;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int r = getaddrinfo(addr && *addr ? addr : NULL, ps, &hints, &res);
    if (r != 0 || !res)
        return err_set(e, ERR_INPUT, "rendezvous address '%s' cannot be resolved (%s); set "
                       "MASTER_ADDR / parallel.master_addr to rank 0's host name or IP",
                       addr ? addr : "", gai_strerror(r));
    memcpy(out, res->ai_addr, res->ai_addrlen);
    *out_len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

store_server_t *store_server_start(const char *addr, int port, err_t *e) {
    return store_server_start_opts(addr, port, NULL, e);
}

/* The table, locks and options of a server, without a socket. */
static store_server_t *server_new(const store_server_opts_t *o) {
    store_server_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (o) s->o = *o;
    if (!(s->o.timeout_s > 0)) s->o.timeout_s = 300;
    s->listen_fd = -1;
    s->failed_rank = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    return s;
}

store_server_t *store_server_create_(const store_server_opts_t *o) { return server_new(o); }

store_server_t *store_server_start_opts(const char *addr, int port, const store_server_opts_t *o,
                                        err_t *e) {
    if (port < 0 || port > 65535) {
        err_set(e, ERR_INPUT, "rendezvous port %d is out of range; use 0..65535", port);
        return NULL;
    }
    struct sockaddr_storage sa;
    socklen_t sl;
    if (store_resolve_(addr, port, true, &sa, &sl, e) < 0) return NULL;
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) { err_errno(e, ERR_RUNTIME, "store: socket"); return NULL; }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sl) < 0) {
        err_errno(e, ERR_INPUT, "rendezvous store cannot listen on %s:%d (is another run using "
                  "the port? set MASTER_PORT / parallel.master_port to a free port, or 0)",
                  addr, port);
        close(fd);
        return NULL;
    }
    if (listen(fd, 256) < 0) { err_errno(e, ERR_RUNTIME, "store: listen"); close(fd); return NULL; }
    store_server_t *s = server_new(o);
    if (!s) { close(fd); err_set(e, ERR_RUNTIME, "out of memory"); return NULL; }
    s->listen_fd = fd;
    struct sockaddr_storage got;
    socklen_t gl = sizeof got;
    getsockname(fd, (struct sockaddr *)&got, &gl);
    s->port = got.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&got)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&got)->sin_port);
    if (pthread_create(&s->accept_thread, NULL, accept_main, s) != 0) {
        err_set(e, ERR_RUNTIME, "store: cannot start the server thread");
        close(fd);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    return s;
}

int store_server_port(const store_server_t *s) { return s->port; }

void store_server_stop(store_server_t *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->listen_fd >= 0) {
        shutdown(s->listen_fd, SHUT_RDWR);
        pthread_join(s->accept_thread, NULL);
        close(s->listen_fd);
    }
    for (int i = 0; i < s->n_clients; i++) shutdown(s->clients[i]->fd, SHUT_RDWR);
    for (int i = 0; i < s->n_clients; i++) {
        pthread_join(s->clients[i]->thread, NULL);
        close(s->clients[i]->fd);
        free(s->clients[i]);
    }
    for (int i = 0; i < s->n_kv; i++) free(s->kv[i].val);
    free(s->kv);
    free(s->clients);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
