/*
 * internal.h: the context object and the seams between the library's files.
 *
 * One struct pcoll holds all mutable state (there is no other). c->lock guards every field below "guarded" and
 * every MPI call on c->comm; whichever thread holds it drives progress (pcoll_progress). The kinds differ only in
 * the hooks of struct pcoll_kind_ops (quorum.c, majority.c, wagma.c); the round driver (progress.c), the
 * activation (activation.c) and the allreduce schedules (allreduce.c) are shared.
 */
#ifndef PCOLL_INTERNAL_H
#define PCOLL_INTERNAL_H

#define _GNU_SOURCE

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "pcoll.h"

enum { PCOLL_TAG_DATA = 1, PCOLL_TAG_TOKEN = 2, PCOLL_TAG_CLOCK = 3 };

/* Per-rank metadata slot appended to every reduced vector: each rank writes only its own slot, so the sum
 * delivers every rank's values exactly. */
enum { META_FLAGS = 0, META_GRADIENTS = 1, META_T_HI = 2, META_T_LO = 3, META_WIDTH = 4 };
/* The flags of a slot: what the rank put in, and what its data tells the activation (activation.c): it knew the
 * round activated (ACTIVATED), its own post of the call was counted and sent on every edge (ROOT), the data stands
 * for a token its sender owed on that edge (TOKEN); the message's hops, times FLAG_HOPS, above them (a float holds
 * the integers exactly). */
enum {
    FLAG_CONTRIBUTED = 1,
    FLAG_FRESH = 2,
    FLAG_ACTIVATED = 4,
    FLAG_ROOT = 8,
    FLAG_TOKEN = 16,
    FLAG_HOPS = 32
};

/* What this rank put into a round: set by a kind's contribute hook. */
struct pcoll_take {
    int gradients;
    int fresh;
};

struct pcoll_kind_ops {
    /* Round n waits for every rank's post of call n (no activation). */
    int (*is_sync)(const pcoll_t *c, uint64_t n);
    /* Whether rank r's post of call n counts towards activating (non-sync) round n: c->quorum such posts do. */
    int (*counts)(const pcoll_t *c, uint64_t n, int r);
    /* How many counting posts of a call activate its round, 1 <= k <= size, fixed at creation; NULL: 1. */
    int (*quorum)(const pcoll_t *c);
    /* The initiator of non-sync round n from its reduced metadata (META_WIDTH floats per rank) and its post time
     * into *t; -1 if the metadata does not say. */
    int (*initiator)(const pcoll_t *c, uint64_t n, const float *meta, double *t);
    /* Point c->src at this rank's contribution to round n, count floats that stay unchanged until the round
     * completes (c->work, filled here, or a buffer of the kind's own); under the lock. */
    void (*contribute)(pcoll_t *c, uint64_t n, struct pcoll_take *take);
    /* A post of call n before round n's exchange started here: into app_buf; NULL: copied. Like late, under the
     * lock, but for ring sizes without it while no round may start (c->copying). */
    void (*in_time)(pcoll_t *c, const float *contribution);
    /* A post of call n that arrives after round n's exchange started here; NULL: kept in app_buf like a post in
     * time. */
    void (*late)(pcoll_t *c, const float *contribution);
    /* Members of round n's reduction into members[], their number into *m; returns the group id or -1. */
    int (*group)(const pcoll_t *c, uint64_t n, int *members, int *m);
    /* Divisor applied to the sum of a round. */
    float (*divisor)(const pcoll_t *c, const pcoll_round *r);
    int sync_kind, async_kind; /* enum pcoll_round_kind of synchronous and other rounds */
};

extern const struct pcoll_kind_ops pcoll_quorum_ops, pcoll_majority_ops, pcoll_wagma_ops;

/* The vectors a schedule step names (resolved when the step is posted): the rank's own contribution, the partial
 * sums, where the round's result goes (c->work, or the waiting application's buffer). Summing steps receive into
 * c->scratch. */
enum pcoll_role { ROLE_SRC, ROLE_WORK, ROLE_DST };

/* What a step does with the floats it received (offsets: recv_off of the named vectors). */
enum pcoll_op {
    OP_NONE,   /* received in place */
    OP_SUM,    /* received into scratch; work = add_from + scratch */
    OP_FINAL,  /* received into scratch; dst = (add_from + scratch) / divisor: this part of the result is done */
    OP_FORMED, /* received in place: the whole result, formed by another member */
};

/* One step of an allreduce schedule: an optional send and an optional receive, then its op; offsets and lengths
 * in floats. */
