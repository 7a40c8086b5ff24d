/* config_yaml.c: the YAML side of config loading. Reads an experiment file with the
 * checks a user needs explained (missing, directory, too big, empty, NUL bytes, UTF-16,
 * bad UTF-8, tabs in indentation), parses it with libyaml's document loader, parses
 * --set values, formats errors as "file:line:col: what; what to do", and bounds the work
 * of walking a document (alias expansion budget, nesting depth).
 *
 * It does not know the schema (config_schema.c) or apply values (config_apply.c).
 */
#include "runner/config_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cfg_add_source(cfg_ctx_t *c, const char *label, bool cli) {
    if (c->n_src >= CFG_MAX_SOURCES)
        return err_set(c->err, ERR_INPUT,
                       "%s: too many sources (base files, --set items, matrix entries); at "
                       "most %d in one load",
                       label, (int)CFG_MAX_SOURCES);
    snprintf(c->src[c->n_src].label, sizeof c->src[0].label, "%s", label);
    c->src[c->n_src].cli = cli;
    return c->n_src++;
}

static bool loc_before(cfg_loc_t a, cfg_loc_t b) {
    if (a.src != b.src) return a.src < b.src;
    return a.line != b.line ? a.line < b.line : a.col < b.col;
}

/* c->err from the errors recorded: the only one as it is; several in file order, one per
 * line, as many as fit, then how many more there are. */
static void join_errors(cfg_ctx_t *c) {
    int order[CFG_MAX_ERRORS], n = c->n_err < CFG_MAX_ERRORS ? c->n_err : CFG_MAX_ERRORS;
    for (int i = 0; i < n; i++) { /* insertion sort: stable, at most 20 */
        int j = i;
        while (j > 0 && loc_before(c->errs[i].loc, c->errs[order[j - 1]].loc)) order[j] = order[j - 1], j--;
        order[j] = i;
    }
    char *m = c->err->msg;
    size_t cap = sizeof c->err->msg, len = 0;
    int shown = 0;
    for (; shown < n; shown++) {
        const char *t = c->errs[order[shown]].text;
        size_t need = strlen(t) + (shown ? 1 : 0);
        if (shown && len + need + 64 >= cap) break;
        len += (size_t)snprintf(m + len, cap - len, "%s%s", shown ? "\n" : "", t);
        if (len >= cap) len = cap - 1;
    }
    if (shown < c->n_err)
        snprintf(m + len, cap - len, "\n... and %d more error%s; fix these and run again", c->n_err - shown,
                 c->n_err - shown == 1 ? "" : "s");
    c->err->code = ERR_INPUT;
}

/* Records "place: [scope: ]message" as an ERR_INPUT error. The place is file:line:col for
 * a file node, the file alone when loc.line is 0, and "--set k=v" for a --set source. */
