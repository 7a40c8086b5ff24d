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

/* Writes n bytes to path atomically: a temporary file beside it, fsync, rename. On
 * failure (ERR_RUNTIME) nothing is left at path that was not there before. */
int write_file_atomic(const char *path, const void *data, size_t n, err_t *e);

/* Expands a path the user wrote, as a shell would before the program sees it: a leading
 * `~` (to $HOME) or `~user` (to that user's home directory), and `$NAME` or `${NAME}`
 * anywhere (an environment variable; `$$` is a literal `$`, and a `$` not followed by a
 * name or `{` stays as it is). Nothing else changes: relative paths stay relative.
 * Fails with ERR_INPUT and a message without a place (the caller prefixes the key) when
 * HOME or a variable is unset, the user is unknown, or the result does not fit in cap. */
int path_expand(const char *in, char *out, size_t cap, err_t *e);

#endif
