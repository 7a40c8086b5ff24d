/* jpeg_loader_bench.c: one epoch of the runner's loader over an image folder with the
 * ImageNet training transform: decode + RandomResizedCrop(224) + horizontal flip +
 * normalisation to float32, batch 64, the consumer doing nothing with the batches. The
 * same work as bench/jpeg_loader/torchvision_loader.py; bench/jpeg_loader/run.sh runs both.
 *
 * Usage: bench_jpeg_loader_bench DIR WORKERS [DCT_SCALING 0|1 (default 1)] [BATCH]
 *   Prints one JSON line: images, wall seconds, CPU seconds (the process, all threads).
 * Usage: bench_jpeg_loader_bench --dct-error DIR SIZE
 *   For every image, the training transform (RandomResizedCrop(SIZE) + flip, the same
 *   draws) and the evaluation one (Resize(round(SIZE / 0.875)) + CenterCrop(SIZE)) with and
 *   without DCT-domain scaling: how often scaling applied, the mean absolute and maximum
 *   pixel difference over the images where it did, and the PSNR (one JSON line each).
 */
#include <math.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "data/dataset.h"
#include "data/loader.h"
#include "util/clock.h"

static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

static int dct_error(const char *dir, int size) {
    err_t e = {0};
    dataset_opts_t o = {0};
    o.name = "image_folder";
    o.root = dir;
    o.split = DATA_SPLIT_TRAIN;
    dataset_t *ds = NULL;
    if (dataset_open(&o, &ds, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    img_tf_opts_t on = {size, (int)nearbyint(size / 0.875), true, {0.08, 1.0}, {0.75, 4.0 / 3.0},
                        true, true, 3, img_default_limits()};
    img_tf_opts_t off = on;
    off.dct_scaling = false;
    size_t px = (size_t)size * size * 3;
    uint8_t *a = malloc(px), *b = malloc(px);
    img_work_t w = {0};
    data_buf_t buf = {0};
    for (int train = 1; train >= 0; train--) {
        double sum = 0, sq = 0;
        int maxd = 0;
        long scaled = 0, n = dataset_size(ds);
        for (long i = 0; i < n; i++) {
            data_sample_t s;
            img_tf_info_t ti;
            rng_t r1 = rng_make(1, RNG_STREAM_AUGMENT, 0, (uint64_t)i), r2 = r1;
            if (dataset_read(ds, i, &s, &buf, &e) ||
                img_transform(&on, s.bytes, s.len, train, &r1, a, &w, &ti, &e) ||
                img_transform(&off, s.bytes, s.len, train, &r2, b, &w, NULL, &e)) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            if (ti.scale_num == 8) continue;
            scaled++;
            for (size_t k = 0; k < px; k++) {
                int d = abs((int)a[k] - (int)b[k]);
                sum += d;
                sq += (double)d * d;
                if (d > maxd) maxd = d;
            }
        }
        double cnt = (double)scaled * px, mse = cnt ? sq / cnt : 0;
        printf("{\"transform\": \"%s\", \"size\": %d, \"images\": %ld, \"scaled_fraction\": %.4f, "
               "\"mean_abs_err\": %.4f, \"max_err\": %d, \"psnr_db\": %.2f}\n",
               train ? "train" : "eval", size, n, (double)scaled / (double)n, cnt ? sum / cnt : 0,
               maxd, mse > 0 ? 10 * log10(255.0 * 255.0 / mse) : INFINITY);
    }
    free(a);
    free(b);
    img_work_free(&w);
    data_buf_free(&buf);
    dataset_free(ds);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--dct-error")) return dct_error(argv[2], atoi(argv[3]));
    if (argc < 3) {
        fprintf(stderr, "usage: %s DIR WORKERS [DCT_SCALING] [BATCH]\n", argv[0]);
        return 2;
    }
    err_t e = {0};
    dataset_opts_t o = {0};
    o.name = "image_folder";
    o.root = argv[1];
    o.split = DATA_SPLIT_TRAIN;
    o.folder.channels = 3;
    dataset_t *ds = NULL;
    if (dataset_open(&o, &ds, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    loader_opts_t lo = {0};
    lo.batch_size = argc > 4 ? atoi(argv[4]) : 64;
    lo.workers = atoi(argv[2]);
    lo.shuffle = true;
    lo.world_size = 1;
    lo.seed = 1;
    lo.augment.horizontal_flip = true;
    lo.n_norm = 3;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    for (int k = 0; k < 3; k++) lo.mean[k] = mean[k], lo.std[k] = std[k];
    lo.dtype = LOADER_F32;
    lo.image = (img_tf_opts_t){224, 256, true, {0.08, 1.0}, {0.75, 4.0 / 3.0}, true,
                               argc > 3 ? atoi(argv[3]) != 0 : true, 3, img_default_limits()};
    loader_t *l = NULL;
    if (loader_create(ds, &lo, &l, &e) || loader_start_epoch(l, 0, 0, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    double c0 = cpu_s(), t0 = now_s();
    long n = 0;
    loader_batch_t *b;
    int r;
    while ((r = loader_next(l, &b, &e)) == 1) n += b->n;
    double wall = now_s() - t0, cpu = cpu_s() - c0;
    if (r < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    printf("{\"images\": %ld, \"wall_s\": %.4f, \"cpu_s\": %.4f}\n", n, wall, cpu);
    loader_free(l);
    dataset_free(ds);
    return 0;
}
