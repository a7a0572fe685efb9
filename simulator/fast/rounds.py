"""The fast engine's sweep of round-per-call algorithms (sync, eager-SGD, WAGMA, local SGD): the rules of
:class:`~stragglerlab.simulator.algorithms.rounds.RoundRules` as compiled sweeps over arrays.

Rounds are strictly sequential, so every worker's post of call m is known once round m − 1 is done: a round is one
O(P) sweep (trigger, exchange start, fresh or late, release, late contributions taken) instead of events. The kernel
works on the engine's window of iterations and returns a status when it needs the driver to slide or grow the window,
or to widen the per-worker queues of pending late contributions; its state arrays keep everything needed to resume.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from stragglerlab.simulator.fast.engine import DONE, NEED_PENDING, NEED_ROWS, OUT_FULL, returned

if TYPE_CHECKING:
    from stragglerlab.simulator.algorithms.rounds import RoundRules
    from stragglerlab.simulator.fast.engine import FastEngine

#: the late rules as the kernel knows them
LATE = {"accumulate": 0, "drop": 1, "deposit": 2}
ACCUMULATE, DROP, DEPOSIT = LATE.values()
#: buckets of the histogram that narrows the selection of a round's trigger
_BUCKETS = 1 << 14
# state of the kernel (int64 array): the next round, the window's first iteration, whether the time budget ended
# the run (its last round was the one before the next)
S_ROUND, S_BASE, S_OVER = 0, 1, 2
#: a post's wave: its phase (after how many completions of its instant) in the bits from here, its place in a chain
#: of posts below (:func:`wave_of`)
PHASE = 32


def run(rules: RoundRules, fast: FastEngine) -> None:
    """Run ``rules`` on the fast engine ``fast``: every round, then the local steps after the last one; or, when a
    round is triggered at or after the time budget, up to each worker's stop."""
    P, N, total, stride = fast.P, fast.N, rules.total, rules.stride
    rounds = range(total)
    is_sync = np.array([rules.synchronous(m) for m in rounds], dtype=np.bool_)
    t_exchange = np.array([rules.exchange_time(m) for m in rounds], dtype=np.float64)
    initiator = np.array([-1 if is_sync[m] else rules.fixed_initiator(m) for m in rounds], dtype=np.int64)
    quorum = np.array([rules.quorum(m) for m in rounds], dtype=np.int64)
    kind = np.array([rules.kind(m) for m in rounds], dtype=object)
    group = np.array([rules.group(m) for m in rounds], dtype=np.int64)
    ends_budget = np.array([rules.ends_budget(m) for m in rounds], dtype=np.bool_)
    window = fast.window(max(fast.window_size(stride), 2 * stride))
    state = np.zeros(3, dtype=np.int64)
    last_done = -np.inf  # the completion of the last round processed
    t_start, first_post, scratch = np.zeros(P), np.full(P, np.inf), np.zeros(P)
    waves = (np.full(P, -np.inf), np.zeros(P, dtype=np.int64))  # see wave_of
    depth = max(8, rules.sync_period + 2)
    pend_n, pend_t = np.zeros((P, depth), dtype=np.int64), np.zeros((P, depth))
    pend_head, pend_len = np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64)
    out = fast.round_buffers(max(1, window.size // stride))

    def version(iteration: np.ndarray, _: np.ndarray) -> np.ndarray:
        return iteration // stride

    while True:
        state[S_BASE] = window.base
        status, written = round_kernel(
            state,
            t_start,
            first_post,
            scratch,
            waves,
            pend_n,
            pend_t,
            pend_head,
            pend_len,
            window.times,
            window.calls,
            window.start,
            window.post,
            window.done,
            window.round,
            window.fresh,
            is_sync,
            t_exchange,
            initiator,
            quorum,
            rules.t_act,
            stride,
            LATE[rules.late],
            rules.update,
            rules.buckets,
            rules.backward,
            rules.t_bucket * rules.factors,
            rules.budget,
            ends_budget,
            out["round"],
            out["initiator"],
            out["t_trigger"],
            out["t_done"],
            out["contributors"],
            out["fresh"],
        )
        idx = out["round"][:written]
        fast.emit_rounds(written, out, kind[idx], group[idx])
        if written:
            last_done = float(out["t_done"][written - 1])
        if status == DONE:
            break
        if status == OUT_FULL:
            continue
        if status == NEED_PENDING:
            pend_n, pend_t = _widen(pend_n, pend_head, pend_len), _widen(pend_t, pend_head, pend_len)
            pend_head[:] = 0
            continue
        # rows before the oldest pending contribution, and before the round in progress, are final
        final = state[S_ROUND] * stride
        if pend_len.any():
            final = min(final, int(pend_n[np.arange(P), pend_head][pend_len > 0].min()))
        if rules.budget < np.inf:  # a row released after every round so far may be its worker's last
            final = min(final, int(window.base + released_by(window.released(final), last_done).min()))
        fast.flush(window, final, version)
        window.slide(final)
    if state[S_OVER]:  # each worker stops at its first release after the last round, or at its call of that round
        calls = state[S_ROUND] * stride
        limit = np.minimum(window.base + released_by(window.released(calls), last_done) + 1, calls)
        fast.flush(window, calls, version, limit)
        return
    if total * stride < N:
        if window.base + window.size < N:
            fast.flush(window, total * stride, version)
            window.slide(total * stride)
        local_tail(
            t_start,
            waves,
            window.times,
            window.calls,
            window.start,
            window.post,
            window.done,
            window.round,
            window.fresh,
            total * stride,
            N,
            window.base,
            rules.update,
        )
    fast.flush(window, N, version)


@njit(cache=True)
def round_kernel(
    state,
    t_start,
    first_post,
    scratch,
    waves,
    pend_n,
    pend_t,
    pend_head,
    pend_len,
    compute,
    calls,
    r_start,
    r_post,
    r_done,
    r_round,
    r_fresh,
    is_sync,
    t_exchange,
    fixed_initiator,
    quorum,
    t_act,
    stride,
    late_mode,
    update,
    buckets,
    backward,
    t_bucket,
    budget,
    ends_budget,
    out_round,
    out_initiator,
    out_trigger,
    out_done,
    out_contributors,
    out_fresh,
):
    """Process rounds from ``state[S_ROUND]`` until all are done or the window is full.

    ``t_start[i]``: when worker i starts its next iteration; ``scratch``: P floats for the trigger's selection;
    ``waves``: where a worker's next post may tie with its release, that instant and the post's wave (:func:`wave_of`).
    ``pend_*``: each worker's late contributions not yet taken by an exchange (ring buffers of iteration and post
    time). Round rows go to the ``out_*`` arrays, from index 0; returns (status, rounds written). A round m
    triggered at or after ``budget`` (the time budget; infinity: none) is the last if ``ends_budget[m]``:
    ``state[S_OVER]`` is set.
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
        # local steps (local SGD), then the post of call m; the trigger: the fixed initiator's post, else the
        # quorum-th post (the last of all for a synchronous round)
        sync = is_sync[m]
        _local_steps(
            t_start, waves, first, call, base, compute, calls, r_start, r_post, r_done, r_round, r_fresh, m, update
        )
        for i in range(P):
            t = t_start[i]
            r_start[k, i] = t
            t = t + compute[k, i]
            r_post[k, i] = t
            if m == 0:
                first_post[i] = t
        posts = r_post[k]
        initiator = fixed_initiator[m] if fixed_initiator[m] >= 0 else kth_post(posts, quorum[m], scratch, waves)
        t_trigger = posts[initiator]
        x = t_trigger if sync else t_trigger + t_act
        done = (
            bucketed_end(r_start[k], posts, buckets, backward, t_bucket[m])
            if sync and buckets > 1
            else x + t_exchange[m]
        )
        # the wave of a post at the completion's instant by a worker it released: the phase after the completion's
        after = ((wave_of(waves, initiator, t_trigger) >> PHASE) + 1 if done == t_trigger else 1) << PHASE
        ties = _may_tie(compute, k, update)
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
                r_done[k, i] = returned(posts[i], done, calls[k, i])
                t_start[i] = r_done[k, i] + update
            else:
                r_round[k, i] = -1
                r_fresh[k, i] = False
                r_done[k, i] = returned(posts[i], max(posts[i], done), calls[k, i])
                t_start[i] = r_done[k, i] + update
                if late_mode != DROP:
                    slot = (pend_head[i] + pend_len[i]) % R
                    pend_n[i, slot] = call
                    pend_t[i, slot] = posts[i]
                    pend_len[i] += 1
                    full |= pend_len[i] == R
            if ties and _computes_nothing(compute, k, i):  # its next post may tie with this release
                held = fresh or done >= posts[i]  # released by the round's end, else at once at its own post
                own = wave_of(waves, i, posts[i]) + 1 if r_done[k, i] == posts[i] else 0
                _released(waves, i, r_done[k, i], (after if r_done[k, i] == done else 0) if held else own)
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
        if t_trigger >= budget and ends_budget[m]:  # the time budget's last round
            state[S_OVER] = 1
            return DONE, written
    return DONE, written


@njit(cache=True)
def kth_post(posts, q, scratch, waves):
    """The worker whose post is the ``q``-th (from 1) in the order of time, ties by wave (:func:`wave_of`) then in
    worker order: a linear scan for the first and the last, else one selection (:func:`_kth_smallest`, in
    ``scratch``: P floats)."""
    P = posts.shape[0]
    best = 0
    # the first and the last written out: one loop over a shared (time, wave) comparison halved sync's speed
    if q == 1:
        for i in range(1, P):
            if posts[i] < posts[best] or (
                posts[i] == posts[best] and wave_of(waves, i, posts[i]) < wave_of(waves, best, posts[best])
            ):
                best = i
        return best
    if q == P:
        for i in range(1, P):
            if posts[i] > posts[best] or (
                posts[i] == posts[best] and wave_of(waves, i, posts[i]) >= wave_of(waves, best, posts[best])
            ):
                best = i
        return best
    at = _kth_smallest(posts, q, scratch)
    below, equal = 0, 0  # one pass: posts before instant ``at``, and the workers posting at it
    for i in range(P):
        below += posts[i] < at  # no branch: at the median it would be mispredicted half the time
        if posts[i] == at:
            equal += 1
            best = i if equal == 1 else best
    if equal == 1:
        return best
    need, level = q - below, -1  # the need-th, in (wave, worker) order, of those posting at ``at``: wave by wave
    while True:
        level = min([wave_of(waves, i, at) for i in range(P) if posts[i] == at and wave_of(waves, i, at) > level])
        for i in range(P):
            if posts[i] == at and wave_of(waves, i, at) == level:
                need -= 1
                if need == 0:
                    return i


@njit(cache=True)
def _kth_smallest(x, q, scratch):
    """The ``q``-th smallest (from 1) of ``x``. A histogram of x over equal buckets between its least and greatest
    value finds the bucket that holds it (the bucket is monotone in the value); only that bucket's values, copied
    into ``scratch``, are then selected from: three passes over x, where a quickselect over all of it took 12 times
    numpy's partition (and numba's ``np.partition`` five times sync's whole sweep)."""
    lo, hi = x.min(), x.max()
    scale = (_BUCKETS - 1) / (hi - lo) if hi > lo else 0.0
    if not np.isfinite(scale):  # a spread of subnormal size: one bucket
        scale = 0.0
    histogram = np.zeros(_BUCKETS, dtype=np.int64)
    for v in x:
        histogram[int((v - lo) * scale)] += 1
    b, rank = 0, q
    while rank > histogram[b]:
        rank -= histogram[b]
        b += 1
    j = 0
    for v in x:
        if int((v - lo) * scale) == b:
            scratch[j] = v
            j += 1
    return _select(scratch[:j], rank - 1)


@njit(cache=True)
def _select(a, q):
    """The ``q``-th smallest (from 0) of ``a``, which it reorders: Hoare's quickselect, median-of-three pivots."""
    lo, hi = 0, a.shape[0] - 1
    while lo < hi:
        x, y, z = a[lo], a[(lo + hi) // 2], a[hi]
        pivot = max(min(x, y), min(max(x, y), z))
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if q <= j:
            hi = j
        elif q >= i:
            lo = i
        else:
            break
    return a[q]


@njit(cache=True, inline="always")
def wave_of(waves, i, t):
    """The wave of worker i's post at ``t``, which orders it among the posts of that instant (ties in time: by wave,
    then by worker). A post that computed nothing after a release at its instant is later than the posts before it:
    a worker released at once at its own post (a local step, a post after its round's end) posts one wave later, and
    the workers a round's completion releases post after every chain of waves of the instant, in the phase after the
    completion's (the high bits, :data:`PHASE`): phase 1, or one more than the trigger's when the round took no time.
    Any other post is in wave 0. ``waves``: the instant of each worker's last release after which its next post
    computes nothing (only those are kept: no other post can tie with its release), and that post's wave."""
    at, then = waves
    return then[i] * (t == at[i])


@njit(cache=True, inline="always")
def _may_tie(compute, k, update):
    """Whether some worker's post after window row ``k`` may tie with its release (:func:`wave_of`): only where
    there is no update and some worker computes nothing in the next row (or the next row is past the window)."""
    return update == 0.0 and (k + 1 == compute.shape[0] or compute[k + 1].min() == 0.0)


@njit(cache=True, inline="always")
def _computes_nothing(compute, k, i):
    """Whether worker i computes nothing in window row ``k + 1`` (or that row is past the window)."""
    return k + 1 == compute.shape[0] or compute[k + 1, i] == 0.0


@njit(cache=True, inline="always")
def _released(waves, i, t, then):
    """Worker i returns at ``t`` and computes nothing before its next post, which is in wave ``then``."""
    waves[0][i] = t
    waves[1][i] = then


@njit(cache=True)
def _local_steps(
    t_start, waves, first, last, base, compute, calls, r_start, r_post, r_done, r_round, r_fresh, carried_by, update
):
    """Every worker's iterations [first, last) as local steps from ``t_start[i]``, released at once (returning after
    their call costs); ``t_start[i]`` ends as the start of the next one (the last one's end plus the update). Row by
    row across the workers: a worker's column of rows is far apart in memory."""
    fresh = carried_by >= 0
    for n in range(first, last):
        k = n - base
        ties = _may_tie(compute, k, update)
        for i in range(t_start.shape[0]):
            t = t_start[i]
            r_start[k, i] = t
            t = t + compute[k, i]
            r_post[k, i] = t
            released = t + calls[k, i]
            if ties and _computes_nothing(compute, k, i):
                _released(waves, i, released, wave_of(waves, i, t) + 1 if released == t else 0)
            t = released
            r_done[k, i] = t
            r_round[k, i] = carried_by
            r_fresh[k, i] = fresh
            t_start[i] = t + update


@njit(cache=True)
def local_tail(t_start, waves, compute, calls, r_start, r_post, r_done, r_round, r_fresh, first, last, base, update):
    """Local steps after the last round (local SGD's incomplete last period): carried by no round."""
    _local_steps(
        t_start, waves, first, last, base, compute, calls, r_start, r_post, r_done, r_round, r_fresh, -1, update
    )


@njit(cache=True)
def bucketed_end(starts, posts, buckets, backward, t_bucket):
    """When the last of ``buckets`` gradient buckets of a synchronous round is all-reduced: bucket b of worker i is
    ready at start + c·(1 − f) + c·f·(b + 1)/B (c = post − start, f = ``backward``, the share of the compute that is
    backward; the last bucket is ready at the post itself), its allreduce starts when every worker has it ready and
    the previous bucket's is done (one stream), and takes ``t_bucket``."""
    end = -np.inf
    for b in range(buckets):
        ready = -np.inf
        for i in range(starts.shape[0]):
            c = posts[i] - starts[i]
            at = posts[i] if b == buckets - 1 else starts[i] + c * (1 - backward) + c * backward * (b + 1) / buckets
            ready = max(ready, at)
        end = max(ready, end) + t_bucket
    return end


def released_by(done: np.ndarray, t: float) -> np.ndarray:
    """Each worker's count of leading rows of ``done`` (release times, rows × workers: :meth:`~.engine._Window.
    released`) released no later than ``t``."""
    after = done > t
    if not after.size:
        return np.zeros(done.shape[1], dtype=np.int64)
    return np.where(after.any(axis=0), after.argmax(axis=0), done.shape[0])


def _widen(queue: np.ndarray, head: np.ndarray, length: np.ndarray) -> np.ndarray:
    """A ring buffer per row, twice as deep, each row's live entries moved to its start."""
    rows, depth = queue.shape
    out = np.zeros((rows, 2 * depth), dtype=queue.dtype)
    for r in range(rows):
        idx = (head[r] + np.arange(length[r])) % depth
        out[r, : length[r]] = queue[r, idx]
    return out
