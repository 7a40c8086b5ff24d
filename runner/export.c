/* export.c: checkpoint -> safetensors (export.h). Runs on the CPU backend; needs neither
 * the dataset nor a GPU. */
#include "runner/export.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/backend.h"
#include "model/net.h"
#include "model/arch/arch.h"
#include "model/safetensors.h"
#include "runner/checkpoint.h"
#include "runner/rundir.h"
#include "util/json.h"

/* A JSON list of the numbers in key of meta (NULL when absent) into buf and vals. */
static int meta_floats(const json_t *m, const char *key, double *vals, int max, char *buf, size_t cap) {
    const json_t *a = json_get(m, key);
    int n = 0;
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (size_t i = 0; a && a->type == JSON_ARRAY && i < a->count && n < max; i++) {
        vals[n] = a->items[i]->number;
        o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "%s%.6g", n ? ", " : "", vals[n]);
        n++;
    }
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return n;
}

/* x as the shortest decimal that reads back as the same double ("0.25", "1"). */
static void fmt_exact(char *buf, size_t cap, double x) {
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

/* The class names of meta as a JSON list (malloc'd; "[]" when absent). */
static char *meta_class_names(const json_t *m) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    const json_t *a = json_get(m, "class_names");
    fputc('[', f);
    for (size_t i = 0; a && a->type == JSON_ARRAY && i < a->count; i++) {
        if (i) fputs(", ", f);
        json_write_string(f, a->items[i]->type == JSON_STRING ? a->items[i]->string : "");
    }
    fputc(']', f);
    fclose(f);
    return buf;
}

/* Where the file goes: output, output/<default name> when output is a directory, or the
 * run directory's default. A folder that does not exist is an error naming it, checked
 * before any work: created silently, a mistyped path would leave a stray tree (cp and
 * torch.save refuse too). */
