/* fs.h: the file-system helpers every module needs: creating a directory with its
 * parents, replacing a small file atomically, and expanding `~` and `$VAR` in paths
 * the user wrote. */
#ifndef RUNNER_UTIL_FS_H
#define RUNNER_UTIL_FS_H

#include <stddef.h>

#include "util/err.h"

/* mkdir -p: creates path and any missing parents (mode 0755). Fails with `code` (the
 * caller decides whether an uncreatable directory is bad input or a runtime failure)
 * naming the component that could not be created, or when path exists but is not a
 * directory. */
int mkdir_p(const char *path, int code, err_t *e);

/* Writes n bytes to path atomically: a temporary file beside it ("<path>.tmp-<pid>"),
 * fsync, rename, fsync of the directory. On failure (ERR_RUNTIME, naming the file and the
 * error, e.g. "No space left on device") the temporary file is removed and path is left
 * as it was: the old complete file or none, never half of one. */
int write_file_atomic(const char *path, const void *data, size_t n, err_t *e);

/* Expands a path the user wrote, as a shell would before the program sees it: a leading
 * `~` (to $HOME) or `~user` (to that user's home directory), and `$NAME` or `${NAME}`
 * anywhere (an environment variable; `$$` is a literal `$`, and a `$` not followed by a
 * name or `{` stays as it is). Nothing else changes: relative paths stay relative.
 * Fails with ERR_INPUT and a message without a place (the caller prefixes the key) when
 * HOME or a variable is unset, the user is unknown, or the result does not fit in cap. */
int path_expand(const char *in, char *out, size_t cap, err_t *e);

/* fsync of the directory that holds path, so that a rename or unlink in it survives a
 * crash. 0, or -1 with errno. */
int fsync_parent_dir(const char *path);

/* write(2) until all n bytes are written (EINTR retried). 0, or -1 with errno (a short
 * write that ends in an error, ENOSPC say, returns -1 after writing part). */
int write_all_fd(int fd, const void *buf, size_t n);

/* Reads a whole regular file into a malloc'd buffer (NUL-terminated, not counted in *len)
 * if it has at most max_bytes; a larger file is `code` naming the file, its size and
 * the bound (`what` names the bound for the message, e.g. "checkpoint files"), checked
 * before anything is allocated. Returns 0, or -1 with e set (a missing or unreadable file
 * is `code` too). */
int read_file_bounded(const char *path, size_t max_bytes, const char *what, int code,
                      char **out, size_t *len, err_t *e);

#endif
