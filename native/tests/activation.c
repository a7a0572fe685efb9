/*
 * activation.c: C-level test of how far an activation travels (MPICH test style): every rank counts its errors,
 * one reduction decides, the exit status says it. Runs at any number of ranks; ranks may share cores (it counts
 * messages, it does not time them).
 *
 * In each round only its posters post at first: one rank (eager-solo, wagma, and eager-majority's init(n)), or k
 * ranks one after the other (quorum). Every other rank waits, without posting, until the round has completed on
 * it (its progress thread started it when the activation reached it), then posts late. The record of every rank
 * that did not post must say it learnt of the activation through at least one message and at most
 * ceil(log2 P) + 1 on the critical path (a rank's successive sends counted as a chain); a poster's, none. Rank 0
 * prints the longest path seen per kind.
 */
#define _POSIX_C_SOURCE 199309L

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <mpi.h>

#include "pcoll.h"

enum { COUNT = 16 };

static int rank, size;

static void pause_us(long us)
{
    struct timespec t = {us / 1000000L, (us % 1000000L) * 1000L};
    nanosleep(&t, NULL);
}

/* eager-majority's init(n), written independently of the library */
static int majority_init(uint64_t seed, uint64_t n)
{
    uint64_t z = seed + (n + 1) * UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return (int)((z ^ (z >> 31)) % (uint64_t)size);
}

/* Order of rank r among round n's posters (0 first), or -1 if it waits. */
static int poster(const pcoll_options *opt, int k, int n, int r)
{
    int first = opt->kind == PCOLL_MAJORITY ? majority_init(opt->seed, (uint64_t)n) : (n * 7) % size;
    int order = (r - first + size) % size;
    return order < k ? order : -1;
}

static int ceil_log2(int p)
{
    int d = 0;
    while ((1 << d) < p) d++;
    return d;
}

/* Rounds of one kind; returns the errors, and the longest path into *longest. */
static int run(int kind, int quorum, int group_size, int rounds, int *longest)
{
    pcoll_options opt;
    pcoll_options_default(&opt);
    opt.kind = kind;
    opt.quorum = quorum;
    opt.group_size = group_size;
    opt.seed = 11;
    int k = kind == PCOLL_QUORUM ? quorum : 1, errs = 0, bound = ceil_log2(size) + 1;
    pcoll_t *c = NULL;
    if (pcoll_create(MPI_Comm_c2f(MPI_COMM_WORLD), COUNT, &opt, &c) != PCOLL_OK) return 1;
    float x[COUNT], out[COUNT];
    for (int i = 0; i < COUNT; i++) x[i] = 1.0f;
    for (int n = 0; n < rounds; n++) {
        int order = poster(&opt, k, n, rank);
        if (order > 0) pause_us(300L * order); /* the quorum's posts one after the other */
        while (order < 0 && pcoll_num_rounds(c) <= (size_t)n) pause_us(200);
        pcoll_round rec;
        if (pcoll_post(c, x) != PCOLL_OK || pcoll_wait(c, out, &rec, NULL, NULL) != PCOLL_OK) return errs + 1;
        errs += rec.round != (uint64_t)n;
        if (order >= 0) {
            errs += rec.hops != 0;
        } else {
            errs += rec.hops < 1 || rec.hops > bound;
            if (rec.hops > bound) fprintf(stderr, "rank %d round %d: %d hops > %d\n", rank, n, rec.hops, bound);
        }
        if (rec.hops > *longest) *longest = rec.hops;
    }
    return errs + (pcoll_close(c) != PCOLL_OK);
}

int main(int argc, char **argv)
{
    int provided, errs = 0, total = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct {
        const char *name;
        int kind, quorum, group_size;
    } kinds[] = {
        {"eager-solo", PCOLL_QUORUM, 1, 2},
        {"eager-majority", PCOLL_MAJORITY, 0, 2},
        {"wagma", PCOLL_WAGMA, 0, 2},
        {"quorum half", PCOLL_QUORUM, (size + 1) / 2, 2},
        {"quorum P-1", PCOLL_QUORUM, size > 1 ? size - 1 : 1, 2},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        int longest = 0, most = 0;
        errs += run(kinds[i].kind, kinds[i].quorum, kinds[i].group_size, 2 * size, &longest);
        MPI_Reduce(&longest, &most, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("%s: P = %d, longest activation path %d messages (bound %d)\n", kinds[i].name, size,
                              most, ceil_log2(size) + 1);
    }
    MPI_Reduce(&errs, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(total ? " Found %d errors\n" : " No Errors\n", total);
    MPI_Finalize();
    return total != 0;
}
