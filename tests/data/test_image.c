/* test_image.c: the JPEG/PNG decoders and torchvision's transforms against PIL and
 * torchvision themselves (Debian's python3-pil 9.4 and python3-torchvision 0.14, run by
 * image_fixtures.py at test time), plus the parts that need no Python: RandomResizedCrop's
 * parameter rules, region and DCT-scaled decoding, the size limits, and bad files.
 *
 * Exactness claims checked here: every colour type/bit depth of PNG and every JPEG kind
 * (4:2:0, 4:2:2, 4:4:4, progressive, grayscale, CMYK, odd sizes) decodes to PIL's
 * convert("RGB") and convert("L") bytes; Resize + CenterCrop and crop + resize (+ flip)
 * equal torchvision's PIL path byte for byte; a region decode equals the same pixels of a
 * full decode. Skipped (77) when /usr/bin/python3 lacks PIL or torchvision.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/image.h"
#include "data/image_transform.h"
#include "tests/test.h"

static char fx[4096];     /* fixture directory */
static int have_fx;

static uint8_t *load(const char *name, size_t *len) {
    char p[8192];
    snprintf(p, sizeof p, "%s/%s", fx, name);
    return (uint8_t *)test_read_file(p, len);
}

static int count_diff(const uint8_t *a, const uint8_t *b, size_t n, int *maxd) {
    int c = 0;
    *maxd = 0; /* set before any use */
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d) c++;
        if (d > *maxd) *maxd = d;
    }
    return c;
}

static void test_decode_vs_pil(void) {
    if (!have_fx) return;
    char path[8192];
    snprintf(path, sizeof path, "%s/manifest.txt", fx);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) return;
    char kind[16], name[64], file[64];
    int w, h, n = 0;
    img_buf_t buf = {0};
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%15s %63s %63s %d %d", kind, name, file, &w, &h) != 5 ||
            strcmp(kind, "decode"))
            continue;
        size_t len, rl;
        uint8_t *bytes = load(file, &len);
        for (int c = 1; c <= 3; c += 2) {
            char ref[128];
            snprintf(ref, sizeof ref, "%s.%s", name, c == 3 ? "rgb" : "l");
            uint8_t *want = load(ref, &rl);
            img_request_t rq = {0, 0, 0, 0, 8, c};
            img_region_t g;
            err_t e = {0};
            int rc = img_decode(bytes, len, NULL, &rq, &buf, &g, &e);
            if (rc) fprintf(stderr, "%s: %s\n", file, e.msg);
            CHECK_INT(rc, 0);
            if (!rc && want) {
                CHECK_INT(g.w, w);
                CHECK_INT(g.h, h);
                CHECK_INT(rl, (size_t)w * h * c);
                int md = 0, nd = rl == (size_t)w * h * c ? count_diff(g.px, want, rl, &md) : -1;
                if (nd) fprintf(stderr, "%s (c=%d): %d bytes differ from PIL, max %d\n", file, c, nd, md);
                CHECK_INT(nd, 0);
            }
            free(want);
            n++;
        }
        free(bytes);
    }
    fclose(f);
    img_buf_free(&buf);
    CHECK(n >= 50);
}

/* The resampler on PIL-decoded pixels (name.rgb of a decode entry). */
static uint8_t *pil_rgb(const char *file, int *w, int *h) {
    char path[8192], line[512], kind[16], name[64], fl[64];
    snprintf(path, sizeof path, "%s/manifest.txt", fx);
    FILE *f = fopen(path, "r");
    uint8_t *px = NULL;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "%15s %63s %63s %d %d", kind, name, fl, w, h) == 5 &&
            !strcmp(kind, "decode") && !strcmp(fl, file)) {
            char ref[128];
            size_t n;
            snprintf(ref, sizeof ref, "%s.rgb", name);
            px = load(ref, &n);
            break;
        }
    if (f) fclose(f);
    return px;
}

