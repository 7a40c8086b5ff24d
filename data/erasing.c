/* erasing.c: random erasing of one normalised image (see erasing.h). The boxes come from
 * erase_draw and the values from erase_normal (util/augops.h), box by box in draw order so
 * a later box overwrites an earlier one, as timm's assignments do. */
#include "data/erasing.h"

int erasing_apply(const erasing_opts_t *o, uint64_t seed, int64_t epoch, int64_t index, float *img, int c,
                  int h, int w) {
    erase_box_t boxes[ERASE_MAX_COUNT];
    int n = erase_draw(seed, epoch, index, o->prob, o->count, h, w, boxes);
    for (int b = 0; b < n; b++) {
        const erase_box_t *q = &boxes[b];
        float chan[4] = {0, 0, 0, 0};
        if (o->mode == ERASE_RAND)
            for (int ch = 0; ch < c && ch < 4; ch++) chan[ch] = erase_normal(seed, epoch, index, b, ch);
        for (int y = 0; y < q->h; y++)
            for (int x = 0; x < q->w; x++) {
                float *p = img + ((int64_t)(q->top + y) * w + (q->left + x)) * c;
                for (int ch = 0; ch < c; ch++) {
                    if (o->mode == ERASE_CONST) p[ch] = 0.0f;
                    else if (o->mode == ERASE_RAND) p[ch] = chan[ch < 4 ? ch : 0];
                    else p[ch] = erase_normal(seed, epoch, index, b, ((int64_t)y * q->w + x) * c + ch);
                }
            }
    }
    return n;
}
