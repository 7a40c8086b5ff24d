/* image_index.h: the file list of one image_folder split, as torchvision's ImageFolder
 * builds it, checked and cached (private to data/).
 *
 * Order and labels (torchvision 0.14's find_classes + make_dataset):
 *   classes   the names of the entries of the class directory that are directories
 *             (symbolic links followed), sorted by their bytes (Python's str order for
 *             UTF-8 names); label = position. For the val split the classes are the train
 *             split's, so both agree (a val folder naming a class train lacks is an error;
 *             a class with no val images is allowed).
 *   samples   for each class in that order, every directory under it (links followed),
 *             sorted by path, and in each its non-directory entries sorted by name whose
 *             lower-cased name ends in .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp.
 * torchvision refuses a train class without files; so does this. It ignores unreadable
 * directories silently and loops forever on a link to an ancestor; both are errors here.
 *
 * Checks while indexing (every file, on several threads): it opens, is not empty, starts
 * like a JPEG or PNG this build decodes (a PNG's size within the limits). A file failing
 * them gets a bad status and a reason; whether that stops the run is the caller's
 * business (data.bad_images). Decoding errors of files that pass (a truncated JPEG) show
 * only when the loader decodes them.
 *
 * Cache: <cache_dir>/image_folder/<hash of the split's real path>.idx holds the list, the
 * statuses and a fingerprint: the modification time (ns), inode and device of every
 * directory walked (and, for val, of the train directory), and each file's size, mtime and
 * ctime (ns) when it was checked. Adding, removing or renaming a file changes its
 * directory's mtime: the tree is walked again. Loading the cache stats every file (one
 * stat each, on the checking threads; no walk, no reads) and checks again the files whose
 * stamp changed, so a file rewritten in place, or given read permission, is seen as it is
 * now (notes->index_rechecked counts them; the cache is then rewritten). Not noticed: a
 * rewrite with the same size within the file system's timestamp granularity.
 * A cache that cannot be read is rebuilt; one that cannot be written is skipped (notes).
 */
#ifndef RUNNER_DATA_IMAGE_INDEX_H
#define RUNNER_DATA_IMAGE_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "data/dataset.h"
#include "data/image.h"

enum { FOLDER_OK = 0, FOLDER_BAD = 1 };

typedef struct folder_index {
    int classes;
    char **class_names;
    int64_t n;               /* files torchvision would list, bad ones included */
    char *paths;             /* NUL-terminated paths relative to the split directory */
    int64_t *path_off;       /* n */
    int32_t *label;          /* n */
    uint8_t *status;         /* n: FOLDER_OK / FOLDER_BAD */
    int64_t n_bad;
    char *why;               /* reasons of the bad files, NUL-terminated, in index order */
    int64_t *why_off;        /* n: -1 for good files */
    int64_t n_other;         /* files with a listed extension that are not JPEG/PNG */
} folder_index_t;

typedef struct folder_index_opts {
    const char *split_dir;   /* root/train_dir or root/val_dir */
    const char *classes_dir; /* where the class list comes from (the train split dir) */
    const char *cache_dir;   /* NULL/"": the default (see dataset.h) */
    img_limits_t limits;
    int threads;             /* header checks in parallel; 0 = a default */
    bool cache_read_only;    /* read a valid cache, never write one (notes->index_path
                                then names where the run would write it) */
} folder_index_opts_t;

/* Builds (or loads from the cache) the index. ERR_INPUT for a missing or unreadable
 * directory, no class folders, a train class without files, a val class unknown to train.
 * notes gets the cache path and whether it was reused. */
int folder_index_load(const folder_index_opts_t *o, folder_index_t *ix, dataset_notes_t *notes,
                      err_t *e);

void folder_index_free(folder_index_t *ix);

#endif
