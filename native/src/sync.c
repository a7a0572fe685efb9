/*
 * sync.c: every round synchronous, like MPI_Allreduce: round n starts when every rank has posted call n, and
 * every contribution is fresh (the result is the sum over all ranks divided by P).
 */
#include "internal.h"

static int always(const pcoll_t *c, uint64_t n)
{
    (void)c;
    (void)n;
    return 1;
}

static int never(const pcoll_t *c, uint64_t n)
{
    (void)c;
    (void)n;
    return 0;
}

const struct pcoll_kind_ops pcoll_sync_ops = {
    .is_sync = always,
    .activates = never,
    .contribute = pcoll_eager_contribute,
    .late = pcoll_eager_late,
    .group = pcoll_all_ranks,
    .divisor = pcoll_eager_divisor,
    .sync_kind = PCOLL_ROUND_SYNC,
    .async_kind = PCOLL_ROUND_SYNC,
};
