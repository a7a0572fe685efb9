/*
 * allreduce.c: allreduce schedules over a member list, run step by step with non-blocking point-to-point.
 *
 * Small vectors: recursive doubling; when the member count m is not a power of two, the first 2 * (m - p2) members
 * fold in pairs first (even ones hand their vector to the next odd one, which takes part for both, and get the
 * result back at the end). Large vectors: ring, a reduce-scatter then an allgather over m segments. Every member
 * ends with bitwise the same sum: each partial sum is formed once (ring) or by both partners in commutative order
 * (recursive doubling). Data messages carry one tag; MPI's non-overtaking order between two ranks on the private
 * communicator matches them, since every member walks the same rounds and steps in the same order.
 */
#include "internal.h"

static struct pcoll_step *add_step(pcoll_t *c)
{
    struct pcoll_step *s = &c->steps[c->nsteps++];
    s->send_peer = s->recv_peer = -1;
    s->send_off = s->send_len = s->recv_off = s->recv_len = 0;
    s->reduce = 0;
    return s;
}

static void recursive_doubling(pcoll_t *c, const int *members, int m, int me)
{
    int p2 = 1;
    while (p2 * 2 <= m) p2 *= 2;
    int rem = m - p2, v;
    if (me < 2 * rem && me % 2 == 0) {
        struct pcoll_step *s = add_step(c);
        s->send_peer = members[me + 1];
        s->send_len = c->len;
        s = add_step(c);
        s->recv_peer = members[me + 1];
        s->recv_len = c->len;
        return;
    }
    if (me < 2 * rem) {
        struct pcoll_step *s = add_step(c);
        s->recv_peer = members[me - 1];
        s->recv_len = c->len;
        s->reduce = 1;
        v = me / 2;
    } else {
        v = me - rem;
    }
    for (int mask = 1; mask < p2; mask <<= 1) {
        int pv = v ^ mask;
        int peer = members[pv < rem ? 2 * pv + 1 : pv + rem];
        struct pcoll_step *s = add_step(c);
        s->send_peer = s->recv_peer = peer;
        s->send_len = s->recv_len = c->len;
        s->reduce = 1;
    }
    if (me < 2 * rem) {
        struct pcoll_step *s = add_step(c);
        s->send_peer = members[me - 1];
        s->send_len = c->len;
    }
}

static size_t segment_start(const pcoll_t *c, int k, int m)
{
    return (size_t)((unsigned long long)c->len * (unsigned)k / (unsigned)m);
}

static void ring_step(pcoll_t *c, int next, int prev, int send_seg, int recv_seg, int m, int reduce)
{
    struct pcoll_step *s = add_step(c);
    s->send_peer = next;
    s->recv_peer = prev;
    s->send_off = segment_start(c, send_seg, m);
    s->send_len = segment_start(c, send_seg + 1, m) - s->send_off;
    s->recv_off = segment_start(c, recv_seg, m);
    s->recv_len = segment_start(c, recv_seg + 1, m) - s->recv_off;
    s->reduce = reduce;
}

static void ring(pcoll_t *c, const int *members, int m, int me)
{
    int next = members[(me + 1) % m], prev = members[(me + m - 1) % m];
    for (int s = 0; s < m - 1; s++) ring_step(c, next, prev, (me - s + 2 * m) % m, (me - s - 1 + 2 * m) % m, m, 1);
    for (int s = 0; s < m - 1; s++) ring_step(c, next, prev, (me + 1 - s + 2 * m) % m, (me - s + 2 * m) % m, m, 0);
}

int pcoll_schedule_build(pcoll_t *c, const int *members, int m)
{
    int me = -1;
    for (int i = 0; i < m; i++)
        if (members[i] == c->rank) me = i;
    if (me < 0) return pcoll_fail(c, PCOLL_ERR_ARG, "schedule: rank not in its group", MPI_SUCCESS);
    c->nsteps = c->step = c->step_posted = 0;
    if (m == 1) return PCOLL_OK;
    size_t ring_min = c->opt.ring_min_bytes ? c->opt.ring_min_bytes : 65536;
    if (c->len * sizeof(float) >= ring_min)
        ring(c, members, m, me);
    else
        recursive_doubling(c, members, m, me);
    return PCOLL_OK;
}

static int post_step(pcoll_t *c, const struct pcoll_step *s)
{
    c->step_reqs[0] = c->step_reqs[1] = MPI_REQUEST_NULL;
    if (s->recv_len > 0) {
        float *dst = s->reduce ? c->scratch : c->work + s->recv_off;
        PCOLL_MPI(c, MPI_Irecv(dst, (int)s->recv_len, MPI_FLOAT, s->recv_peer, PCOLL_TAG_DATA, c->comm,
                               &c->step_reqs[0]));
    }
    if (s->send_len > 0)
        PCOLL_MPI(c, MPI_Isend(c->work + s->send_off, (int)s->send_len, MPI_FLOAT, s->send_peer, PCOLL_TAG_DATA,
                               c->comm, &c->step_reqs[1]));
    c->step_posted = 1;
    return PCOLL_OK;
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
        if (s->reduce) pcoll_vector_add(c->work + s->recv_off, c->scratch, s->recv_len);
        c->step++;
        c->step_posted = 0;
        *did = 1;
    }
    *done = c->step >= c->nsteps;
    return PCOLL_OK;
}
