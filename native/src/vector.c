/*
 * vector.c: the vectors a handle keeps and the passes over them that are not copies (the sums of a reduction and
 * of pending gradients, and the division of a result).
 *
 * Large vectors are aligned to 2 MiB and advised for transparent huge pages, as numpy does for its arrays: passes
 * over 16 MiB otherwise pay TLB misses on 4 KiB pages that the application's (numpy) buffers, and MPI_Allreduce on
 * them, do not. The arithmetic is compiled for several instruction sets and picked at load time (GCC/Clang function
 * multiversioning on x86-64): a build must run on every node of a cluster, yet the division of a 16 MiB result is
 * compute-bound with 4-wide SSE alone.
 */
#include "internal.h"

#include <stdlib.h>
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

float *pcoll_vector_alloc(size_t floats)
{
    size_t bytes = floats * sizeof(float);
    if (bytes < HUGE_FROM) return malloc(bytes ? bytes : 1);
    void *p = NULL;
    size_t rounded = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (posix_memalign(&p, HUGE_PAGE, rounded)) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
}

MULTIVERSION void pcoll_vector_add(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

MULTIVERSION void pcoll_vector_divide(float *restrict dst, const float *restrict src, float divisor, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = src[i] / divisor;
}
