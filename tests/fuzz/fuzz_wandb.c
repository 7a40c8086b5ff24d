/* fuzz_wandb.c: what the W&B sender reads from the network and the key lookup reads from
 * disk (runner/track/wandb_parse.c, wandb_auth.c): the GraphQL answers of Viewer,
 * RunResumeStatus (with its nested historyTail JSON) and UpsertBucket, a Retry-After
 * header line, and a netrc file.
 * Input: byte 0 picks the reader; the rest is the body / line / file.
 * Property: offsets taken from an answer are never negative. */
#include "runner/track/track_impl.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *body = (const char *)data + 1;
    size_t n = size - 1;
    char entity[256] = "";
    switch (data[0] % 5) {
    case 0:
        (void)track_wandb_parse_viewer(body, n, entity, sizeof entity);
        break;
    case 1: {
        int64_t h = 0, o = 0, skip = -1;
        if (track_wandb_parse_resume(body, n, &h, &o, &skip) == 0)
            FUZZ_ASSERT(h >= 0 && o >= 0 && skip >= -1);
        break;
    }
    case 2: {
        bool refused = false;
        (void)track_wandb_parse_upsert(body, n, entity, sizeof entity, &refused);
        break;
    }
    case 3: {
        double s = -1;
        if (track_http_retry_after(body, n, &s) == 0) FUZZ_ASSERT(s >= 0);
        break;
    }
    default: {
        FILE *f = fmemopen((void *)body, n ? n : 1, "r");
        if (!f) abort();
        char key[256] = "";
        (void)track_netrc_find(f, "api.wandb.ai", key, sizeof key);
        fclose(f);
        break;
    }
    }
    FUZZ_ASSERT(strlen(entity) < sizeof entity);
    return 0;
}
