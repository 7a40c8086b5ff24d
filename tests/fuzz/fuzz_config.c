/* fuzz_config.c: the whole experiment load (runner/config*.c) from text: YAML through
 * libyaml, the schema table, --set overrides, defaults and cross-field checks, and for a
 * file with `matrix:` every entry (config_load_matrix_text), as `runner EXP --set ...` and
 * `runner compare` load them, with the base: chain off.
 *
 * Input: the experiment text, then up to 8 --set strings, each after a NUL byte.
 * Property: an experiment that loads writes a resolved.yaml that loads again to the same
 * experiment hash (what resume and checkpoints rely on). */
#include "runner/config.h"
#include "tests/fuzz/fuzz.h"

enum { MAX_SETS = 8 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_copy(data, size);
    size_t ylen = strnlen(text, size);
    const char *sets[MAX_SETS];
    int n_sets = 0;
    for (size_t i = ylen; i < size && n_sets < MAX_SETS; i++)
        if (text[i] == '\0' && i + 1 <= size) sets[n_sets++] = text + i + 1;
    experiment_t *x = malloc(sizeof *x), *y = malloc(sizeof *y);
    if (!x || !y) abort();
    err_t e = {0};
    if (config_load_text("fuzz.yaml", text, ylen, sets, n_sets, x, &e) == 0) {
        size_t len = 0;
        char *resolved = config_yaml_string(x, &len);
        FUZZ_ASSERT(resolved != NULL);
        err_t e2 = {0};
        int rc = config_load_text("resolved.yaml", resolved, len, NULL, 0, y, &e2);
        if (rc) fprintf(stderr, "resolved.yaml does not load: %s\n%s\n", e2.msg, resolved);
        FUZZ_ASSERT(rc == 0);
        FUZZ_ASSERT(config_hash(x) == config_hash(y));
        free(resolved);
    } else {
        FUZZ_ERR_OK(&e);
    }
    if (memmem(text, ylen, "matrix", 6)) {
        err_t me = {0};
        experiment_matrix_t *m = config_load_matrix_text("fuzz.yaml", text, ylen, sets, n_sets, &me);
        if (!m) FUZZ_ERR_OK(&me);
        free(m);
    }
    free(x);
    free(y);
    free(text);
    return 0;
}
