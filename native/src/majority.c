/*
 * majority.c: eager-majority, round n activated only by the post of rank init(n), drawn by splitmix64 from the
 * seed shared by every rank (the simulator uses the very same function, so both pick the same initiators).
 */
#include "internal.h"

static uint64_t splitmix64(uint64_t seed, uint64_t n)
{
    uint64_t z = seed + (n + 1) * UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static int majority_activates(const pcoll_t *c, uint64_t n)
{
    return splitmix64(c->opt.seed, n) % (uint64_t)c->size == (uint64_t)c->rank;
}

const struct pcoll_kind_ops pcoll_majority_ops =
    PCOLL_EAGER_OPS(pcoll_periodic_sync, majority_activates, PCOLL_ROUND_ASYNC);
