/* fs.c: mkdir_p, write_file_atomic and path_expand (fs.h). */
#include "util/fs.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdbool.h>
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
