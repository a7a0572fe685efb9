/*
 * activation.c: activation tokens. A rank whose post counts towards activating round n sends a token carrying the
 * 64-bit id n straight to every other rank (P - 1 small sends, so concurrent posters of one round need no
 * forwarding and merge trivially); every rank keeps a receive of tokens standing for each peer (a receive from
 * MPI_ANY_SOURCE costs far more per poll in MPICH). A token for round m means every round < m was activated too (its
 * sender completed round m - 1, which some post of call m - 1 must have activated), so a rank keeps only the
 * watermark "rounds < activated are activated" and ignores tokens below it. Round m itself is activated once
 * c->quorum posts of call m are known here (the rank's own and tokens): one for every kind but quorum. Tokens of
 * call m are counted only while activated == m, and a token of a later call raises the watermark past m, so one
 * counter suffices. Sent and received tokens are counted per peer so that close can drain the ones still in
 * flight.
 */
#include "internal.h"

#include <stdlib.h>

static int post_token_receive(pcoll_t *c, int peer)
{
    PCOLL_MPI(c, MPI_Irecv(&c->token_in[peer], 1, MPI_UINT64_T, peer, PCOLL_TAG_TOKEN, c->comm,
                           &c->token_reqs[peer]));
    return PCOLL_OK;
}

int pcoll_tokens_init(pcoll_t *c)
{
    int rc = PCOLL_OK;
    for (int peer = 0; peer < c->size && rc == PCOLL_OK; peer++) {
        c->token_reqs[peer] = MPI_REQUEST_NULL;
        if (peer != c->rank) rc = post_token_receive(c, peer);
    }
    return rc;
}

int pcoll_tokens_send(pcoll_t *c, uint64_t n)
{
    if (c->size == 1) return PCOLL_OK;
    struct pcoll_tokens *t = c->token_free;
    if (t) {
        c->token_free = t->next;
    } else {
        t = malloc(sizeof *t);
        if (t) t->reqs = malloc((size_t)(c->size - 1) * sizeof(MPI_Request));
        if (!t || !t->reqs) {
            free(t);
            return pcoll_fail(c, PCOLL_ERR_NOMEM, "token batch", MPI_SUCCESS);
        }
    }
    t->id = n;
    t->n = 0;
    t->next = c->token_out;
    c->token_out = t;
    for (int k = 1; k < c->size; k++) {
        int peer = (c->rank + k) % c->size;
        PCOLL_MPI(c, MPI_Isend(&t->id, 1, MPI_UINT64_T, peer, PCOLL_TAG_TOKEN, c->comm, &t->reqs[t->n]));
        t->n++;
        c->tokens_sent[peer]++;
    }
    return PCOLL_OK;
}

/* One more counting post of call n known here, this rank's own or a peer's token (n >= c->activated): its poster
 * completed round n - 1, so every round < n was activated. Returns 1 if it completes the quorum: round n is
 * activated too. */
int pcoll_tokens_count(pcoll_t *c, uint64_t n)
{
    c->activated = n;
    if (c->counted_round != n + 1) {
        c->counted_round = n + 1;
        c->counted = 0;
    }
    if (++c->counted < c->quorum) return 0;
    c->activated = n + 1;
    return 1;
}

/* Move the batches whose sends all completed to the free list. */
static int reap_sent(pcoll_t *c)
{
    struct pcoll_tokens **p = &c->token_out;
    while (*p) {
        int done = 0;
        PCOLL_MPI(c, MPI_Testall((*p)->n, (*p)->reqs, &done, MPI_STATUSES_IGNORE));
        if (done) {
            struct pcoll_tokens *t = *p;
            *p = t->next;
            t->next = c->token_free;
            c->token_free = t;
        } else {
            p = &(*p)->next;
        }
    }
    return PCOLL_OK;
}

int pcoll_tokens_poll(pcoll_t *c, int *did)
{
    if (c->size == 1) return PCOLL_OK;
    int ndone = 0;
    PCOLL_MPI(c, MPI_Testsome(c->size, c->token_reqs, &ndone, c->token_done, MPI_STATUSES_IGNORE));
    for (int i = 0; i < ndone && ndone != MPI_UNDEFINED; i++) {
        int src = c->token_done[i];
        *did = 1;
        c->tokens_received[src]++;
        if (c->token_in[src] >= c->activated && pcoll_tokens_count(c, c->token_in[src])) {
            c->hint_round = c->token_in[src] + 1;
            c->hint_src = src;
            c->hint_time = pcoll_now(c);
        }
        int rc = post_token_receive(c, src);
        if (rc) return rc;
    }
    return c->token_out ? reap_sent(c) : PCOLL_OK;
}

/* Collective (close): receive every token still in flight to this rank, then retire the standing receive. */
int pcoll_tokens_drain(pcoll_t *c)
{
    if (c->size == 1) return PCOLL_OK;
    uint64_t *expect = calloc((size_t)c->size, sizeof *expect);
    if (!expect) return pcoll_fail(c, PCOLL_ERR_NOMEM, "token drain", MPI_SUCCESS);
    MPI_Request req;
    int rc = MPI_Ialltoall(c->tokens_sent, 1, MPI_UINT64_T, expect, 1, MPI_UINT64_T, c->comm, &req);
    long ns = 0;
    for (int done = 0, all = 0; rc == MPI_SUCCESS && !(done && all);) {
        int did = 0;
        if (!done) rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS && pcoll_tokens_poll(c, &did) != PCOLL_OK) break;
        all = 1;
        for (int r = 0; done && r < c->size; r++) all &= c->tokens_received[r] >= expect[r];
        if (!did) pcoll_backoff(&ns, 100000);
    }
    free(expect);
    if (rc != MPI_SUCCESS) return pcoll_fail(c, PCOLL_ERR_MPI, "MPI_Ialltoall", rc);
    if (c->failed) return c->failed;
    for (int peer = 0; peer < c->size; peer++) {
        if (peer == c->rank) continue;
        PCOLL_MPI(c, MPI_Cancel(&c->token_reqs[peer]));
        PCOLL_MPI(c, MPI_Wait(&c->token_reqs[peer], MPI_STATUS_IGNORE));
    }
    for (struct pcoll_tokens *t = c->token_out; t; t = t->next)
        PCOLL_MPI(c, MPI_Waitall(t->n, t->reqs, MPI_STATUSES_IGNORE));
    return PCOLL_OK;
}

void pcoll_tokens_free(pcoll_t *c)
{
    struct pcoll_tokens *lists[] = {c->token_out, c->token_free};
    for (int i = 0; i < 2; i++) {
        while (lists[i]) {
            struct pcoll_tokens *t = lists[i];
            lists[i] = t->next;
            free(t->reqs);
            free(t);
        }
    }
    c->token_out = c->token_free = NULL;
}
