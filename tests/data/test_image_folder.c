/* test_image_folder.c: the image_folder reader and its loader path.
 *
 * - Order and labels equal torchvision's ImageFolder on a tree with every corner
 *   (folder_fixtures.py: hidden and linked class folders, nested folders whose path order
 *   differs from a depth-first walk, upper-case extensions, ignored files); val labelled
 *   with train's classes; a val folder train lacks, an empty train class and a split
 *   without class folders are refused.
 * - The index cache: reused when nothing changed, rebuilt after a file is added or the
 *   cache is corrupted, skipped when it cannot be written; a file rewritten in place is
 *   checked again (a fixed bad file is no longer bad, a broken good one is).
 * - Bad files (text named .jpg, empty, truncated, unreadable): data.bad_images error stops
 *   with one message naming the file; skip leaves them out or replaces them (the replaced
 *   sample keeps its own label), counted; both deterministic.
 * - The loader's batches do not depend on the worker count and a resumed epoch equals
 *   the uninterrupted one.
 * Skipped (77) without /usr/bin/python3 + PIL + torchvision (the fixture generator).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/image.h"
#include "data/loader.h"
#include "tests/test.h"

static char tmp[2048], fx[2300], cache[2300];

static dataset_t *open_folder(const char *root, data_split_t split, bool skip, int channels,
                              err_t *e) {
    dataset_opts_t o = {0};
    o.name = "image_folder";
    o.root = root;
    o.split = split;
    o.folder.skip_bad = skip;
    o.folder.channels = channels;
    o.folder.cache_dir = cache;
    dataset_t *d = NULL;
    if (dataset_open(&o, &d, e)) return NULL;
    return d;
}

/* The samples of d as "label\tpath relative to split_dir\n" lines. */
static char *listing(const dataset_t *d, const char *split_dir) {
    size_t cap = 1 << 16, len = 0;
    char *s = calloc(1, cap), p[4096];
    for (int64_t i = 0; i < dataset_size(d); i++) {
        dataset_sample_path(d, i, p, sizeof p);
        const char *rel = strncmp(p, split_dir, strlen(split_dir)) ? p : p + strlen(split_dir) + 1;
        len += (size_t)snprintf(s + len, cap - len, "%d\t%s\n", dataset_labels(d)[i], rel);
    }
    return s;
}

static void test_order_matches_torchvision(void) {
    err_t e = {0};
    char split[2400], path[2400];
    for (int sp = 0; sp < 2; sp++) {
        dataset_t *d = open_folder(fx, sp ? DATA_SPLIT_VAL : DATA_SPLIT_TRAIN, false, 3, &e);
        if (!d) fprintf(stderr, "%s\n", e.msg);
        CHECK(d != NULL);
        if (!d) continue;
        snprintf(split, sizeof split, "%s/%s", fx, sp ? "val" : "train");
        snprintf(path, sizeof path, "%s/expected_%s.txt", fx, sp ? "val" : "train");
        char *want = test_read_file(path, NULL), *got = listing(d, split);
        CHECK_STR(got, want);
        free(want);
        free(got);
        CHECK_INT(dataset_num_classes(d), 7);
        CHECK_STR(dataset_class_name(d, 0), ".hidden");
        CHECK_STR(dataset_class_name(d, 6), "\xc3\xa9");
        int c, h, w;
        dataset_shape(d, &c, &h, &w);
        CHECK_INT(c, 3);
        CHECK_INT(h, 0);
        CHECK(!dataset_in_memory(d));
        int64_t counts[7];
        dataset_class_counts(d, counts);
        CHECK_INT(counts[2], sp ? 2 : 8);
        dataset_free(d);
    }
}

