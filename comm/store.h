/* store.h: the TCP rendezvous store (key -> bytes) that ranks use to find each other.
 *
 * Rank 0 hosts the server on a thread of its own process (store_server_start, bound on
 * MASTER_ADDR:MASTER_PORT); every rank, rank 0 included, talks to it through a client
 * (store_connect). It carries the startup barrier, the shared-memory segment name of
 * comm/shm.c, the NCCL unique id (opaque bytes) and a failure flag a dying rank raises so
 * that the others stop waiting at once instead of running into their timeout.
 *
 * It does not: persist anything, authenticate clients, or carry bulk data (values are at
 * most STORE_MAX_VALUE bytes).
 *
 * Nothing waits forever: clients retry connecting until their timeout (so the server may
 * start after the clients), every socket has send/receive timeouts, and every wait takes
 * a timeout after which it fails with ERR_RUNTIME naming what it waited for. A client
 * that cannot reach the server fails with ERR_INPUT naming addr:port and the hint to
 * check MASTER_ADDR / MASTER_PORT / the firewall.
 *
 * Typical start of a worker (rank r of world w):
 *     store_server_t *srv = NULL;
 *     if (r == 0) srv = store_server_start(addr, port, &e);     // before connecting
 *     store_t *st = store_connect(addr, port, r, w, timeout_s, &e);
 *     store_barrier(st, "start", &e);                           // every rank arrived
 *     ... comm_shm_create(st, ...) / comm_nccl_create(st, ...) ...
 *     store_close(st); store_server_stop(srv);                  // at exit (srv may be NULL)
 * On a fatal error a rank calls store_set_failed(st, msg) before exiting.
 */
#ifndef RUNNER_COMM_STORE_H
#define RUNNER_COMM_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bounds on what a peer can make the server hold or do (see store.c): key length, value
 * length, keys, bytes held, connections, and the longest wait a GET/WAIT may ask for. */
enum { STORE_MAX_KEY = 256, STORE_MAX_VALUE = 1 << 20, STORE_MAX_KEYS = 65536,
       STORE_MAX_BYTES = 256 << 20, STORE_MAX_CONNS = 1024, STORE_MAX_WAIT_MS = 7 * 86400 * 1000 };

typedef struct store_server store_server_t;
typedef struct store store_t;

/* What the server checks in each connection's handshake. */
typedef struct store_server_opts {
    uint64_t job_id;     /* only clients with this id join (store_job_id); 0 for both sides
                            of the plain store_server_start / store_connect */
    int world;           /* > 0: a client must say this world size and a rank in it */
    double timeout_s;    /* handshake and rest-of-message deadline, longest wait a
                            GET/WAIT may ask for; <= 0: 300 */
    FILE *log;           /* one line per refused connection; NULL: silent */
} store_server_opts_t;

/* Starts the server: binds addr:port (port 0 picks a free port; see store_server_port),
 * listens, and serves every client on its own thread until store_server_stop. addr is a
 * numeric IPv4 address or a host name ("0.0.0.0" listens everywhere). A port in use is
 * ERR_INPUT naming it. Returns NULL with e set on failure. */
store_server_t *store_server_start(const char *addr, int port, err_t *e);
store_server_t *store_server_start_opts(const char *addr, int port, const store_server_opts_t *o,
                                        err_t *e);
/* The TCP port the server listens on. */
int store_server_port(const store_server_t *s);
/* Stops the server, closes every connection and frees it. NULL is a no-op. */
void store_server_stop(store_server_t *s);

/* Connects rank `rank` of `world` to the server at addr:port, retrying until timeout_s
 * seconds have passed (the server may not be up yet). timeout_s also bounds every later
 * wait of this client unless a call takes its own timeout. */
store_t *store_connect(const char *addr, int port, int rank, int world, double timeout_s,
                       err_t *e);
/* store_connect for a job: the server refuses a client of another job id (ERR_INPUT with
 * its reason: a second job on the same port) or of another world size. */
store_t *store_connect_job(const char *addr, int port, int rank, int world, double timeout_s,
                           uint64_t job_id, err_t *e);
/* A job id from what the launchers give every rank of one job alike: the run directory
 * (this runner's launcher), TORCHELASTIC_RUN_ID, SLURM_JOB_ID + SLURM_STEP_ID,
 * OMPI_MCA_ess_base_jobid, mixed with salt (the experiment's hash); never 0. */
uint64_t store_job_id(const char *run_dir, uint64_t salt);
void store_close(store_t *s);   /* NULL is a no-op */
int store_rank(const store_t *s);
int store_world(const store_t *s);
double store_timeout(const store_t *s);

/* Sets key to len bytes of val (overwriting), and wakes every waiter on key. */
int store_set(store_t *s, const char *key, const void *val, size_t len, err_t *e);
/* Waits up to timeout_s (< 0: the client's timeout) for key to exist, then copies its
 * value into buf (at most cap bytes) and its full length into *len (len may be NULL).
 * A timeout is ERR_RUNTIME "timed out after T s waiting for key K"; a raised failure
 * flag ends the wait at once with the failing rank's message. */
int store_get(store_t *s, const char *key, void *buf, size_t cap, size_t *len,
              double timeout_s, err_t *e);
/* Waits like store_get for key to exist, without reading it. */
int store_wait(store_t *s, const char *key, double timeout_s, err_t *e);
/* 1 if key exists, 0 if not, -1 on error; never waits. */
int store_check(store_t *s, const char *key, err_t *e);
/* Atomically adds delta to the integer counter key (missing: 0) and returns the new
 * value in *out (out may be NULL). */
int store_add(store_t *s, const char *key, int64_t delta, int64_t *out, err_t *e);
/* Every rank of the world calls this with the same name; returns once all have arrived.
 * A name may be reused (calls are counted per client). On timeout the message names
 * the ranks that never arrived. */
int store_barrier(store_t *s, const char *name, err_t *e);
/* Raises the failure flag with this rank and msg (first one wins). Best effort: errors
 * are ignored, as the caller is already failing. */
void store_set_failed(store_t *s, const char *msg);
/* 1 and the failing rank + its message if the flag is raised, 0 if not, -1 on error. */
int store_get_failed(store_t *s, int *rank, char *msg, size_t cap, err_t *e);

/* A small per-client counter that every rank advances in the same order, so objects
 * created in the same order on every rank (communicators) get the same key prefix. */
int store_next_id(store_t *s);

/* For tests and the fuzz harness: a server without a socket, serving one connection fd
 * in the calling thread until it ends (stop it with store_server_stop); and a client over
 * an already connected fd (owned by the client). */
store_server_t *store_server_create_(const store_server_opts_t *o);
void store_server_serve_fd_(store_server_t *s, int fd);
store_t *store_connect_fd_(int fd, int rank, int world, double timeout_s, uint64_t job_id, err_t *e);

#ifdef __cplusplus
}
#endif
#endif
