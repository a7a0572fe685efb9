/*
 * solo.c: eager-solo, round n activated by the first post of call n anywhere; and the eager contribution rules
 * that sync and majority share: a rank contributes its gradient n if posted by the exchange start (plus pending
 * late gradients under accumulate), else pending (accumulate) or zeros (drop).
 */
#include "internal.h"

#include <string.h>

int pcoll_periodic_sync(const pcoll_t *c, uint64_t n)
{
    uint64_t k = c->opt.sync_period;
    return k > 0 && n % k == k - 1;
}

int pcoll_always(const pcoll_t *c, uint64_t n)
{
    (void)c;
    (void)n;
    return 1;
}

static void swap_buffers(float **a, float **b)
{
    float *t = *a;
    *a = *b;
    *b = t;
}

void pcoll_eager_contribute(pcoll_t *c, uint64_t n, struct pcoll_take *take)
{
    (void)n;
    take->gradients = 0;
    take->fresh = 0;
    if (c->app_full) {
        swap_buffers(&c->work, &c->app_buf);
        c->app_full = 0;
        take->fresh = 1;
        take->gradients = 1;
        if (c->pending_grads > 0) pcoll_vector_sum(c->work, c->work, c->pending, 1.0f, c->count);
    } else if (c->pending_grads > 0) {
        swap_buffers(&c->work, &c->pending);
    } else {
        memset(c->work, 0, c->count * sizeof(float));
    }
    take->gradients += c->pending_grads;
    c->pending_grads = 0;
    c->src = c->work;
}

void pcoll_eager_late(pcoll_t *c, const float *contribution)
{
    if (c->opt.late == PCOLL_LATE_DROP) return;
    if (c->pending_grads == 0)
        memcpy(c->pending, contribution, c->count * sizeof(float));
    else
        pcoll_vector_sum(c->pending, c->pending, contribution, 1.0f, c->count);
    c->pending_grads++;
}

int pcoll_all_ranks(const pcoll_t *c, uint64_t n, int *members, int *m)
{
    (void)n;
    for (int i = 0; i < c->size; i++) members[i] = i;
    *m = c->size;
    return -1;
}

float pcoll_eager_divisor(const pcoll_t *c, const pcoll_round *r)
{
    if (c->opt.divide_by == PCOLL_DIVIDE_CONTRIBUTORS) return r->gradients > 0 ? (float)r->gradients : 1.0f;
    return (float)c->size;
}

const struct pcoll_kind_ops pcoll_solo_ops = PCOLL_EAGER_OPS(pcoll_periodic_sync, pcoll_always, PCOLL_ROUND_ASYNC);
