/* amp.c: the dynamic loss scaler of amp.h (torch.amp.GradScaler update rule). */
#include "model/amp.h"

#include <string.h>

int loss_scaler_init(loss_scaler_t *s, backend_t *be, dtype_t act_dt, double init_scale,
                     int64_t growth_interval, err_t *e) {
    memset(s, 0, sizeof *s);
    s->enabled = act_dt == DT_F16;
    s->scale = s->enabled ? init_scale : 1.0;
    s->growth_factor = 2.0;
    s->backoff_factor = 0.5;
    s->growth_interval = growth_interval;
    s->be = be;
    if (s->enabled && !(init_scale > 0))
        return err_set(e, ERR_INPUT, "amp.init_scale: %g must be > 0", init_scale);
    if (s->enabled && growth_interval < 1)
        return err_set(e, ERR_INPUT, "amp.growth_interval: %lld must be >= 1", (long long)growth_interval);
    if (!s->enabled) return 0;
    s->found_inf = be->ops->alloc(be, sizeof(int32_t));
    if (!s->found_inf) return err_set(e, ERR_RUNTIME, "loss scaler: allocation failed: %s", be->err.msg);
    return 0;
}

void loss_scaler_deinit(loss_scaler_t *s) {
    if (s->found_inf && s->be) s->be->ops->release(s->be, s->found_inf);
    s->found_inf = NULL;
}

double loss_scaler_scale(const loss_scaler_t *s) { return s->enabled ? s->scale : 1.0; }

int loss_scaler_unscale(loss_scaler_t *s, float *g, int64_t n, bool *found_inf, err_t *e) {
    *found_inf = false;
    if (!s->enabled) return 0;
    backend_t *be = s->be;
    int32_t flag = 0;
    /* inv_scale in fp32 as GradScaler computes it (scale.double().reciprocal().float()) */
    float inv = (float)(1.0 / s->scale);
    if (be->ops->zero(be, s->found_inf, sizeof flag) < 0 ||
        be->ops->unscale_check_finite(be, n, g, inv, s->found_inf) < 0 ||
        be->ops->download(be, &flag, s->found_inf, sizeof flag) < 0)
        return err_set(e, ERR_RUNTIME, "loss scaler: unscaling gradients: %s", be->err.msg);
    *found_inf = flag != 0;
    return 0;
}

void loss_scaler_update(loss_scaler_t *s, bool found_inf) {
    if (!s->enabled) return;
    if (found_inf) {
        s->scale *= s->backoff_factor;
        s->growth_tracker = 0;
        return;
    }
    if (++s->growth_tracker >= s->growth_interval) {
        s->scale *= s->growth_factor;
        s->growth_tracker = 0;
    }
}

void loss_scaler_get_state(const loss_scaler_t *s, double *scale, int64_t *growth_tracker) {
    *scale = s->scale;
    *growth_tracker = s->growth_tracker;
}

void loss_scaler_set_state(loss_scaler_t *s, double scale, int64_t growth_tracker) {
    s->scale = scale;
    s->growth_tracker = growth_tracker;
}
