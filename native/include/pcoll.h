/*
 * pcoll.h: partial collectives over MPI (the one public header of stragglerlab's native core).
 *
 * A handle runs a sequence of rounds: on every rank, call n is pcoll_post(contribution n) then pcoll_wait(result
 * of round n). Kinds by mechanism: a k-of-P quorum (round n starts once k ranks posted call n: k = P with every
 * round synchronous is sync, k = 1 is eager-solo), eager-majority (one rank drawn per round starts it) and wagma
 * (the first poster starts it; the reduction runs inside butterfly groups). A progress thread drives rounds while
 * the application computes; pcoll_wait drives them itself. MPI must be initialised with MPI_THREAD_MULTIPLE. Every
 * function returns a pcoll_status code.
 */
#ifndef PCOLL_H
#define PCOLL_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pcoll pcoll_t;

/* Default of pcoll_options.ring_min_bytes: up to 64 KiB, recursive doubling's log2 P steps beat the ring's
 * 2 (P - 1), most of all where ranks share cores. */
#define PCOLL_RING_MIN_BYTES (128 * 1024)

enum pcoll_kind { PCOLL_QUORUM = 0, PCOLL_MAJORITY = 1, PCOLL_WAGMA = 2 };
enum pcoll_late { PCOLL_LATE_ACCUMULATE = 0, PCOLL_LATE_DROP = 1 };
enum pcoll_divide { PCOLL_DIVIDE_WORKERS = 0, PCOLL_DIVIDE_CONTRIBUTORS = 1 };
enum pcoll_round_kind { PCOLL_ROUND_SYNC = 0, PCOLL_ROUND_ASYNC = 1, PCOLL_ROUND_GROUP = 2, PCOLL_ROUND_AVERAGE = 3 };
enum pcoll_status {
    PCOLL_OK = 0,
    PCOLL_ERR_ARG = 1,    /* a bad argument or option value */
    PCOLL_ERR_STATE = 2,  /* a call out of order: two posts without a wait, a wait without a post */
    PCOLL_ERR_THREAD = 3, /* MPI not initialised, or not with MPI_THREAD_MULTIPLE */
    PCOLL_ERR_MPI = 4,    /* an MPI call failed (pcoll_last_error says which) */
    PCOLL_ERR_NOMEM = 5
};

/* Options of a handle; pcoll_options_default fills the defaults (eager-solo: a quorum of one). */
typedef struct pcoll_options {
    int kind;               /* enum pcoll_kind */
    int late;               /* enum pcoll_late: a post that misses its round (quorum, majority) */
    int divide_by;          /* enum pcoll_divide: result = sum / P or sum / gradients summed (quorum, majority) */
    int group_size;         /* wagma: butterfly group size S >= 1 */
    uint64_t sync_period;   /* k > 0: round n is synchronous iff n % k == k - 1 (1: every round, as sync); 0: never */
    uint64_t seed;          /* eager-majority: the initiator generator's seed, the same on every rank */
    size_t ring_min_bytes;  /* contributions of at least this many bytes are reduced by the ring, smaller ones
                               by recursive doubling; 0 means PCOLL_RING_MIN_BYTES */
    int quorum;             /* quorum: the k-th post of call n activates round n, 1 <= k <= P; 0 means
                               ceil(P / 2); other kinds ignore it */
} pcoll_options;

/* One round as this rank saw it (times in seconds since pcoll_create, aligned across ranks at creation). */
typedef struct pcoll_round {
    uint64_t round;     /* round id n */
    int kind;           /* enum pcoll_round_kind */
    int initiator;      /* rank whose post activated it (quorum: the k-th post); synchronous rounds: the last to
                           post; -1 if unknown */
    int group;          /* wagma: butterfly phase of a group round; -1 when the round spans all ranks */
    int contributors;   /* ranks (of this rank's group) that contributed anything */
    int fresh;          /* of those, ranks whose own call n made it in */
    int gradients;      /* gradients summed (wagma: models) */
    int hops;           /* messages on the path by which this rank learnt that the round was activated, when that
                           started it here (counting a rank's successive sends as a chain); 0 when its own post
                           started it */
    double t_trigger;   /* post time of the initiator */
    double t_done;      /* when this rank completed it */
} pcoll_round;

void pcoll_options_default(pcoll_options *opt);

/* Collective over fcomm (a Fortran handle, e.g. mpi4py's comm.py2f()); the communicator is duplicated. */
int pcoll_create(MPI_Fint fcomm, size_t count, const pcoll_options *opt, pcoll_t **out);

/* Contribution of the next call (count floats, copied in). Starts this rank's part of the round at once; its
 * transfers are left to pcoll_wait and the progress thread. */
int pcoll_post(pcoll_t *c, const float *contribution);

/* Result of the round of the last posted call into out (count floats); rec, fresh (1 if this rank's own
 * contribution of that call is in it) and mask (size bytes, 1 per contributing rank) may be NULL. A large
 * result is formed in out directly while the round runs, so after an error return out may still be written:
 * the handle is then unusable (pcoll_abort). */
int pcoll_wait(pcoll_t *c, float *out, pcoll_round *rec, int *fresh, unsigned char *mask);

/* *ready = 1 if pcoll_wait would return at once (drives progress once). */
int pcoll_test(pcoll_t *c, int *ready);

/* Rounds completed on this rank so far, and a copy of records [first, first + n). */
size_t pcoll_num_rounds(pcoll_t *c);
int pcoll_get_rounds(pcoll_t *c, size_t first, size_t n, pcoll_round *out);

/* Collective: every rank calls it. Completes the rounds any rank started, consistently, then frees everything. */
int pcoll_close(pcoll_t *c);

/* Local: stops the progress thread and frees nothing of MPI's, for error paths where the job is about to abort. */
int pcoll_abort(pcoll_t *c);

const char *pcoll_strerror(int status);
/* The last error's message on this handle ("" if none). */
const char *pcoll_last_error(pcoll_t *c);

#ifdef __cplusplus
}
#endif

#endif
