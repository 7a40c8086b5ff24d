/* err.c: the err_t helpers declared in err.h. */
#include "util/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int err_set(err_t *e, int code, const char *fmt, ...) {
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    return -1;
}

int err_wrap(err_t *e, const char *fmt, ...) {
    if (!e) return -1;
    char prefix[1024], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    size_t pl = strlen(prefix);
    if (pl > sizeof e->msg - 3) pl = sizeof e->msg - 3;
    memcpy(e->msg, prefix, pl);
    memcpy(e->msg + pl, ": ", 2);
    size_t room = sizeof e->msg - pl - 3, ol = strnlen(old, sizeof old);
    if (ol > room) ol = room;
    memcpy(e->msg + pl + 2, old, ol);
    e->msg[pl + 2 + ol] = '\0';
    if (!e->code) e->code = ERR_RUNTIME;
    return -1;
}

int err_errno(err_t *e, int code, const char *fmt, ...) {
    int saved = errno;
    if (!e) return -1;
    char head[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    snprintf(e->msg, sizeof e->msg, "%s: %s", head, strerror(saved));
    e->code = code;
    return -1;
}

void err_clear(err_t *e) {
    if (!e) return;
    e->code = 0;
    e->msg[0] = '\0';
}

void *xmalloc_(size_t n, err_t *e, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) err_set(e, ERR_RUNTIME, "out of memory allocating %zu bytes at %s:%d", n, file, line);
    return p;
}

void *xcalloc_(size_t count, size_t size, err_t *e, const char *file, int line) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        err_set(e, ERR_RUNTIME, "out of memory allocating %zu x %zu bytes at %s:%d", count, size,
                file, line);
    return p;
}