static void test_transforms_vs_torchvision(void) {
    if (!have_fx) return;
    char path[8192], line[512], kind[16], name[64], file[64];
    snprintf(path, sizeof path, "%s/manifest.txt", fx);
    FILE *f = fopen(path, "r");
    if (!f) return;
    img_work_t wk = {0};
    int n_eval = 0, n_box = 0;
    while (fgets(line, sizeof line, f)) {
        int a, b, c, d, size, flip;
        if (sscanf(line, "%15s %63s %63s", kind, name, file) != 3) continue;
        char ref[128];
        size_t rl, len;
        snprintf(ref, sizeof ref, "%s.out", name);
        if (!strcmp(kind, "eval") && sscanf(line, "%*s %*s %*s %d %d", &a, &size) == 2) {
            uint8_t *want = load(ref, &rl), *bytes = load(file, &len);
            uint8_t *out = malloc((size_t)size * size * 3);
            img_tf_opts_t o = {size, a, false, {0.08, 1}, {0.75, 4.0 / 3}, false, false, 3,
                               img_default_limits()};
            err_t e = {0};
            int rc = img_transform(&o, bytes, len, false, NULL, out, &wk, NULL, &e);
            if (rc) fprintf(stderr, "%s: %s\n", name, e.msg);
            CHECK_INT(rc, 0);
            CHECK_INT(rl, (size_t)size * size * 3);
            int md = 0, nd = rc || rl != (size_t)size * size * 3 ? -1 : count_diff(out, want, rl, &md);
            if (nd) fprintf(stderr, "%s: %d bytes differ from torchvision, max %d\n", name, nd, md);
            CHECK_INT(nd, 0);
            /* the training path without RandomResizedCrop is the same geometry (+ flip) */
            o.flip = true;
            rng_t r = rng_make(1, RNG_STREAM_AUGMENT, 0, 0);
            img_tf_info_t ti;
            uint8_t *out2 = malloc((size_t)size * size * 3);
            CHECK_INT(img_transform(&o, bytes, len, true, &r, out2, &wk, &ti, &e), 0);
            for (int y = 0; y < size; y++)
                for (int x = 0; x < size; x++) {
                    int sx = ti.flip ? size - 1 - x : x;
                    if (memcmp(out2 + ((size_t)y * size + x) * 3, out + ((size_t)y * size + sx) * 3, 3)) {
                        CHECK(!"train geometry without rrc differs from eval");
                        y = size;
                        break;
                    }
                }
            free(out2);
            free(out);
            free(bytes);
            free(want);
            n_eval++;
        } else if (!strcmp(kind, "box") &&
                   sscanf(line, "%*s %*s %*s %d %d %d %d %d %d", &a, &b, &c, &d, &size, &flip) == 6) {
            int w, h;
            uint8_t *src = pil_rgb(file, &w, &h), *want = load(ref, &rl);
            uint8_t *out = malloc((size_t)size * size * 3);
            err_t e = {0};
            CHECK(src != NULL);
            int rc = src ? img_resize_box(src, w, h, 3, b, a, b + d, a + c, size, size, out, &wk, &e) : -1;
            CHECK_INT(rc, 0);
            if (flip)
                for (int y = 0; y < size; y++)
                    for (int x = 0; x < size / 2; x++)
                        for (int k = 0; k < 3; k++) {
                            uint8_t *p = out + ((size_t)y * size + x) * 3 + k;
                            uint8_t *q = out + ((size_t)y * size + size - 1 - x) * 3 + k;
                            uint8_t t = *p;
                            *p = *q;
                            *q = t;
                        }
            int md = 0, nd = rc || rl != (size_t)size * size * 3 ? -1 : count_diff(out, want, rl, &md);
            if (nd) fprintf(stderr, "%s: %d bytes differ from torchvision, max %d\n", name, nd, md);
            CHECK_INT(nd, 0);
            free(src);
            free(want);
            free(out);
            n_box++;
        }
    }
    fclose(f);
    img_work_free(&wk);
    CHECK_INT(n_eval, 7);
    CHECK_INT(n_box, 5);
}

