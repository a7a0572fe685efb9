/*
 * progress.c: the progress engine. pcoll_progress (called with c->lock held, by whichever thread drives) starts the
 * next round when this rank posted or learnt it was activated, advances its allreduce schedule and, when it
 * completes, records it and queues its result for pcoll_wait; it reads activation tokens (and the next round's
 * first message) while it waits for either, and forwards what they oblige (activation.c).
 *
 * The progress thread calls it only while the application is not waiting and has not returned from post or wait
 * for 100 us: a thread that stepped in between an application's back-to-back calls only contended with it (for
 * the lock, MPI's own lock and the core), and small rounds took 2-6x longer in one block out of four. While a
 * round is in flight it polls, yielding the core between polls, until 1 ms passed without progress (a large
 * transfer moves only when polled, and a straggler's thread that slept between polls made the fast ranks wait on
 * it), then sleeps; otherwise it backs off exponentially (from 1 us, doubling), sleeping in nanosleep (1 ns timer
 * slack on Linux): up to 20 us while a round is in flight; up to 50 us while the application computes (within
 * 0.1 s of its last call), since a straggler's fast partners may activate its next round any moment and every
 * microsecond it takes to notice is theirs to wait (a 0.5 ms cap cost them a quarter of a millisecond on
 * average); up to 0.5 ms when idle longer or while the application drives. It never spins between rounds and is
 * never woken on the critical path.
 */
#include "internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

enum { IDLE_CAP_NS = 500000, WATCH_CAP_NS = 50000, ACTIVE_CAP_NS = 20000, FIRST_SLEEP_NS = 1000 };
#define ACTIVE_YIELD_S 1e-3
#define APP_GRACE_S 100e-6
#define WATCH_S 0.1

double pcoll_now(const pcoll_t *c)
{
    return MPI_Wtime() - c->t0;
}

void pcoll_backoff(long *ns, long cap_ns)
{
    *ns = *ns <= 0 ? FIRST_SLEEP_NS : (*ns * 2 > cap_ns ? cap_ns : *ns * 2);
    struct timespec ts = {*ns / 1000000000L, *ns % 1000000000L};
    nanosleep(&ts, NULL);
}

int pcoll_fail(pcoll_t *c, int status, const char *what, int mpi_code)
{
    char mpi_msg[MPI_MAX_ERROR_STRING] = "";
    int n = 0;
    if (mpi_code != MPI_SUCCESS) MPI_Error_string(mpi_code, mpi_msg, &n);
    snprintf(c->error, sizeof c->error, "%s%s%s", what, n ? ": " : "", mpi_msg);
    if (!c->failed) c->failed = status;
    return status;
}

/* Round n may start here: this rank posted call n (its contribution is then fixed), or knows the round was
 * activated; a synchronous round only on the post. */
static int can_start(const pcoll_t *c, uint64_t n)
{
    if (c->copying) return 0;
    if (c->closing) return n < c->closing_rounds;
    return c->posts > n || (!c->ops->is_sync(c, n) && pcoll_activated(c, n));
}

/* Take this rank's contribution, fill its metadata slot and post the first step, with the activation messages
 * this start owes (the first step's message standing for one of them where it can: activation.c). */
static int start_round(pcoll_t *c)
{
    uint64_t n = c->cur;
    int did = 0, data_first = 1, sync = c->ops->is_sync(c, n);
    int rc = pcoll_schedule_prepare(c, &did);
    if (rc) return rc;
    c->ops->contribute(c, n, &c->take);
    int flags = sync ? 0 : pcoll_tokens_plan(c, n, pcoll_schedule_first_peer(c), &data_first);
    c->start_hops = !sync && !c->take.fresh && pcoll_activated(c, n) ? c->know_hops : 0;
    float *meta = c->work + c->count;
    memset(meta, 0, (c->len - c->count) * sizeof(float));
    float *mine = meta + (size_t)META_WIDTH * (size_t)c->rank;
    mine[META_FLAGS] = (float)((c->take.gradients > 0 ? FLAG_CONTRIBUTED : 0) | (c->take.fresh ? FLAG_FRESH : 0) |
                               flags);
    mine[META_GRADIENTS] = (float)c->take.gradients;
    if (c->take.fresh) {
        mine[META_T_HI] = (float)c->t_post;
        mine[META_T_LO] = (float)(c->t_post - (double)mine[META_T_HI]);
    }
    c->in_round = 1;
    c->dst = NULL;
    if (!data_first) rc = pcoll_tokens_flush(c);
    if (rc == PCOLL_OK) rc = pcoll_schedule_start(c);
    return rc == PCOLL_OK && data_first ? pcoll_tokens_flush(c) : rc;
}

