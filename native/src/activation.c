/*
 * activation.c: how a round that some ranks have not posted for yet gets started everywhere, in O(log P) message
 * latencies.
 *
 * A rank that posted call n starts its part of round n at once (its contribution is then fixed: nothing can
 * change it before the round starts), so a round whose ranks all posted needs no activation message at all, and
 * one whose reduction completes is always a round the rules allow (its members all posted, or one was told it
 * was activated). Activation messages exist for the ranks that have not posted: they must start with pending
 * gradients (or zeros) once k posts of call n are known (k = c->quorum: one for eager-solo, wagma and
 * eager-majority, whose only counting post is init(n)'s; k = P needs none, as a rank cannot be needed before its
 * own post).
 *
 * What travels is knowledge, a lattice: (a, B) says rounds < a are activated and the ranks in B posted call a
 * (B only where 1 < k < P, to count). Two pieces join by taking the larger round, or the union at the same round;
 * k posts make (a + 1, {}). Every rank keeps what it knows, and per edge what it owes and what it sent.
 *
 * The edges form a hypercube over virtual ranks, as recursive doubling does: with p2 the largest power of two
 * <= P and rem = P - p2, the first 2 rem ranks pair up (an even rank is folded into the odd one above it, which
 * takes its place); dimension j joins the virtual ranks that differ in bit j. A piece learnt from one's own post
 * is owed on every edge; received on dimension j, on the dimensions above j and on the fold edge; received by an
 * odd rank from its folded partner, on every dimension; received by a folded rank, nowhere. Sends go in that
 * order (dimensions ascending, the fold edge last), and a token carries what its edge is owed, nothing more. So
 * each post's news is a binomial tree broadcast of its own: it reaches a virtual rank whose offset from the
 * poster has highest bit j after at most j + 1 messages, counting a rank's successive sends of it as a chain,
 * and any rank after at most ceil(log2 P) + 1 (log2 P when P is a power of two). Every piece carries that count
 * (its hops), and a rank records the hops of the piece that told it its round was activated (pcoll_round.hops).
 * Pieces merge: a rank sends on an edge only what is owed there beyond what it sent, and a token received on a
 * dimension edge counts as sent back on it (its sender owes everything the reply would ask of it). A round
 * costs at most one message per edge and knowledge change: O(P) messages for one poster.
 *
 * The reduction's first message doubles as a token where it goes where a token is owed first and is its
 * receiver's first receive: its sender's metadata slot says so (FLAG_TOKEN), what it stands for (round n
 * activated, or the sender's own post) and its hops. A rank keeps the receive of its next round's first message
 * posted while it waits, so such a message starts it as a token would. Each rank keeps one token receive
 * standing per edge (at most log2 P + 1), and sent and received tokens are counted per peer so that close can
 * drain the ones still in flight.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Via: knowledge from this rank's own post (owed on every edge), or an edge's index. */
enum { VIA_OWN = -1 };
/* Token layout (uint64s): the hops of "rounds < a are activated", the piece (the round a, then when counting the
 * post bits of call a), then (counting) one byte of hops per rank. */
enum { TOKEN_HOPS = 0, TOKEN_PIECE = 1 };
enum { HOPS_MAX = 255 };

static uint64_t *piece(const pcoll_t *c, uint64_t *pieces, int i)
{
    return pieces + (size_t)i * c->know_words;
}

/* a below b in the lattice */
static int below(const pcoll_t *c, const uint64_t *a, const uint64_t *b)
{
    if (a[0] != b[0]) return a[0] < b[0];
    for (size_t w = 1; w < c->know_words; w++)
        if (a[w] & ~b[w]) return 0;
    return 1;
}

static void join(const pcoll_t *c, uint64_t *dst, const uint64_t *src)
{
    if (src[0] > dst[0]) {
        memcpy(dst, src, c->know_words * sizeof *dst);
    } else if (src[0] == dst[0]) {
        for (size_t w = 1; w < c->know_words; w++) dst[w] |= src[w];
    }
}

static int has_bit(const uint64_t *k, int r)
{
    return (k[1 + r / 64] >> (r % 64)) & 1;
}

static int posts(const pcoll_t *c, const uint64_t *k)
{
    int n = 0;
    for (size_t w = 1; w < c->know_words; w++) n += __builtin_popcountll(k[w]);
    return n;
}

/* k = "rank r posted call n, and its post counts": with a quorum of one, round n is activated. */
static void posted(const pcoll_t *c, uint64_t n, int r, uint64_t *k)
{
    memset(k, 0, c->know_words * sizeof *k);
    k[0] = n + (c->know_words == 1);
    if (c->know_words > 1) k[1 + r / 64] |= UINT64_C(1) << (r % 64);
}

