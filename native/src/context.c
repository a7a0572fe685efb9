/*
 * context.c: the public API on the one context object: create (dup the communicator, align clocks, start the
 * progress thread), post and wait (the application side of the double buffer), the round records, and close (a
 * collective that agrees on how many rounds were started anywhere, completes them all, drains tokens and frees).
 */
#include "internal.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* pcoll_wait polls without pause for WAIT_SPIN_S, then yields the core between polls (to whoever else is runnable
 * on it: the ranks it waits for, where ranks outnumber cores; spinning 50 us made small rounds 3-7x slower at 4
 * ranks on 2 cores) while a round in flight here moves, since a transfer moves only when polled (a waiter that slept
 * between polls made a 1 MiB round 30 % slower); once nothing moved for WAIT_YIELD_S with no round in flight
 * (waiting for another rank's activation), or for WAIT_ROUND_YIELD_S with one (waiting for a straggler's part of a
 * synchronous round), it sleeps, with a backoff capped at WAIT_SLEEP_CAP_NS. Yielding is no rest where ranks
 * outnumber cores: three ranks that yielded for 150 ms while a 4-rank synchronous round waited for its straggler kept
 * the run queue full, and the round took 30-80 ms once the straggler came, against 1 ms otherwise. */
#define WAIT_SPIN_S 5e-6
#define WAIT_YIELD_S 200e-6
#define WAIT_ROUND_YIELD_S 1e-3
enum { WAIT_SLEEP_CAP_NS = 20000 };

void pcoll_options_default(pcoll_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->kind = PCOLL_QUORUM;
    opt->quorum = 1;
    opt->late = PCOLL_LATE_ACCUMULATE;
    opt->divide_by = PCOLL_DIVIDE_WORKERS;
    opt->group_size = 2;
}

static const struct pcoll_kind_ops *kind_ops(int kind)
{
    switch (kind) {
    case PCOLL_QUORUM: return &pcoll_quorum_ops;
    case PCOLL_MAJORITY: return &pcoll_majority_ops;
    case PCOLL_WAGMA: return &pcoll_wagma_ops;
    default: return NULL;
    }
}

static void free_context(pcoll_t *c)
{
    pcoll_tokens_free(c);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    for (size_t i = 0; i < c->results_cap; i++) free(c->results[i].data);
    free(c->results);
    free(c->records);
    free(c->masks);
    free(c->app_buf);
    free(c->pending);
    free(c->model);
    free(c->work);
    free(c->scratch);
    free(c->steps);
    free(c->members);
    free(c->tokens_sent);
    free(c->tokens_received);
    free(c);
}

static int allocate(pcoll_t *c)
{
    size_t p = (size_t)c->size;
    c->app_buf = pcoll_vector_alloc(c->len, 1);
    c->pending = pcoll_vector_alloc(c->len, 1);
    c->work = pcoll_vector_alloc(c->len, 1);
    c->scratch = pcoll_vector_alloc(c->len, 1);
    c->model = pcoll_vector_alloc(c->len, 1);
    c->steps = malloc((2 * p + 70) * sizeof *c->steps);
    c->members = malloc(p * sizeof *c->members);
    c->tokens_sent = calloc(p, sizeof *c->tokens_sent);
    c->tokens_received = calloc(p, sizeof *c->tokens_received);
    return c->app_buf && c->pending && c->work && c->scratch && c->model && c->steps && c->members &&
           c->tokens_sent && c->tokens_received;
}

static int valid_options(const pcoll_options *o)
{
    return kind_ops(o->kind) && (o->late == PCOLL_LATE_ACCUMULATE || o->late == PCOLL_LATE_DROP) &&
           (o->divide_by == PCOLL_DIVIDE_WORKERS || o->divide_by == PCOLL_DIVIDE_CONTRIBUTORS) &&
           o->group_size >= 1 && o->quorum >= 0;
}

/* Set c->t0 so that times since creation agree across ranks: rank 0 answers a few ping-pongs from each rank in
 * turn, which takes the offset of the one with the shortest round trip (MPI_Wtime need not be global). */