static int output_path(const char *run_dir, const char *output, bool ema, char *out, size_t len, err_t *e) {
    const char *name = ema ? "model_ema.safetensors" : "model.safetensors";
    struct stat st;
    if (!output) {
        snprintf(out, len, "%s/%s", run_dir, name);
        return 0;
    }
    if (!*output) return err_set(e, ERR_INPUT, "--output is empty; give a file such as %s", name);
    if (stat(output, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(out, len, "%s%s%s", output, output[strlen(output) - 1] == '/' ? "" : "/", name);
        return 0;
    }
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", output);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    if (stat(dir, &st) != 0)
        return err_set(e, ERR_INPUT, "--output %s: the folder %s does not exist; create it first (mkdir -p %s) "
                       "or give a path in an existing folder", output, dir, dir);
    if (!S_ISDIR(st.st_mode))
        return err_set(e, ERR_INPUT, "--output %s: %s is a file, not a folder; give a path in a folder", output,
                       dir);
    if (access(dir, W_OK | X_OK) != 0)
        return err_errno(e, ERR_INPUT, "--output %s: cannot write into the folder %s", output, dir);
    snprintf(out, len, "%s", output);
    return 0;
}

int export_run(const char *run_dir, const char *which, const char *output, bool ema, char *out_path, size_t len,
               export_info_t *info, err_t *e) {
    if (output_path(run_dir, output, ema, out_path, len, e)) return -1;
    char ck[4200];
    if (!which || !strcmp(which, "last") || !strcmp(which, "best"))
        snprintf(ck, sizeof ck, "%s/checkpoints/%s.ckpt", run_dir, which ? which : "last");
    else
        snprintf(ck, sizeof ck, "%s", which);
    if (access(ck, R_OK) != 0) {
        if (!rundir_is_run(run_dir))
            return err_set(e, ERR_INPUT, "%s: not a run directory (no resolved.yaml); give the directory "
                           "runner printed when the run started", run_dir);
        if (which && !strcmp(which, "best"))
            return err_set(e, ERR_INPUT, "%s: no checkpoint: no evaluation of this run improved on the one "
                           "before it yet, or checkpoint.keep_best is false; use --checkpoint last", ck);
        return err_set(e, ERR_INPUT, "%s: no checkpoint; the run stopped before it wrote one (or use "
                       "--checkpoint PATH)", ck);
    }
    ckpt_t *c = ckpt_read(ck, e);
    if (!c) return -1;
    int rc = -1;
    net_t *n = NULL;
    backend_t *be = NULL;
    float *buf = NULL;
    json_t *m = NULL;
    char *classes_json = NULL;
    const ckpt_section_t *ms = ckpt_find(c, "meta");
    if (!ms) { err_set(e, ERR_INPUT, "%s: section 'meta' missing", ck); goto out; }
    if (!(m = json_parse((const char *)ms->data, (size_t)ms->size, e))) { err_wrap(e, "%s: meta", ck); goto out; }
    if (ckpt_meta_check(ck, m, e)) goto out;   /* sizes bounded before the net is built */
    const char *arch = json_get_string(m, "arch", "");
    int inc = (int)json_get_number(m, "in_channels", 3), classes = (int)json_get_number(m, "num_classes", 10);
    int h = (int)json_get_number(m, "in_h", 32), w = (int)json_get_number(m, "in_w", 32);
    /* checkpoints from before model.stem existed are CIFAR-stem ones */
    const char *stem = json_get_string(m, "stem", "cifar");
    arch_stem_t sk = !strcmp(stem, "imagenet") ? ARCH_STEM_IMAGENET : ARCH_STEM_CIFAR;
    if (strcmp(stem, arch_stem_name(sk))) {
        err_set(e, ERR_INPUT, "%s: meta: unknown stem '%s' (cifar | imagenet)", ck, stem);
        goto out;
    }
    /* model.width / groups / dropout as the run built them (absent before issue 24: the
     * architecture's own) */
    arch_opts_t ao = {.stem = sk, .in_channels = inc, .num_classes = classes,
                      .width = json_get_number(m, "width", 0), .groups = (int)json_get_number(m, "groups", 0),
                      .dropout = json_get_number(m, "dropout", -1)}, ar;
    if (arch_resolve(arch, &ao, &ar, e)) { err_wrap(e, "%s: meta", ck); goto out; }
    if (!(n = arch_build(arch, &ar, e))) goto out;
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 1};
    if (!(be = backend_create(&bo, e))) goto out;
    if (net_bind(n, be, 1, h, w, DT_F32, e)) goto out;
    size_t np = net_num_params(n), nb = net_num_buffers(n);
    buf = malloc((np > nb ? np : nb) * sizeof(float) + 4);
    if (!buf) { err_set(e, ERR_RUNTIME, "out of memory"); goto out; }
    if (ema && !ckpt_find(c, "ema.params")) {
        err_set(e, ERR_INPUT, "%s: no EMA weights in this checkpoint; the run needs train.ema.decay (e.g. "
                "--set train.ema.decay=0.9998), or export without --ema", ck);
        goto out;
    }
    if (ckpt_get(c, ema ? "ema.params" : "params", buf, np * sizeof(float), e) || net_upload_params(n, buf, e) ||
        ckpt_get(c, ema ? "ema.buffers" : "buffers", buf, nb * sizeof(float), e) || net_upload_buffers(n, buf, e))
        goto out;
    const json_t *cn = json_get(m, "bn_counters");
    int64_t *counters = net_counters(n);
    for (int i = 0; cn && cn->type == JSON_ARRAY && i < (int)cn->count && i < net_num_counters(n); i++)
        counters[i] = (int64_t)cn->items[i]->number;
    export_info_t local;
    export_info_t *in = info ? info : &local;
    memset(in, 0, sizeof *in);
    snprintf(in->arch, sizeof in->arch, "%s", arch);
    snprintf(in->stem, sizeof in->stem, "%s", stem);
    const char *slash = strrchr(ck, '/');
    snprintf(in->checkpoint, sizeof in->checkpoint, "%.63s", slash ? slash + 1 : ck);
    in->in_channels = inc;
    in->num_classes = classes;
    in->width = ar.width;
    in->groups = ar.groups;
    in->dropout = ar.dropout;
    in->in_h = h;
    in->in_w = w;
    in->step = (long long)json_get_number(m, "step", 0);
    char steps[32], cls[16], chans[16], size[32], mean[128], std[128];
    int nm = meta_floats(m, "mean", in->mean, 4, mean, sizeof mean);
    int ns = meta_floats(m, "std", in->std, 4, std, sizeof std);
    in->n_norm = nm == ns ? nm : 0;
    if (!(classes_json = meta_class_names(m))) { err_set(e, ERR_RUNTIME, "out of memory"); goto out; }
    snprintf(steps, sizeof steps, "%lld", in->step);
    snprintf(cls, sizeof cls, "%d", classes);
    snprintf(chans, sizeof chans, "%d", inc);
    snprintf(size, sizeof size, "%dx%d", h, w);
    const char *keys[17] = {"format", "arch", "stem", "in_channels", "num_classes", "input_size", "mean", "std",
                            "class_names", "dataset", "step", "run_dir", "runner_commit", "weights"};
    const char *vals[17] = {"pt", arch, in->stem, chans, cls, size, mean, std, classes_json,
                            json_get_string(m, "dataset", ""), steps, run_dir, runner_commit(), ema ? "ema" : "trained"};
    int nk = 14;
    char knob[3][32];   /* the architecture's model.width / groups / dropout, for torchvision_model.py */
    const arch_info_t *a = arch_info(arch);
    if (a->width != 0) {
        fmt_exact(knob[0], sizeof knob[0], ar.width);
        keys[nk] = "width";
        vals[nk++] = knob[0];
    }
    if (a->groups != 0) {
        snprintf(knob[1], sizeof knob[1], "%d", ar.groups);
        keys[nk] = "groups";
        vals[nk++] = knob[1];
    }
    if (a->dropout >= 0) {
        fmt_exact(knob[2], sizeof knob[2], ar.dropout);
        keys[nk] = "dropout";
        vals[nk++] = knob[2];
    }
    rc = safetensors_save_net(n, out_path, keys, vals, nk, e);
out:
    free(buf);
    free(classes_json);
    json_free(m);
    net_free(n);
    backend_free(be);
    ckpt_free(c);
    return rc;
}