int pcoll_kick(pcoll_t *c)
{
    if (c->failed) return c->failed;
    if (c->in_round || !can_start(c, c->cur)) return pcoll_tokens_flush(c);
    return start_round(c);
}

/* Make room for one more record (with its mask) and one more queued result. */
static int reserve(pcoll_t *c)
{
    if (c->nrecords == c->records_cap) {
        size_t cap = c->records_cap ? 2 * c->records_cap : 64;
        pcoll_round *r = realloc(c->records, cap * sizeof *r);
        if (!r) return -1;
        c->records = r;
        uint64_t *m = realloc(c->masks, cap * c->mask_words * sizeof *m);
        if (!m) return -1;
        c->masks = m;
        c->records_cap = cap;
    }
    if (c->results_count < c->results_cap) return 0;
    size_t old = c->results_cap, cap = old ? old * 2 : 8;
    struct pcoll_result *q = calloc(cap, sizeof *q);
    if (!q) return -1;
    for (size_t i = 0; i < old; i++) q[i] = c->results[(c->results_head + i) % old];
    free(c->results);
    c->results = q;
    c->results_cap = cap;
    c->results_head = 0;
    return 0;
}

/* Read the metadata slots of the reduced vector into the round record and (unless NULL) the contributor mask. */
static void summarise(const pcoll_t *c, pcoll_round *r, uint64_t *mask)
{
    const float *meta = c->work + c->count;
    int last = -1, sync = c->ops->is_sync(c, c->cur);
    double last_t = 0.0;
    if (mask) memset(mask, 0, c->mask_words * sizeof *mask);
    r->contributors = r->fresh = r->gradients = 0;
    for (int j = 0; j < c->size; j++) {
        const float *s = meta + (size_t)META_WIDTH * (size_t)j;
        int flags = (int)s[META_FLAGS];
        r->gradients += (int)s[META_GRADIENTS];
        if (flags & FLAG_CONTRIBUTED) {
            r->contributors++;
            if (mask) mask[j / 64] |= UINT64_C(1) << (j % 64);
        }
        if (!(flags & FLAG_FRESH)) continue;
        r->fresh++;
        if (last < 0 || pcoll_post_time(s) > last_t) {
            last = j;
            last_t = pcoll_post_time(s);
        }
    }
    r->kind = sync ? c->ops->sync_kind : c->ops->async_kind;
    r->initiator = last; /* a synchronous round: the last to post */
    r->t_trigger = last_t;
}

/* The initiator of a completed round that was not synchronous: the kind's, from the metadata; else (no member
 * posted: a wagma group round activated elsewhere, or a round close started) the rank whose message told this
 * rank of the activation, and when it arrived; else -1. */
static void name_initiator(const pcoll_t *c, pcoll_round *r)
{
    if (c->ops->is_sync(c, c->cur)) return;
    r->initiator = c->ops->initiator(c, c->cur, c->work + c->count, &r->t_trigger);
    if (r->initiator < 0 && c->hint_round == c->cur + 1) {
        r->initiator = c->hint_src;
        r->t_trigger = c->hint_time;
    } else if (r->initiator < 0) {
        r->t_trigger = -1.0;
    }
}

float pcoll_round_divisor(pcoll_t *c)
{
    pcoll_round r;
    summarise(c, &r, NULL);
    return c->ops->divisor(c, &r);
}

float *pcoll_round_dst(pcoll_t *c)
{
    int waited_for = c->wait_out && c->results_count == 0 && c->cur == c->waits && !c->result_in_work;
    return waited_for ? c->wait_out : c->work;
}

