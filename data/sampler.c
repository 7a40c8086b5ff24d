/* sampler.c: DistributedSampler semantics for training, exact-once splits for evaluation.
 *
 * See sampler.h for the rules. Not here: batching (loader.c).
 */
#include "data/sampler.h"

#include <stdlib.h>
#include <string.h>

#include "util/rng.h"

int64_t sampler_num_samples(int64_t n, int world_size, bool drop_last) {
    if (drop_last && n % world_size) return (n - world_size + world_size - 1) / world_size;
    return (n + world_size - 1) / world_size;
}

void sampler_eval_range(int64_t n, int world_size, int rank, int64_t *begin, int64_t *count) {
    int64_t q = n / world_size, rem = n % world_size;
    *count = q + (rank < rem ? 1 : 0);
    *begin = rank * q + (rank < rem ? rank : rem);
}

int sampler_init(sampler_t *s, const sampler_opts_t *o, err_t *e) {
    memset(s, 0, sizeof *s);
    if (o->n < 1)
        return err_set(e, ERR_INPUT, "sampler: the dataset is empty (n = %lld)", (long long)o->n);
    if (o->world_size < 1 || o->rank < 0 || o->rank >= o->world_size)
        return err_set(e, ERR_INPUT, "sampler: rank %d is outside world size %d", o->rank,
                       o->world_size);
    s->o = *o;
    if (o->eval) {
        int64_t begin;
        sampler_eval_range(o->n, o->world_size, o->rank, &begin, &s->num_samples);
        s->total_size = o->n;
    } else {
        s->num_samples = sampler_num_samples(o->n, o->world_size, o->drop_last);
        s->total_size = s->num_samples * o->world_size;
        if (s->num_samples < 1)
            return err_set(e, ERR_INPUT, "sampler: %lld samples cannot be split over %d ranks "
                           "with drop_last (every rank would get none)", (long long)o->n,
                           o->world_size);
    }
    s->epoch = -1;
    s->indices = xmalloc((size_t)(s->num_samples > 0 ? s->num_samples : 1) * sizeof(int64_t), e);
    s->order_ = o->eval ? NULL : xmalloc((size_t)o->n * sizeof(int64_t), e);
    if (!s->indices || (!o->eval && !s->order_)) {
        sampler_deinit(s);
        return -1;
    }
    return 0;
}

int sampler_set_epoch(sampler_t *s, int64_t epoch, err_t *e) {
    if (epoch < 0) return err_set(e, ERR_INPUT, "sampler: epoch %lld < 0", (long long)epoch);
    const sampler_opts_t *o = &s->o;
    s->epoch = epoch;
    if (o->eval) {
        int64_t begin, count;
        sampler_eval_range(o->n, o->world_size, o->rank, &begin, &count);
        for (int64_t i = 0; i < count; i++) s->indices[i] = begin + i;
        return 0;
    }
    int64_t n = o->n, *order = s->order_;
    for (int64_t i = 0; i < n; i++) order[i] = i;
    if (o->shuffle) {
        /* Fisher-Yates, from the end; j uniform in [0, i] */
        rng_t r = rng_make(o->seed, RNG_STREAM_SHUFFLE, (uint64_t)epoch, 0);
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)rng_below(&r, (uint32_t)(i + 1));
            int64_t t = order[i]; order[i] = order[j]; order[j] = t;
        }
    }
    /* position p of the padded/truncated order is order[p % n] (padding repeats from the
     * start, cycling); rank r takes positions r, r + W, ... */
    for (int64_t k = 0; k < s->num_samples; k++) {
        int64_t p = o->rank + k * o->world_size;
        s->indices[k] = order[p % n];
    }
    return 0;
}

void sampler_deinit(sampler_t *s) {
    free(s->indices);
    free(s->order_);
    s->indices = s->order_ = NULL;
}