/* img_transform's training output at full scale equals the crop + resize (+ flip) of a full
 * decode with the parameters it reports, and the draws are a function of the rng key. */
static void test_train_transform_consistent(void) {
    if (!have_fx) return;
    size_t len;
    uint8_t *bytes = load("p420.jpg", &len);
    int w, h;
    uint8_t *full = pil_rgb("p420.jpg", &w, &h);
    CHECK(bytes && full);
    if (!bytes || !full) return;
    img_work_t wk = {0}, wk2 = {0};
    img_tf_opts_t o = {96, 110, true, {0.08, 1}, {0.75, 4.0 / 3}, true, false, 3, img_default_limits()};
    uint8_t out[96 * 96 * 3], ref[96 * 96 * 3], again[96 * 96 * 3];
    int flips = 0;
    for (int i = 0; i < 40; i++) {
        rng_t r = rng_make(5, RNG_STREAM_AUGMENT, 2, (uint64_t)i);
        img_tf_info_t ti;
        err_t e = {0};
        CHECK_INT(img_transform(&o, bytes, len, true, &r, out, &wk, &ti, &e), 0);
        CHECK_INT(ti.scale_num, 8);
        CHECK(ti.w >= 1 && ti.h >= 1 && ti.left + ti.w <= w && ti.top + ti.h <= h);
        CHECK_INT(img_resize_box(full, w, h, 3, ti.left, ti.top, ti.left + ti.w, ti.top + ti.h,
                                 96, 96, ref, &wk2, &e), 0);
        int bad = 0;
        for (int y = 0; y < 96; y++)
            for (int x = 0; x < 96; x++)
                bad += memcmp(out + (y * 96 + x) * 3, ref + (y * 96 + (ti.flip ? 95 - x : x)) * 3, 3) != 0;
        CHECK_INT(bad, 0);
        flips += ti.flip;
        rng_t r2 = rng_make(5, RNG_STREAM_AUGMENT, 2, (uint64_t)i);
        CHECK_INT(img_transform(&o, bytes, len, true, &r2, again, &wk2, NULL, &e), 0);
        CHECK(!memcmp(out, again, sizeof out));
    }
    CHECK(flips > 8 && flips < 32);
    img_work_free(&wk);
    img_work_free(&wk2);
    free(bytes);
    free(full);
}

/* A region, at any DCT scale, equals the requested pixels of the full decode at that
 * scale. */
