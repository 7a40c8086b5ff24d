/* config_images.c: the dataset-dependent defaults and checks of image_folder's keys
 * (issue 16), called by config.c's finalize before the normalisation defaults.
 *
 * image_folder: random_resized_crop on unless given, the CIFAR-style random_crop and
 * rotation off unless given (random_crop on is refused: it does not apply to images of
 * any size), data.resize = round(image_size / 0.875) (Python's round) unless given,
 * data.workers auto unless given. Other datasets: random_resized_crop on is refused.
 */
#include <math.h>
#include <string.h>

#include "runner/config_internal.h"

static cfg_loc_t loc_of(const cfg_state_t *st, const char *key) {
    int r = cfg_row_find(key);
    return r >= 0 && st->set[r] ? st->loc[r] : (cfg_loc_t){0, 0, 0};
}

static bool given(const cfg_state_t *st, const char *key) {
    int r = cfg_row_find(key);
    return r >= 0 && st->set[r];
}

int cfg_finalize_images(cfg_ctx_t *c, cfg_state_t *st, int *chans, int *side) {
    experiment_t *x = &st->x;
    if (!x->data.resize) x->data.resize = (int)nearbyint(x->data.image_size / 0.875);
    bool folder = !strcmp(x->data.dataset, "image_folder");
    if (!folder) {
        if (x->data.augment.random_resized_crop)
            return cfg_fail(c, loc_of(st, "data.augment.random_resized_crop"),
                            "data.augment.random_resized_crop applies to data.dataset "
                            "image_folder; for %s use data.augment.random_crop",
                            x->data.dataset);
        if (x->data.workers < 0) x->data.workers = 2;
        return 0;
    }
    if (!given(st, "data.augment.random_resized_crop")) x->data.augment.random_resized_crop = true;
    if (!given(st, "data.augment.rotation")) x->data.augment.rotation = 0;
    if (!given(st, "data.workers")) x->data.workers = -1;
    if (given(st, "data.augment.random_crop") && x->data.augment.random_crop)
        return cfg_fail(c, loc_of(st, "data.augment.random_crop"),
                        "data.augment.random_crop pads and crops images of one size (CIFAR); "
                        "image_folder crops with data.augment.random_resized_crop: {scale: [0.08, "
                        "1.0], ratio: [0.75, 1.3333]} to data.image_size; remove random_crop");
    x->data.augment.random_crop = false;
    const double *sc = x->data.augment.rrc_scale, *ra = x->data.augment.rrc_ratio;
    if (x->data.augment.random_resized_crop && (sc[0] > sc[1] || ra[0] > ra[1]))
        return cfg_fail(c, loc_of(st, sc[0] > sc[1] ? "data.augment.random_resized_crop.scale"
                                                    : "data.augment.random_resized_crop.ratio"),
                        "data.augment.random_resized_crop: %s [%g, %g] is not [min, max]; swap "
                        "the two values", sc[0] > sc[1] ? "scale" : "ratio",
                        sc[0] > sc[1] ? sc[0] : ra[0], sc[0] > sc[1] ? sc[1] : ra[1]);
    *chans = x->data.image_mode == 1 ? 1 : 3;
    *side = x->data.image_size;
    return 0;
}
