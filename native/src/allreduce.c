/*
 * allreduce.c: allreduce schedules over a member list, run step by step with non-blocking point-to-point.
 *
 * Small vectors: recursive doubling over the whole vector (contribution and metadata, copied into c->work); when
 * the member count m is not a power of two, the first 2 * (m - p2) members fold in pairs first (even ones hand
 * their vector to the next odd one, which takes part for both, and get the result back at the end). The last
 * addition forms the result, divided, where the result goes.
 *
 * Large vectors: the metadata first (recursive doubling over its floats), so that the divisor is known before the
 * result is formed; then a ring over the contribution: a reduce-scatter in which every rank adds its own
 * contribution, read where the kind keeps it (never copied), to the partial sum it receives, its last addition
 * dividing and writing its segment of the result where the result goes; then an allgather of the result's
 * segments there. The result goes straight into the application's buffer when the application is waiting for
 * this very round, so a large result is never copied out.
 *
 * A round's schedule is built as soon as the round before it completed (its members follow from the round
 * number), and the receive of its first step is posted then, into c->scratch: a partner that starts the round
 * first is heard at once, and its message, whose metadata says what its sender knew, serves the activation as a
 * token would (activation.c).
 *
 * Every member ends with bitwise the same result: each partial sum is formed once (ring) or by both partners in
 * commutative order (recursive doubling), and every rank divides by the same divisor. Data messages carry one
 * tag; MPI's non-overtaking order between two ranks on the private communicator matches them, since every member
 * walks the same rounds and steps in the same order.
 */
#include "internal.h"

#include <string.h>

static struct pcoll_step *add_step(pcoll_t *c)
{
    struct pcoll_step *s = &c->steps[c->nsteps++];
    s->send_peer = s->recv_peer = -1;
    s->send_off = s->send_len = s->recv_off = s->recv_len = 0;
    s->send_from = s->recv_into = s->add_from = ROLE_WORK;
    s->op = OP_NONE;
    return s;
}

/* A recursive-doubling step over c->work[off, off + len): a send to send_peer and a receive from recv_peer, either
 * of them -1 for none, then op. */
static void rd_step(pcoll_t *c, int send_peer, int recv_peer, size_t off, size_t len, int op)
{
    struct pcoll_step *s = add_step(c);
    s->send_peer = send_peer;
    s->recv_peer = recv_peer;
    s->send_off = s->recv_off = off;
    s->send_len = send_peer >= 0 ? len : 0;
    s->recv_len = recv_peer >= 0 ? len : 0;
    s->op = (unsigned char)op;
}

/* Recursive doubling over c->work[off, off + len), in place. With final (the whole vector), the last addition
 * forms the result: it sums the metadata first, for the divisor, then divides the contribution's sum into where
 * the result goes (a member that hands the result on to a folded partner keeps it in c->work for that). */
static void recursive_doubling(pcoll_t *c, const int *members, int m, int me, size_t off, size_t len, int final)
{
    int p2 = 1;
    while (p2 * 2 <= m) p2 *= 2;
    int rem = m - p2, v;
    /* the first message goes to a member whose first receive it is: unless that member takes a folded one's */
    if (c->nsteps == 0) c->first_matched = me < 2 * rem || ((me - rem) ^ 1) >= rem;
    if (me < 2 * rem && me % 2 == 0) {
        rd_step(c, members[me + 1], -1, off, len, OP_NONE);
        rd_step(c, -1, members[me + 1], off, len, final ? OP_FORMED : OP_NONE);
        return;
    }
    if (me < 2 * rem) {
        rd_step(c, -1, members[me - 1], off, len, OP_SUM);
        v = me / 2;
    } else {
        v = me - rem;
    }
    for (int mask = 1; mask < p2; mask <<= 1) {
        int pv = v ^ mask, peer = members[pv < rem ? 2 * pv + 1 : pv + rem];
        rd_step(c, peer, peer, off, len, final && mask * 2 >= p2 ? OP_FINAL : OP_SUM);
    }
    if (me < 2 * rem) {
        rd_step(c, members[me - 1], -1, off, len, OP_NONE);
        c->result_in_work = final;
    }
}

static size_t segment_start(const pcoll_t *c, int k, int m)
{
    return (size_t)((unsigned long long)c->count * (unsigned)k / (unsigned)m);
}