static void test_region_decode(void) {
    if (!have_fx) return;
    const char *files[] = {"p420.jpg", "p422.jpg", "p444.jpg", "prog.jpg", "gray.jpg", "cmyk.jpg", "rgb8.png", "l16i.png"};
    img_buf_t fb = {0}, rb = {0};
    for (int fi = 0; fi < 8; fi++) {
        size_t len;
        uint8_t *bytes = load(files[fi], &len);
        CHECK(bytes != NULL);
        if (!bytes) continue;
        for (int m = 8; m >= 1; m -= (m > 4 ? 1 : 3)) {
            img_request_t all = {0, 0, 0, 0, m, 3};
            img_region_t full, g;
            err_t e = {0};
            CHECK_INT(img_decode(bytes, len, NULL, &all, &fb, &full, &e), 0);
            rng_t r = rng_make(9, RNG_STREAM_MISC, (uint64_t)fi, (uint64_t)m);
            for (int t = 0; t < 12; t++) {
                int W = full.w * 8 / m, H = full.h * 8 / m;
                int x0 = (int)rng_below(&r, (uint32_t)W), y0 = (int)rng_below(&r, (uint32_t)H);
                int x1 = x0 + 1 + (int)rng_below(&r, (uint32_t)(W - x0)), y1 = y0 + 1 + (int)rng_below(&r, (uint32_t)(H - y0));
                img_request_t rq = {x0, y0, x1, y1, m, 3};
                CHECK_INT(img_decode(bytes, len, NULL, &rq, &rb, &g, &e), 0);
                CHECK_INT(g.full_w, full.w);
                CHECK_INT(g.full_h, full.h);
                /* it covers the request at that scale ... */
                CHECK(g.x0 <= x0 * m / 8 && g.y0 <= y0 * m / 8);
                CHECK(g.x0 + g.w >= (x1 * m + 7) / 8 || g.x0 + g.w == full.w);
                CHECK(g.y0 + g.h >= (y1 * m + 7) / 8 || g.y0 + g.h == full.h);
                /* ... and holds exactly the full decode's pixels there (the decoded
                 * region's outermost pixels may differ: the chroma upsampler treats them as
                 * an image edge; the decoder adds a margin so they are never requested) */
                int bad = 0, rx0 = x0 * m / 8, ry0 = y0 * m / 8;
                int rx1 = (x1 * m + 7) / 8 < full.w ? (x1 * m + 7) / 8 : full.w;
                int ry1 = (y1 * m + 7) / 8 < full.h ? (y1 * m + 7) / 8 : full.h;
                for (int y = ry0; y < ry1; y++)
                    bad += memcmp(g.px + ((size_t)(y - g.y0) * g.w + rx0 - g.x0) * 3,
                                  full.px + ((size_t)y * full.w + rx0) * 3, (size_t)(rx1 - rx0) * 3) != 0;
                if (bad) fprintf(stderr, "%s m=%d region %d,%d..%d,%d: %d rows differ\n", files[fi], m, x0, y0, x1, y1, bad);
                CHECK_INT(bad, 0);
            }
            if (strstr(files[fi], ".png")) break;
        }
        free(bytes);
    }
    img_buf_free(&fb);
    img_buf_free(&rb);
}

/* DCT scaling: picked as the smallest M/8 that keeps at least the output's pixels, and
 * close to the full decode (mean absolute error well under 2 levels on a photo). */
static void test_dct_scaling(void) {
    if (!have_fx) return;
    size_t len;
    uint8_t *bytes = load("p420.jpg", &len);
    if (!bytes) return;
    img_work_t wk = {0};
    img_tf_opts_t o = {56, 64, false, {0.08, 1}, {0.75, 4.0 / 3}, false, true, 3, img_default_limits()};
    uint8_t a[56 * 56 * 3], b[56 * 56 * 3];
    img_tf_info_t ti;
    err_t e = {0};
    CHECK_INT(img_transform(&o, bytes, len, false, NULL, a, &wk, &ti, &e), 0);
    /* 451x300 -> short side 64: 300 * 2 / 8 = 75 >= 64 but 300 / 8 < 64, so M = 2 */
    CHECK_INT(ti.scale_num, 2);
    o.dct_scaling = false;
    CHECK_INT(img_transform(&o, bytes, len, false, NULL, b, &wk, &ti, &e), 0);
    CHECK_INT(ti.scale_num, 8);
    double sum = 0;
    for (size_t i = 0; i < sizeof a; i++) sum += abs((int)a[i] - (int)b[i]);
    CHECK(sum / sizeof a < 2.0);
    CHECK(sum > 0); /* it did decode differently */
    img_work_free(&wk);
    free(bytes);
}

