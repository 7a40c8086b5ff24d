/* runlock.c: the run directory lock (runlock.h): an OFD lock on <run_dir>/.lock and the
 * holder line written into it. */
#include "runner/runlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/lockinfo.h"

enum { LOCK_PATH = 4200 };

static void lock_path(const char *run_dir, char *out, size_t len) {
    snprintf(out, len, "%s/.lock", run_dir);
}

/* A whole-file write lock on fd's open file description, without waiting: 0 taken (or
 * already held by this open file), else the errno. */
static int ofd_lock(int fd) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    return fcntl(fd, F_OFD_SETLK, &fl) == 0 ? 0 : errno;
}

/* 1 when another open file holds a lock on fd's file (F_OFD_GETLK), 0 when not or when
 * the file system cannot tell. */
static int ofd_locked_elsewhere(int fd) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

/* True when the holder named in the lock file ran on this host and is gone or a zombie:
 * its lock is being released. */
static bool holder_exiting(long pid, const char *host) {
    char me[256] = "", path[64], stat[512];
    gethostname(me, sizeof me - 1);
    if (pid <= 0 || strcmp(host, me)) return false;
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *rp = strrchr(stat, ')');   /* the name may hold spaces and parentheses */
    return rp && (rp[2] == 'Z' || rp[2] == 'X');
}

int run_lock_adopt(const char *run_dir, run_lock_t *l) {
    memset(l, 0, sizeof *l);
    l->fd = -1;
    const char *v = getenv("RUNNER_LOCK_FD");
    if (!v) return 0;
    char *end;
    long fd = strtol(v, &end, 10);
    bool ok = *v && !*end && fd > 2 && fd < 1 << 20;
    unsetenv("RUNNER_LOCK_FD");   /* for this process only */
    char path[LOCK_PATH];
    lock_path(run_dir, path, sizeof path);
    struct stat a, b;
    if (!ok || fstat((int)fd, &a) != 0 || stat(path, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
        return 0;
    fcntl((int)fd, F_SETFD, FD_CLOEXEC);   /* not further than this process unless passed on */
    l->fd = (int)fd;
    l->inherited = true;
    return 1;
}

int run_lock_take(const char *run_dir, const char *command, run_lock_t *l, err_t *e) {
    char path[LOCK_PATH];
    lock_path(run_dir, path, sizeof path);
    int fd = run_lock_adopt(run_dir, l) ? l->fd : -1;
    l->fd = -1;
    if (fd < 0) {
        int raw = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (raw < 0) return err_errno(e, ERR_INPUT, "%s: cannot open the run directory's lock file", path);
        /* above the standard descriptors, which a child's dup2 would overwrite */
        fd = raw > 2 ? raw : fcntl(raw, F_DUPFD_CLOEXEC, 3);
        if (raw <= 2) close(raw);
        if (fd < 0) return err_errno(e, ERR_RUNTIME, "%s", path);
    }
    /* A holder that was just killed keeps the lock until the kernel has torn down all its
     * threads (one in fsync can take a while) and the ranks it passed the lock to have
     * died with it: a holder gone from this host is waited for (30 s at most). A live
     * one, or one on another host, is not: this process stops at once. */
    int r;
    for (double waited = 0;; waited += 0.05) {
        r = ofd_lock(fd);
        if (r != EAGAIN && r != EACCES) break;
        char who[1024], host[256];
        long pid;
        lock_info_read(fd, who, sizeof who, &pid, host, sizeof host);
        if (waited < 30.0 && holder_exiting(pid, host)) {
            usleep(50000);
            continue;
        }
        close(fd);
        char stop[400] = "";
        if (pid > 0) snprintf(stop, sizeof stop, ", or stop it (kill -INT %ld%s%s: it saves a checkpoint first)", pid,
                              host[0] ? " on host " : "", host);
        return err_set(e, ERR_INPUT, "%s is in use: another runner is writing it (%s). One process writes a run "
                       "directory at a time; this one stopped without changing anything there. Wait for that run "
                       "to end%s, then run the command again", run_dir, who, stop);
    }
    if (r == ENOLCK || r == EOPNOTSUPP || r == ENOSYS || r == EINVAL) {
        snprintf(l->warning, sizeof l->warning, "%.300s cannot be locked (%s): its file system does not support "
                 "locks, so nothing stops a second runner from writing this run directory at the same time; "
                 "make sure only one does", path, strerror(r));
        close(fd);
        return 0;
    }
    if (r) {
        close(fd);
        errno = r;
        return err_errno(e, ERR_RUNTIME, "%s: cannot lock", path);
    }
    if (!l->inherited) lock_info_write(fd, command);
    l->fd = fd;
    return 0;
}

int run_lock_holder(const char *run_dir, char *out, size_t len) {
    char path[LOCK_PATH];
    lock_path(run_dir, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    int held = ofd_locked_elsewhere(fd);
    if (held) {
        char host[256];
        long pid;
        lock_info_read(fd, out, len, &pid, host, sizeof host);
    }
    close(fd);
    return held;
}

void run_lock_env(const run_lock_t *l, char *out, size_t len) {
    if (l->fd < 0) snprintf(out, len, "RUNNER_LOCK_FD=");
    else snprintf(out, len, "RUNNER_LOCK_FD=%d", l->fd);
}

void run_lock_release(run_lock_t *l) {
    if (l->fd >= 0) close(l->fd);
    l->fd = -1;
}
