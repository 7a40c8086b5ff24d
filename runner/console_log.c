/* console_log.c: stdout and stderr also appended to logs/rank0.log (console_log.h). */
#include "runner/console_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/launch.h"
#include "util/fs.h"

/* One replaced stream: where its bytes go, and the tee frame open at the end of the last
 * write (launch_tee_split's state). Lives until the process exits. */
typedef struct console_sink {
    int out_fd;    /* the original descriptor: 1 or 2 */
    int log_fd;    /* logs/rank0.log, shared by both sinks */
    int state;
} console_sink_t;

static ssize_t sink_write(void *cookie, const char *buf, size_t n) {
    console_sink_t *s = cookie;
    char to_log[4096], to_out[4096];
    for (size_t at = 0; at < n;) {
        size_t chunk = n - at < sizeof to_log ? n - at : sizeof to_log, nl, no;
        launch_tee_split(buf + at, chunk, &s->state, to_log, &nl, to_out, &no);
        /* the console first: a log that cannot be written (a full disk) costs the log only */
        if (no && write_all_fd(s->out_fd, to_out, no) != 0 && errno != EPIPE) return at ? (ssize_t)at : -1;
        if (nl) (void)write_all_fd(s->log_fd, to_log, nl);
        at += chunk;
    }
    return (ssize_t)n;
}

/* A stream writing to sink; NULL when it cannot be made. */
static FILE *sink_stream(console_sink_t *s, int buffering) {
    cookie_io_functions_t io = {.read = NULL, .write = sink_write, .seek = NULL, .close = NULL};
    FILE *f = fopencookie(s, "w", io);
    if (f) setvbuf(f, NULL, buffering, buffering == _IONBF ? 0 : BUFSIZ);
    return f;
}

int console_log_start(const char *run_dir, err_t *e) {
    char path[4200];
    snprintf(path, sizeof path, "%s/logs", run_dir);
    if (mkdir_p(path, ERR_RUNTIME, e)) return -1;   /* a resumed run may have lost it */
    snprintf(path, sizeof path, "%s/logs/rank0.log", run_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return err_errno(e, ERR_RUNTIME, "cannot open %s", path);
    console_sink_t *s = calloc(2, sizeof *s);
    if (!s) { close(fd); return err_set(e, ERR_RUNTIME, "out of memory"); }
    s[0] = (console_sink_t){1, fd, 0};
    s[1] = (console_sink_t){2, fd, 0};
    FILE *out = sink_stream(&s[0], _IOLBF), *err = sink_stream(&s[1], _IONBF);
    if (!out || !err) {
        if (out) fclose(out);
        if (err) fclose(err);
        free(s);
        close(fd);
        return err_set(e, ERR_RUNTIME, "cannot copy the console to %s", path);
    }
    /* the progress display frames what is for the terminal only (launch.h RUNNER_TTY) */
    if (isatty(1)) setenv("RUNNER_TTY", "1", 1);
    fflush(stdout);
    fflush(stderr);
    stdout = out;   /* glibc's standard streams are assignable variables */
    stderr = err;
    return 0;
}
