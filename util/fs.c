/* fs.c: mkdir_p and write_file_atomic (fs.h). */
#include "util/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int mkdir_p(const char *path, int code, err_t *e) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
        return err_set(e, code, "%s: path too long", path);
    for (char *p = tmp + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return err_errno(e, code, "%s: cannot create directory", tmp);
        *p = c;
        if (!c) break;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_set(e, code, "%s: exists and is not a directory; choose another path", path);
    return 0;
}

int write_file_atomic(const char *path, const void *data, size_t n, err_t *e) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return err_errno(e, ERR_RUNTIME, "%s: cannot create", tmp);
    const char *p = data;
    size_t left = n;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            err_errno(e, ERR_RUNTIME, "%s: write failed", tmp);
            close(fd);
            unlink(tmp);
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
        err_errno(e, ERR_RUNTIME, "%s: cannot write", path);
        unlink(tmp);
        return -1;
    }
    return 0;
}
