/*
 * vector.c: the vectors a handle keeps and the passes over them that are not copies: sums (of a reduction, of
 * pending gradients) fused with the division of a result where the result is formed.
 *
 * Large vectors kept for the handle's life are aligned to 2 MiB and advised for transparent huge pages, as numpy
 * does for its arrays: passes over 16 MiB otherwise pay TLB misses on 4 KiB pages that the application's (numpy)
 * buffers, and MPI_Allreduce on them, do not. Not the queue slots a lagging rank adds while rounds run: a huge
 * page fault may compact memory first, which stalled a straggler's progress thread for 40 ms per 16 MiB slot.
 * Every vector is touched once when allocated, so that its page faults do not land inside a round.
 *
 * The arithmetic is compiled for several instruction sets and picked at load time (GCC/Clang function
 * multiversioning on x86-64): a build must run on every node of a cluster, yet the division of a 16 MiB result is
 * compute-bound with 4-wide SSE alone.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef MULTIVERSION
#define MULTIVERSION
#endif

enum { HUGE_PAGE = 2 * 1024 * 1024, HUGE_FROM = 4 * 1024 * 1024 };

float *pcoll_vector_alloc(size_t floats, int huge)
{
    size_t bytes = floats * sizeof(float);
    void *p = NULL;
    if (!huge || bytes < HUGE_FROM) {
        p = malloc(bytes ? bytes : 1);
    } else {
        size_t rounded = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
        if (posix_memalign(&p, HUGE_PAGE, rounded)) return NULL;
#ifdef MADV_HUGEPAGE
        madvise(p, rounded, MADV_HUGEPAGE);
#endif
    }
    if (p) memset(p, 0, bytes);
    return p;
}

/* dst may be a (an in-place sum); b is another vector. Dividing by 1 is exact, so a plain sum is divisor 1. */
MULTIVERSION void pcoll_vector_sum(float *dst, const float *a, const float *restrict b, float divisor, size_t n)
{
    if (divisor == 1.0f) {
        for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
    } else {
        for (size_t i = 0; i < n; i++) dst[i] = (a[i] + b[i]) / divisor;
    }
}

MULTIVERSION void pcoll_vector_divide(float *dst, const float *a, float divisor, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = a[i] / divisor;
}
