/*
 * allreduce.c: C-level test of the native core (MPICH test style): every rank counts its errors, one reduction
 * decides, the exit status says it. Runs at any number of ranks.
 *
 * Balanced rounds of the sync kind must return exactly the average of every rank's vector, for vector lengths on
 * both sides of the ring / recursive-doubling switch and both algorithms forced; wagma group rounds must return
 * exactly the sum over the rank's butterfly group (group_size 2 and 3; every rank posts the same vector, so the
 * sum is the same whether a contribution is fresh or stale).
 */
#include <stdio.h>
#include <stdlib.h>

#include <mpi.h>

#include "pcoll.h"

static int rank, size;

/* A handle of the given kind on MPI_COMM_WORLD (NULL on failure); the quorum kind as sync: a quorum of every rank,
 * every round synchronous. */
static pcoll_t *create(int kind, size_t count, size_t ring_min_bytes, int group_size)
{
    pcoll_options opt;
    pcoll_options_default(&opt);
    opt.kind = kind;
    if (kind == PCOLL_QUORUM) {
        opt.quorum = size;
        opt.sync_period = 1;
    }
    opt.ring_min_bytes = ring_min_bytes;
    opt.group_size = group_size;
    pcoll_t *c = NULL;
    return pcoll_create(MPI_Comm_c2f(MPI_COMM_WORLD), count, &opt, &c) == PCOLL_OK ? c : NULL;
}

static int run_sync(size_t count, size_t ring_min_bytes, int rounds)
{
    int errs = 0;
    pcoll_t *c = create(PCOLL_QUORUM, count, ring_min_bytes, 2);
    if (!c) return 1;
    float *x = malloc(count * sizeof *x), *out = malloc(count * sizeof *out);
    for (int n = 0; n < rounds; n++) {
        for (size_t i = 0; i < count; i++) x[i] = (float)(rank + 1 + (int)(i % 7) + n);
        pcoll_round rec;
        if (pcoll_post(c, x) != PCOLL_OK || pcoll_wait(c, out, &rec, NULL, NULL) != PCOLL_OK) return errs + 1;
        errs += rec.round != (uint64_t)n || rec.fresh != size;
        for (size_t i = 0; i < count; i++) {
            double sum = size * (size + 1) / 2.0 + (double)size * (double)((int)(i % 7) + n);
            errs += out[i] != (float)sum / (float)size;
        }
    }
    free(x);
    free(out);
    return errs + (pcoll_close(c) != PCOLL_OK);
}

/* Whether ranks i and j share a butterfly group in round n: they differ at most in base-S digit n mod phases. */
static int in_group(int i, int j, int n, int size, int group_size)
{
    int phases = 1, base = 1;
    for (int rest = size - 1; rest >= group_size; rest /= group_size) phases++;
    for (int s = 0; s < n % phases; s++) base *= group_size;
    return i / (base * group_size) == j / (base * group_size) && i % base == j % base;
}

static int run_wagma(int group_size, int rounds)
{
    int errs = 0;
    pcoll_t *c = create(PCOLL_WAGMA, (size_t)size, 0, group_size);
    if (!c) return 1;
    float *x = calloc((size_t)size, sizeof *x), *out = malloc((size_t)size * sizeof *out);
    for (int n = 0; n < rounds; n++) {
        x[rank] = 1.0f;
        MPI_Barrier(MPI_COMM_WORLD); /* from round 1 on, every rank has a model (its call 0) before any round starts */
        pcoll_round rec;
        if (pcoll_post(c, x) != PCOLL_OK || pcoll_wait(c, out, &rec, NULL, NULL) != PCOLL_OK) return errs + 1;
        for (int j = 0; n > 0 && j < size; j++)
            errs += out[j] != (in_group(rank, j, n, size, group_size) ? 1.0f : 0.0f);
    }
    free(x);
    free(out);
    return errs + (pcoll_close(c) != PCOLL_OK);
}

int main(int argc, char **argv)
{
    int provided, errs = 0, total = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const size_t counts[] = {1, 3, 1000, 70000};
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
        errs += run_sync(counts[k], 0, 20);
        errs += run_sync(counts[k], 1, 20);
        errs += run_sync(counts[k], (size_t)1 << 40, 20);
    }
    errs += run_wagma(2, 12);
    errs += run_wagma(3, 12);
    MPI_Reduce(&errs, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(total ? " Found %d errors\n" : " No Errors\n", total);
    MPI_Finalize();
    return total != 0;
}