static void test_bad_files(void) {
    if (!have_fx) return;
    char path[8192], line[512], file[64], what[64];
    snprintf(path, sizeof path, "%s/manifest.txt", fx);
    FILE *f = fopen(path, "r");
    if (!f) return;
    img_buf_t buf = {0};
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "bad ", 4) || sscanf(line, "bad %63s %63[^\n]", file, what) != 2) continue;
        size_t len;
        uint8_t *bytes = load(file, &len);
        img_request_t rq = {0, 0, 0, 0, 8, 3};
        img_region_t g;
        err_t e = {0};
        CHECK_INT(img_decode(bytes ? bytes : (uint8_t *)"", bytes ? len : 0, NULL, &rq, &buf, &g, &e), -1);
        CHECK_INT(e.code, ERR_INPUT);
        CHECK_CONTAINS(e.msg, what);
        /* a crop of the top rows of a truncated JPEG fails too (the end marker check) */
        rq = (img_request_t){0, 0, 16, 16, 8, 3};
        CHECK_INT(img_decode(bytes ? bytes : (uint8_t *)"", bytes ? len : 0, NULL, &rq, &buf, &g, &e), -1);
        free(bytes);
        n++;
    }
    fclose(f);
    img_buf_free(&buf);
    CHECK_INT(n, 5);
}

/* Python-free checks: limits, formats, RandomResizedCrop's rules. */
static void test_limits_and_formats(void) {
    img_info_t ii;
    err_t e = {0};
    /* a PNG header claiming 100000 x 100000 */
    uint8_t png[33] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                       0, 1, 0x86, 0xa0, 0, 1, 0x86, 0xa0, 8, 2, 0, 0, 0, 0, 0, 0, 0};
    CHECK_INT(img_probe(png, sizeof png, NULL, &ii, &e), -1);
    CHECK_CONTAINS(e.msg, "max_side");
    img_limits_t lim = img_default_limits();
    lim.max_side = 200000;
    CHECK_INT(img_probe(png, sizeof png, &lim, &ii, &e), -1);
    CHECK_CONTAINS(e.msg, "max_pixels");
    lim.max_pixels = 20000000000LL;
    CHECK_INT(img_probe(png, sizeof png, &lim, &ii, &e), 0);
    CHECK_INT(ii.width, 100000);
    CHECK_STR(ii.format_name, "PNG");
    /* a JPEG whose SOF says 70000 wide cannot exist; 65535 x 65535 is over max_pixels */
    uint8_t jpg[] = {0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xC0, 0, 11, 8, 0xFF, 0xFF, 0xFF, 0xFF, 1, 1, 0x11, 0};
    CHECK_INT(img_probe(jpg, sizeof jpg, NULL, &ii, &e), -1);
    CHECK_CONTAINS(e.msg, "max_pixels");
    CHECK_INT(img_probe((const uint8_t *)"GIF89a\1\0\1\0", 10, NULL, &ii, &e), -1);
    CHECK_CONTAINS(e.msg, "GIF");
    CHECK_INT(img_probe((const uint8_t *)"hello world", 11, NULL, &ii, &e), -1);
    CHECK_CONTAINS(e.msg, "not an image");
    CHECK_CONTAINS(e.msg, "hello world");
    CHECK_INT(img_probe(jpg, 4, NULL, &ii, &e), -1);
    CHECK_CONTAINS(e.msg, "truncated");
}