static int edge_of(const pcoll_t *c, int peer)
{
    for (int e = 0; peer >= 0 && e < c->nedges; e++)
        if (c->edge_peer[e] == peer) return e;
    return -1;
}

/* The edges [*lo, *hi) that a piece learnt via `via` is owed on. */
static void owed_edges(const pcoll_t *c, int via, int *lo, int *hi)
{
    *lo = 0;
    *hi = c->nedges;
    if (via >= 0 && via < c->ndims) *lo = via + 1;     /* a dimension: the ones above, and the fold edge */
    else if (via >= 0 && c->ndims > 0) *hi = c->ndims;  /* an odd rank's fold edge: every dimension */
    else if (via >= 0) *hi = 0;                         /* a folded rank: nothing */
}

/* How many sends of a piece learnt via `via` go up to and including the one on edge e (its hops there). */
static int position(const pcoll_t *c, int via, int e)
{
    int lo, hi;
    owed_edges(c, via, &lo, &hi);
    return e >= lo && e < hi ? e - lo + 1 : e + 1;
}

static int add_hops(int hops, int more)
{
    return hops + more > HOPS_MAX ? HOPS_MAX : hops + more;
}

/* Owe piece k (its round's hops here: hops) on the edges a piece learnt via `via` is owed on. */
static void oblige(pcoll_t *c, const uint64_t *k, int via, int hops)
{
    int lo, hi;
    owed_edges(c, via, &lo, &hi);
    for (int e = lo; e < hi; e++) {
        uint64_t *owe = piece(c, c->owe, e);
        if (k[0] > owe[0]) c->owe_hops[e] = add_hops(hops, position(c, via, e));
        join(c, owe, k);
    }
}

/* Record the posts piece k brings that are new here (their hops and edge); returns the hops of the post that
 * completes a count that still needs `needed` posts (the needed-th among the new ones, fewest hops first: the
 * chain that completed it), or -1 if it does not complete it. */
static int new_posts(pcoll_t *c, const uint64_t *k, int via, int hops, const unsigned char *bit_hops, int needed)
{
    int at_hops[HOPS_MAX + 1] = {0}, same = k[0] == c->know[0];
    for (int r = 0; r < c->size; r++) {
        if (!has_bit(k, r) || (same && has_bit(c->know, r))) continue;
        c->bit_hops[r] = (unsigned char)(bit_hops ? bit_hops[r] : hops);
        c->bit_via[r] = via;
        at_hops[c->bit_hops[r]]++;
    }
    for (int h = 0; h <= HOPS_MAX; h++)
        if ((needed -= at_hops[h]) <= 0) return h;
    return -1;
}

/* Merge piece k, learnt via an edge (or VIA_OWN) from src (-1: none): its round's hops `hops`, its posts' hops
 * bit_hops[] (NULL: all `hops`). */
static void learn(pcoll_t *c, const uint64_t *k, int via, int hops, const unsigned char *bit_hops, int src)
{
    uint64_t *know = c->know, before = know[0];
    int completing = -1;
    if (c->know_words > 1 && k[0] >= know[0]) {
        int counted = k[0] == know[0] ? posts(c, know) : 0;
        completing = new_posts(c, k, via, hops, bit_hops, c->quorum - counted);
    }
    join(c, know, k);
    if (k[0] > before) c->know_hops = hops;
    if (completing >= 0) { /* k posts of call know[0]: its round is activated */
        know[0]++;
        memset(know + 1, 0, (c->know_words - 1) * sizeof *know);
        c->know_hops = completing;
    }
    if (know[0] > before && src >= 0) {
        c->hint_round = know[0];
        c->hint_src = src;
        c->hint_time = pcoll_now(c);
    }
    oblige(c, k, via, hops);
}

static int post_receive(pcoll_t *c, int e)
{
    PCOLL_MPI(c, MPI_Irecv(c->token_in + (size_t)e * c->token_words, (int)c->token_words, MPI_UINT64_T,
                           c->edge_peer[e], PCOLL_TAG_TOKEN, c->comm, &c->token_reqs[e]));
    return PCOLL_OK;
}

static int virtual_to_rank(int v, int rem)
{
    return v < rem ? 2 * v + 1 : v + rem;
}

