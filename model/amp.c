/* amp.c: the dynamic loss scaler of amp.h over the step control in backend memory. */
#include "model/amp.h"

#include <float.h>
#include <math.h>
#include <string.h>

static int ctl_read(const loss_scaler_t *s, step_ctl_t *c, err_t *e) {
    if (s->be->ops->download(s->be, c, s->ctl, sizeof *c) < 0)
        return err_set(e, ERR_RUNTIME, "loss scaler: reading the step control: %s", s->be->err.msg);
    return 0;
}

static int ctl_write(loss_scaler_t *s, const step_ctl_t *c, err_t *e) {
    if (s->be->ops->upload(s->be, s->ctl, c, sizeof *c) < 0)
        return err_set(e, ERR_RUNTIME, "loss scaler: writing the step control: %s", s->be->err.msg);
    return 0;
}

int loss_scaler_init(loss_scaler_t *s, backend_t *be, step_ctl_t *ctl, dtype_t act_dt,
                     double init_scale, int64_t growth_interval, err_t *e) {
    memset(s, 0, sizeof *s);
    s->enabled = act_dt == DT_F16;
    s->be = be;
    s->ctl = ctl;
    if (!s->enabled) return 0;
    if (!(init_scale > 0) || init_scale > FLT_MAX)
        return err_set(e, ERR_INPUT, "amp.init_scale: %g must be > 0 and at most %g", init_scale, (double)FLT_MAX);
    if (growth_interval < 1 || growth_interval > INT32_MAX)
        return err_set(e, ERR_INPUT, "amp.growth_interval: %lld must be in [1, %d]", (long long)growth_interval,
                       INT32_MAX);
    step_ctl_t c;
    if (ctl_read(s, &c, e)) return -1;
    c.loss_scale = (float)init_scale;
    c.growth_tracker = 0;
    c.growth_interval = (int32_t)growth_interval;
    c.growth_factor = 2.0f;
    c.backoff_factor = 0.5f;
    return ctl_write(s, &c, e);
}

int loss_scaler_unscale(loss_scaler_t *s, float *g, int64_t n, err_t *e) {
    if (!s->enabled) return 0;
    backend_t *be = s->be;
    if (be->ops->zero(be, &s->ctl->found_inf, sizeof(int32_t)) < 0 ||
        be->ops->unscale_check_finite(be, n, g, s->ctl) < 0)
        return err_set(e, ERR_RUNTIME, "loss scaler: unscaling gradients: %s", be->err.msg);
    return 0;
}

int loss_scaler_scale(const loss_scaler_t *s, double *scale, err_t *e) {
    *scale = 1.0;
    if (!s->enabled) return 0;
    step_ctl_t c;
    if (ctl_read(s, &c, e)) return -1;
    *scale = c.loss_scale;
    return 0;
}

int loss_scaler_found_inf(const loss_scaler_t *s, bool *found_inf, err_t *e) {
    *found_inf = false;
    if (!s->enabled) return 0;
    step_ctl_t c;
    if (ctl_read(s, &c, e)) return -1;
    *found_inf = c.found_inf != 0;
    return 0;
}

int loss_scaler_get_state(const loss_scaler_t *s, double *scale, int64_t *growth_tracker, err_t *e) {
    *scale = 1.0;
    *growth_tracker = 0;
    if (!s->enabled) return 0;
    step_ctl_t c;
    if (ctl_read(s, &c, e)) return -1;
    *scale = c.loss_scale;
    *growth_tracker = c.growth_tracker;
    return 0;
}

int loss_scaler_set_state(loss_scaler_t *s, double scale, int64_t growth_tracker, err_t *e) {
    if (!s->enabled) return 0;
    if (!(scale > 0) || scale > FLT_MAX || growth_tracker < 0 || growth_tracker > INT32_MAX)
        return err_set(e, ERR_INPUT, "loss scaler state: scale %g / growth tracker %lld out of range", scale,
                       (long long)growth_tracker);
    step_ctl_t c;
    if (ctl_read(s, &c, e)) return -1;
    c.loss_scale = (float)scale;
    c.growth_tracker = (int32_t)growth_tracker;
    return ctl_write(s, &c, e);
}
