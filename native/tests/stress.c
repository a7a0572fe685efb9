/*
 * stress.c: randomized stress of every kind (MPICH test style: every rank counts its errors, one reduction decides,
 * the exit status says it). Usage: stress [ROUNDS [SEED]] runs ROUNDS rounds (default 1500) of each kind (sync,
 * eager-solo, eager-majority, wagma, quorum) at any number of ranks.
 *
 * Each kind's rounds are cut into segments of 200-2000 rounds, each a handle of its own with options drawn from
 * SEED (the same on every rank): the vector length (a few floats, or up to 40,000), the allreduce (recursive
 * doubling, the ring, or the default switch), the sync period (none, or 1-16), late (accumulate, drop), the divisor
 * (workers, contributors), the quorum (1..P), the wagma group size (1, 2, 3, P). Every rank sleeps a random time
 * before most posts (none, up to 50 us, and now and then up to 1 ms, so ranks lag several rounds) and sometimes
 * between post and wait.
 *
 * The probe stays exact in float32: rank r's call n is zero except slot r = v(n), slot P + r = 1, and every later
 * element i with i % P == r = v(n), where v(n) = n % 4096 + 1 (quorum, majority: sums of a few calls stay far below
 * 2^24 and survive the division) or n + 1 (wagma, whose results are sums of single calls). Checked, for every
 * round: the same result on every rank (of the wagma group), bitwise (a hash per round, gathered at the end of a
 * segment); the long part equal to the slots it mirrors; the record's round, contributors, gradients, mask and
 * fresh count against the slots; and, replaying each rank's own calls in order, every call applied exactly once
 * under accumulate (only late calls may remain pending at close) and never twice under drop (a round holds call n
 * or nothing), none staler than the sync period, every rank fresh in synchronous rounds, at least k fresh ranks in
 * a quorum round, init(n) fresh in an eager-majority round; for wagma, nothing from outside the group, each
 * member's last posted call, no staler than the sync period. Rank 0 prints what each kind went through.
 */
#define _POSIX_C_SOURCE 199309L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "pcoll.h"

enum { KINDS = 5, SYNC = 0, SOLO = 1, MAJORITY = 2, WAGMA = 3, QUORUM = 4, MODULUS = 4096 };
static const char *kind_names[KINDS] = {"sync", "eager-solo", "eager-majority", "wagma", "quorum"};

static int rank, size;

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static int pick(uint64_t *s, int n)
{
    return (int)(next(s) % (uint64_t)n);
}

static void pause_ns(long ns)
{
    struct timespec t = {ns / 1000000000L, ns % 1000000000L};
    if (ns > 0) nanosleep(&t, NULL);
}

/* None (70 %), up to 50 us (29 %), or 0.2-1 ms (1 %). */
static void random_pause(uint64_t *s)
{
    int u = pick(s, 100);
    pause_ns(u < 70 ? 0 : u < 99 ? pick(s, 50000) : 200000 + pick(s, 800000));
}

/* eager-majority's init(n) and wagma's groups, written independently of the library */
static int majority_init(uint64_t seed, uint64_t n)
{
    uint64_t z = seed + (n + 1) * UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return (int)((z ^ (z >> 31)) % (uint64_t)size);
}

static int same_group(int i, int j, uint64_t n, int group_size)
{
    if (group_size < 2) return i == j;
    int phases = 1;
    long base = 1;
    for (int rest = size - 1; rest >= group_size; rest /= group_size) phases++;
    for (uint64_t s = 0; s < n % (uint64_t)phases; s++) base *= group_size;
    return i / (base * group_size) == j / (base * group_size) && i % base == j % base;
}

struct config {
    int kind, rounds;
    size_t count;
    pcoll_options opt;
};

struct stats {
    long rounds, segments, ring_segments, late, most_calls;
    double seconds;
};

