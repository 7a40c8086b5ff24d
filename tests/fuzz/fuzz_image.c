/* fuzz_image.c: the image_folder dataset's decoders (data/image.c, image_jpeg.c,
 * image_png.c; libjpeg-turbo and libpng underneath): img_sniff and img_probe on the header,
 * then img_decode of a region at a DCT scale into RGB or L, as the loader decodes each
 * file. Built only when data/image.h exists (the image_folder reader, issue 16).
 * Input: byte 0 (bit 0: L instead of RGB; bits 1-3: scale_num - 1), bytes 1-4 the crop
 * rectangle as fractions of the image (x0, y0, x1, y1 in 1/255), then the file.
 * Properties: the decoded region lies inside the image at its scale and has the asked
 * channel count; nothing is allocated past the limits (smaller here than the defaults, to
 * keep the fuzzer's memory bounded). */
#include "data/image.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 5) return 0;
    const uint8_t *file = data + 5;
    size_t n = size - 5;
    img_limits_t lim = img_default_limits();
    lim.max_pixels = (int64_t)1 << 22;   /* 4 Mpixel: 12 MB of RGB at most per input */
    lim.max_side = 8192;
    img_info_t info;
    err_t e = {0};
    if (img_sniff(file, n, &lim, &info, &e) != 0) FUZZ_ERR_OK(&e);
    err_t pe = {0};
    if (img_probe(file, n, &lim, &info, &pe) != 0) {
        FUZZ_ERR_OK(&pe);
        return 0;
    }
    FUZZ_ASSERT(info.width > 0 && info.height > 0 && (int64_t)info.width * info.height <= lim.max_pixels);
    img_request_t req = {0};
    req.channels = data[0] & 1 ? 1 : 3;
    req.scale_num = ((data[0] >> 1) & 7) + 1;
    int x0 = data[1] * info.width / 256, y0 = data[2] * info.height / 256;
    int x1 = x0 + 1 + data[3] * (info.width - x0 - 1) / 255, y1 = y0 + 1 + data[4] * (info.height - y0 - 1) / 255;
    req.x0 = x0, req.y0 = y0, req.x1 = x1, req.y1 = y1;
    img_buf_t buf = {0};
    img_region_t out;
    err_t de = {0};
    if (img_decode(file, n, &lim, &req, &buf, &out, &de) == 0) {
        FUZZ_ASSERT(out.c == req.channels && out.w > 0 && out.h > 0 && out.px != NULL);
        FUZZ_ASSERT(out.x0 >= 0 && out.y0 >= 0 && out.x0 + out.w <= out.full_w && out.y0 + out.h <= out.full_h);
        volatile uint8_t last = out.px[(size_t)out.h * out.w * out.c - 1];   /* ASan: all of it is there */
        (void)last;
    } else {
        FUZZ_ERR_OK(&de);
    }
    img_buf_free(&buf);
    return 0;
}
