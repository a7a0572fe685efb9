/*
 * schedule.c: how many steps the native core's allreduce schedules take, for the simulator's cost model to compare
 * (no MPI needed: it only builds schedules). For every group size m = 1 .. 9 it prints "m small large": the most
 * steps any member's schedule has for a small vector (recursive doubling over it) and for a large one (recursive
 * doubling over the round's metadata, then the ring over the vector).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/internal.h"

/* The most steps among the m members' schedules of a count-float contribution. */
static int longest(int m, size_t count)
{
    int members[16], most = 0;
    for (int i = 0; i < m; i++) members[i] = i;
    for (int me = 0; me < m; me++) {
        struct pcoll c;
        memset(&c, 0, sizeof c);
        c.rank = me;
        c.size = m;
        c.count = count;
        c.len = count + META_WIDTH * (size_t)m;
        c.ring = count * sizeof(float) >= PCOLL_RING_MIN_BYTES;
        c.work = calloc(c.len, sizeof(float));
        c.steps = malloc((2 * (size_t)m + 70) * sizeof *c.steps);
        c.src = c.work;
        if (!c.work || !c.steps || pcoll_schedule_build(&c, members, m) != PCOLL_OK) return -1;
        if (c.nsteps > most) most = c.nsteps;
        free(c.work);
        free(c.steps);
    }
    return most;
}

int main(void)
{
    size_t small = 16, large = PCOLL_RING_MIN_BYTES / sizeof(float);
    for (int m = 1; m <= 9; m++) printf("%d %d %d\n", m, longest(m, small), longest(m, large));
    return 0;
}