int cfg_fail(cfg_ctx_t *c, cfg_loc_t loc, const char *fmt, ...) {
    char msg[1600], place[CFG_PATH + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (loc.src < 0 || loc.src >= c->n_src)
        place[0] = '\0';
    else if (c->src[loc.src].cli || loc.line <= 0)
        snprintf(place, sizeof place, "%s: ", c->src[loc.src].label);
    else
        snprintf(place, sizeof place, "%s:%d:%d: ", c->src[loc.src].label, loc.line, loc.col);
    char line[sizeof c->err->msg];
    snprintf(line, sizeof line, "%s%s%s%s", place, c->scope, c->scope[0] ? ": " : "", msg);
    if (c->n_err < CFG_MAX_ERRORS) {
        c->errs[c->n_err].loc = loc;
        snprintf(c->errs[c->n_err].text, sizeof c->errs[0].text, "%.*s", (int)sizeof c->errs[0].text - 1, line);
    }
    if (c->n_err++ == 0) return err_set(c->err, ERR_INPUT, "%s", line);   /* the only one so far: in full */
    join_errors(c);
    return -1;
}

bool cfg_go_on(const cfg_ctx_t *c, int errs_before) {
    return !c->fatal && c->n_err > errs_before;
}

cfg_loc_t cfg_node_loc(const cfg_ctx_t *c, const yaml_node_t *n) {
    cfg_loc_t l = {c->cur, 0, 0};
    if (n) {
        l.line = (int)n->start_mark.line + 1;
        l.col = (int)n->start_mark.column + 1;
    }
    return l;
}

yaml_node_t *cfg_node(const cfg_ctx_t *c, int index) {
    return yaml_document_get_node(c->doc, index);
}

bool cfg_is_null(const yaml_node_t *n) {
    if (!n) return true;
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = (const char *)n->data.scalar.value;
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
           !strcmp(s, "NULL");
}

const char *cfg_scalar(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

const char *cfg_describe(const yaml_node_t *n, char *buf, size_t cap) {
    if (!n || cfg_is_null(n)) return "null";
    if (n->type == YAML_SEQUENCE_NODE) return "a list";
    if (n->type == YAML_MAPPING_NODE) return "a mapping";
    const char *s = cfg_scalar(n);
    if (strlen(s) > 60)
        snprintf(buf, cap, "'%.57s...'", s);
    else
        snprintf(buf, cap, "'%s'", s);
    return buf;
}

int cfg_visit(cfg_ctx_t *c, const yaml_node_t *n, int depth) {
    if (depth > CFG_MAX_DEPTH)
        return c->fatal = true, cfg_fail(c, cfg_node_loc(c, n),
                        "nesting is deeper than %d levels (a recursive alias?); experiment "
                        "files need at most 5 levels",
                        (int)CFG_MAX_DEPTH);
    if (--c->budget < 0)
        return c->fatal = true, cfg_fail(c, cfg_node_loc(c, n),
                        "this document has more than %d values, counting what aliases expand "
                        "to (an alias bomb?); an experiment needs about 100",
                        (int)CFG_NODE_BUDGET);
    return 0;
}

/* Copies line `line` (1-based) of buf into out with tabs shown as <TAB>. */
static void show_line(const char *buf, size_t len, int line, char *out, size_t cap) {
    size_t i = 0;
    for (int l = 1; l < line && i < len; i++)
        if (buf[i] == '\n') l++;
    size_t o = 0;
    for (; i < len && buf[i] != '\n' && buf[i] != '\r' && o + 6 < cap && o < 100; i++) {
        if (buf[i] == '\t') {
            memcpy(out + o, "<TAB>", 5);
            o += 5;
        } else {
            out[o++] = buf[i];
        }
    }
    out[o] = '\0';
}

/* Length of the UTF-8 sequence at p (1..4) if valid, 0 if not. */
static int utf8_len(const unsigned char *p, size_t left) {
    unsigned char b = p[0];
    if (b < 0x80) return 1;
    int n = b >= 0xF0 && b <= 0xF4 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 && b < 0xE0 ? 2 : 0;
    if (!n || (size_t)n > left) return 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    if (n == 3 && ((b == 0xE0 && p[1] < 0xA0) || (b == 0xED && p[1] >= 0xA0))) return 0;
    if (n == 4 && ((b == 0xF0 && p[1] < 0x90) || (b == 0xF4 && p[1] >= 0x90))) return 0;
    return n;
}

/* The byte-level checks libyaml would report badly or not at all: UTF-16/32 files, NUL
 * bytes, invalid UTF-8 and tabs used for indentation. */
static int check_bytes(cfg_ctx_t *c, int src, const char *buf, size_t len) {
    const unsigned char *u = (const unsigned char *)buf;
    cfg_loc_t loc = {src, 1, 1};
    if (len >= 2 && ((u[0] == 0xFF && u[1] == 0xFE) || (u[0] == 0xFE && u[1] == 0xFF)))
        return cfg_fail(c, (cfg_loc_t){src, 0, 0},
                        "the file is UTF-16 (it starts with a UTF-16 byte order mark); save "
                        "it as UTF-8");
    size_t i = len >= 3 && u[0] == 0xEF && u[1] == 0xBB && u[2] == 0xBF ? 3 : 0;
    bool line_start = true, indent_tab = false;
    /* flow nesting ([ and { where a value starts, outside quotes and comments): libyaml
       takes quadratic time on deep flow nesting, so it is bounded here, before parsing */
    enum { PLAIN, DQUOTE, SQUOTE, COMMENT } mode = PLAIN;
    int flow = 0, anchors = 0;
    unsigned char prev = '\n'; /* last non-blank character outside quotes */
    while (i < len) {
        unsigned char ch = u[i];
        if (mode == DQUOTE) {
            if (ch == '\\' && i + 1 < len && u[i + 1] != '\n') {
                i++, loc.col++;
            } else if (ch == '"') {
                mode = PLAIN, prev = ch;
            }
        } else if (mode == SQUOTE) {
            if (ch == '\'' && i + 1 < len && u[i + 1] == '\'') i++, loc.col++;
            else if (ch == '\'') mode = PLAIN, prev = ch;
        } else if (mode == COMMENT) {
            if (ch == '\n') mode = PLAIN;
        } else if (ch == '#' && (prev == '\n' || i == 0 || u[i - 1] == ' ' || u[i - 1] == '\t')) {
            mode = COMMENT;
        } else if ((ch == '"' || ch == '\'') && strchr("\n:[{,-?", prev)) {
            mode = ch == '"' ? DQUOTE : SQUOTE;
        } else if ((ch == '&' || ch == '*') && strchr("\n:[{,-?", prev)) {
            /* libyaml looks anchors up linearly: many anchors x many aliases is slow */
            if (++anchors > CFG_MAX_ANCHORS)
                return cfg_fail(c, loc,
                                "more than %d anchors and aliases (& and *); an experiment "
                                "needs a handful",
                                (int)CFG_MAX_ANCHORS);
        } else if ((ch == '[' || ch == '{') && strchr("\n:[{,-?", prev)) {
            if (++flow > CFG_MAX_DEPTH)
                return cfg_fail(c, loc,
                                "brackets nested deeper than %d levels; experiment files need "
                                "at most 5",
                                (int)CFG_MAX_DEPTH);
        } else if ((ch == ']' || ch == '}') && flow > 0) {
            flow--;
        }
        if (mode == PLAIN && ch != ' ' && ch != '\t' && ch != '\r') prev = ch;
        if (u[i] == 0)
            return cfg_fail(c, loc,
                            "NUL byte in the file (is it a binary or UTF-16 file?); "
                            "experiment files are UTF-8 text");
        int n = utf8_len(u + i, len - i);
        if (!n)
            return cfg_fail(c, loc,
                            "invalid UTF-8 (byte 0x%02X); save the file as UTF-8 (it may be "
                            "in Latin-1 or another legacy encoding)",
                            u[i]);
        if (u[i] == '\n') {
            loc.line++, loc.col = 1;
            line_start = true, indent_tab = false;
            i++;
            continue;
        }
        if (line_start) {
            if (u[i] == '\t') indent_tab = true;
            if (u[i] != ' ' && u[i] != '\t') {
                line_start = false;
                if (indent_tab && u[i] != '#' && u[i] != '\r') {
                    char text[128];
                    show_line(buf, len, loc.line, text, sizeof text);
                    return cfg_fail(c, (cfg_loc_t){src, loc.line, 1},
                                    "a tab is used for indentation; YAML indents with spaces "
                                    "only, so replace the tab(s) with spaces: \"%s\"",
                                    text);
                }
            }
        }
        loc.col++;
        i += (size_t)n;
    }
    return 0;
}

/* Loads one YAML document from buf into doc; the root must exist. what_src is the
 * source for messages; for a file, lines are shown from buf. */
static int load_doc(cfg_ctx_t *c, int src, const char *buf, size_t len, yaml_document_t *doc) {
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return err_set(c->err, ERR_RUNTIME, "libyaml: out of memory");
    if (len >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3)) buf += 3, len -= 3; /* UTF-8 BOM */
    yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
    yaml_parser_set_encoding(&p, YAML_UTF8_ENCODING);
    bool cli = c->src[src].cli;
    if (!yaml_parser_load(&p, doc)) {
        char text[128], ctx[128] = "";
        int line = (int)p.problem_mark.line + 1, col = (int)p.problem_mark.column + 1;
        if (p.context)
            snprintf(ctx, sizeof ctx, " (%s at line %d)", p.context,
                     (int)p.context_mark.line + 1);
        int rc;
        if (cli) {
            rc = cfg_fail(c, (cfg_loc_t){src, 0, 0},
                          "the value is not valid YAML (%s); quote it, e.g. --set "
                          "name='\"my run\"'",
                          p.problem ? p.problem : "syntax error");
        } else {
            int shown = line;
            show_line(buf, len, line, text, sizeof text);
            if (!text[0] && p.context) { /* at the end of the file: show where it began */
                shown = (int)p.context_mark.line + 1;
                show_line(buf, len, shown, text, sizeof text);
            }
            const char *hint = "check the indentation, colons and quotes";
            if (p.problem && strstr(p.problem, "mapping values are not allowed"))
                hint = "quote a value that contains ': ', and check the indentation";
            rc = cfg_fail(c, (cfg_loc_t){src, line, col},
                          "YAML syntax error: %s%s; %s of line %d: \"%s\"",
                          p.problem ? p.problem : "unknown problem", ctx, hint, shown, text);
        }
        yaml_parser_delete(&p);
        return rc;
    }
    /* a second document ("---" again) is almost always a pasting mistake */
    yaml_document_t more;
    if (yaml_parser_load(&p, &more)) {
        yaml_node_t *r = yaml_document_get_root_node(&more);
        cfg_loc_t loc = {src, r ? (int)r->start_mark.line + 1 : 0,
                         r ? (int)r->start_mark.column + 1 : 0};
        yaml_document_delete(&more);
        if (r) {
            yaml_parser_delete(&p);
            yaml_document_delete(doc);
            return cfg_fail(c, loc,
                            "a second YAML document starts here (after ---); an experiment "
                            "file holds one document, so remove the extra ---");
        }
    } else {
        int line = (int)p.problem_mark.line + 1, col = (int)p.problem_mark.column + 1;
        int rc = cfg_fail(c, (cfg_loc_t){src, line, col},
                          "YAML syntax error after ---: %s; an experiment file holds one "
                          "document",
                          p.problem ? p.problem : "unknown problem");
        yaml_parser_delete(&p);
        yaml_document_delete(doc);
        return rc;
    }
    yaml_parser_delete(&p);
    return 0;
}

int cfg_parse_file(cfg_ctx_t *c, int src, yaml_document_t *doc) {
    const char *path = c->src[src].label;
    cfg_loc_t here = {src, 0, 0};
    struct stat sb;
    if (stat(path, &sb)) {
        if (errno == ENOENT) {
            char cwd[PATH_MAX] = "?";
            if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "?");
            return cfg_fail(c, here,
                            "no such file; check the path (relative paths start at the "
                            "current directory, %s)",
                            cwd);
        }
        return cfg_fail(c, here, "cannot open it: %s; check the path", strerror(errno));
    }
    if (S_ISDIR(sb.st_mode))
        return cfg_fail(c, here, "is a directory; give the experiment's .yaml file");
    if (!S_ISREG(sb.st_mode))
        return cfg_fail(c, here, "is not a regular file; give the experiment's .yaml file");
    if (sb.st_size > CFG_MAX_FILE)
        return cfg_fail(c, here,
                        "the file is %.1f MiB; experiment files are limited to 1 MiB (is "
                        "this the right file?)",
                        (double)sb.st_size / (1 << 20));
    FILE *f = fopen(path, "rb");
    if (!f)
        return cfg_fail(c, here, "cannot read it: %s; check its permissions", strerror(errno));
    char *buf = malloc(CFG_MAX_FILE + 2);
    if (!buf) {
        fclose(f);
        return err_set(c->err, ERR_RUNTIME, "out of memory reading %s", path);
    }
    size_t len = fread(buf, 1, CFG_MAX_FILE + 1, f);
    bool bad = ferror(f);
    fclose(f);
    int rc = 0;
    if (bad)
        rc = cfg_fail(c, here, "cannot read it (I/O error); check the file");
    else if (len > CFG_MAX_FILE)
        rc = cfg_fail(c, here, "the file is over 1 MiB; experiment files are limited to 1 MiB");
    if (!rc) rc = cfg_parse_buffer(c, src, buf, len, doc);
    free(buf);
    return rc;
}

