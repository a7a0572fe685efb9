/*
 * sync.c: every round synchronous, like MPI_Allreduce: round n starts when every rank has posted call n, and
 * every contribution is fresh (the result is the sum over all ranks divided by P).
 */
#include "internal.h"

static int never(const pcoll_t *c, uint64_t n)
{
    (void)c;
    (void)n;
    return 0;
}

const struct pcoll_kind_ops pcoll_sync_ops = PCOLL_EAGER_OPS(pcoll_always, never, PCOLL_ROUND_SYNC);