/* How torchvision builds in->arch as exported, into buf ("torchvision.models.vgg16_bn(num_classes=10)"
 * and the line replacing the first conv for another channel count), or false when torchvision's
 * own constructor does not build it (a CIFAR variant, a non-default width / groups). */
static bool torchvision_snippet(const export_info_t *in, char *buf, size_t cap) {
    const arch_info_t *a = arch_info(in->arch);
    bool imagenet = !strcmp(in->stem, "imagenet");
    if (!a || !a->imagenet || (a->width != 0 && in->width != a->width) || (a->groups != 0 && in->groups != a->groups))
        return false;
    size_t o = (size_t)snprintf(buf, cap, "    model = torchvision.models.%s(num_classes=%d)\n", in->arch,
                                in->num_classes);
    const char *conv = NULL;
    int c0 = 64, k = 7, stride = 2, pad = 3;
    switch (a->family) {
    case ARCH_FAM_RESNET:
        if (!imagenet) {
            o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "    model.conv1 = torch.nn.Conv2d(%d, 64, "
                                  "kernel_size=3, stride=1, padding=1, bias=False)\n    model.maxpool = "
                                  "torch.nn.Identity()\n", in->in_channels);
            return true;
        }
        conv = "model.conv1";
        break;
    case ARCH_FAM_VGG:
        if (!imagenet) return false;
        conv = "model.features[0]";
        k = 3, stride = 1, pad = 1;
        break;
    case ARCH_FAM_MOBILENET_V2:
        if (!imagenet) return false;
        conv = "model.features[0][0]";
        c0 = 32, k = 3, stride = 2, pad = 1;
        break;
    default:
        return false;
    }
    if (in->in_channels != 3)
        snprintf(buf + o, o < cap ? cap - o : 0, "    %s = torch.nn.Conv2d(%d, %d, kernel_size=%d, stride=%d, "
                 "padding=%d, bias=%s)\n", conv, in->in_channels, c0, k, stride, pad,
                 a->family == ARCH_FAM_VGG ? "True" : "False");
    return true;
}