static void test_refusals(void) {
    err_t e = {0};
    char root[2400], p[2600];
    snprintf(root, sizeof root, "%s/ref", tmp);
    /* a val class train lacks */
    snprintf(p, sizeof p, "mkdir -p %s/train/a %s/val/zz && cp %s/train/b/2.jpg %s/train/a/ && "
             "cp %s/train/b/2.jpg %s/val/zz/", root, root, fx, root, fx, root);
    CHECK_INT(system(p), 0);
    CHECK(open_folder(root, DATA_SPLIT_VAL, false, 3, &e) == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "/val/zz is not a class of the training split");
    /* an empty training class */
    snprintf(p, sizeof p, "mkdir -p %s/train/empty && touch %s/train/empty/readme.txt", root, root);
    CHECK_INT(system(p), 0);
    CHECK(open_folder(root, DATA_SPLIT_TRAIN, false, 3, &e) == NULL);
    CHECK_CONTAINS(e.msg, "1 class folder in");
    CHECK_CONTAINS(e.msg, "has no image files (empty;");
    /* no class folders: images directly in the split */
    snprintf(p, sizeof p, "mkdir -p %s/flat/train && cp %s/train/b/2.jpg %s/flat/train/", root, fx, root);
    CHECK_INT(system(p), 0);
    snprintf(p, sizeof p, "%s/flat", root);
    CHECK(open_folder(p, DATA_SPLIT_TRAIN, false, 3, &e) == NULL);
    CHECK_CONTAINS(e.msg, "no class folders in");
    /* a missing split */
    snprintf(p, sizeof p, "%s/nothing", root);
    CHECK(open_folder(p, DATA_SPLIT_TRAIN, false, 3, &e) == NULL);
    CHECK_CONTAINS(e.msg, "is not a directory");
}

static void test_cache(void) {
    err_t e = {0};
    char root[2400], cmd[5000];
    snprintf(root, sizeof root, "%s/cached", tmp);
    snprintf(cmd, sizeof cmd, "cp -r %s %s && rm -f %s/image_folder/*", fx, root, cache);
    CHECK_INT(system(cmd), 0);
    dataset_t *d = open_folder(root, DATA_SPLIT_TRAIN, false, 3, &e);
    CHECK(d && !dataset_notes(d)->index_reused && dataset_notes(d)->index_path[0]);
    int64_t n = d ? dataset_size(d) : 0;
    char idx[1024];
    snprintf(idx, sizeof idx, "%s", d ? dataset_notes(d)->index_path : "");
    dataset_free(d);
    CHECK_CONTAINS(idx, cache);
    d = open_folder(root, DATA_SPLIT_TRAIN, false, 3, &e);
    CHECK(d && dataset_notes(d)->index_reused);
    CHECK_INT(d ? dataset_size(d) : -1, n);
    dataset_free(d);
    /* a new file in a nested folder changes that folder's mtime: rebuilt, one more */
    snprintf(cmd, sizeof cmd, "sleep 0.01; cp %s/train/b/2.jpg '%s/train/a/s b/new.jpg'", fx, root);
    CHECK_INT(system(cmd), 0);
    d = open_folder(root, DATA_SPLIT_TRAIN, false, 3, &e);
    CHECK(d && !dataset_notes(d)->index_reused);
    CHECK_INT(d ? dataset_size(d) : -1, n + 1);
    dataset_free(d);
    /* a corrupted cache is rebuilt, with the same result */
    int fd = open(idx, O_RDWR);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK_INT(pwrite(fd, "\x55", 1, 40), 1);
        close(fd);
    }
    d = open_folder(root, DATA_SPLIT_TRAIN, false, 3, &e);
    CHECK(d && !dataset_notes(d)->index_reused);
    CHECK_INT(d ? dataset_size(d) : -1, n + 1);
    dataset_free(d);
    d = open_folder(root, DATA_SPLIT_TRAIN, false, 3, &e);
    CHECK(d && dataset_notes(d)->index_reused);
    dataset_free(d);
    /* issue 23: a bad file fixed in place, as the message says, leaves its folder's mtime
     * alone; the cache sees the file's own size/mtime change: reused, that file checked
     * again, no longer bad (the old code kept the error). Broken in place: bad again. */
    char fixed[2400];
    snprintf(fixed, sizeof fixed, "%s/fixed", tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/train/c0 %s/train/c1 && cp %s/big.jpg %s/train/c0/ok.jpg && "
             "cp %s/big.jpg %s/train/c1/ok.jpg && cp %s/big.jpg %s/train/c1/ok2.jpg && "
             "echo 'not a picture' > %s/train/c0/text.jpg", fixed, fixed, fx, fixed, fx, fixed, fx, fixed, fixed);
    CHECK_INT(system(cmd), 0);
    CHECK(open_folder(fixed, DATA_SPLIT_TRAIN, false, 3, &e) == NULL);
    CHECK_CONTAINS(e.msg, "train/c0/text.jpg: not an image");
    struct stat before, after;
    snprintf(cmd, sizeof cmd, "%s/train/c0", fixed);
    CHECK_INT(stat(cmd, &before), 0);
    snprintf(cmd, sizeof cmd, "sleep 0.01; cat %s/big.jpg > %s/train/c0/text.jpg", fx, fixed);
    CHECK_INT(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/train/c0", fixed);
    CHECK_INT(stat(cmd, &after), 0);
    CHECK(before.st_mtim.tv_sec == after.st_mtim.tv_sec && before.st_mtim.tv_nsec == after.st_mtim.tv_nsec);
    err_clear(&e);
    d = open_folder(fixed, DATA_SPLIT_TRAIN, false, 3, &e);
    if (!d) fprintf(stderr, "%s\n", e.msg);
    CHECK(d != NULL);
    CHECK(d && dataset_notes(d)->index_reused);
    CHECK_INT(d ? dataset_notes(d)->index_rechecked : -1, 1);
    CHECK_INT(d ? dataset_size(d) : -1, 4);
    CHECK_INT(d ? dataset_notes(d)->skipped : -1, 0);
    dataset_free(d);
    d = open_folder(fixed, DATA_SPLIT_TRAIN, false, 3, &e);   /* rewritten: nothing to check again */
    CHECK(d && dataset_notes(d)->index_reused);
    CHECK_INT(d ? dataset_notes(d)->index_rechecked : -1, 0);
    dataset_free(d);
    snprintf(cmd, sizeof cmd, "sleep 0.01; : > %s/train/c1/ok.jpg", fixed);
    CHECK_INT(system(cmd), 0);
    CHECK(open_folder(fixed, DATA_SPLIT_TRAIN, false, 3, &e) == NULL);
    CHECK_CONTAINS(e.msg, "train/c1/ok.jpg: not an image (the file is empty)");
    d = open_folder(fixed, DATA_SPLIT_TRAIN, true, 3, &e);
    CHECK(d && dataset_notes(d)->index_reused);
    CHECK_INT(d ? dataset_notes(d)->skipped : -1, 1);
    dataset_free(d);
    /* an unwritable cache location: no cache, still works */
    char saved[2300];
    snprintf(saved, sizeof saved, "%s", cache);
    snprintf(cache, sizeof cache, "/proc/no-cache-here");
    d = open_folder(root, DATA_SPLIT_TRAIN, false, 3, &e);
    CHECK(d && !dataset_notes(d)->index_reused && !dataset_notes(d)->index_path[0]);
    CHECK_INT(d ? dataset_size(d) : -1, n + 1);
    dataset_free(d);
    snprintf(cache, sizeof cache, "%s", saved);
}

