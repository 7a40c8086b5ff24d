/* fs.h: the two file-system helpers every module needs: creating a directory with its
 * parents, and replacing a small file atomically. */
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

#endif
