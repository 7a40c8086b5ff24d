/* lockinfo.c: the holder line of a lock file (lockinfo.h). */
#include "util/lockinfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/json.h"

enum { HOLDER_MAX = 4096 };

int lock_info_read(int fd, char *out, size_t len, long *pid, char *host, size_t host_len) {
    *pid = 0;
    if (host_len) host[0] = '\0';
    snprintf(out, len, "a process whose details are not in its lock file");
    for (int attempt = 0; attempt < 20; attempt++) {
        char buf[HOLDER_MAX];
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        err_t ignore = {0};
        json_t *j = n > 0 ? json_parse(buf, (size_t)n, &ignore) : NULL;
        if (j) {
            *pid = (long)json_get_number(j, "pid", 0);
            snprintf(host, host_len, "%s", json_get_string(j, "host", "?"));
            snprintf(out, len, "pid %ld on host %s, since %s: %.300s", *pid, host, json_get_string(j, "started", "?"),
                     json_get_string(j, "command", "?"));
            json_free(j);
            return 1;
        }
        usleep(50000);
    }
    return 0;
}

void lock_info_write(int fd, const char *command) {
    char host[256] = "", when[64] = "";
    gethostname(host, sizeof host - 1);
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %z", &tm);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return;
    jw_t w;
    jw_init(&w, f, false);
    jw_obj_begin(&w);
    jw_kint(&w, "pid", (int64_t)getpid());
    jw_kstr(&w, "host", host);
    jw_kstr(&w, "started", when);
    jw_kstr(&w, "command", command ? command : "runner");
    jw_obj_end(&w);
    fputc('\n', f);
    fclose(f);
    if (ftruncate(fd, 0) == 0 && pwrite(fd, buf, n, 0) == (ssize_t)n) fdatasync(fd);
    free(buf);
}