static int finish_round(pcoll_t *c)
{
    if (reserve(c)) return pcoll_fail(c, PCOLL_ERR_NOMEM, "round records", MPI_SUCCESS);
    pcoll_round *r = &c->records[c->nrecords];
    r->round = c->cur;
    r->group = c->group;
    r->hops = c->start_hops;
    summarise(c, r, c->masks + c->nrecords * c->mask_words);
    name_initiator(c, r);
    r->t_done = pcoll_now(c);
    struct pcoll_result *q = &c->results[(c->results_head + c->results_count) % c->results_cap];
    if (!c->dst) { /* recursive doubling, or a group of one: the result is formed here */
        float divisor = c->ops->divisor(c, r);
        c->dst = pcoll_round_dst(c);
        if (c->dst != c->src || divisor != 1.0f) pcoll_vector_divide(c->dst, c->src, divisor, c->count);
    }
    q->delivered = c->dst != c->work;
    if (!q->delivered) {
        if (!q->data && !(q->data = pcoll_vector_alloc(c->len, 0)))
            return pcoll_fail(c, PCOLL_ERR_NOMEM, "round result", MPI_SUCCESS);
        float *t = q->data;
        q->data = c->work;
        c->work = t;
    }
    q->fresh = c->take.fresh;
    q->record = c->nrecords;
    c->results_count++;
    c->nrecords++;
    c->in_round = 0;
    c->cur++;
    pcoll_tokens_completed(c, c->cur - 1); /* a completed round was activated, whether or not this rank was told */
    return PCOLL_OK;
}

int pcoll_progress(pcoll_t *c, int *did)
{
    if (c->failed) return c->failed;
    int rc = PCOLL_OK;
    while (rc == PCOLL_OK) {
        if (!c->in_round) {
            rc = pcoll_schedule_prepare(c, did);
            if (rc == PCOLL_OK && !can_start(c, c->cur)) rc = pcoll_tokens_poll(c, did);
            if (rc == PCOLL_OK && !can_start(c, c->cur)) rc = pcoll_schedule_poll_first(c, did);
            if (rc || !can_start(c, c->cur)) break;
            rc = start_round(c);
            *did = 1;
            continue;
        }
        int done = 0;
        rc = pcoll_schedule_progress(c, &done, did);
        if (rc || !done) break;
        rc = finish_round(c);
        /* A waiting application has its result: let it return and post before another round starts here, or its
         * next contribution would miss a round that another rank's token already activated. */
        if (c->app_driving) break;
    }
    /* Forward what other ranks' tokens oblige (in a round too, so that those waiting on this rank's edges do not
     * wait for the round). */
    if (rc == PCOLL_OK && c->in_round) rc = pcoll_tokens_poll(c, did);
    return rc == PCOLL_OK ? pcoll_tokens_flush(c) : rc;
}

static void *progress_thread(void *arg)
{
    pcoll_t *c = arg;
    long ns = 0;
    double last_did = 0.0; /* when a poll last made progress */
#ifdef PR_SET_TIMERSLACK
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
    pthread_mutex_lock(&c->lock);
    while (!c->stop) {
        int did = 0, active = 0, driving = c->app_driving;
        if (c->failed) {
            pthread_cond_wait(&c->cond, &c->lock); /* the application reports it; wait to be stopped */
            continue;
        }
        /* While the application waits it drives progress itself, and one that left post or wait moments ago is
         * likely back soon: keep out of its way (and off the cores). */
        double left = MPI_Wtime() - c->app_left;
        if (driving || left < APP_GRACE_S) {
            ns = IDLE_CAP_NS;
        } else {
            pcoll_progress(c, &did);
            active = c->in_round;
        }
        pthread_mutex_unlock(&c->lock);
        double now = MPI_Wtime();
        if (did || !active) last_did = now;
        if (did) {
            ns = 0;
        } else if (active && now - last_did < ACTIVE_YIELD_S) {
            sched_yield(); /* a transfer in flight moves only when polled: stay close to it for a while */
        } else {
            pcoll_backoff(&ns, active ? ACTIVE_CAP_NS : !driving && left < WATCH_S ? WATCH_CAP_NS : IDLE_CAP_NS);
        }
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int pcoll_start_thread(pcoll_t *c)
{
    if (pthread_create(&c->thread, NULL, progress_thread, c) != 0)
        return pcoll_fail(c, PCOLL_ERR_NOMEM, "cannot start the progress thread", MPI_SUCCESS);
    c->thread_started = 1;
    return PCOLL_OK;
}

void pcoll_stop_thread(pcoll_t *c)
{
    if (!c->thread_started) return;
    pthread_mutex_lock(&c->lock);
    c->stop = 1;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL);
    c->thread_started = 0;
}
