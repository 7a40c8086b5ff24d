/* faultfs.c: an LD_PRELOAD library that makes file operations on chosen paths fail the way
 * a full or failing disk does, or kills the process in the middle of them, for the fault
 * tests (test_fault_disk.c, test_fault_kill.c). Configured by the environment:
 *
 *   FAULTFS_PATH   substring of the path: an fd opened on a matching path is watched,
 *                  and rename() with a matching source or target is (required)
 *   FAULTFS_OP     write | fsync | rename: the operation that fails (default write)
 *   FAULTFS_ERRNO  ENOSPC (default) | EIO | EDQUOT
 *   FAULTFS_AFTER  write: bytes that still go to watched files before the failure (the
 *                  write that crosses it writes the part that fits and fails: a short
 *                  write, then ENOSPC, as a filling disk does); fsync / rename: calls
 *                  that still succeed. Default 0.
 *   FAULTFS_KILL   1: instead of failing, SIGKILL every process of this session at that
 *                  moment (a partial write is on disk first)
 * Once it has failed, every later matching operation fails too (a full disk stays full).
 * glibc's own stdio writes do not pass through here (it calls its internal write), so
 * the runner's run files are written with write(2) (util/fs.c, track/csv.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

enum { MAX_FD = 65536 };
static unsigned char watched[MAX_FD];
static long long budget_bytes = -1, budget_calls = -1;
static int tripped, op_kind = -1, err_no = ENOSPC, kill_mode;
static const char *pattern;

enum { OP_WRITE, OP_FSYNC, OP_RENAME };

static void init(void) {
    if (op_kind >= 0) return;
    pattern = getenv("FAULTFS_PATH");
    const char *op = getenv("FAULTFS_OP");
    op_kind = !op || !strcmp(op, "write") ? OP_WRITE : !strcmp(op, "fsync") ? OP_FSYNC : OP_RENAME;
    const char *er = getenv("FAULTFS_ERRNO");
    if (er && !strcmp(er, "EIO")) err_no = EIO;
    if (er && !strcmp(er, "EDQUOT")) err_no = EDQUOT;
    const char *af = getenv("FAULTFS_AFTER");
    long long after = af ? atoll(af) : 0;
    if (op_kind == OP_WRITE) budget_bytes = after;
    else budget_calls = after;
    const char *k = getenv("FAULTFS_KILL");
    kill_mode = k && !strcmp(k, "1");
}

static bool matches(const char *path) {
    init();
    return pattern && *pattern && path && strstr(path, pattern);
}

/* SIGKILL to every process of this session (all ranks of a DDP run and their launcher,
 * which the fault tests start as a session of its own), this one last. */
static void kill_session(void) {
    pid_t sid = getsid(0), me = getpid();
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0 || pid == me) continue;
        if (getsid((pid_t)pid) == sid) kill((pid_t)pid, SIGKILL);
    }
    if (d) closedir(d);
    raise(SIGKILL);
}

static int fail(void) {
    __atomic_store_n(&tripped, 1, __ATOMIC_SEQ_CST);
    if (kill_mode) kill_session();
    errno = err_no;
    return -1;
}

#define REAL(name, ret, args) static ret (*real_##name) args; \
    if (!real_##name) real_##name = (ret (*) args)dlsym(RTLD_NEXT, #name)

static void note_fd(int fd, const char *path) {
    if (fd >= 0 && fd < MAX_FD) watched[fd] = matches(path);
}

int open(const char *path, int flags, ...) {
    REAL(open, int, (const char *, int, ...));
    mode_t m = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); m = va_arg(ap, mode_t); va_end(ap); }
    int fd = real_open(path, flags, m);
    note_fd(fd, path);
    return fd;
}
int open64(const char *path, int flags, ...) {
    REAL(open64, int, (const char *, int, ...));
    mode_t m = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); m = va_arg(ap, mode_t); va_end(ap); }
    int fd = real_open64(path, flags, m);
    note_fd(fd, path);
    return fd;
}
int openat(int dir, const char *path, int flags, ...) {
    REAL(openat, int, (int, const char *, int, ...));
    mode_t m = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); m = va_arg(ap, mode_t); va_end(ap); }
    int fd = real_openat(dir, path, flags, m);
    note_fd(fd, path);
    return fd;
}
int creat(const char *path, mode_t m) {
    return open(path, O_WRONLY | O_CREAT | O_TRUNC, m);
}
int close(int fd) {
    REAL(close, int, (int));
    if (fd >= 0 && fd < MAX_FD) watched[fd] = 0;
    return real_close(fd);
}

static bool is_watched(int fd) { init(); return fd >= 0 && fd < MAX_FD && watched[fd]; }

ssize_t write(int fd, const void *buf, size_t n) {
    REAL(write, ssize_t, (int, const void *, size_t));
    if (!is_watched(fd) || op_kind != OP_WRITE) return real_write(fd, buf, n);
    if (__atomic_load_n(&tripped, __ATOMIC_SEQ_CST)) return fail();
    long long left = __atomic_load_n(&budget_bytes, __ATOMIC_SEQ_CST);
    if ((long long)n <= left) {
        __atomic_sub_fetch(&budget_bytes, (long long)n, __ATOMIC_SEQ_CST);
        return real_write(fd, buf, n);
    }
    __atomic_store_n(&budget_bytes, 0, __ATOMIC_SEQ_CST);
    if (left > 0) {
        ssize_t w = real_write(fd, buf, (size_t)left);
        if (kill_mode) fail();
        __atomic_store_n(&tripped, 1, __ATOMIC_SEQ_CST);
        return w;   /* short write; the next one gets the error */
    }
    return fail();
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    REAL(pwrite, ssize_t, (int, const void *, size_t, off_t));
    if (is_watched(fd) && op_kind == OP_WRITE) return fail();
    return real_pwrite(fd, buf, n, off);
}

static int sync_common(int fd, int (*real)(int)) {
    if (is_watched(fd) && op_kind == OP_FSYNC) {
        if (__atomic_load_n(&tripped, __ATOMIC_SEQ_CST) || __atomic_sub_fetch(&budget_calls, 1, __ATOMIC_SEQ_CST) < 0)
            return fail();
    }
    return real(fd);
}
int fsync(int fd) { REAL(fsync, int, (int)); return sync_common(fd, real_fsync); }
int fdatasync(int fd) { REAL(fdatasync, int, (int)); return sync_common(fd, real_fdatasync); }

int rename(const char *a, const char *b) {
    REAL(rename, int, (const char *, const char *));
    init();
    if (op_kind == OP_RENAME && (matches(a) || matches(b))) {
        if (__atomic_load_n(&tripped, __ATOMIC_SEQ_CST) || __atomic_sub_fetch(&budget_calls, 1, __ATOMIC_SEQ_CST) < 0)
            return fail();
    }
    return real_rename(a, b);
}