static loader_opts_t folder_loader(int batch, int workers, bool eval, bool skip) {
    loader_opts_t o = {0};
    o.batch_size = batch;
    o.workers = workers;
    o.eval = eval;
    o.shuffle = !eval;
    o.world_size = 1;
    o.seed = 42;
    o.augment.horizontal_flip = true;
    o.n_norm = 0;
    o.dtype = LOADER_F32;
    o.image = (img_tf_opts_t){16, 18, true, {0.08, 1}, {0.75, 4.0 / 3}, true, true, 3,
                              img_default_limits()};
    o.skip_bad = skip;
    return o;
}

/* All batches of an epoch, concatenated (images then labels). */
static float *epoch_bytes(const dataset_t *d, const loader_opts_t *o, int64_t start, size_t *n,
                          err_t *e) {
    loader_t *l = NULL;
    if (loader_create(d, o, &l, e)) return NULL;
    size_t cap = 1 << 20, len = 0;
    float *all = malloc(cap * sizeof *all);
    loader_batch_t *b;
    int r;
    CHECK_INT(loader_start_epoch(l, 1, start, e), 0);
    while ((r = loader_next(l, &b, e)) == 1) {
        size_t k = (size_t)b->n * b->h * b->w * b->c;
        if (len + k + (size_t)b->n > cap) break;
        memcpy(all + len, b->images, k * sizeof(float));
        len += k;
        for (int i = 0; i < b->n; i++) all[len++] = (float)b->labels[i];
    }
    loader_free(l);
    *n = len;
    if (r < 0) {
        free(all);
        return NULL;
    }
    return all;
}

