/* lockinfo.h: who holds a lock file. A process that locks a file (a run directory's
 * .lock, a comparison's .compare.lock) writes one JSON line into it about itself, and a
 * process refused the lock reads that line to name the holder in its message.
 *
 * The line: {"pid": N, "host": "H", "started": "YYYY-mm-dd HH:MM:SS +zzzz", "command": "..."}.
 * It is advice for the message, not the lock: the lock itself (flock, an OFD lock) is what
 * keeps a second process out, and the line stays behind when the holder ends.
 */
#ifndef RUNNER_UTIL_LOCKINFO_H
#define RUNNER_UTIL_LOCKINFO_H

#include <stddef.h>

/* Replaces the content of the lock file open on fd (read-write) with this process's line
 * (pid, host name, local time, command; "runner" when command is NULL). Best effort. */
void lock_info_write(int fd, const char *command);

/* Reads the holder line of the lock file open on fd into out as "pid N on host H, since
 * T: COMMAND", pid (0 if unknown) and host ("" if unknown). The holder writes its line
 * just after taking the lock, so an empty or partial line is read again for up to a
 * second. Returns 1 when read; 0 with out saying the details are unknown. */
int lock_info_read(int fd, char *out, size_t len, long *pid, char *host, size_t host_len);

#endif