struct pcoll_step {
    int send_peer, recv_peer;
    size_t send_off, send_len, recv_off, recv_len;
    unsigned char send_from, recv_into, add_from, op;
};

/* A batch of activation tokens in flight (at most one per edge), each message c->token_words uint64s. */
struct pcoll_tokens {
    MPI_Request *reqs;
    uint64_t *msgs;
    int n;
    struct pcoll_tokens *next;
};

/* A completed round not yet consumed by pcoll_wait. */
struct pcoll_result {
    float *data;      /* len floats: the result (divided) and the metadata; unused when delivered */
    int delivered;    /* the result went straight into the waiting application's buffer */
    int fresh;
    size_t record;    /* index into c->records */
};

struct pcoll {
    /* fixed at creation */
    MPI_Comm comm;
    int rank, size;
    size_t count, len;          /* contribution floats; count + META_WIDTH * size, the reduced vector */
    size_t mask_words;          /* uint64 words of one contributor mask */
    pcoll_options opt;
    const struct pcoll_kind_ops *ops;
    int quorum;                 /* counting posts of a call that activate its round (ops->quorum) */
    int ring;                   /* the contribution is large: reduced by the ring (pcoll_options.ring_min_bytes) */
    double t0;                  /* local MPI_Wtime that corresponds to rank 0's clock at creation */
    pthread_t thread;
    int thread_started;
    /* the activation's edges (activation.c): a virtual hypercube over the ranks, the first ones folded in pairs */
    int tokens;                 /* activation messages are needed at all (some round may start before a post) */
    size_t know_words;          /* uint64s of one piece of knowledge: the round, then (counting) post bits */
    size_t token_words;         /* uint64s of one token: its hops, then a piece of knowledge */
    int ndims, nedges;          /* hypercube edges (0 for a folded rank), all edges (the fold edge last) */
    int *edge_peer;             /* nedges */

    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* guarded */
    int stop;                   /* the progress thread must exit */
    int app_driving;            /* the application thread is in wait/close and drives progress itself */
    double app_left;            /* MPI_Wtime when the application last returned from post or wait */
    int failed;                 /* a status code once an MPI call failed: every later call reports it */
    char error[256];

    uint64_t posts, waits;      /* calls posted and waited so far */
    float *app_buf;             /* the posted call not yet taken by an exchange */
    int app_full;
    int copying;                /* post is filling app_buf or pending without the lock: no round may start */
    int app_grads;              /* eager: the gradients app_buf holds (the post's, and the late ones summed in) */
    uint64_t app_call;          /* the call app_buf holds */
    float *model;               /* wagma: the vector last taken from app_buf */
    int has_model;
    uint64_t model_call;
    float *wait_out;            /* the application's result buffer while it waits (NULL otherwise) */
    float *pending;             /* eager, accumulate: late gradients summed */
    int pending_grads;
    double t_post;              /* time of the last post */

    /* activation knowledge (activation.c): know[0] = a means rounds < a are known to be activated; know[1..] the
     * ranks whose counting posts of call a are known */
    uint64_t *know;
    int know_hops;              /* hops of the piece that raised know[0] last */
    unsigned char *bit_hops;    /* per rank: hops of its post's piece here (counting) */
    int *bit_via;               /* per rank: the edge its post's piece came by (counting) */
    uint64_t *owe, *sent;       /* per edge: knowledge owed on it, knowledge sent on it (nedges pieces) */
    int *owe_hops;              /* per edge: hops of the round of the piece owed there */
    uint64_t *scratch_know;     /* one piece, for what a message says */
    uint64_t root_round;        /* 1 + the last call whose post this rank counted and owed on every edge */
    uint64_t hint_round;        /* know[0] when a message last raised it (0: none) */
    int hint_src;
    double hint_time;

    uint64_t cur;               /* the round in progress, or the next to start */
    int in_round;
    int start_hops;             /* hops of the round in progress (pcoll_round.hops) */
    float *work, *scratch;      /* len floats each */
    const float *src;           /* this rank's contribution to the round in progress (count floats) */
    float *dst;                 /* where the round's result goes: work, or wait_out (delivered directly) */
    int result_in_work;         /* the round's result must be formed in work (a folded partner receives it) */
    struct pcoll_step *steps;
    int nsteps, step, step_posted;
    uint64_t sched_round;       /* 1 + the round the steps are built for (0: none) */
    int first_early;            /* step 0's receive was posted before the round started */
    int first_read;             /* step 0's received metadata was read by the activation */
    int first_matched;          /* step 0's message is its receiver's first receive of the round too */
    MPI_Request step_reqs[2];
    int *members;
    int group;
    struct pcoll_take take;