static void test_loader_invariance(void) {
    err_t e = {0};
    dataset_t *d = open_folder(fx, DATA_SPLIT_TRAIN, false, 3, &e);
    CHECK(d != NULL);
    if (!d) return;
    size_t n0, n3, nr;
    loader_opts_t o = folder_loader(4, 0, false, false);
    float *a = epoch_bytes(d, &o, 0, &n0, &e);
    o.workers = 3;
    float *b = epoch_bytes(d, &o, 0, &n3, &e);
    CHECK(a && b && n0 == n3 && n0 > 0);
    if (a && b && n0 == n3) CHECK(!memcmp(a, b, n0 * sizeof *a));
    /* resume at batch 2: the tail of the uninterrupted epoch */
    float *c = epoch_bytes(d, &o, 2, &nr, &e);
    size_t per = (size_t)4 * 16 * 16 * 3 + 4;
    CHECK(c && nr == n0 - 2 * per);
    if (c && a && nr == n0 - 2 * per) CHECK(!memcmp(c, a + 2 * per, nr * sizeof *a));
    /* grayscale: one channel */
    dataset_t *g = open_folder(fx, DATA_SPLIT_TRAIN, false, 1, &e);
    loader_t *l = NULL;
    CHECK(g && !loader_create(g, &o, &l, &e));
    int hh, ww, cc;
    if (l) loader_shape(l, &hh, &ww, &cc);
    CHECK_INT(l ? cc : -1, 1);
    loader_free(l);
    dataset_free(g);
    free(a);
    free(b);
    free(c);
    dataset_free(d);
}

/* root/train/c0: empty.png, ok1.jpg, ok2.jpg, text.jpg; c1: ok3.jpg, trunc.jpg */
static void make_bad_tree(const char *root, bool with_index_bad) {
    char cmd[6000];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/train/c0 %s/train/c1 %s/val/c0 && cp %s/big.jpg %s/train/c0/ok1.jpg && "
             "cp %s/big.jpg %s/train/c0/ok2.jpg && cp %s/big.jpg %s/train/c1/ok3.jpg && "
             "head -c 2000 %s/big.jpg > %s/train/c1/trunc.jpg && cp %s/big.jpg %s/val/c0/v.jpg",
             root, root, root, fx, root, fx, root, fx, root, fx, root, fx, root);
    CHECK_INT(system(cmd), 0);
    if (with_index_bad) {
        snprintf(cmd, sizeof cmd, "echo 'hello, not a picture' > %s/train/c0/text.jpg && "
                 ": > %s/train/c0/empty.png", root, root);
        CHECK_INT(system(cmd), 0);
    }
}

static void test_bad_files(void) {
    err_t e = {0};
    char root[2400], root2[2400];
    snprintf(root, sizeof root, "%s/bad", tmp);
    make_bad_tree(root, true);
    /* error mode: the first bad file in order, named, with the count */
    CHECK(open_folder(root, DATA_SPLIT_TRAIN, false, 3, &e) == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "train/c0/empty.png: not an image (the file is empty)");
    CHECK_CONTAINS(e.msg, "data.bad_images: skip");
    CHECK_CONTAINS(e.msg, "(2 bad files in");
    /* skip mode: left out and counted */
    dataset_t *d = open_folder(root, DATA_SPLIT_TRAIN, true, 3, &e);
    CHECK(d != NULL);
    if (!d) return;
    CHECK_INT(dataset_size(d), 4);
    CHECK_INT(dataset_notes(d)->skipped, 2);
    CHECK_CONTAINS(dataset_notes(d)->first_skipped, "empty.png");
    /* the truncated file is found while decoding: sample 3 is replaced by sample 0
     * (the next that decodes), with sample 0's label, and counted once */
    loader_opts_t o = folder_loader(4, 2, true, true);
    loader_t *l = NULL;
    CHECK_INT(loader_create(d, &o, &l, &e), 0);
    loader_batch_t *b;
    for (int ep = 0; l && ep < 2; ep++) {
        CHECK_INT(loader_start_epoch(l, ep, 0, &e), 0);
        CHECK_INT(loader_next(l, &b, &e), 1);
        CHECK_INT(b->n, 4);
        CHECK_INT(b->labels[0], 0);
        CHECK_INT(b->labels[2], 1);
        CHECK_INT(b->labels[3], 0); /* ok1's label, not trunc's */
        size_t img = (size_t)16 * 16 * 3;
        CHECK(!memcmp((float *)b->images + 3 * img, b->images, img * sizeof(float)));
        CHECK_INT(loader_bad_images(l), 1);
        /* named once, with the reason alone (the run lists it in skipped_images.jsonl) */
        int64_t *idx = NULL;
        char **why = NULL;
        CHECK_INT(loader_take_bad(l, &idx, &why), ep == 0 ? 1 : 0);
        if (ep == 0 && idx && why) {
            CHECK_INT(idx[0], 3);
            CHECK_STR(why[0], "truncated JPEG: the file (2000 bytes) ends without its end marker");
            free(why[0]);
        }
        free(idx);
        free(why);
    }
    loader_free(l);
    dataset_free(d);
    /* error mode, the truncated file only: the batch fails naming it */
    snprintf(root2, sizeof root2, "%s/bad2", tmp);
    make_bad_tree(root2, false);
    d = open_folder(root2, DATA_SPLIT_TRAIN, false, 3, &e);
    CHECK(d != NULL);
    o = folder_loader(2, 1, true, false);
    l = NULL;
    if (d) CHECK_INT(loader_create(d, &o, &l, &e), 0);
    if (l) {
        CHECK_INT(loader_start_epoch(l, 0, 0, &e), 0);
        CHECK_INT(loader_next(l, &b, &e), 1);
        CHECK_INT(loader_next(l, &b, &e), -1);
        CHECK_INT(e.code, ERR_INPUT);
        CHECK_CONTAINS(e.msg, "train/c1/trunc.jpg: truncated JPEG");
        CHECK_CONTAINS(e.msg, "data.bad_images: skip");
    }
    loader_free(l);
    dataset_free(d);
}