static void draw(uint64_t *s, int kind, int remaining, struct config *cfg)
{
    cfg->kind = kind;
    cfg->rounds = 200 + pick(s, 1801);
    if (cfg->rounds > remaining) cfg->rounds = remaining;
    cfg->count = 2 * (size_t)size + (size_t)(pick(s, 4) == 0 ? pick(s, 40000) : pick(s, 64));
    pcoll_options *o = &cfg->opt;
    pcoll_options_default(o);
    size_t rings[] = {0, 4, (size_t)1 << 40};
    o->ring_min_bytes = rings[pick(s, 3)];
    o->sync_period = pick(s, 4) == 0 ? 0 : 1 + (uint64_t)pick(s, 16);
    o->late = pick(s, 2) ? PCOLL_LATE_DROP : PCOLL_LATE_ACCUMULATE;
    o->divide_by = pick(s, 2) ? PCOLL_DIVIDE_CONTRIBUTORS : PCOLL_DIVIDE_WORKERS;
    o->seed = next(s);
    int groups[] = {1, 2, 3, size};
    o->group_size = groups[pick(s, 4)];
    o->kind = kind == MAJORITY ? PCOLL_MAJORITY : kind == WAGMA ? PCOLL_WAGMA : PCOLL_QUORUM;
    o->quorum = kind == SYNC ? size : kind == SOLO ? 1 : kind == QUORUM ? 1 + pick(s, size) : 0;
    if (kind == SYNC) o->sync_period = 1;
}

static int is_sync(const struct config *cfg, uint64_t n)
{
    uint64_t k = cfg->opt.sync_period;
    return k > 0 && n % k == k - 1;
}

static float value(const struct config *cfg, uint64_t n)
{
    return (float)(cfg->kind == WAGMA ? n + 1 : n % MODULUS + 1);
}

static uint64_t hash(const float *v, size_t n)
{
    uint64_t h = UINT64_C(1469598103934665603);
    const unsigned char *b = (const unsigned char *)v;
    for (size_t i = 0; i < n * sizeof *v; i++) h = (h ^ b[i]) * UINT64_C(1099511628211);
    return h;
}

/* The exact integer under a float that was divided by d; -1 if it is not one. */
static long undivided(float x, float d)
{
    double y = (double)x * d, r = floor(y + 0.5);
    return fabs(y - r) < 1e-2 ? (long)r : -1;
}

/* What round n's result says, checked: the eager replay of this rank's own calls (its next call not yet applied
 * in *nxt), or wagma's group contents. */
static int check_round(const struct config *cfg, uint64_t n, const float *out, const pcoll_round *rec, int fresh,
                       const unsigned char *mask, uint64_t *nxt, struct stats *st)
{
    int errs = 0, p = size, wagma = cfg->kind == WAGMA, sync = cfg->kind == SYNC || is_sync(cfg, n);
    float d = wagma ? 1.0f
                    : cfg->opt.divide_by == PCOLL_DIVIDE_CONTRIBUTORS ? (float)(rec->gradients > 0 ? rec->gradients : 1)
                                                                       : (float)p;
    long counted = 0, contributors = 0, fresh_ranks = 0;
    errs += rec->round != n;
    for (size_t i = 2 * (size_t)p; i < cfg->count; i++) errs += out[i] != out[i % (size_t)p];
    for (int j = 0; j < p; j++) {
        long v = undivided(out[j], d), k = undivided(out[p + j], d);
        errs += v < 0 || k < 0 || (mask[j] != 0) != (k > 0);
        counted += k;
        contributors += k > 0;
        if (wagma) {
            int member = sync || same_group(rank, j, n, cfg->opt.group_size);
            errs += (!member && (v || k)) || k > 1 || (v == 0) != (k == 0) || v > (long)n + 1;
            errs += sync && v != (long)n + 1;
            fresh_ranks += v == (long)n + 1;
            if (cfg->opt.sync_period && n >= cfg->opt.sync_period && v) errs += (long)n + 1 - v >= (long)cfg->opt.sync_period;
        }
    }
    errs += rec->contributors != contributors || (!wagma && rec->gradients != counted);
    if (wagma) return errs + (rec->fresh != fresh_ranks) + ((undivided(out[rank], d) == (long)n + 1) != fresh);
    /* this rank's own calls: the next k not yet applied, in order */
    long v = undivided(out[rank], d), k = undivided(out[p + rank], d), sum = 0;
    for (long m = 0; m < k; m++) sum += (long)value(cfg, *nxt + (uint64_t)m);
    int has_n = k > 0 && *nxt + (uint64_t)k - 1 == n;
    errs += sum != v || *nxt + (uint64_t)k > n + 1 || has_n != fresh;
    if (cfg->opt.sync_period && k > 0) errs += n - *nxt >= cfg->opt.sync_period;
    if (cfg->opt.late == PCOLL_LATE_DROP) errs += k > 1 || (k == 1 && !fresh);
    *nxt = cfg->opt.late == PCOLL_LATE_DROP ? n + 1 : *nxt + (uint64_t)k;
    if (k > st->most_calls) st->most_calls = k;
    errs += sync && (!fresh || rec->fresh != p || rec->kind != PCOLL_ROUND_SYNC);
    if (!sync && cfg->kind == QUORUM) errs += rec->fresh < cfg->opt.quorum;
    if (!sync && cfg->kind == MAJORITY) errs += rec->initiator != majority_init(cfg->opt.seed, n);
    return errs;
}

