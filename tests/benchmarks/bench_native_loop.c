/*
 * bench_native_loop.c: the timed loops of bench_native.py, in C, so that the per-round figures of the core and of
 * MPI_Allreduce carry no Python call overhead (a Python call costs about as much as a small MPI_Allreduce).
 * bench_native.py compiles it against the cached libpcoll.so and calls it through ctypes once per block, on a
 * handle it opens here (the same options as the Python binding's kind of that name).
 */
#include <mpi.h>

#include "pcoll.h"

/* A handle on comm: kind (enum pcoll_kind), quorum and sync_period as pcoll_options has them; NULL on failure. */
pcoll_t *bench_native_open(MPI_Fint comm, int count, int kind, int quorum, int sync_period, int group_size)
{
    pcoll_options opt;
    pcoll_options_default(&opt);
    opt.kind = kind;
    opt.quorum = quorum;
    opt.sync_period = (uint64_t)sync_period;
    opt.group_size = group_size;
    pcoll_t *c = NULL;
    return pcoll_create(comm, (size_t)count, &opt, &c) == PCOLL_OK ? c : NULL;
}

int bench_native_close(pcoll_t *c)
{
    return pcoll_close(c);
}

/* Seconds per round of n rounds on this rank: pcoll post + wait on handle c, or with c NULL MPI_Allreduce (sum)
 * of the same buffers on comm. */
double bench_native_loop(pcoll_t *c, MPI_Fint comm, const float *x, float *out, int count, int n)
{
    MPI_Comm world = MPI_Comm_f2c(comm);
    double start = MPI_Wtime();
    for (int i = 0; i < n; i++) {
        if (c) {
            pcoll_post(c, x);
            pcoll_wait(c, out, NULL, NULL, NULL);
        } else {
            MPI_Allreduce(x, out, count, MPI_FLOAT, MPI_SUM, world);
        }
    }
    return (MPI_Wtime() - start) / n;
}
