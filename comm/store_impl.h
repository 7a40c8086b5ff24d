/* store_impl.h: what the rendezvous store's server (store.c) and client (store_client.c)
 * share: the wire format's codes, the handshake's key and size, bounded socket I/O and
 * address resolution. Private to comm/. The format itself is described in store.c. */
#ifndef RUNNER_COMM_STORE_IMPL_H
#define RUNNER_COMM_STORE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "comm/store.h"

enum { OP_SET = 1, OP_GET, OP_WAIT, OP_CHECK, OP_ADD, OP_FAIL_SET, OP_FAIL_GET, OP_HELLO };
enum { ST_OK = 0, ST_TIMEOUT = 1, ST_FAILED = 2, ST_MISSING = 3, ST_BAD = 4, ST_REFUSED = 5 };
#define STORE_HELLO_KEY "runner-store/1"
enum { HELLO_BYTES = 16 };   /* u64 job id, i32 rank, i32 world */

/* Writes or reads exactly n bytes before the monotonic deadline (<= 0: none). Returns 0,
 * or -1 with errno (ETIMEDOUT on the deadline, EPIPE on a closed peer). */
int store_io_full_(int fd, void *buf, size_t n, bool writing, double deadline);

/* Resolves addr:port into *out (IPv4 or IPv6, numeric or a host name); ERR_INPUT naming
 * the address when it cannot be resolved. */
int store_resolve_(const char *addr, int port, bool passive, struct sockaddr_storage *out,
                   socklen_t *out_len, err_t *e);

#endif
