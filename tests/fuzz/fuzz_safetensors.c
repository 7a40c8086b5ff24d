/* fuzz_safetensors.c: the safetensors reader (model/safetensors.c safetensors_parse: the
 * header length, the JSON header, dtypes, shapes, data offsets, overlaps) and the
 * conversion of every tensor to fp32 / int64, as model.init_from and the read-back of
 * `runner export` use them. Property: a file that validates converts every tensor
 * without reading outside its data (ASan) and finds each tensor by its name. */
#include "model/safetensors.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    void *file = malloc(size ? size : 1);
    if (!file) abort();
    memcpy(file, data, size);
    err_t e = {0};
    safetensors_t *st = safetensors_parse("fuzz.safetensors", file, size, &e);
    if (!st) {
        FUZZ_ERR_OK(&e);
        return 0;
    }
    for (int i = 0; i < st->n; i++) {
        const st_tensor_t *t = &st->t[i];
        FUZZ_ASSERT(safetensors_find(st, t->name) == t);
        FUZZ_ASSERT(t->end <= st->data_size && t->begin <= t->end);
        float *f = malloc((t->numel ? t->numel : 1) * sizeof(float));
        int64_t *q = malloc((t->numel ? t->numel : 1) * sizeof(int64_t));
        if (!f || !q) abort();
        err_t ce = {0};
        FUZZ_ASSERT(safetensors_read_f32(st, t, f, &ce) == 0);
        if (safetensors_read_i64(st, t, q, &ce)) FUZZ_ERR_OK(&ce);
        free(f);
        free(q);
    }
    for (int i = 0; i < st->n_meta; i++) FUZZ_ASSERT(safetensors_meta(st, st->meta_keys[i]) != NULL);
    safetensors_close(st);
    return 0;
}