void export_print_usage(const export_info_t *in, const char *path, FILE *f) {
    char snippet[512];
    bool tv = torchvision_snippet(in, snippet, sizeof snippet);
    const arch_info_t *a = arch_info(in->arch);
    bool resnet = a && (a->family == ARCH_FAM_RESNET || a->family == ARCH_FAM_RESNET_CIFAR);
    bool imagenet = !strcmp(in->stem, "imagenet");
    const char *what = resnet ? (imagenet ? "7x7/2 conv1 + max-pool" : "3x3 conv1, no max-pool")
                              : strchr(arch_stem_text(in->arch, imagenet ? ARCH_STEM_IMAGENET : ARCH_STEM_CIFAR), ':') + 2;
    fprintf(f, "runner: %s, %s %s (%s), %d input channel%s, %d classes, %dx%d inputs; from %s at step %lld\n",
            in->arch, in->stem, resnet ? "stem" : "variant", what, in->in_channels, in->in_channels == 1 ? "" : "s", in->num_classes, in->in_h, in->in_w,
            in->checkpoint, in->step);
    if (in->in_channels != 3) {
        char why[96];
        if (tv) snprintf(why, sizeof why, "torchvision's %s() has 3", in->arch);
        else snprintf(why, sizeof why, "a 3-channel model does not take these weights");
        const char *first = resnet ? "conv1" : a && a->family == ARCH_FAM_VGG ? "features.0"
                          : a && a->family == ARCH_FAM_MOBILENET_V2 ? "features.0.0" : "the first conv";
        fprintf(f, "runner: note: the data has %d channel%s, so %s must be built with %d input "
                "channel%s (%s); the code below does that\n", in->in_channels, in->in_channels == 1 ? "" : "s",
                first, in->in_channels, in->in_channels == 1 ? "" : "s", why);
    }
    if (in->n_norm) {
        fprintf(f, "runner: inputs were normalised per channel as (x / 255 - mean) / std, mean [");
        for (int k = 0; k < in->n_norm; k++) fprintf(f, "%s%.4g", k ? ", " : "", in->mean[k]);
        fprintf(f, "], std [");
        for (int k = 0; k < in->n_norm; k++) fprintf(f, "%s%.4g", k ? ", " : "", in->std[k]);
        fprintf(f, "]\n");
    }
    /* the runner's scripts/ (where this binary was built from), for its standard-library
     * safetensors reader and model builder */
    char scripts[4200];
#ifdef RUNNER_SCRIPTS_DIR
    snprintf(scripts, sizeof scripts, "%s", RUNNER_SCRIPTS_DIR);
#else
    snprintf(scripts, sizeof scripts, "scripts");
#endif
    char probe[4300];
    snprintf(probe, sizeof probe, "%s/torchvision_model.py", scripts);
    bool found = access(probe, R_OK) == 0;
    if (!found) snprintf(scripts, sizeof scripts, "scripts");
    const char *where = found ? "" : "   # the runner's scripts/ folder";
    if (tv) {
        fprintf(f, "runner: load it in PyTorch (arch, stem, channels, classes, mean/std and class names are also "
                "in the file's __metadata__):\n"
                "    import torch, torchvision\n"
                "    try:\n"
                "        from safetensors.torch import load_file\n"
                "    except ImportError:   # no safetensors package (Debian 12): the runner's reader\n"
                "        import sys; sys.path.insert(0, \"%s\")%s\n"
                "        from torchvision_model import load_file\n"
                "%s"
                "    model.load_state_dict(load_file(\"%s\"))\n"
                "    model.eval()\n", scripts, where, snippet, path);
    } else {
        fprintf(f, "runner: torchvision's own constructor does not build %s as exported (%s); the runner's "
                "scripts/torchvision_model.py builds it with these tensor names:\n", in->arch,
                a && a->imagenet ? "the CIFAR variant or another width" : "torchvision does not ship it");
    }
    fprintf(f, "runner: %s the model from the file's metadata alone (any architecture the runner exports; "
            "no safetensors package needed):\n"
            "    import sys; sys.path.insert(0, \"%s\")%s\n"
            "    from torchvision_model import load\n"
            "    model = load(\"%s\")\n", tv ? "or build" : "build", scripts, where, path);
}