static int align_clock(pcoll_t *c)
{
    enum { PINGS = 5 };
    double start = 0.0, theirs = 0.0, offset = 0.0, best_rtt = -1.0;
    int rc = MPI_Barrier(c->comm);
    for (int r = 1; rc == MPI_SUCCESS && r < c->size; r++) {
        for (int k = 0; rc == MPI_SUCCESS && k < PINGS; k++) {
            if (c->rank == 0) {
                rc = MPI_Recv(NULL, 0, MPI_BYTE, r, PCOLL_TAG_CLOCK, c->comm, MPI_STATUS_IGNORE);
                theirs = MPI_Wtime();
                if (rc == MPI_SUCCESS) rc = MPI_Send(&theirs, 1, MPI_DOUBLE, r, PCOLL_TAG_CLOCK, c->comm);
            } else if (c->rank == r) {
                double t1 = MPI_Wtime();
                rc = MPI_Send(NULL, 0, MPI_BYTE, 0, PCOLL_TAG_CLOCK, c->comm);
                if (rc == MPI_SUCCESS) rc = MPI_Recv(&theirs, 1, MPI_DOUBLE, 0, PCOLL_TAG_CLOCK, c->comm, MPI_STATUS_IGNORE);
                double t2 = MPI_Wtime();
                if (best_rtt < 0 || t2 - t1 < best_rtt) {
                    best_rtt = t2 - t1;
                    offset = theirs - 0.5 * (t1 + t2);
                }
            }
        }
    }
    if (c->rank == 0) start = MPI_Wtime();
    if (rc == MPI_SUCCESS) rc = MPI_Bcast(&start, 1, MPI_DOUBLE, 0, c->comm);
    c->t0 = start - offset;
    return rc;
}

int pcoll_create(MPI_Fint fcomm, size_t count, const pcoll_options *opt, pcoll_t **out)
{
    int init = 0, fini = 0, level = 0;
    if (!out || !opt || count == 0 || !valid_options(opt)) return PCOLL_ERR_ARG;
    *out = NULL;
    MPI_Initialized(&init);
    MPI_Finalized(&fini);
    if (!init || fini) return PCOLL_ERR_THREAD;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE) return PCOLL_ERR_THREAD;
    MPI_Comm comm = MPI_Comm_f2c(fcomm);
    if (comm == MPI_COMM_NULL) return PCOLL_ERR_ARG;
    pcoll_t *c = calloc(1, sizeof *c);
    if (!c) return PCOLL_ERR_NOMEM;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    c->opt = *opt;
    c->ops = kind_ops(opt->kind);
    c->count = count;
    if (MPI_Comm_dup(comm, &c->comm) != MPI_SUCCESS) {
        free_context(c);
        return PCOLL_ERR_MPI;
    }
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    c->len = count + (size_t)META_WIDTH * (size_t)c->size;
    c->mask_words = ((size_t)c->size + 63) / 64;
    c->quorum = c->ops->quorum ? c->ops->quorum(c) : 1;
    c->ring = count * sizeof(float) >= (opt->ring_min_bytes ? opt->ring_min_bytes : PCOLL_RING_MIN_BYTES);
    int rc = c->len > INT_MAX || c->quorum > c->size ? PCOLL_ERR_ARG : allocate(c) ? PCOLL_OK : PCOLL_ERR_NOMEM;
    if (rc == PCOLL_OK && align_clock(c) != MPI_SUCCESS) rc = PCOLL_ERR_MPI;
    if (rc == PCOLL_OK) rc = pcoll_tokens_init(c);
    if (rc == PCOLL_OK) rc = pcoll_start_thread(c);
    if (rc != PCOLL_OK) {
        MPI_Comm_free(&c->comm);
        free_context(c);
        return rc;
    }
    *out = c;
    return PCOLL_OK;
}

/* Post n's contribution into the buffers the next round this rank takes part in reads: late (after round n started
 * here), as the kind keeps late posts; else app_buf. Whether it went into app_buf. */
static int take_in(pcoll_t *c, const float *contribution, int late)
{
    if (late && c->ops->late) {
        c->ops->late(c, contribution);
        return 0;
    }
    if (!late && c->ops->in_time)
        c->ops->in_time(c, contribution);
    else
        memcpy(c->app_buf, contribution, c->count * sizeof(float));
    return 1;
}

