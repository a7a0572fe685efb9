/*
 * quorum.c: the k-of-P partial allreduce, the one kind behind sync, eager-solo and quorum: round n is activated
 * by the k-th post of call n anywhere (k = opt.quorum, 0 meaning ceil(P / 2)). k = 1 is eager-solo; k = P with
 * every round synchronous (sync_period = 1) is sync, MPI_Allreduce's rule; k = P - b with late = drop is
 * synchronous SGD with b backup workers. Periodic rounds (n % sync_period == sync_period - 1) wait for every post.
 *
 * Also the eager contribution rules that eager-majority shares: a rank contributes its gradient n if posted by
 * the exchange start (plus pending late gradients under accumulate), else pending (accumulate) or zeros (drop);
 * the result is the sum over P or over the gradients summed. The round's initiator is the rank whose post was the
 * k-th by post time among the fresh ones (ties: lowest rank first), read off the reduced metadata, so every rank
 * names the same one.
 */
#include "internal.h"

#include <string.h>

int pcoll_periodic_sync(const pcoll_t *c, uint64_t n)
{
    uint64_t k = c->opt.sync_period;
    return k > 0 && n % k == k - 1;
}

int pcoll_every_post(const pcoll_t *c, uint64_t n, int r)
{
    (void)c;
    (void)n;
    (void)r;
    return 1;
}

double pcoll_post_time(const float *slot)
{
    return (double)slot[META_T_HI] + (double)slot[META_T_LO];
}

static int quorum_k(const pcoll_t *c)
{
    return c->opt.quorum > 0 ? c->opt.quorum : (c->size + 1) / 2;
}

/* Whether rank a's post (at ta) came before rank b's (at tb): by time, then by rank. */
static int before(double ta, int a, double tb, int b)
{
    return ta < tb || (ta == tb && a < b);
}

/* The fresh rank with exactly k - 1 fresh posts before its own (P^2 comparisons of the metadata at worst, once per
 * round: microseconds at tens of ranks). -1 if fewer than k were fresh (a round started by close). */
int pcoll_kth_fresh(const pcoll_t *c, uint64_t n, const float *meta, double *t)
{
    (void)n;
    for (int j = 0; j < c->size; j++) {
        const float *sj = meta + (size_t)META_WIDTH * (size_t)j;
        if (!((int)sj[META_FLAGS] & FLAG_FRESH)) continue;
        double tj = pcoll_post_time(sj);
        int earlier = 0;
        for (int l = 0; l < c->size && earlier < c->quorum; l++) {
            const float *sl = meta + (size_t)META_WIDTH * (size_t)l;
            earlier += ((int)sl[META_FLAGS] & FLAG_FRESH) && before(pcoll_post_time(sl), l, tj, j);
        }
        if (earlier == c->quorum - 1) {
            *t = tj;
            return j;
        }
    }
    return -1;
}

static void swap_buffers(float **a, float **b)
{
    float *t = *a;
    *a = *b;
    *b = t;
}

void pcoll_eager_contribute(pcoll_t *c, uint64_t n, struct pcoll_take *take)
{
    (void)n;
    take->gradients = 0;
    take->fresh = 0;
    if (c->app_full) {
        swap_buffers(&c->work, &c->app_buf);
        c->app_full = 0;
        take->fresh = 1;
        take->gradients = c->app_grads;
    } else if (c->pending_grads > 0) {
        swap_buffers(&c->work, &c->pending);
        take->gradients = c->pending_grads;
        c->pending_grads = 0;
    } else {
        memset(c->work, 0, c->count * sizeof(float));
    }
    c->src = c->work;
}

/* The gradients pending (accumulate) are summed into a post in time as it is copied in: one pass over the vector
 * instead of a copy and then a sum when the round starts (at 8 MB, a millisecond by which the last poster held up
 * every member of a synchronous round). Nothing joins pending between the post and its round: this rank's next
 * post waits for that round's result. */
void pcoll_eager_in_time(pcoll_t *c, const float *contribution)
{
    if (c->pending_grads > 0)
        pcoll_vector_sum(c->app_buf, contribution, c->pending, 1.0f, c->count);
    else
        memcpy(c->app_buf, contribution, c->count * sizeof(float));
    c->app_grads = 1 + c->pending_grads;
    c->pending_grads = 0;
}

void pcoll_eager_late(pcoll_t *c, const float *contribution)
{
    if (c->opt.late == PCOLL_LATE_DROP) return;
    if (c->pending_grads == 0)
        memcpy(c->pending, contribution, c->count * sizeof(float));
    else
        pcoll_vector_sum(c->pending, c->pending, contribution, 1.0f, c->count);
    c->pending_grads++;
}

int pcoll_all_ranks(const pcoll_t *c, uint64_t n, int *members, int *m)
{
    (void)n;
    for (int i = 0; i < c->size; i++) members[i] = i;
    *m = c->size;
    return -1;
}

float pcoll_eager_divisor(const pcoll_t *c, const pcoll_round *r)
{
    if (c->opt.divide_by == PCOLL_DIVIDE_CONTRIBUTORS) return r->gradients > 0 ? (float)r->gradients : 1.0f;
    return (float)c->size;
}

const struct pcoll_kind_ops pcoll_quorum_ops = {
    .is_sync = pcoll_periodic_sync,
    .counts = pcoll_every_post,
    .quorum = quorum_k,
    .initiator = pcoll_kth_fresh,
    .contribute = pcoll_eager_contribute,
    .in_time = pcoll_eager_in_time,
    .late = pcoll_eager_late,
    .group = pcoll_all_ranks,
    .divisor = pcoll_eager_divisor,
    .sync_kind = PCOLL_ROUND_SYNC,
    .async_kind = PCOLL_ROUND_ASYNC,
};