static int run_segment(const struct config *cfg, uint64_t *delays, struct stats *st)
{
    pcoll_t *c = NULL;
    if (pcoll_create(MPI_Comm_c2f(MPI_COMM_WORLD), cfg->count, &cfg->opt, &c) != PCOLL_OK) return 1;
    size_t r = (size_t)cfg->rounds, p = (size_t)size;
    float *x = calloc(cfg->count, sizeof *x), *out = malloc(cfg->count * sizeof *out);
    uint64_t *mine = malloc(r * sizeof *mine), *all = malloc(r * p * sizeof *all), nxt = 0;
    unsigned char *mask = malloc(p), *fresh_calls = calloc(r, 1);
    int errs = 0;
    for (uint64_t n = 0; n < r; n++) {
        random_pause(delays);
        float v = value(cfg, n);
        for (size_t i = (size_t)rank; i < cfg->count; i += p) x[i] = v;
        x[p + (size_t)rank] = 1.0f;
        pcoll_round rec;
        int fresh = 0;
        if (pcoll_post(c, x) != PCOLL_OK) return errs + 1;
        if (pick(delays, 10) == 0) random_pause(delays);
        if (pcoll_wait(c, out, &rec, &fresh, mask) != PCOLL_OK) return errs + 1;
        mine[n] = hash(out, cfg->count);
        fresh_calls[n] = (unsigned char)fresh;
        st->late += !fresh;
        errs += check_round(cfg, n, out, &rec, fresh, mask, &nxt, st);
    }
    errs += pcoll_close(c) != PCOLL_OK;
    if (cfg->kind != WAGMA && cfg->opt.late == PCOLL_LATE_ACCUMULATE) /* only late calls may still be pending */
        for (uint64_t n = nxt; n < r; n++) errs += fresh_calls[n] || (cfg->opt.sync_period && r - nxt >= cfg->opt.sync_period);
    MPI_Allgather(mine, (int)r, MPI_UINT64_T, all, (int)r, MPI_UINT64_T, MPI_COMM_WORLD);
    for (uint64_t n = 0; n < r; n++)
        for (int j = 0; j < size; j++) {
            int together = cfg->kind != WAGMA || is_sync(cfg, n) || same_group(rank, j, n, cfg->opt.group_size);
            errs += together && all[(size_t)j * r + n] != mine[n];
        }
    st->rounds += cfg->rounds;
    st->segments++;
    st->ring_segments += cfg->count * sizeof(float) >= (cfg->opt.ring_min_bytes ? cfg->opt.ring_min_bytes
                                                                                  : PCOLL_RING_MIN_BYTES);
    free(x);
    free(out);
    free(mine);
    free(all);
    free(mask);
    free(fresh_calls);
    return errs;
}

int main(int argc, char **argv)
{
    int provided, errs = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long rounds = argc > 1 ? atol(argv[1]) : 1500;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    for (int kind = 0; kind < KINDS; kind++) {
        uint64_t shared = seed * 1000003u + (uint64_t)kind, delays = shared ^ (UINT64_C(0x5851F42D4C957F2D) * (uint64_t)(rank + 1));
        struct stats st = {0};
        int kind_errs = 0, total = 0;
        double start = MPI_Wtime();
        while (st.rounds < rounds) {
            struct config cfg;
            draw(&shared, kind, (int)(rounds - st.rounds), &cfg);
            kind_errs += run_segment(&cfg, &delays, &st);
        }
        st.seconds = MPI_Wtime() - start;
        long late = 0, most = 0;
        MPI_Reduce(&kind_errs, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Reduce(&st.late, &late, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Reduce(&st.most_calls, &most, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0)
            printf("%-14s P = %d: %ld rounds in %.1f s, %ld segments (%ld by the ring), late posts %.1f %%, "
                   "most calls in one contribution %ld, %d errors\n",
                   kind_names[kind], size, st.rounds, st.seconds, st.segments, st.ring_segments,
                   100.0 * (double)late / ((double)st.rounds * size), most, total);
        errs += total;
    }
    if (rank == 0) printf(errs ? " Found %d errors\n" : " No Errors\n", errs);
    MPI_Finalize();
    return errs != 0;
}
