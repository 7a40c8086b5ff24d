/* fs.c: mkdir_p, write_file_atomic, fsync_parent_dir, write_all_fd, read_file_bounded and
 * path_expand (fs.h). */
#include "util/fs.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int fsync_parent_dir(const char *path) {
    char dir[4200];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int k = errno;
    close(fd);
    errno = k;
    return rc;
}

int write_all_fd(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) { errno = EIO; return -1; }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int read_file_bounded(const char *path, size_t max_bytes, const char *what, int code,
                      char **out, size_t *len, err_t *e) {
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_errno(e, code, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(e, code, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return err_set(e, code, "%s: %lld bytes, more than the %zu bytes allowed for %s; is this "
                       "the right file?", path, (long long)st.st_size, max_bytes, what);
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return err_set(e, ERR_RUNTIME, "%s: out of memory reading %zu bytes", path, size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    int k = errno;
    close(fd);
    if (got != size) {
        free(buf);
        errno = k;
        return err_set(e, code, "%s: short read (%zu of %zu bytes; the file changed or the disk "
                       "failed)", path, got, size);
    }
    buf[size] = '\0';
    *out = buf;
    *len = size;
    return 0;
}

/* The temporary name is per process, so two writers never share one; a writer killed
 * half-way leaves only "<path>.tmp-<pid>", which no reader opens (runner/checkpoint.c
 * removes stale ones of checkpoints). */
int write_file_atomic(const char *path, const void *data, size_t n, err_t *e) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return err_set(e, ERR_RUNTIME, "%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return err_errno(e, ERR_RUNTIME, "%s: cannot create", tmp);
    if (write_all_fd(fd, data, n) != 0 || fsync(fd) != 0) {
        err_errno(e, ERR_RUNTIME, "%s: cannot write", path);
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        err_errno(e, ERR_RUNTIME, "%s: cannot write", path);
        unlink(tmp);
        return -1;
    }
    if (fsync_parent_dir(path) != 0) return err_errno(e, ERR_RUNTIME, "%s: cannot sync its directory", path);
    return 0;
}

/* Appends n bytes of s to out (length *len, capacity cap); -1 when it does not fit. */
static int append(char *out, size_t *len, size_t cap, const char *s, size_t n) {
    if (*len + n + 1 > cap) return -1;
    memcpy(out + *len, s, n);
    *len += n;
    out[*len] = '\0';
    return 0;
}

int path_expand(const char *in, char *out, size_t cap, err_t *e) {
    size_t len = 0;
    if (!cap) return err_set(e, ERR_INPUT, "path too long");
    out[0] = '\0';
    const char *p = in;
    if (p[0] == '~') {
        size_t n = strcspn(p + 1, "/");
        const char *home = NULL;
        if (n == 0) {
            home = getenv("HOME");
            if (!home || !*home) {
                struct passwd *pw = getpwuid(getuid());
                home = pw ? pw->pw_dir : NULL;
            }
            if (!home || !*home)
                return err_set(e, ERR_INPUT, "'%s': cannot expand ~: HOME is not set; write the full path", in);
        } else {
            char user[256];
            if (n >= sizeof user) return err_set(e, ERR_INPUT, "'%s': user name after ~ is too long", in);
            memcpy(user, p + 1, n);
            user[n] = '\0';
            struct passwd *pw = getpwnam(user);
            if (!pw)
                return err_set(e, ERR_INPUT, "'%s': cannot expand ~%s: there is no user %s on this host; "
                               "write the full path", in, user, user);
            home = pw->pw_dir;
        }
        if (append(out, &len, cap, home, strlen(home))) goto too_long;
        p += 1 + n;
    }
    while (*p) {
        if (p[0] != '$') {
            size_t n = strcspn(p, "$");
            if (append(out, &len, cap, p, n)) goto too_long;
            p += n;
            continue;
        }
        if (p[1] == '$') {
            if (append(out, &len, cap, "$", 1)) goto too_long;
            p += 2;
            continue;
        }
        bool braced = p[1] == '{';
        const char *name = p + 1 + braced;
        size_t n = 0;
        while (name[n] == '_' || isalnum((unsigned char)name[n])) n++;
        if (n == 0 || isdigit((unsigned char)name[0]) || (braced && name[n] != '}')) {
            if (braced)
                return err_set(e, ERR_INPUT, "'%s': ${ without a variable name and a closing }; "
                               "write ${NAME}, or $$ for a literal $", in);
            if (append(out, &len, cap, "$", 1)) goto too_long;   /* a lone $ stays */
            p++;
            continue;
        }
        char var[256];
        if (n >= sizeof var) return err_set(e, ERR_INPUT, "'%s': variable name too long", in);
        memcpy(var, name, n);
        var[n] = '\0';
        const char *v = getenv(var);
        if (!v)
            return err_set(e, ERR_INPUT, "'%s': environment variable %s is not set; set it, or write the "
                           "path without it ($$ is a literal $)", in, var);
        if (append(out, &len, cap, v, strlen(v))) goto too_long;
        p = name + n + braced;
    }
    return 0;
too_long:
    return err_set(e, ERR_INPUT, "'%s': the expanded path is longer than %zu bytes", in, cap - 1);
}