/* A file without read permission (as a non-root user: root reads anything). */
static void test_unreadable(void) {
    char root[2400], cmd[5000];
    snprintf(root, sizeof root, "%s/perm", tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/train/c0 && cp %s/big.jpg %s/train/c0/a.jpg && "
             "cp %s/big.jpg %s/train/c0/secret.jpg && chmod -R go+rX %s && chmod 755 %s && "
             "chmod 000 %s/train/c0/secret.jpg", root, fx, root, fx, root, tmp, tmp, root);
    CHECK_INT(system(cmd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) || setuid(65534))) _exit(3);
        err_t e = {0};
        snprintf(cache, sizeof cache, "/proc/none"); /* nobody cannot write the cache */
        if (open_folder(root, DATA_SPLIT_TRAIN, false, 3, &e)) _exit(4);
        if (!strstr(e.msg, "c0/secret.jpg: cannot open it: Permission denied")) {
            fprintf(stderr, "unexpected: %s\n", e.msg);
            _exit(5);
        }
        dataset_t *d = open_folder(root, DATA_SPLIT_TRAIN, true, 3, &e);
        _exit(d && dataset_size(d) == 1 && dataset_notes(d)->skipped == 1 ? 0 : 6);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st));
    CHECK_INT(WEXITSTATUS(st), 0);
}

int main(void) {
    char cmd[6000], out[4096];
    if (!img_have_jpeg() || !img_have_png()) test_skip("built without libjpeg or libpng");
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    snprintf(fx, sizeof fx, "%s/fx", tmp);
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/data/folder_fixtures.py %s 2>&1 && "
             "/usr/bin/python3 -c \"from PIL import Image; Image.linear_gradient('L').convert('RGB')"
             ".resize((200, 150)).save('%s/big.jpg', quality=90)\" 2>&1",
             test_source_dir(), fx, fx);
    char mk[2400];
    snprintf(mk, sizeof mk, "mkdir -p %s", fx);
    if (system(mk)) return 1;
    if (test_run_cmd(cmd, out, sizeof out)) {
        fprintf(stderr, "folder_fixtures.py failed: %s\n", out);
        test_skip("python3 with PIL and torchvision is needed for the fixtures");
    }
    TEST_RUN(test_order_matches_torchvision);
    TEST_RUN(test_refusals);
    TEST_RUN(test_cache);
    TEST_RUN(test_loader_invariance);
    TEST_RUN(test_bad_files);
    TEST_RUN(test_unreadable);
    snprintf(cmd, sizeof cmd, "chmod -R u+rwX %s; rm -rf %s", tmp, tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmp);
    return test_main_end();
}
