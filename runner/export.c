/* export.c: checkpoint -> safetensors (export.h). Runs on the CPU backend; needs neither
 * the dataset nor a GPU. */
#include "runner/export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/backend.h"
#include "model/net.h"
#include "model/resnet.h"
#include "model/safetensors.h"
#include "runner/checkpoint.h"
#include "runner/rundir.h"
#include "util/json.h"

int export_run(const char *run_dir, const char *which, const char *output, bool ema, char *out_path, size_t len,
               err_t *e) {
    char ck[4200];
    if (!which || !strcmp(which, "last") || !strcmp(which, "best"))
        snprintf(ck, sizeof ck, "%s/checkpoints/%s.ckpt", run_dir, which ? which : "last");
    else
        snprintf(ck, sizeof ck, "%s", which);
    if (access(ck, R_OK) != 0) {
        if (!rundir_is_run(run_dir))
            return err_set(e, ERR_INPUT, "%s: not a run directory (no resolved.yaml); give the directory "
                           "runner printed when the run started", run_dir);
        return err_set(e, ERR_INPUT, "%s: no checkpoint; the run has not finished an epoch yet (or use "
                       "--checkpoint PATH)", ck);
    }
    ckpt_t *c = ckpt_read(ck, e);
    if (!c) return -1;
    int rc = -1;
    net_t *n = NULL;
    backend_t *be = NULL;
    float *buf = NULL;
    json_t *m = NULL;
    const ckpt_section_t *ms = ckpt_find(c, "meta");
    if (!ms) { err_set(e, ERR_INPUT, "%s: section 'meta' missing", ck); goto out; }
    if (!(m = json_parse((const char *)ms->data, (size_t)ms->size, e))) { err_wrap(e, "%s: meta", ck); goto out; }
    const char *arch = json_get_string(m, "arch", "");
    int inc = (int)json_get_number(m, "in_channels", 3), classes = (int)json_get_number(m, "num_classes", 10);
    int h = (int)json_get_number(m, "in_h", 32), w = (int)json_get_number(m, "in_w", 32);
    if (!(n = resnet_build(arch, inc, classes, false, e))) goto out;
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
    if (output) snprintf(out_path, len, "%s", output);
    else snprintf(out_path, len, "%s/%s.safetensors", run_dir, ema ? "model_ema" : "model");
    char steps[32], cls[16];
    snprintf(steps, sizeof steps, "%lld", (long long)json_get_number(m, "step", 0));
    snprintf(cls, sizeof cls, "%d", classes);
    const char *keys[] = {"format", "arch", "num_classes", "step", "run_dir", "runner_commit", "weights"};
    const char *vals[] = {"pt", arch, cls, steps, run_dir, runner_commit(), ema ? "ema" : "trained"};
    rc = safetensors_save_net(n, out_path, keys, vals, 7, e);
out:
    free(buf);
    json_free(m);
    net_free(n);
    backend_free(be);
    ckpt_free(c);
    return rc;
}
