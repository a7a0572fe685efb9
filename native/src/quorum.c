/*
 * quorum.c: the k-of-P partial allreduce (synchronous SGD with backup workers): round n is activated by the k-th
 * post of call n anywhere (k = opt.quorum, 0 meaning ceil(P / 2); k = 1 is eager-solo), with eager-solo's
 * contributions, late posts, divisor and periodic synchronous rounds.
 *
 * Counting (activation.c): every post of call n made before this rank knows round n activated sends a token n to
 * every other rank, and every rank counts the posts of call n it knows of (its own and the tokens). Each rank thus
 * learns of the activation by itself, one message latency after the k-th post, with no second hop; the price is up
 * to k (P - 1) small messages per round instead of solo's P - 1. The round's initiator is the rank whose post was
 * the k-th by post time (ties: lowest rank first): read off the reduced metadata, so every rank names the same one.
 */
#include "internal.h"

static int quorum_k(const pcoll_t *c)
{
    return c->opt.quorum > 0 ? c->opt.quorum : (c->size + 1) / 2;
}

/* Whether rank a's post (at ta) came before rank b's (at tb): by time, then by rank. */
static int before(double ta, int a, double tb, int b)
{
    return ta < tb || (ta == tb && a < b);
}

static double post_time(const float *slot)
{
    return (double)slot[META_T_HI] + (double)slot[META_T_LO];
}

/* The fresh rank with exactly k - 1 fresh posts before its own (P^2 comparisons of the metadata at worst, once per
 * round: microseconds at tens of ranks). -1 if fewer than k were fresh (a round started by close). */
static int kth_fresh(const pcoll_t *c, const float *meta, double *t)
{
    for (int j = 0; j < c->size; j++) {
        const float *sj = meta + (size_t)META_WIDTH * (size_t)j;
        if (!((int)sj[META_FLAGS] & FLAG_FRESH)) continue;
        double tj = post_time(sj);
        int earlier = 0;
        for (int l = 0; l < c->size && earlier < c->quorum; l++) {
            const float *sl = meta + (size_t)META_WIDTH * (size_t)l;
            earlier += ((int)sl[META_FLAGS] & FLAG_FRESH) && before(post_time(sl), l, tj, j);
        }
        if (earlier == c->quorum - 1) {
            *t = tj;
            return j;
        }
    }
    return -1;
}

const struct pcoll_kind_ops pcoll_quorum_ops = {
    .is_sync = pcoll_periodic_sync,
    .activates = pcoll_always,
    .quorum = quorum_k,
    .initiator = kth_fresh,
    .contribute = pcoll_eager_contribute,
    .late = pcoll_eager_late,
    .group = pcoll_all_ranks,
    .divisor = pcoll_eager_divisor,
    .sync_kind = PCOLL_ROUND_SYNC,
    .async_kind = PCOLL_ROUND_ASYNC,
};
