/* console_log.h: the console output of a single or dp run also goes to
 * <run_dir>/logs/rank0.log, as the DDP launcher does for rank 0 (launch.h).
 *
 * console_log_start replaces the process's stdout and stderr FILE streams with streams
 * that write each piece synchronously to the original descriptor (1 or 2) and append it
 * to the log: no thread, no pipe, so nothing written before a crash is held anywhere but
 * in stdio's own line buffer, as before. When stdout is a terminal, the progress display
 * frames its redrawn line for the terminal and its periodic plain lines for the log
 * (RUNNER_TTY=1, track.h TRACK_TEE_*), and the frames are separated here as the launcher
 * separates them (launch_tee_split): the terminal looks as without the log, and the log as
 * when the output is not a terminal.
 *
 * It does not: capture what bypasses stdio (a library's write(2) to fd 1 or 2), or undo
 * itself (the streams stay until the process exits, which flushes them).
 */
#ifndef RUNNER_CONSOLE_LOG_H
#define RUNNER_CONSOLE_LOG_H

#include "util/err.h"

/* Starts copying stdout and stderr to run_dir/logs/rank0.log (appended; logs/ is created
 * when missing). Returns 0, or -1 with e set when the log cannot be opened or a stream
 * cannot be made (the console then stays as it was). */
int console_log_start(const char *run_dir, err_t *e);

#endif
