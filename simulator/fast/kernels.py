"""The fast engine's compiled kernels: the semantics of ``docs/semantics.md`` as sweeps over arrays.

Rounds are strictly sequential, so for the round-per-call algorithms every worker's post of call m is known once
round m − 1 is done: a round is one O(P) sweep (trigger, exchange start, fresh or late, release) instead of events.
LSGD's workers all start together after an exchange and run free until the next, so its kernel computes each free
run's post times and selects the one that triggers the next exchange: one O(P·period) pass per exchange.

Both kernels work on a window of iterations [base, base + rows) held in row buffers (times, round, fresh) and a
compute-time block of the same window, and return a status when they need the driver to slide or grow the window
(or, for the round kernel, the per-worker pending queues); the state arrays keep everything needed to resume.
"""

from __future__ import annotations

import numpy as np
from numba import njit

DONE, NEED_ROWS, NEED_PENDING, OUT_FULL = 0, 1, 2, 3
ACCUMULATE, DROP, DEPOSIT = 0, 1, 2
# state of the round kernel (int64 array)
S_ROUND, S_BASE = 0, 1
# state of the LSGD kernel (int64 array): exchanges done, posts counted before the current free run, the window's
# first iteration
L_ROUND, L_COUNT, L_BASE = range(3)
_BUCKETS = 1 << 14  # of the LSGD trigger's histogram


@njit(cache=True)
def round_kernel(
    state,
    t_start,
    first_post,
    pend_n,
    pend_t,
    pend_head,
    pend_len,
    compute,
    r_start,
    r_post,
    r_done,
    r_round,
    r_fresh,
    is_sync,
    t_exchange,
    fixed_initiator,
    t_act,
    stride,
    late_mode,
    out_round,
    out_initiator,
    out_trigger,
    out_done,
    out_contributors,
    out_fresh,
):
    """Process rounds from ``state[S_ROUND]`` until all are done or the window is full.

    ``t_start[i]``: when worker i starts its next iteration. ``pend_*``: each worker's late contributions not yet
    taken by an exchange (ring buffers of iteration and post time). Round rows go to the ``out_*`` arrays, from
    index 0; returns (status, rounds written).
    """
    P = t_start.shape[0]
    total = is_sync.shape[0]
    base = state[S_BASE]
    rows = r_post.shape[0]
    R = pend_n.shape[1]
    written = 0
    full = np.any(pend_len == R)  # a round pushes at most one pending contribution per worker
    while state[S_ROUND] < total:
        m = state[S_ROUND]
        if written == out_round.shape[0]:
            return OUT_FULL, written
        if (m + 1) * stride - base > rows:
            return NEED_ROWS, written
        if full:
            return NEED_PENDING, written
        first = m * stride
        call = first + stride - 1
        k = call - base
        # local steps (local SGD), then the post of call m; the trigger on the way: the last post (synchronous,
        # the highest rank among ties), the first post (the lowest rank among ties) or the fixed initiator's post
        sync = is_sync[m]
        initiator = -1 if sync else fixed_initiator[m]
        pick = initiator < 0
        _local_steps(t_start, first, call, base, compute, r_start, r_post, r_done, r_round, r_fresh, m)
        for i in range(P):
            t = t_start[i]
            r_start[k, i] = t
            t = t + compute[k, i]
            r_post[k, i] = t
            if m == 0:
                first_post[i] = t
            if pick and (i == 0 or (t >= r_post[k, initiator] if sync else t < r_post[k, initiator])):
                initiator = i
        posts = r_post[k]
        t_trigger = posts[initiator]
        x = t_trigger if sync else t_trigger + t_act
        done = x + t_exchange[m]
        contributors = 0
        fresh_count = 0
        for i in range(P):
            fresh = posts[i] <= x
            # late contributions of earlier calls that this exchange takes (posted no later than its start)
            taken = 0
            while taken < pend_len[i] and pend_t[i, (pend_head[i] + taken) % R] <= x:
                taken += 1
            for j in range(taken):
                slot = (pend_head[i] + j) % R
                kj = pend_n[i, slot] - base
                if late_mode == DEPOSIT and (fresh or j < taken - 1):
                    r_round[kj, i] = -1  # overwritten by a later deposit before any exchange read it
                else:
                    r_round[kj, i] = m
            pend_head[i] = (pend_head[i] + taken) % R
            pend_len[i] -= taken
            if fresh:
                fresh_count += 1
                r_round[k, i] = m
                r_fresh[k, i] = True
                r_done[k, i] = done
                t_start[i] = done
            else:
                r_round[k, i] = -1
                r_fresh[k, i] = False
                r_done[k, i] = max(posts[i], done)
                t_start[i] = r_done[k, i]
                if late_mode != DROP:
                    slot = (pend_head[i] + pend_len[i]) % R
                    pend_n[i, slot] = call
                    pend_t[i, slot] = posts[i]
                    pend_len[i] += 1
                    full |= pend_len[i] == R
            if late_mode == DEPOSIT:
                contributors += first_post[i] <= x
            elif fresh or taken > 0:
                contributors += 1
        out_round[written] = m
        out_initiator[written] = initiator
        out_trigger[written] = t_trigger
        out_done[written] = done
        out_contributors[written] = contributors
        out_fresh[written] = fresh_count
        written += 1
        state[S_ROUND] = m + 1
    return DONE, written