int pcoll_post(pcoll_t *c, const float *contribution)
{
    if (!c || !contribution) return PCOLL_ERR_ARG;
    int rc = PCOLL_OK;
    pthread_mutex_lock(&c->lock);
    if (c->failed) {
        rc = c->failed;
    } else if (c->posts != c->waits) {
        rc = PCOLL_ERR_STATE;
        snprintf(c->error, sizeof c->error, "post: the previous call was not waited for");
    } else {
        uint64_t n = c->posts;
        int late = c->cur > n || (c->in_round && c->cur == n), did = 0;
        int counts = !late && c->tokens && !c->ops->is_sync(c, n) && c->ops->counts(c, n, c->rank);
        c->t_post = pcoll_now(c);
        /* What already arrived may say that round n is activated: then this post is not news to anyone. */
        if (counts && !pcoll_activated(c, n)) rc = pcoll_tokens_poll(c, &did);
        if (rc == PCOLL_OK && counts && !pcoll_activated(c, n)) rc = pcoll_schedule_poll_first(c, &did);
        if (rc == PCOLL_OK && counts && !pcoll_activated(c, n)) {
            pcoll_tokens_post(c, n);
            /* A large copy-in takes long: the others learn of this post first. */
            if (c->ring) rc = pcoll_tokens_flush(c);
        }
        /* Without the lock for a large copy: a round in flight here moves meanwhile (its other members would wait
         * on this rank's part), but none starts, since the copy fills what the next one takes. */
        int unlocked = c->copying = c->ring;
        if (unlocked) pthread_mutex_unlock(&c->lock);
        int filled = take_in(c, contribution, late);
        if (unlocked) pthread_mutex_lock(&c->lock);
        c->copying = 0;
        if (filled) {
            c->app_full = 1;
            c->app_call = n;
        }
        c->posts++;
        /* Start this rank's part of the round, but leave its transfers to the waiter: a large result then goes
         * straight into the buffer that wait names. */
        if (rc == PCOLL_OK) rc = pcoll_kick(c);
    }
    c->app_left = MPI_Wtime();
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* Copy the oldest queued result (round c->waits) out and dequeue it. */
static void take_result(pcoll_t *c, float *out, pcoll_round *rec, int *fresh, unsigned char *mask)
{
    struct pcoll_result *q = &c->results[c->results_head];
    const uint64_t *bits = c->masks + q->record * c->mask_words;
    if (!q->delivered) memcpy(out, q->data, c->count * sizeof(float));
    if (rec) *rec = c->records[q->record];
    if (fresh) *fresh = q->fresh;
    for (int j = 0; mask && j < c->size; j++) mask[j] = (bits[j / 64] >> (j % 64)) & 1;
    c->results_head = (c->results_head + 1) % c->results_cap;
    c->results_count--;
    c->waits++;
}

int pcoll_wait(pcoll_t *c, float *out, pcoll_round *rec, int *fresh, unsigned char *mask)
{
    if (!c || !out) return PCOLL_ERR_ARG;
    int rc = PCOLL_OK;
    long ns = 0;
    double idle_since = MPI_Wtime();
    pthread_mutex_lock(&c->lock);
    if (c->posts != c->waits + 1) {
        snprintf(c->error, sizeof c->error, "wait: no call was posted");
        pthread_mutex_unlock(&c->lock);
        return PCOLL_ERR_STATE;
    }
    c->app_driving = 1;
    c->wait_out = out;
    while (c->results_count == 0) {
        int did = 0;
        rc = pcoll_progress(c, &did);
        if (rc || c->results_count) break;
        int in_round = c->in_round;
        pthread_mutex_unlock(&c->lock);
        double idle = MPI_Wtime() - idle_since;
        if (did) {
            idle_since = MPI_Wtime();
            ns = 0;
        } else if (idle > (in_round ? WAIT_ROUND_YIELD_S : WAIT_YIELD_S)) {
            pcoll_backoff(&ns, WAIT_SLEEP_CAP_NS);
        } else if (idle > WAIT_SPIN_S) {
            sched_yield();
        }
        pthread_mutex_lock(&c->lock);
    }
    if (rc == PCOLL_OK) take_result(c, out, rec, fresh, mask);
    c->app_driving = 0;
    c->wait_out = NULL;
    c->app_left = MPI_Wtime();
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int pcoll_test(pcoll_t *c, int *ready)
{
    if (!c || !ready) return PCOLL_ERR_ARG;
    int did = 0;
    pthread_mutex_lock(&c->lock);
    int rc = pcoll_progress(c, &did);
    *ready = rc == PCOLL_OK && c->posts == c->waits + 1 && c->results_count > 0;
    pthread_mutex_unlock(&c->lock);
    return rc;
}

size_t pcoll_num_rounds(pcoll_t *c)
{
    if (!c) return 0;
    pthread_mutex_lock(&c->lock);
    size_t n = c->nrecords;
    pthread_mutex_unlock(&c->lock);
    return n;
}

int pcoll_get_rounds(pcoll_t *c, size_t first, size_t n, pcoll_round *out)
{
    if (!c || (n && !out)) return PCOLL_ERR_ARG;
    pthread_mutex_lock(&c->lock);
    int ok = first <= c->nrecords && n <= c->nrecords - first;
    if (ok && n) memcpy(out, c->records + first, n * sizeof *out);
    pthread_mutex_unlock(&c->lock);
    return ok ? PCOLL_OK : PCOLL_ERR_ARG;
}

/* Drive progress (this thread alone) until req completes, or with req NULL until every round < closing_rounds
 * completed. */
static int drive(pcoll_t *c, MPI_Request *req)
{
    long ns = 0;
    for (int flag = 0; !flag;) {
        int did = 0, rc = pcoll_progress(c, &did);
        if (rc) return rc;
        if (req)
            PCOLL_MPI(c, MPI_Test(req, &flag, MPI_STATUS_IGNORE));
        else
            flag = c->cur >= c->closing_rounds && !c->in_round;
        if (did)
            ns = 0;
        else if (!flag)
            pcoll_backoff(&ns, WAIT_SLEEP_CAP_NS);
    }
    return PCOLL_OK;
}

static int finish_rounds(pcoll_t *c)
{
    MPI_Request req;
    PCOLL_MPI(c, MPI_Ibarrier(c->comm, &req));
    int rc = drive(c, &req);
    if (rc) return rc;
    /* Every rank is closing, so no new round can be activated: agree on how many were, anywhere. */
    uint64_t local = c->know[0] > c->posts ? c->know[0] : c->posts, rounds = 0;
    if (c->cur + (uint64_t)c->in_round > local) local = c->cur + (uint64_t)c->in_round;
    PCOLL_MPI(c, MPI_Iallreduce(&local, &rounds, 1, MPI_UINT64_T, MPI_MAX, c->comm, &req));
    rc = drive(c, &req);
    if (rc) return rc;
    c->closing_rounds = rounds;
    c->closing = 1;
    rc = drive(c, NULL);
    if (rc == PCOLL_OK) rc = pcoll_schedule_cancel(c); /* the first receive of a round nobody starts */
    return rc ? rc : pcoll_tokens_drain(c);
}

int pcoll_close(pcoll_t *c)
{
    if (!c) return PCOLL_ERR_ARG;
    pcoll_stop_thread(c);
    int rc = c->failed ? c->failed : finish_rounds(c);
    if (rc != PCOLL_OK) return rc; /* requests may still reference the buffers: keep them */
    MPI_Comm_free(&c->comm);
    free_context(c);
    return PCOLL_OK;
}

int pcoll_abort(pcoll_t *c)
{
    if (!c) return PCOLL_ERR_ARG;
    pcoll_stop_thread(c);
    return PCOLL_OK;
}

const char *pcoll_strerror(int status)
{
    switch (status) {
    case PCOLL_OK: return "success";
    case PCOLL_ERR_ARG: return "invalid argument or option";
    case PCOLL_ERR_STATE: return "call out of order";
    case PCOLL_ERR_THREAD: return "MPI is not initialised with MPI_THREAD_MULTIPLE";
    case PCOLL_ERR_MPI: return "an MPI call failed";
    case PCOLL_ERR_NOMEM: return "out of memory";
    default: return "unknown status";
    }
}

const char *pcoll_last_error(pcoll_t *c)
{
    return c ? c->error : "";
}
