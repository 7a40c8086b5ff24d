/* checkpoint.h: the checkpoint file format and its atomic writer / verifying reader.
 *
 * A checkpoint is a set of named binary sections:
 *
 *   offset 0   magic "RNCKPT\r\n" (8 bytes), u32 version (1), u32 section count,
 *              u64 config hash, u64 reserved                                  (32 bytes)
 *   then       table of contents, one 64-byte entry per section:
 *              char name[40] (NUL-padded), u64 offset, u64 size, u32 crc32, u32 reserved
 *   then       u32 CRC-32 of header + table of contents
 *   then       the section payloads, each starting at a 64-byte aligned offset.
 *
 * All integers little-endian. The writer writes to "<path>.tmp-<pid>", fsyncs the file,
 * renames it over <path> and fsyncs the directory, so a checkpoint is either the old
 * complete file or the new complete file, never half of one. The reader checks magic,
 * version, sizes against the file size and every CRC before handing out any section.
 * It does not know what the sections mean; runner/train_state.c does.
 */
#ifndef RUNNER_CHECKPOINT_H
#define RUNNER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define CKPT_MAGIC "RNCKPT\r\n"
#define CKPT_VERSION 1u
#define CKPT_NAME_MAX 40
#define CKPT_MAX_SECTIONS 64
/* The largest checkpoint read (it is read whole into memory): ResNet-152 with AdamW state
 * is about 1 GiB, so 16 GiB leaves room for larger nets without letting a corrupt size
 * field or a wrong file exhaust memory. */
#define CKPT_MAX_BYTES ((size_t)16 << 30)

typedef struct ckpt_section {
    char name[CKPT_NAME_MAX];
    const void *data;   /* writer: borrowed until ckpt_write returns; reader: into the file image */
    uint64_t size;
} ckpt_section_t;

/* Writes the sections atomically to path. Returns 0, or -1 with e set (ERR_RUNTIME:
 * disk full, permission; nothing is left at path that was not there before). */
int ckpt_write(const char *path, uint64_t config_hash, const ckpt_section_t *sections, int n,
               err_t *e);

/* A checkpoint read into memory and verified. */
typedef struct ckpt {
    char path[1024];
    uint64_t config_hash;
    int n;
    ckpt_section_t sections[CKPT_MAX_SECTIONS];
    void *image;        /* the whole file */
    size_t image_size;
} ckpt_t;

/* Reads and verifies path. A truncated or corrupt file is ERR_INPUT naming the file and
 * what failed ("section 'params' CRC mismatch", "truncated: 1048576 of 94371840 bytes"). */
ckpt_t *ckpt_read(const char *path, err_t *e);
/* The same checks on a file image already in memory (the fuzz harness and ckpt_read use
 * it); takes ownership of image (malloc'd), freed with the result or on failure. path
 * only names the file in messages. */
ckpt_t *ckpt_parse(const char *path, void *image, size_t size, err_t *e);
/* Checks a parsed "meta" section before anything reads it (runner/train_state.c decides
 * what it holds): an object; every count and size a whole number within its bound (in_h /
 * in_w at most 8192, classes 2^24, steps 2^53, ...), any other whole number within
 * +-2^53, bn_counters at most CKPT_META_MAX_COUNTERS whole numbers. ERR_INPUT names the file
 * and the key. So the conversions of meta numbers to integers are defined. */
#define CKPT_META_MAX_COUNTERS 4096
struct json;
int ckpt_meta_check(const char *path, const struct json *m, err_t *e);

void ckpt_free(ckpt_t *c);

/* Reads only the config hash from path's header (magic and version checked, nothing
 * else). Returns 0, or -1 when the file is missing or not a checkpoint. */
int ckpt_read_config_hash(const char *path, uint64_t *hash);

/* The section called name, or NULL. */
const ckpt_section_t *ckpt_find(const ckpt_t *c, const char *name);

/* Copies section name into dst, which must be exactly size bytes; a missing section or a
 * size mismatch is ERR_INPUT naming the checkpoint and the section. */
int ckpt_get(const ckpt_t *c, const char *name, void *dst, size_t size, err_t *e);

#endif
