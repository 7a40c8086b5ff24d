/* config_internal.h: private to runner/config*.c. The schema table (one row per dotted
 * key), the loader's state and context, and the helpers the config source files share.
 * Other modules include runner/config.h only; nothing here is a public contract.
 *
 * How loading works: every source (a base file, the experiment file, a matrix entry, one
 * --set) is parsed by libyaml into a document and then applied, key by key, onto one
 * cfg_state_t in order, so later sources win leaf by leaf (a deep merge where lists
 * replace). After the last source, cfg_finalize fills the dataset-dependent defaults and
 * runs the cross-field checks.
 */
#ifndef RUNNER_CONFIG_INTERNAL_H
#define RUNNER_CONFIG_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "runner/config.h"

enum {
    CFG_MAX_ROWS = 160,          /* rows in the schema table (checked at compile time) */
    CFG_MAX_SOURCES = 96,        /* base chain files + --set items (+ 1 for the file) */
    CFG_MAX_BASE_DEPTH = 16,     /* base: chain length */
    CFG_MAX_DEPTH = 64,          /* YAML nesting depth */
    CFG_NODE_BUDGET = 10000,     /* nodes visited per document, aliases expanded */
    CFG_MAX_FILE = 1 << 20,      /* bytes */
    CFG_MAX_ANCHORS = 1000,      /* & and * in one file */
    CFG_MAX_KEYS = 1000,         /* keys in one mapping */
    CFG_MAX_NAME = 100,          /* run and matrix entry names */
    CFG_MAX_ERRORS = 20          /* errors shown from one load (all are counted) */
};

/* What a row's value is. */
typedef enum {
    K_INT,       /* int field, bounds lo..hi */
    K_INT64,     /* int64_t field; with F_NULLABLE null stores -1 */
    K_UINT64,    /* uint64_t field (seed) */
    K_FLOAT,     /* double field, finite, bounds */
    K_BOOL,      /* bool field: true/false/yes/no/on/off */
    K_STR,       /* char[size] field */
    K_NAME,      /* char[size] field holding one of names[] (dataset, arch) */
    K_ENUM,      /* int-sized enum field; names[value] (NULL entries not accepted) */
    K_INTS,      /* int array, count at count_off (or only in the state), min_n..max_n */
    K_FLOATS,    /* double array */
    K_STRS,      /* char[max_n][size] array */
    K_SWITCH,    /* false | true | mapping of the child rows (random_crop, normalize) */
    K_ROTATION   /* false | degrees (double field) */
} cfg_kind_t;

enum {
    F_NULLABLE = 1 << 0,  /* YAML null accepted ("" / -1 / empty list) */
    F_LO_OPEN = 1 << 1,   /* value must be > lo (else >= lo) */
    F_HI_OPEN = 1 << 2,   /* value must be < hi (else <= hi) */
    F_HASH = 1 << 3,      /* part of config_hash */
    F_INCREASING = 1 << 4,/* list strictly increasing */
    F_UNIQUE = 1 << 5,    /* list entries distinct */
    F_NONEMPTY = 1 << 6,  /* string must not be empty */
    F_PLAIN = 1 << 7,     /* string is a plain run name */
    F_MD5 = 1 << 8,       /* 32 hex digits */
    F_URL = 1 << 9,       /* http://, https:// or file:// */
    F_CHILD = 1 << 10,    /* child of a K_SWITCH row: written inline by its parent */
    F_QUOTE = 1 << 11,    /* string written quoted */
    F_PATH = 1 << 12,     /* a path: leading ~ / ~user and $VAR expanded (util/fs.h) */
    F_HASH_SET = 1 << 13, /* with F_HASH: in config_hash only when not the default, so a key
                             added later leaves the hash of every run that does not use it
                             unchanged */
    F_AUTO = 1 << 14,     /* int: `auto` accepted, stored as -1 (data.workers) */
    F_IMAGES = 1 << 15,   /* with F_HASH: hashed only for data.dataset image_folder, the only
                             dataset they change (other runs keep their hash) */
    F_BOOLS = 1 << 16     /* enum whose names start "false", "true": yes/no/on/off are
                             accepted for them as for a bool (train.cuda_graphs) */
};

typedef struct cfg_row {
    const char *key;            /* dotted, e.g. "optimizer.lr" */
    cfg_kind_t kind;
    ptrdiff_t off;              /* offsetof(experiment_t, field); -1: none */
    size_t size;                /* char field size, or element size for K_STRS */
    double lo, hi;              /* bounds (numbers and list elements) */
    unsigned flags;
    int min_n, max_n;           /* list lengths */
    ptrdiff_t count_off;        /* offsetof the list's count field; -1: none */
    const char *const *names;   /* K_ENUM / K_NAME values */
    int n_names;
    const char *doc;            /* one line: meaning (resolved.yaml comment) */
} cfg_row_t;

/* What a nullable K_FLOAT row stores for null: 0 where its bounds exclude 0 (lo 0 with
 * F_LO_OPEN: train.ema.decay), else -1, below every value it accepts (model.dropout, whose
 * 0 is a value). */
static inline double cfg_float_null(const cfg_row_t *r) {
    return r->lo == 0 && !(r->flags & F_LO_OPEN) ? -1 : 0;
}

extern const cfg_row_t cfg_rows[];
extern const int cfg_n_rows;

/* Where a value came from: a source index and a 1-based line/column (0: no place). */
typedef struct cfg_loc {
    int src;
    int line, col;
} cfg_loc_t;