    uint64_t closing_rounds;    /* during close: every round < this starts without activation */
    int closing;

    MPI_Request *token_reqs;    /* a standing receive of tokens on each edge (nedges) */
    uint64_t *token_in;         /* nedges tokens */
    int *token_done;            /* scratch for MPI_Testsome */
    struct pcoll_tokens *token_out;  /* batches in flight */
    struct pcoll_tokens *token_free; /* completed batches, for reuse (no allocation per round) */
    uint64_t *tokens_sent, *tokens_received;  /* per peer, to drain in close */

    pcoll_round *records;
    uint64_t *masks;            /* mask_words per record */
    size_t nrecords, records_cap;

    struct pcoll_result *results; /* ring of completed rounds not yet waited for */
    size_t results_cap, results_head, results_count;
};

/* progress.c */
int pcoll_progress(pcoll_t *c, int *did);
int pcoll_kick(pcoll_t *c);
int pcoll_start_thread(pcoll_t *c);
void pcoll_stop_thread(pcoll_t *c);
double pcoll_now(const pcoll_t *c);
void pcoll_backoff(long *ns, long cap_ns);
int pcoll_fail(pcoll_t *c, int status, const char *what, int mpi_code);

/* vector.c */
float *pcoll_vector_alloc(size_t floats, int huge); /* freed with free(); huge: for the handle's life */
/* dst = (a + b) / divisor and dst = a / divisor; dst may be a */
void pcoll_vector_sum(float *dst, const float *a, const float *restrict b, float divisor, size_t n);
void pcoll_vector_divide(float *dst, const float *a, float divisor, size_t n);

/* activation.c */
int pcoll_tokens_init(pcoll_t *c);
int pcoll_activated(const pcoll_t *c, uint64_t n);
void pcoll_tokens_completed(pcoll_t *c, uint64_t n);
void pcoll_tokens_post(pcoll_t *c, uint64_t n);
int pcoll_tokens_plan(pcoll_t *c, uint64_t n, int peer, int *data_first);
int pcoll_tokens_flush(pcoll_t *c);
int pcoll_tokens_poll(pcoll_t *c, int *did);
void pcoll_tokens_data(pcoll_t *c, uint64_t n, int peer, const float *meta);
int pcoll_tokens_drain(pcoll_t *c);
void pcoll_tokens_free(pcoll_t *c);

/* allreduce.c */
int pcoll_schedule_build(pcoll_t *c, const int *members, int m); /* the steps alone, for members[] */
int pcoll_schedule_prepare(pcoll_t *c, int *did);                 /* round c->cur's steps, its first receive */
int pcoll_schedule_poll_first(pcoll_t *c, int *did);
int pcoll_schedule_start(pcoll_t *c);
int pcoll_schedule_progress(pcoll_t *c, int *done, int *did);
int pcoll_schedule_first_peer(const pcoll_t *c);
int pcoll_schedule_cancel(pcoll_t *c);
float pcoll_round_divisor(pcoll_t *c); /* progress.c: from the reduced metadata */
float *pcoll_round_dst(pcoll_t *c);    /* progress.c: where the result of the round in progress goes */

/* quorum.c: the eager contribution rules that quorum and majority share */
void pcoll_eager_contribute(pcoll_t *c, uint64_t n, struct pcoll_take *take);
void pcoll_eager_in_time(pcoll_t *c, const float *contribution);
void pcoll_eager_late(pcoll_t *c, const float *contribution);
int pcoll_all_ranks(const pcoll_t *c, uint64_t n, int *members, int *m);
float pcoll_eager_divisor(const pcoll_t *c, const pcoll_round *r);
int pcoll_periodic_sync(const pcoll_t *c, uint64_t n);
int pcoll_every_post(const pcoll_t *c, uint64_t n, int r);
double pcoll_post_time(const float *slot);
/* The rank whose post was the c->quorum-th among the fresh ones (an initiator hook). */
int pcoll_kth_fresh(const pcoll_t *c, uint64_t n, const float *meta, double *t);

#define PCOLL_MPI(c, call)                                                                                    \
    do {                                                                                                      \
        int pcoll_rc_ = (call);                                                                               \
        if (pcoll_rc_ != MPI_SUCCESS) return pcoll_fail((c), PCOLL_ERR_MPI, #call, pcoll_rc_);                \
    } while (0)

#endif
