/*
 * wagma.c: wait-avoiding group model averaging. Activation is global (the first post anywhere, as solo); the
 * reduction runs inside butterfly groups. Ranks are written in base S = group_size; there are as many phases as
 * base-S digits of P - 1 (at least one); round n uses phase s = n mod phases, and the group of rank i is every
 * rank j < P that differs from i only in digit s (for powers of two: only in bits [s log2 S, (s+1) log2 S)).
 * Each rank contributes the vector it last posted (stale if late; zeros, not counted, before its first post).
 * Periodic sync rounds are global sums. The result is a plain sum: the caller weighs it. The initiator is the
 * group's earliest fresh poster (every rank that posted before it knew of the round activated it).
 */
#include "internal.h"

#include <string.h>

static int phases(const pcoll_t *c)
{
    uint64_t s = (uint64_t)c->opt.group_size, rest = (uint64_t)(c->size - 1);
    int p = 1;
    if (s < 2) return 1;
    while (rest >= s) {
        rest /= s;
        p++;
    }
    return p;
}

/* The model is read in place by the exchange (never copied into c->work), so a post lands in app_buf and becomes
 * the model when the next round starts: an exchange in flight never sees its contribution change. */
static void wagma_contribute(pcoll_t *c, uint64_t n, struct pcoll_take *take)
{
    if (c->app_full) {
        float *t = c->model;
        c->model = c->app_buf;
        c->app_buf = t;
        c->app_full = 0;
        c->has_model = 1;
        c->model_call = c->app_call;
    }
    if (c->has_model) {
        c->src = c->model;
        take->gradients = 1;
        take->fresh = c->model_call == n;
    } else {
        memset(c->work, 0, c->count * sizeof(float));
        c->src = c->work;
        take->gradients = 0;
        take->fresh = 0;
    }
}

static int wagma_group(const pcoll_t *c, uint64_t n, int *members, int *m)
{
    if (pcoll_periodic_sync(c, n)) return pcoll_all_ranks(c, n, members, m);
    int s = (int)(n % (uint64_t)phases(c));
    int size = c->opt.group_size < 2 ? 1 : c->opt.group_size;
    long base = 1;
    for (int i = 0; i < s; i++) base *= size;
    long digit = (c->rank / base) % size;
    long first = c->rank - digit * base;
    *m = 0;
    for (long d = 0; d < size; d++) {
        long j = first + d * base;
        if (j < c->size) members[(*m)++] = (int)j;
    }
    return s;
}

static float wagma_divisor(const pcoll_t *c, const pcoll_round *r)
{
    (void)c;
    (void)r;
    return 1.0f;
}

const struct pcoll_kind_ops pcoll_wagma_ops = {
    .is_sync = pcoll_periodic_sync,
    .counts = pcoll_every_post,
    .initiator = pcoll_kth_fresh,
    .contribute = wagma_contribute,
    .late = NULL, /* a late post is kept like any other: the vector last posted is the model */
    .group = wagma_group,
    .divisor = wagma_divisor,
    .sync_kind = PCOLL_ROUND_AVERAGE,
    .async_kind = PCOLL_ROUND_GROUP,
};