/* The experiment being built plus what the checks need to know about each row. */
typedef struct cfg_state {
    experiment_t x;
    unsigned char set[CFG_MAX_ROWS];     /* given by some source */
    unsigned char set_now[CFG_MAX_ROWS]; /* by the current source: 0, 1 weak (<<), 2 */
    cfg_loc_t loc[CFG_MAX_ROWS];         /* where it was last given */
    int count[CFG_MAX_ROWS];             /* list lengths */
    unsigned order[CFG_MAX_ROWS];        /* when it was last given: a later value is larger */
    unsigned n_given;                    /* values given so far (the next order) */
    bool norm_off;                       /* data.normalize: false */
} cfg_state_t;

/* One load: the sources seen, the current one, and the error sink. */
typedef struct cfg_ctx {
    err_t *err;
    int n_src;
    struct {
        char label[CFG_PATH];            /* file path as the user would write it, or
                                            "--set key=value" */
        bool cli;
    } src[CFG_MAX_SOURCES];
    int cur;                             /* source being applied */
    yaml_document_t *doc;                /* its document */
    long budget;                         /* nodes left to visit in doc */
    bool is_base;                        /* applying a base file (name: not inherited) */
    char scope[96];                      /* "matrix[2] (line 7)" while applying an entry */
    const char *text;                    /* config_load_text: the top file's bytes (base:
                                            is refused), NULL when loading files */
    size_t text_len;
    int n_stack;                         /* base chain: real paths being loaded */
    char stack[CFG_MAX_BASE_DEPTH + 1][PATH_MAX];
    /* Errors so far. A wrong key or value does not stop the walk of its document: the
     * next key is applied and checked too, so one run shows every such error of a file
     * (up to CFG_MAX_ERRORS), in file order, one "file:line:col: message" line each (err
     * holds them joined). What cannot be walked past stops it: fatal. */
    int n_err;
    bool fatal;
    struct {
        cfg_loc_t loc;
        char text[640];                  /* the error's full line */
    } errs[CFG_MAX_ERRORS];
} cfg_ctx_t;

/* ---- config_schema.c ---- */
int cfg_row_find(const char *key);
/* true when some row's key starts with key + "." */
bool cfg_is_section(const char *key);
/* Writes " did you mean X?" / " valid keys here: ..." advice for an unknown key. */
void cfg_suggest_key(const char *full, char *out, size_t cap);
/* Closest of names[] to s (case-insensitive edit distance), or NULL if none is close. */
const char *cfg_closest(const char *s, const char *const *names, int n);
size_t cfg_edit_distance(const char *a, const char *b);
/* Plain run name check; returns NULL when ok, else what is wrong. */
const char *cfg_plain_name_problem(const char *s, char *buf, size_t cap);

/* ---- config_yaml.c ---- */
int cfg_add_source(cfg_ctx_t *c, const char *label, bool cli);
/* Records an error at loc (see cfg_ctx_t) and returns -1. */
int cfg_fail(cfg_ctx_t *c, cfg_loc_t loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* After a step of walking a document returned -1 with errs_before errors recorded before
 * it: true when the walk may go on to the next key (the step recorded a schema error and
 * hit no bound), false when it must stop. */
bool cfg_go_on(const cfg_ctx_t *c, int errs_before);
cfg_loc_t cfg_node_loc(const cfg_ctx_t *c, const yaml_node_t *n);
/* Reads and checks a file (size, type, NUL, UTF-8, tabs) and parses it into doc. The
 * root must be a mapping. On success the caller owns doc (yaml_document_delete). */
int cfg_parse_file(cfg_ctx_t *c, int src, yaml_document_t *doc);
/* The same checks on len bytes already in memory (cfg_parse_file reads, then calls it). */
int cfg_parse_buffer(cfg_ctx_t *c, int src, const char *buf, size_t len, yaml_document_t *doc);
/* Parses a --set value (YAML scalar or flow collection) into doc. */
int cfg_parse_value(cfg_ctx_t *c, int src, const char *text, yaml_document_t *doc);
yaml_node_t *cfg_node(const cfg_ctx_t *c, int index);
bool cfg_is_null(const yaml_node_t *n);
const char *cfg_scalar(const yaml_node_t *n);
/* "'ten'", "a list", "a mapping", "null": what the user wrote, for messages. */
const char *cfg_describe(const yaml_node_t *n, char *buf, size_t cap);
/* Counts one visited node against the alias budget and the depth bound. */
int cfg_visit(cfg_ctx_t *c, const yaml_node_t *n, int depth);

/* ---- config_apply.c ---- */
/* Applies every pair of mapping m under prefix ("" at the top). skip(key) names keys the
 * caller handles itself (base, matrix). weak: values from a << merge key. */
int cfg_apply_map(cfg_ctx_t *c, cfg_state_t *st, const char *prefix, yaml_node_t *m,
                  int depth, bool weak, bool (*skip)(const char *key));
/* Applies one value to the dotted key full (a row, a section, or an unknown key). */
int cfg_apply_value(cfg_ctx_t *c, cfg_state_t *st, const char *full, yaml_node_t *key,
                    yaml_node_t *val, int depth, bool weak);

/* ---- config_images.c ---- */
/* image_folder's defaults and checks (and the refusal of its augmentation elsewhere);
 * sets *chans and *side to the network input's channels and side for image_folder. */
int cfg_finalize_images(cfg_ctx_t *c, cfg_state_t *st, int *chans, int *side);

/* ---- config_write.c ---- */
/* Formats row r of x as YAML flow text (the value part of "key: value"). */
void cfg_format_value(const cfg_row_t *r, const experiment_t *x, char *out, size_t cap);

#endif
