/* ranks.h: runs `world` forked rank processes against one TCP store, for the comm tests.
 *
 * Fork safety: the ranks are forked BEFORE the store server starts, and learn its port
 * through a pipe. A process that forks while another of its threads holds a lock (the
 * store server's thread inside malloc, say, with the sanitizer's allocator, which has no
 * fork handlers for every lock) hands the child a lock nobody will release; the child
 * then blocks forever at its next allocation. Starting the server after the forks keeps
 * the parent single-threaded whenever it forks.
 *
 * ranks_run returns how many ranks exited non-zero (printing each such code), codes
 * (optional) gets every exit code; a rank is fn(rank, port, ctx)'s return value, or 100
 * when the port never arrived.
 */
#ifndef RUNNER_TESTS_COMM_RANKS_H
#define RUNNER_TESTS_COMM_RANKS_H

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/store.h"

typedef int (*ranks_fn)(int rank, int port, void *ctx);

static inline int ranks_run(int world, ranks_fn fn, void *ctx, int *codes) {
    enum { MAX = 16 };
    pid_t kids[MAX];
    int pipes[MAX][2];
    if (world > MAX) return world;
    for (int r = 0; r < world; r++) {
        if (pipe(pipes[r]) < 0) return world;
        kids[r] = fork();
        if (kids[r] == 0) {
            close(pipes[r][1]);
            int port = 0;
            ssize_t n = read(pipes[r][0], &port, sizeof port);
            close(pipes[r][0]);
            if (n != (ssize_t)sizeof port || port <= 0) _exit(100);
            _exit(fn(r, port, ctx));
        }
        close(pipes[r][0]);
    }
    err_t e = {0};
    store_server_t *srv = store_server_start("127.0.0.1", 0, &e);
    int port = srv ? store_server_port(srv) : 0;
    if (!srv) fprintf(stderr, "store server: %s\n", e.msg);
    for (int r = 0; r < world; r++) {
        if (write(pipes[r][1], &port, sizeof port) != (ssize_t)sizeof port) perror("write port");
        close(pipes[r][1]);
    }
    int bad = 0;
    for (int r = 0; r < world; r++) {
        int s = 0;
        waitpid(kids[r], &s, 0);
        int code = WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
        if (codes) codes[r] = code;
        if (code) fprintf(stderr, "rank %d exited %d\n", r, code);
        bad += code != 0;
    }
    if (srv) store_server_stop(srv);
    return bad;
}

#endif