static struct pcoll_step *ring_step(pcoll_t *c, int next, int prev, int send_seg, int recv_seg, int m)
{
    struct pcoll_step *s = add_step(c);
    s->send_peer = next;
    s->recv_peer = prev;
    s->send_off = segment_start(c, send_seg, m);
    s->send_len = segment_start(c, send_seg + 1, m) - s->send_off;
    s->recv_off = segment_start(c, recv_seg, m);
    s->recv_len = segment_start(c, recv_seg + 1, m) - s->recv_off;
    return s;
}

/* The ring over the contribution's count floats (m >= 2). */
static void ring(pcoll_t *c, const int *members, int m, int me)
{
    int next = members[(me + 1) % m], prev = members[(me + m - 1) % m];
    for (int k = 0; k < m - 1; k++) {
        struct pcoll_step *s = ring_step(c, next, prev, (me - k + 2 * m) % m, (me - k - 1 + 2 * m) % m, m);
        s->send_from = k == 0 ? ROLE_SRC : ROLE_WORK;
        s->add_from = ROLE_SRC;
        s->op = k == m - 2 ? OP_FINAL : OP_SUM;
    }
    for (int k = 0; k < m - 1; k++) {
        struct pcoll_step *s = ring_step(c, next, prev, (me + 1 - k + 2 * m) % m, (me - k + 2 * m) % m, m);
        s->send_from = s->recv_into = ROLE_DST;
    }
}

int pcoll_schedule_build(pcoll_t *c, const int *members, int m)
{
    int me = -1;
    for (int i = 0; i < m; i++)
        if (members[i] == c->rank) me = i;
    if (me < 0) return pcoll_fail(c, PCOLL_ERR_ARG, "schedule: rank not in its group", MPI_SUCCESS);
    c->nsteps = c->step = c->step_posted = 0;
    c->result_in_work = 0;
    if (m == 1) return PCOLL_OK;
    if (c->ring) {
        recursive_doubling(c, members, m, me, c->count, c->len - c->count, 0);
        ring(c, members, m, me);
    } else {
        recursive_doubling(c, members, m, me, 0, c->len, 1);
    }
    return PCOLL_OK;
}

/* The steps of round c->cur (its members from the kind), without touching any vector. */
static int build(pcoll_t *c)
{
    int m = 0;
    c->group = c->ops->group(c, c->cur, c->members, &m);
    c->first_early = c->first_read = 0;
    c->step_reqs[0] = c->step_reqs[1] = MPI_REQUEST_NULL;
    c->sched_round = c->cur + 1;
    return pcoll_schedule_build(c, c->members, m);
}

/* Whether step s receives the round's metadata into c->scratch (the first step of every member but a folded
 * one, whose first receive is the result). */
static int receives_metadata(const pcoll_t *c, const struct pcoll_step *s)
{
    return s->recv_len > 0 && (s->op == OP_SUM || s->op == OP_FINAL) && s->recv_off <= c->count &&
           s->recv_off + s->recv_len == c->len;
}

int pcoll_schedule_prepare(pcoll_t *c, int *did)
{
    if (c->sched_round != c->cur + 1) {
        int rc = build(c);
        if (rc) return rc;
    }
    if (c->in_round || c->first_early || c->nsteps == 0 || !receives_metadata(c, &c->steps[0])) return PCOLL_OK;
    const struct pcoll_step *s = &c->steps[0];
    PCOLL_MPI(c, MPI_Irecv(c->scratch, (int)s->recv_len, MPI_FLOAT, s->recv_peer, PCOLL_TAG_DATA, c->comm,
                           &c->step_reqs[0]));
    c->first_early = 1;
    *did = 1;
    return PCOLL_OK;
}

/* The first message of round c->cur, received: what its metadata tells the activation (not for synchronous
 * rounds, which need none). */
static void read_first(pcoll_t *c)
{
    const struct pcoll_step *s = &c->steps[0];
    c->first_read = 1;
    if (c->tokens && !c->ops->is_sync(c, c->cur))
        pcoll_tokens_data(c, c->cur, s->recv_peer, c->scratch + (c->count - s->recv_off));
}

int pcoll_schedule_poll_first(pcoll_t *c, int *did)
{
    if (!c->first_early || c->first_read) return PCOLL_OK;
    int flag = 0;
    PCOLL_MPI(c, MPI_Test(&c->step_reqs[0], &flag, MPI_STATUS_IGNORE));
    if (flag) {
        read_first(c);
        *did = 1;
    }
    return PCOLL_OK;
}