static void test_rrc_params(void) {
    double sc[2] = {0.08, 1.0}, ra[2] = {0.75, 4.0 / 3};
    /* fallback for an extreme aspect: 1000 x 10 -> in_ratio 100 > 4/3: h = 10, w = round(13.33) */
    for (int i = 0; i < 20; i++) {
        rng_t r = rng_make(3, RNG_STREAM_AUGMENT, 0, (uint64_t)i);
        int top, left, h, w;
        img_rrc_params(sc, ra, 1000, 10, &r, &top, &left, &h, &w);
        CHECK(h >= 1 && h <= 10 && w >= 1 && w <= 1000 && top + h <= 10 && left + w <= 1000);
        double ar = (double)w / h, area = (double)w * h / 10000.0;
        CHECK(ar >= 0.75 - 0.2 && ar <= 4.0 / 3 + 0.2);
        CHECK(area <= 1.0);
    }
    rng_t r = rng_make(0, 0, 0, 0);
    int top, left, h, w;
    double never[2] = {2.0, 3.0}; /* area fraction > 1 never fits: the centre fallback */
    img_rrc_params(never, ra, 1000, 10, &r, &top, &left, &h, &w);
    CHECK_INT(h, 10);
    CHECK_INT(w, 13);
    CHECK_INT(top, 0);
    CHECK_INT(left, (1000 - 13) / 2);
    img_rrc_params(never, ra, 10, 1000, &r, &top, &left, &h, &w); /* ratio < 3/4: w = 10, h = round(13.33) */
    CHECK_INT(w, 10);
    CHECK_INT(h, 13);
    img_rrc_params(never, ra, 100, 90, &r, &top, &left, &h, &w); /* inside: the whole image */
    CHECK_INT(w, 100);
    CHECK_INT(h, 90);
    /* statistics: area fraction ~ U(0.08, 1) when it fits, log-ratio ~ U */
    double mean_area = 0;
    int n = 2000;
    for (int i = 0; i < n; i++) {
        rng_t q = rng_make(11, RNG_STREAM_AUGMENT, 1, (uint64_t)i);
        img_rrc_params(sc, ra, 4000, 4000, &q, &top, &left, &h, &w);
        mean_area += (double)w * h / 16e6;
    }
    CHECK_NEAR(mean_area / n, 0.4757, 0.01, 0); /* torchvision get_params, 20000 draws: 0.4757 */
    int rw, rh;
    img_resize_dims(256, 500, 375, &rw, &rh);
    CHECK_INT(rw, 341); /* int(256 * 500 / 375) = int(341.33) */
    CHECK_INT(rh, 256);
    img_resize_dims(256, 375, 500, &rw, &rh);
    CHECK_INT(rw, 256);
    CHECK_INT(rh, 341);
}

/* A build without libjpeg or libpng: decoding says so (ERR_INPUT), nothing else. */
static void test_built_without(void) {
    static const uint8_t jpg[] = {0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xC0, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0};
    static const uint8_t png[33] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D',
                                    'R', 0, 0, 0, 8, 0, 0, 0, 8, 8, 2, 0, 0, 0, 0, 0, 0, 0};
    img_info_t ii;
    err_t e = {0};
    if (!img_have_jpeg()) {
        CHECK_INT(img_probe(jpg, sizeof jpg, NULL, &ii, &e), -1);
        CHECK_INT(e.code, ERR_INPUT);
        CHECK_CONTAINS(e.msg, "built without JPEG support");
    }
    if (!img_have_png()) {
        CHECK_INT(img_probe(png, sizeof png, NULL, &ii, &e), -1);
        CHECK_INT(e.code, ERR_INPUT);
        CHECK_CONTAINS(e.msg, "built without PNG support");
    }
}

int main(void) {
    char cmd[16384], out[8192];
    if (!img_have_jpeg() || !img_have_png()) {
        TEST_RUN(test_built_without);
        if (test_main_end()) return 1;
        test_skip("built without libjpeg or libpng: only the refusal is checked");
    }
    if (test_tmpdir(fx, sizeof fx) == 0) {
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/data/image_fixtures.py %s 2>&1",
                 test_source_dir(), fx);
        int rc = test_run_cmd(cmd, out, sizeof out);
        have_fx = rc == 0;
        if (!have_fx) fprintf(stderr, "image_fixtures.py failed (PIL/torchvision missing?): %s\n", out);
    }
    TEST_RUN(test_limits_and_formats);
    TEST_RUN(test_rrc_params);
    if (!have_fx) {
        if (test_main_end()) return 1;
        test_skip("python3-pil / python3-torchvision not available for the PIL comparisons");
    }
    TEST_RUN(test_decode_vs_pil);
    TEST_RUN(test_transforms_vs_torchvision);
    TEST_RUN(test_train_transform_consistent);
    TEST_RUN(test_region_decode);
    TEST_RUN(test_dct_scaling);
    TEST_RUN(test_bad_files);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", fx);
    return test_main_end();
}
