/* safetensors.h: the safetensors file format, and loading/saving a net's weights with it.
 *
 * Format: 8-byte little-endian header length N, then N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"k": "v"}} and then the data, offsets relative to its start.
 * The reader checks everything before use: N within the file, the JSON well formed,
 * dtypes known, shape products matching the byte ranges, ranges inside the file, no
 * overlaps of tensors. Every failure is ERR_INPUT naming the file and the tensor.
 *
 * Net weights use torchvision names and shapes (OIHW conv weights; the net stores KRSC
 * and converts), F32 parameters and buffers and I64 num_batches_tracked, as
 * torch.save_file(model.state_dict()) writes them, so PyTorch/torchvision load them.
 * Loading accepts F32, F16, BF16 (and F64) for float tensors and I64/I32 counters.
 * What it does not do: memory-map, write dtypes other than F32/I64.
 */
#ifndef RUNNER_MODEL_SAFETENSORS_H
#define RUNNER_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "model/net.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ST_F32 = 0, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_U8, ST_DTYPE_COUNT } st_dtype_t;
extern const char *const st_dtype_names[ST_DTYPE_COUNT]; /* "F32", "F16", ... */

enum { ST_MAX_DIMS = 8 };

typedef struct st_tensor {
    char *name;
    st_dtype_t dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t numel;
    size_t begin, end;       /* byte range in the data section */
} st_tensor_t;

/* A whole file read into memory and validated. */
typedef struct safetensors {
    char *path;
    uint8_t *file;           /* the whole file */
    size_t file_size;
    const uint8_t *data;     /* start of the data section */
    size_t data_size;
    int n;                   /* tensors (in file order) */
    st_tensor_t *t;
    int n_meta;              /* __metadata__ entries */
    char **meta_keys, **meta_values;
} safetensors_t;

/* The largest weight file read (whole, into memory): 4 GiB (ResNet-152 in F32 is 240 MB).
 * The JSON header is at most 100 MiB (ST_MAX_HEADER in safetensors.c), a tensor has at
 * most ST_MAX_DIMS dimensions and 2^40 elements. */
#define ST_MAX_FILE ((size_t)4 << 30)

/* Reads and validates path (at most max_bytes; 0 = ST_MAX_FILE). NULL with ERR_INPUT naming
 * the file on any problem. */
safetensors_t *safetensors_open(const char *path, size_t max_bytes, err_t *e);
/* The same validation of a file image already in memory (takes ownership of the malloc'd
 * file; freed by safetensors_close or on failure); path only names it in messages. */
safetensors_t *safetensors_parse(const char *path, void *file, size_t size, err_t *e);
void safetensors_close(safetensors_t *st);
const st_tensor_t *safetensors_find(const safetensors_t *st, const char *name);
/* The metadata value for key, or NULL. */
const char *safetensors_meta(const safetensors_t *st, const char *key);
/* Copies tensor t converted to fp32 into dst (t->numel floats). Integer tensors convert
 * too. */
int safetensors_read_f32(const safetensors_t *st, const st_tensor_t *t, float *dst, err_t *e);
/* Copies an integer tensor t into dst as int64 (t->numel values). */
int safetensors_read_i64(const safetensors_t *st, const st_tensor_t *t, int64_t *dst, err_t *e);

/* One tensor to write: data is host memory in dtype's layout (F32 or I64 or F16...). */
typedef struct st_entry {
    const char *name;
    st_dtype_t dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;
} st_entry_t;

/* Writes n entries (and n_meta metadata pairs, may be 0) to path atomically: a temp
 * file beside it, fsync, rename. */
int safetensors_write(const char *path, const st_entry_t *entries, int n,
                      const char *const *meta_keys, const char *const *meta_values, int n_meta,
                      err_t *e);

/* Loads every tensor of the bound net n from path: names must match exactly (a missing
 * tensor or an extra one is ERR_INPUT: "FILE: missing tensor layer1.0.conv1.weight",
 * "FILE: unexpected tensor foo (not in resnet...)"), shapes too ("FILE: tensor
 * conv1.weight has shape [64,3,3,3], expected [64,1,3,3]"). Uploads params and buffers
 * and sets the counters. */
int safetensors_load_net(net_t *n, const char *path, err_t *e);

/* safetensors_load_net from a file already open. keep_prefix (may be NULL): tensors whose
 * names start with it (e.g. "fc.") are neither required nor read, whatever their shape
 * in the file, and keep the values the net has (fine-tuning with a fresh classifier). */
int safetensors_load_net_from(net_t *n, const safetensors_t *st, const char *keep_prefix, err_t *e);

/* The checks of safetensors_load_net_from alone (names, shapes, dtypes; the net need not
 * be bound), so a run can refuse a file before it creates anything. */
int safetensors_check_net(const net_t *n, const safetensors_t *st, const char *keep_prefix, err_t *e);

/* Writes every param, buffer and counter of the bound net n with torchvision names and
 * shapes (F32, counters I64), atomically. meta may be NULL/0 pairs. */
int safetensors_save_net(net_t *n, const char *path, const char *const *meta_keys,
                         const char *const *meta_values, int n_meta, err_t *e);

#ifdef __cplusplus
}
#endif
#endif
