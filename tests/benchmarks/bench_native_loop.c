/*
 * bench_native_loop.c: the timed loops of bench_native.py, in C, so that the per-round figures of the core and of
 * MPI_Allreduce carry no Python call overhead (a ctypes call costs about as much as a small MPI_Allreduce).
 * bench_native.py compiles it against the cached libpcoll.so and calls it through ctypes once per block.
 */
#include <mpi.h>

#include "pcoll.h"

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
