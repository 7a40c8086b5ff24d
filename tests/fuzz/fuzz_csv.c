/* fuzz_csv.c: the two readers of the run's CSV files: the report's table reader
 * (runner/report/runread.c csv_table_parse: header, numeric cells, a half-written last
 * line) and the resume scan of runner/track/csv.c (track_csv_scan: header check, rows up
 * to the checkpoint's step, complete lines only).
 * Input: byte 0 (bit 0: resume scan; the rest: the step to resume at), then the file.
 * Properties: a scan keeps whole lines only (what it keeps ends with a newline), never more
 * than the file; a table has as many values in every column as rows. */
#include "runner/report/runread.h"
#include "runner/track/track_impl.h"
#include "tests/fuzz/fuzz.h"

static const char *METRICS =
    "epoch,step,lr,train_loss,train_top1,val_loss,val_top1,val_top5,epoch_seconds,images_per_second,"
    "peak_memory_bytes";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *text = data + 1;
    size_t n = size - 1;
    err_t e = {0};
    if (data[0] & 1) {
        FILE *f = fmemopen((void *)text, n ? n : 1, "r");
        if (!f) abort();
        if (!n) { fclose(f); return 0; }
        long keep = -1;
        if (track_csv_scan("metrics.csv", f, METRICS, 1, data[0] >> 1, &keep, &e) == 0) {
            FUZZ_ASSERT(keep >= 0 && (size_t)keep <= n);
            FUZZ_ASSERT(keep == 0 || text[keep - 1] == '\n');
        } else {
            FUZZ_ERR_OK(&e);
        }
        fclose(f);
        return 0;
    }
    static const char *const req[] = {"epoch", "train_loss", "val_top1", "epoch_seconds"};
    csv_table_t t;
    if (csv_table_parse("metrics.csv", fuzz_copy(text, n), req, 4, &t, &e) == 0) {
        for (int c = 0; c < 4; c++) FUZZ_ASSERT(csv_table_col(&t, req[c]) != NULL || t.nrows == 0);
        csv_table_free(&t);
    } else {
        FUZZ_ERR_OK(&e);
    }
    return 0;
}