int pcoll_schedule_first_peer(const pcoll_t *c)
{
    return c->nsteps > 0 && c->steps[0].send_len > 0 && c->first_matched ? c->steps[0].send_peer : -1;
}

int pcoll_schedule_cancel(pcoll_t *c)
{
    if (c->in_round || !c->first_early || c->step_reqs[0] == MPI_REQUEST_NULL) return PCOLL_OK;
    PCOLL_MPI(c, MPI_Cancel(&c->step_reqs[0]));
    PCOLL_MPI(c, MPI_Wait(&c->step_reqs[0], MPI_STATUS_IGNORE));
    c->first_early = 0;
    c->sched_round = 0;
    return PCOLL_OK;
}

static const float *role(const pcoll_t *c, int r)
{
    switch (r) {
    case ROLE_SRC: return c->src;
    case ROLE_DST: return c->dst;
    default: return c->work;
    }
}

static int post_step(pcoll_t *c, const struct pcoll_step *s)
{
    int early = c->step == 0 && c->first_early;
    if (!early) c->step_reqs[0] = MPI_REQUEST_NULL;
    c->step_reqs[1] = MPI_REQUEST_NULL;
    if (s->recv_len > 0 && !early) {
        int summed = s->op == OP_SUM || s->op == OP_FINAL;
        float *dst = summed ? c->scratch : (s->recv_into == ROLE_DST ? c->dst : c->work) + s->recv_off;
        PCOLL_MPI(c, MPI_Irecv(dst, (int)s->recv_len, MPI_FLOAT, s->recv_peer, PCOLL_TAG_DATA, c->comm,
                               &c->step_reqs[0]));
    }
    if (s->send_len > 0)
        PCOLL_MPI(c, MPI_Isend(role(c, s->send_from) + s->send_off, (int)s->send_len, MPI_FLOAT, s->send_peer,
                               PCOLL_TAG_DATA, c->comm, &c->step_reqs[1]));
    c->step_posted = 1;
    return PCOLL_OK;
}

int pcoll_schedule_start(pcoll_t *c)
{
    if (c->nsteps > 0 && !c->ring && c->src != c->work) {
        memcpy(c->work, c->src, c->count * sizeof(float)); /* recursive doubling sums in place */
        c->src = c->work;
    }
    return c->step < c->nsteps && !c->step_posted ? post_step(c, &c->steps[c->step]) : PCOLL_OK;
}

/* The received floats of a completed step s. */
static void apply(pcoll_t *c, const struct pcoll_step *s)
{
    size_t off = s->recv_off, n = s->recv_len;
    if (s->op == OP_SUM) {
        pcoll_vector_sum(c->work + off, role(c, s->add_from) + off, c->scratch, 1.0f, n);
    } else if (s->op == OP_FINAL) {
        if (off + n > c->count) { /* recursive doubling: the metadata came along; sum it first, for the divisor */
            size_t meta = off + n - c->count;
            pcoll_vector_sum(c->work + c->count, c->work + c->count, c->scratch + (n - meta), 1.0f, meta);
            n -= meta;
        }
        c->dst = pcoll_round_dst(c);
        pcoll_vector_sum(c->dst + off, role(c, s->add_from) + off, c->scratch, pcoll_round_divisor(c), n);
    } else if (s->op == OP_FORMED) {
        c->dst = c->work;
    }
}

int pcoll_schedule_progress(pcoll_t *c, int *done, int *did)
{
    while (c->step < c->nsteps) {
        const struct pcoll_step *s = &c->steps[c->step];
        if (!c->step_posted) {
            int rc = post_step(c, s);
            if (rc) return rc;
            *did = 1;
        }
        int flag = 0;
        PCOLL_MPI(c, MPI_Testall(2, c->step_reqs, &flag, MPI_STATUSES_IGNORE));
        if (!flag) break;
        if (c->step == 0 && !c->first_read && receives_metadata(c, s)) read_first(c);
        apply(c, s);
        c->step++;
        c->step_posted = 0;
        *did = 1;
    }
    *done = c->step >= c->nsteps;
    if (*done) c->sched_round = 0;
    return PCOLL_OK;
}
