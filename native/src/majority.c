/*
 * majority.c: eager-majority, round n activated only by the post of rank init(n), drawn by splitmix64 from the
 * seed shared by every rank (the simulator uses the very same function, so both pick the same initiators); the
 * eager contributions of quorum.c.
 */
#include "internal.h"

static uint64_t splitmix64(uint64_t seed, uint64_t n)
{
    uint64_t z = seed + (n + 1) * UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static int init_rank(const pcoll_t *c, uint64_t n)
{
    return (int)(splitmix64(c->opt.seed, n) % (uint64_t)c->size);
}

static int majority_counts(const pcoll_t *c, uint64_t n, int r)
{
    return init_rank(c, n) == r;
}

/* init(n), when its post is in the round (always, unless close started the round). */
static int majority_initiator(const pcoll_t *c, uint64_t n, const float *meta, double *t)
{
    int r = init_rank(c, n);
    const float *slot = meta + (size_t)META_WIDTH * (size_t)r;
    if (!((int)slot[META_FLAGS] & FLAG_FRESH)) return -1;
    *t = pcoll_post_time(slot);
    return r;
}

const struct pcoll_kind_ops pcoll_majority_ops = {
    .is_sync = pcoll_periodic_sync,
    .counts = majority_counts,
    .initiator = majority_initiator,
    .contribute = pcoll_eager_contribute,
    .in_time = pcoll_eager_in_time,
    .late = pcoll_eager_late,
    .group = pcoll_all_ranks,
    .divisor = pcoll_eager_divisor,
    .sync_kind = PCOLL_ROUND_SYNC,
    .async_kind = PCOLL_ROUND_ASYNC,
};
