/*
 * quorum.c: C-level test of the quorum kind (MPICH test style): every rank counts its errors, one reduction
 * decides, the exit status says it. Runs at any number of ranks.
 *
 * A quorum outside 1..P (or negative) is refused with PCOLL_ERR_ARG on every rank. For k = 1, ceil(P/2) (the
 * default, 0) and P, ranks post after staggered sleeps; every round must hold at least k fresh ranks (all of them
 * at k = P), name a fresh rank as its initiator, and, every gradient being a vector of ones summed under
 * accumulate and divided by the gradients summed, return exactly ones.
 */
#define _POSIX_C_SOURCE 199309L

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <mpi.h>

#include "pcoll.h"

enum { COUNT = 64, ROUNDS = 40 };

static int rank, size;

static int create(int quorum, pcoll_t **c)
{
    pcoll_options opt;
    pcoll_options_default(&opt);
    opt.kind = PCOLL_QUORUM;
    opt.quorum = quorum;
    opt.divide_by = PCOLL_DIVIDE_CONTRIBUTORS;
    return pcoll_create(MPI_Comm_c2f(MPI_COMM_WORLD), COUNT, &opt, c);
}

static int run(int quorum, int k)
{
    int errs = 0;
    pcoll_t *c = NULL;
    if (create(quorum, &c) != PCOLL_OK) return 1;
    float x[COUNT], out[COUNT];
    unsigned char *mask = malloc((size_t)size);
    for (int i = 0; i < COUNT; i++) x[i] = 1.0f;
    for (int n = 0; n < ROUNDS; n++) {
        struct timespec pause = {0, 100000L * ((rank * 3 + n * 5) % 7)};
        nanosleep(&pause, NULL);
        pcoll_round rec;
        int fresh = 0;
        if (pcoll_post(c, x) != PCOLL_OK || pcoll_wait(c, out, &rec, &fresh, mask) != PCOLL_OK) return errs + 1;
        errs += rec.round != (uint64_t)n || rec.kind != PCOLL_ROUND_ASYNC;
        errs += rec.fresh < k || (k == size && rec.fresh != size) || rec.gradients < rec.fresh;
        errs += rec.initiator < 0 || rec.initiator >= size || !mask[rec.initiator];
        for (int i = 0; i < COUNT; i++) errs += out[i] != 1.0f;
    }
    free(mask);
    return errs + (pcoll_close(c) != PCOLL_OK);
}

int main(int argc, char **argv)
{
    int provided, errs = 0, total = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    pcoll_t *c = NULL;
    errs += create(size + 1, &c) != PCOLL_ERR_ARG || c != NULL;
    errs += create(-1, &c) != PCOLL_ERR_ARG || c != NULL;
    errs += run(1, 1);
    errs += run(0, (size + 1) / 2);
    errs += run(size, size);
    MPI_Reduce(&errs, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(total ? " Found %d errors\n" : " No Errors\n", total);
    MPI_Finalize();
    return total != 0;
}
