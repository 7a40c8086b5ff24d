/* fuzz.h: what every harness in tests/fuzz shares.
 *
 * A harness defines LLVMFuzzerTestOneInput(data, size): it hands the bytes to one reader's
 * in-memory entry point, the same code the runner runs on a file, and returns 0. Built
 * with clang and RUNNER_FUZZ=ON it is a libFuzzer binary (scripts/fuzz.sh, ctest -L fuzz in
 * build-fuzz); built any other way it is linked with replay.c and runs the checked-in
 * corpus once (a unit test, under the sanitizers in CI's ASan build too).
 *
 * A harness aborts (FUZZ_ASSERT) only where the reader broke a promise (a round trip that
 * does not round-trip, an error without a message); rejecting input is the reader's job
 * and is not a finding.
 */
#ifndef RUNNER_TESTS_FUZZ_H
#define RUNNER_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond) do { if (!(cond)) { \
    fprintf(stderr, "%s:%d: fuzz property violated: %s\n", __FILE__, __LINE__, #cond); \
    abort(); } } while (0)

/* An error was reported: it must say something (one clear message, never an empty one). */
#define FUZZ_ERR_OK(e) FUZZ_ASSERT((e)->code != 0 && (e)->msg[0] != '\0')

/* A malloc'd NUL-terminated copy of the input (readers may keep or free it). */
static inline char *fuzz_copy(const uint8_t *data, size_t size) {
    char *p = malloc(size + 1);
    if (!p) abort();
    memcpy(p, data, size);
    p[size] = '\0';
    return p;
}

#endif