int pcoll_tokens_init(pcoll_t *c)
{
    int p2 = 1, dims = 0;
    while (p2 * 2 <= c->size) {
        p2 *= 2;
        dims++;
    }
    int rem = c->size - p2, r = c->rank;
    int folded = r < 2 * rem && r % 2 == 0, odd = r < 2 * rem && r % 2 == 1;
    int counting = c->size > 1 && c->quorum > 1 && c->quorum < c->size;
    c->tokens = c->size > 1 && c->quorum < c->size;
    c->know_words = 1 + (counting ? c->mask_words : 0);
    c->token_words = 1 + c->know_words + (counting ? ((size_t)c->size + 7) / 8 : 0);
    c->ndims = folded ? 0 : dims;
    c->nedges = c->tokens ? c->ndims + (folded || odd) : 0;
    size_t e = (size_t)c->nedges + 1, kw = c->know_words, p = (size_t)c->size;
    c->edge_peer = malloc(e * sizeof *c->edge_peer);
    c->know = calloc(kw, sizeof *c->know);
    c->scratch_know = calloc(kw, sizeof *c->scratch_know);
    c->owe = calloc(e * kw, sizeof *c->owe);
    c->sent = calloc(e * kw, sizeof *c->sent);
    c->owe_hops = calloc(e, sizeof *c->owe_hops);
    c->bit_hops = calloc(p, sizeof *c->bit_hops);
    c->bit_via = calloc(p, sizeof *c->bit_via);
    c->token_in = calloc(e * c->token_words, sizeof *c->token_in);
    c->token_reqs = malloc(e * sizeof *c->token_reqs);
    c->token_done = malloc(e * sizeof *c->token_done);
    if (!c->edge_peer || !c->know || !c->scratch_know || !c->owe || !c->sent || !c->owe_hops || !c->bit_hops ||
        !c->bit_via || !c->token_in || !c->token_reqs || !c->token_done)
        return pcoll_fail(c, PCOLL_ERR_NOMEM, "activation state", MPI_SUCCESS);
    int v = odd ? r / 2 : r - rem;
    for (int j = 0; j < c->ndims && j < c->nedges; j++) c->edge_peer[j] = virtual_to_rank(v ^ (1 << j), rem);
    if (c->nedges > c->ndims) c->edge_peer[c->ndims] = folded ? r + 1 : r - 1;
    for (int j = 0; j < c->nedges; j++) {
        int rc = post_receive(c, j);
        if (rc) return rc;
    }
    return PCOLL_OK;
}

int pcoll_activated(const pcoll_t *c, uint64_t n)
{
    return c->know[0] > n;
}

void pcoll_tokens_completed(pcoll_t *c, uint64_t n)
{
    if (c->know[0] > n) return;
    memset(c->know, 0, c->know_words * sizeof *c->know);
    c->know[0] = n + 1;
}

/* This rank posted call n, and the post counts while round n is not known to be activated: owed everywhere. */
void pcoll_tokens_post(pcoll_t *c, uint64_t n)
{
    posted(c, n, c->rank, c->scratch_know);
    learn(c, c->scratch_know, VIA_OWN, 0, NULL, -1);
    c->root_round = n + 1;
}

static int first_owed(const pcoll_t *c, int *count)
{
    int first = -1;
    *count = 0;
    for (int e = 0; e < c->nedges; e++) {
        if (below(c, piece(c, c->owe, e), piece(c, c->sent, e))) continue;
        if (first < 0) first = e;
        ++*count;
    }
    return first;
}

/* Round n starts here and its first message goes to peer (-1: none at once, or not its receiver's first): the
 * activation flags of this rank's metadata slot, and whether that message goes before the tokens (it stands for
 * the first one owed) or after them (pcoll_tokens_flush sends them). */
int pcoll_tokens_plan(pcoll_t *c, uint64_t n, int peer, int *data_first)
{
    *data_first = 0;
    int e = edge_of(c, peer), owed = 0, first = first_owed(c, &owed);
    int activated = pcoll_activated(c, n), root = c->root_round == n + 1, flags = root ? FLAG_ROOT : 0;
    if (!c->tokens || e < 0) return c->tokens ? flags : 0; /* FLAG_ROOT holds in whatever data this rank sends */
    uint64_t *k = c->scratch_know;
    if (root && !activated) {
        posted(c, n, c->rank, k);
    } else {
        memset(k, 0, c->know_words * sizeof *k);
        k[0] = activated ? n + 1 : n;
    }
    if (e != first || (!activated && !root) || !below(c, piece(c, c->owe, e), k)) return flags;
    join(c, piece(c, c->sent, e), k);
    *data_first = 1;
    int hops = activated ? add_hops(c->know_hops, 1) : position(c, VIA_OWN, e);
    return flags | FLAG_TOKEN | (activated ? FLAG_ACTIVATED : 0) | hops * FLAG_HOPS;
}

