/* image_folder.c: placeholder, replaced below. */
#include "data/dataset_impl.h"

static int folder_open(dataset_t *d, const dataset_opts_t *o, err_t *e) {
    (void)d; (void)o;
    return err_set(e, ERR_INPUT, "image_folder: not yet");
}

const dataset_reader_t dataset_reader_image_folder = {
    {"image_folder", "data/images", "", "", 3, 0, 0, 0, 0, 0, {0.485f, 0.456f, 0.406f, 0.449f},
     {0.229f, 0.224f, 0.225f, 0.226f}},
    NULL, folder_open, NULL, NULL,
};
