/* clock.h: seconds on the monotonic clock, for durations, timeouts and deadlines (never
 * a time of day: it does not jump when the system clock is set). */
#ifndef RUNNER_UTIL_CLOCK_H
#define RUNNER_UTIL_CLOCK_H

#include <time.h>

static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#endif