/* Send each edge what it is owed beyond what was sent on it, in edge order. */
int pcoll_tokens_flush(pcoll_t *c)
{
    int owed = 0;
    if (!c->tokens || first_owed(c, &owed) < 0) return PCOLL_OK;
    struct pcoll_tokens *t = c->token_free;
    if (t) {
        c->token_free = t->next;
    } else {
        t = calloc(1, sizeof *t);
        if (t) t->reqs = malloc((size_t)c->nedges * sizeof *t->reqs);
        if (t) t->msgs = malloc((size_t)c->nedges * c->token_words * sizeof *t->msgs);
        if (!t || !t->reqs || !t->msgs) {
            if (t) free(t->reqs);
            free(t);
            return pcoll_fail(c, PCOLL_ERR_NOMEM, "token batch", MPI_SUCCESS);
        }
    }
    t->n = 0;
    t->next = c->token_out;
    c->token_out = t;
    for (int e = 0; e < c->nedges; e++) {
        uint64_t *owe = piece(c, c->owe, e), *sent = piece(c, c->sent, e);
        if (below(c, owe, sent)) continue;
        uint64_t *msg = t->msgs + (size_t)t->n * c->token_words;
        memset(msg, 0, c->token_words * sizeof *msg);
        msg[TOKEN_HOPS] = (uint64_t)c->owe_hops[e];
        memcpy(msg + TOKEN_PIECE, owe, c->know_words * sizeof *msg);
        unsigned char *hops = (unsigned char *)(msg + TOKEN_PIECE + c->know_words);
        for (int r = 0; c->know_words > 1 && r < c->size; r++)
            if (has_bit(owe, r)) hops[r] = (unsigned char)add_hops(c->bit_hops[r], position(c, c->bit_via[r], e));
        join(c, sent, owe);
        PCOLL_MPI(c, MPI_Isend(msg, (int)c->token_words, MPI_UINT64_T, c->edge_peer[e], PCOLL_TAG_TOKEN, c->comm,
                               &t->reqs[t->n]));
        t->n++;
        c->tokens_sent[c->edge_peer[e]]++;
    }
    return PCOLL_OK;
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

/* Learn from the tokens that arrived (what they oblige is sent by the next pcoll_tokens_flush). */
int pcoll_tokens_poll(pcoll_t *c, int *did)
{
    if (!c->tokens) return PCOLL_OK;
    int ndone = 0;
    PCOLL_MPI(c, MPI_Testsome(c->nedges, c->token_reqs, &ndone, c->token_done, MPI_STATUSES_IGNORE));
    for (int i = 0; i < ndone && ndone != MPI_UNDEFINED; i++) {
        int e = c->token_done[i], peer = c->edge_peer[e];
        const uint64_t *msg = c->token_in + (size_t)e * c->token_words, *k = msg + TOKEN_PIECE;
        *did = 1;
        c->tokens_received[peer]++;
        learn(c, k, e, (int)msg[TOKEN_HOPS], (const unsigned char *)(k + c->know_words), peer);
        if (e < c->ndims) join(c, piece(c, c->sent, e), k); /* its sender owes all a reply would ask */
        int rc = post_receive(c, e);
        if (rc) return rc;
    }
    return c->token_out ? reap_sent(c) : PCOLL_OK;
}

/* Learn from the metadata (META_WIDTH floats per rank) of round n's first message, received from peer: what it
 * stands for, if it stands for a token; and whether its sender owes its own post on every edge. */
void pcoll_tokens_data(pcoll_t *c, uint64_t n, int peer, const float *meta)
{
    int flags = (int)meta[(size_t)META_WIDTH * (size_t)peer + META_FLAGS], e = edge_of(c, peer);
    if (e < 0) return;
    uint64_t *k = c->scratch_know;
    if (flags & FLAG_TOKEN) {
        if (flags & FLAG_ACTIVATED) {
            memset(k, 0, c->know_words * sizeof *k);
            k[0] = n + 1;
        } else {
            posted(c, n, peer, k);
        }
        learn(c, k, e, flags / FLAG_HOPS, NULL, peer);
        if (e < c->ndims) join(c, piece(c, c->sent, e), k);
    }
    if (flags & FLAG_ROOT) { /* its sender owes its own post on every edge: not to be sent back */
        posted(c, n, peer, k);
        join(c, piece(c, c->sent, e), k);
    }
}

/* Collective (close): receive every token still in flight to this rank, then retire the standing receives. */
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
    for (int e = 0; e < c->nedges; e++) {
        PCOLL_MPI(c, MPI_Cancel(&c->token_reqs[e]));
        PCOLL_MPI(c, MPI_Wait(&c->token_reqs[e], MPI_STATUS_IGNORE));
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
            free(t->msgs);
            free(t);
        }
    }
    c->token_out = c->token_free = NULL;
    free(c->edge_peer);
    free(c->know);
    free(c->scratch_know);
    free(c->owe);
    free(c->sent);
    free(c->owe_hops);
    free(c->bit_hops);
    free(c->bit_via);
    free(c->token_in);
    free(c->token_reqs);
    free(c->token_done);
}