int cfg_parse_buffer(cfg_ctx_t *c, int src, const char *buf, size_t len, yaml_document_t *doc) {
    cfg_loc_t here = {src, 0, 0};
    if (len > CFG_MAX_FILE)
        return cfg_fail(c, here, "the file is over 1 MiB; experiment files are limited to 1 MiB");
    int rc = check_bytes(c, src, buf, len);
    if (!rc) rc = load_doc(c, src, buf, len, doc);
    if (rc) return rc;
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root) {
        yaml_document_delete(doc);
        return cfg_fail(c, here,
                        "the file is empty (or only comments); an experiment needs at least "
                        "`data: {dataset: cifar10}` and `model: {arch: resnet18}`");
    }
    if (root->type != YAML_MAPPING_NODE) {
        char what[96];
        const char *d = cfg_describe(root, what, sizeof what);
        c->cur = src;
        rc = cfg_fail(c, cfg_node_loc(c, root),
                      "the top level is %s%s; an experiment file is a mapping of keys, e.g. "
                      "`model: {arch: resnet18}` on its own line",
                      root->type == YAML_SCALAR_NODE && !cfg_is_null(root) ? "the text " : "",
                      d);
        yaml_document_delete(doc);
        return rc;
    }
    return 0;
}

int cfg_parse_value(cfg_ctx_t *c, int src, const char *text, yaml_document_t *doc) {
    const char *t = text;
    while (*t == ' ') t++;
    if (!*t) t = "~"; /* "--set key=" means null */
    if (load_doc(c, src, t, strlen(t), doc)) return -1;
    if (!yaml_document_get_root_node(doc)) {
        yaml_document_delete(doc);
        return load_doc(c, src, "~", 1, doc);
    }
    return 0;
}