@njit(cache=True)
def _local_steps(t_start, first, last, base, compute, r_start, r_post, r_done, r_round, r_fresh, carried_by):
    """Every worker's iterations [first, last) as local steps from ``t_start[i]``, released at once; ``t_start[i]``
    ends as the last one's end. Row by row across the workers: a worker's column of rows is far apart in memory."""
    fresh = carried_by >= 0
    for n in range(first, last):
        k = n - base
        for i in range(t_start.shape[0]):
            t = t_start[i]
            r_start[k, i] = t
            t = t + compute[k, i]
            r_post[k, i] = t
            r_done[k, i] = t
            r_round[k, i] = carried_by
            r_fresh[k, i] = fresh
            t_start[i] = t


@njit(cache=True)
def local_tail(t_start, compute, r_start, r_post, r_done, r_round, r_fresh, first, last, base):
    """Local steps after the last round (local SGD's incomplete last period): carried by no round."""
    _local_steps(t_start, first, last, base, compute, r_start, r_post, r_done, r_round, r_fresh, -1)


@njit(cache=True)
def lsgd_kernel(
    state,
    t_start,
    iteration,
    unresolved,
    compute,
    r_start,
    r_post,
    r_done,
    r_round,
    r_fresh,
    iterations,
    local_every,
    global_every,
    t_exchange,
    out_round,
    out_initiator,
    out_trigger,
    out_done,
    out_global,
):
    """Run LSGD's exchanges one free-running segment at a time, then the workers' free run to the end.

    Between two exchanges every worker starts together (``t_start``: the previous exchange's end, or 0) and runs
    free; the exchange is triggered by the post that brings the count of posts to the next multiple of
    ``local_every`` or ``global_every``, every other worker joins with its first post after that one in the engine's
    order, and the exchange starts at the last join. ``iteration[i]``: worker i's next iteration; ``unresolved[i]``:
    its first row that may still change. Returns (status, rounds written).
    """
    P = t_start.shape[0]
    base = state[L_BASE]
    end = base + r_post.shape[0]
    before = np.zeros(P, dtype=np.int64)  # each worker's posts of the segment ahead of the trigger
    written = 0
    while True:
        if written == out_round.shape[0]:
            return OUT_FULL, written
        count = state[L_COUNT]
        target = min((count // local_every + 1) * local_every, (count // global_every + 1) * global_every)
        status, w = _lsgd_trigger(
            target - count, t_start, iteration, before, compute, r_start, r_post, r_done, base, end, iterations
        )
        if status != DONE:
            return status, written
        if w < 0:
            break
        # every worker's rows up to its join are carried by exchange m, which starts at the last join
        m = state[L_ROUND]
        start = 0.0
        for i in range(P):
            start = max(start, r_post[iteration[i] + before[i] - base, i])
        done = start + t_exchange
        out_round[written] = m
        out_initiator[written] = w
        out_trigger[written] = r_post[iteration[w] + before[w] - base, w]
        out_done[written] = done
        out_global[written] = target % global_every == 0
        written += 1
        for r in range(before.max() + 1):
            for i in range(P):
                if r <= before[i]:
                    k = iteration[i] + r - base
                    r_round[k, i] = m
                    r_fresh[k, i] = True
        for i in range(P):
            r_done[iteration[i] + before[i] - base, i] = done
            t_start[i] = done
            iteration[i] += before[i] + 1
            unresolved[i] = iteration[i]
        state[L_ROUND] = m + 1
        state[L_COUNT] = target + P - 1  # the trigger, then one join per other worker
    # after the last exchange the workers run free to the end, which is in the window: no exchange was found to come
    # only once some worker's last iteration was computed
    _lsgd_steps(t_start, iteration, np.full(P, iterations), base, compute, r_start, r_post, r_done)
    return DONE, written


@njit(cache=True)
def _lsgd_trigger(posts, t_start, iteration, before, compute, r_start, r_post, r_done, base, end, iterations):
    """The worker whose post triggers the segment's exchange: the ``posts``-th post since the segment started, in
    the engine's order (time, then worker, then iteration); ``before[i]``: worker i's posts ahead of it (for the
    initiator, those before the trigger). Returns (status, worker); worker -1 when no exchange comes: some worker
    posts its last iteration ahead of the trigger, or fewer posts remain.

    Each worker's posts are computed up to a horizon, about ``posts / P`` at first, doubled for the workers whose
    horizon does not reach past the trigger found so far (which then moves only earlier), until all do.
    """
    P = t_start.shape[0]
    if iteration.max() == iterations:  # a worker joined the last exchange with its last iteration
        return DONE, -1
    t = t_start.copy()  # each worker's last computed post
    reach = iteration.copy()  # the posts are computed up to here (exclusive)
    grow = np.minimum(iteration + posts // P + 2, iterations)
    if grow.max() > end:
        return NEED_ROWS, -1
    while True:
        _lsgd_steps(t, reach, grow, base, compute, r_start, r_post, r_done)
        reach[:] = grow
        w = _lsgd_select(posts, iteration, reach, r_post, base, before)
        more = False
        for i in range(P):
            if i != w and reach[i] < iterations and (w < 0 or iteration[i] + before[i] == reach[i]):
                grow[i] = min(reach[i] + max(reach[i] - iteration[i], 1), iterations, end)
                if grow[i] == reach[i]:
                    return NEED_ROWS, -1
                more = True
        if not more:
            break
    if w >= 0:
        for i in range(P):
            if i != w and iteration[i] + before[i] == reach[i]:  # it posted its last iteration ahead of the trigger
                return DONE, -1
    return DONE, w


@njit(cache=True)
def _lsgd_select(posts, iteration, reach, r_post, base, before):
    """The worker of the ``posts``-th of the computed posts (rows [iteration, reach) of each worker) in (time,
    worker, iteration) order, -1 when there are fewer; into ``before``, how many of each worker's come ahead of it.

    A histogram of the times over equal buckets finds the bucket that holds that post; only that bucket's posts are
    then partitioned (the bucket of a time is monotone in it, so every post of a lower bucket is earlier).
    """
    P = iteration.shape[0]
    if (reach - iteration).sum() < posts:
        return -1
    depth = (reach - iteration).max()
    lo, hi = np.inf, -np.inf  # each worker's posts are in time order
    for i in range(P):
        if reach[i] > iteration[i]:
            lo = min(lo, r_post[iteration[i] - base, i])
            hi = max(hi, r_post[reach[i] - 1 - base, i])
    scale = (_BUCKETS - 1) / (hi - lo) if hi > lo else 0.0
    if not np.isfinite(scale):  # a spread of subnormal size: one bucket
        scale = 0.0
    histogram = np.zeros(_BUCKETS, dtype=np.int64)
    current, run = 0, 0  # runs of one bucket are counted apart: ties make long ones
    for r in range(depth):
        for i in range(P):
            if iteration[i] + r < reach[i]:
                k = min(int((r_post[iteration[i] + r - base, i] - lo) * scale), _BUCKETS - 1)
                if k != current:
                    histogram[current] += run
                    current, run = k, 0
                run += 1
    histogram[current] += run
    b, rank = 0, posts  # the bucket of the trigger, and the trigger's rank among that bucket's posts
    while rank > histogram[b]:
        rank -= histogram[b]
        b += 1
    times, workers = np.empty(histogram[b]), np.empty(histogram[b], dtype=np.int64)
    j = 0
    before[:] = 0
    for r in range(depth):
        for i in range(P):
            if iteration[i] + r < reach[i]:
                t = r_post[iteration[i] + r - base, i]
                k = min(int((t - lo) * scale), _BUCKETS - 1)
                if k < b:
                    before[i] += 1
                elif k == b:
                    times[j], workers[j] = t, i
                    j += 1
    v = times.min()
    if v < times.max():  # (a bucket of one instant, as ties make, needs no partition)
        v = np.partition(times, rank - 1)[rank - 1]
    # the posts before instant v come first, then those at v by worker (a worker's own by iteration)
    equal = np.zeros(P, dtype=np.int64)
    for j in range(times.shape[0]):
        if times[j] < v:
            before[workers[j]] += 1
            rank -= 1
        elif times[j] == v:
            equal[workers[j]] += 1
    w = 0
    while rank > equal[w]:
        rank -= equal[w]
        before[w] += equal[w]
        w += 1
    before[w] += rank - 1
    return w


@njit(cache=True)
def _lsgd_steps(t, first, last, base, compute, r_start, r_post, r_done):
    """Free steps: worker i's iterations [first[i], last[i]) from time t[i], each released at its post; t[i] ends
    as the last post's time. Row by row across the workers, for locality."""
    for r in range((last - first).max()):
        for i in range(t.shape[0]):
            if first[i] + r < last[i]:
                k = first[i] + r - base
                x = t[i]
                r_start[k, i] = x
                x += compute[k, i]
                r_post[k, i] = x
                r_done[k, i] = x
                t[i] = x
