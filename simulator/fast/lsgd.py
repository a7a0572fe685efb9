"""The fast path of LSGD: the counting trigger of :class:`~stragglerlab.simulator.algorithms.lsgd.LsgdRules` as a
compiled step.

All workers start together after an exchange and run free until the next, so each free run's post times are
computed and the one that triggers the next exchange is selected (:func:`~.order.kth_smallest`): one O(P·period)
pass per exchange.

Workers' iterations drift apart (each joins an exchange after its own count of posts), so the rows a pass reads for
one free run are far apart from one worker to the next. Each pass goes a tile of :data:`TILE` neighbouring workers at
a time, row by row inside it, so the window's cache lines a tile reads stay cached while it reads them: a pass row by
row over all workers read each line once per worker in it, and the steps took half as long again (65,536 workers,
compute of cv 1.0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numba import njit

from stragglerlab.simulator.fast.engine import BASE, DONE, FINAL, NEED_ROWS, OUT_FULL, Kernel, returned
from stragglerlab.simulator.fast.order import kth_smallest

if TYPE_CHECKING:
    from stragglerlab.simulator.algorithms.lsgd import LsgdRules

#: ``State.at``: exchanges done, posts counted before the current free run
ROUND, COUNT = 0, 1
#: workers a pass takes together: a 64-byte cache line of a row (8 took a sixth less time than 64)
TILE = 8


class State(NamedTuple):
    t_exchange: np.ndarray  # each exchange's time
    t_start: np.ndarray  # per worker: when its free run starts (the last exchange's end, or 0)
    iteration: np.ndarray  # its next iteration: the first of the free run
    before: np.ndarray  # its posts of the free run ahead of the trigger
    at: np.ndarray  # int64: ROUND, COUNT
    local_every: int
    global_every: int
    update: float
    budget: float
    iterations: int


def kernel(rules: LsgdRules) -> Kernel:
    """The fast path of ``rules``."""
    P = rules.P
    state = State(
        rules.t_exchange * rules.factors, np.zeros(P), np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64),
        np.zeros(2, dtype=np.int64), int(rules.local_every), int(rules.global_every), float(rules.update),
        float(rules.budget), int(rules.N),
    )  # fmt: skip
    return Kernel(step, state, ("leader",))


@njit(cache=True)
def step(s, rows, out):
    """Run LSGD's exchanges one free run at a time, then the workers' free run to the end.

    The exchange is triggered by the post that brings the count of posts to the next multiple of ``local_every`` or
    ``global_every``, every other worker joins with its first post after that one in the engine's order, and the
    exchange starts at the last join. An exchange that completes at or after the time budget is the last: every
    worker stops at its release from it."""
    # the arrays as locals: read through the tuples, every access in a loop would load them again
    t_start, iteration, before = s.t_start, s.iteration, s.before
    calls, post, done_ = rows.calls, rows.post, rows.done
    P = t_start.shape[0]
    base = rows.at[BASE]
    written = out.written[0]
    while True:
        if written == out.round.shape[0]:
            out.written[0] = written
            return OUT_FULL
        count = s.at[COUNT]
        target = min((count // s.local_every + 1) * s.local_every, (count // s.global_every + 1) * s.global_every)
        status, w = _trigger(s, rows, target - count)
        if status != DONE:
            out.written[0] = written
            rows.at[FINAL] = iteration.min()  # rows from a worker's free run on may still change
            return status
        if w < 0:
            break
        # every worker's rows up to its join are carried by exchange m, which starts at the last join
        m = s.at[ROUND]
        start = 0.0
        for i in range(P):
            start = max(start, post[iteration[i] + before[i] - base, i])
        done = start + s.t_exchange[m]
        out.round[written] = m
        out.kind[written] = 0
        out.initiator[written] = w
        out.t_trigger[written] = post[iteration[w] + before[w] - base, w]
        out.t_done[written] = done
        out.contributors[written] = P
        out.fresh[written] = P
        out.group[written] = -1 if target % s.global_every == 0 else 0
        written += 1
        for i in range(P):
            k = iteration[i] + before[i] - base
            done_[k, i] = returned(post[k, i], done, calls, k, i)
            t_start[i] = done_[k, i] + s.update
            iteration[i] += before[i] + 1
        s.at[ROUND] = m + 1
        s.at[COUNT] = target + P - 1  # the trigger, then one join per other worker
        if done >= s.budget:
            rows.stop[:] = iteration
            out.written[0] = written
            return DONE
    # after the last exchange the workers run free to the end, which is in the window: no exchange was found to come
    # only once some worker's last iteration was computed
    _steps(s, rows, t_start, iteration, np.full(P, s.iterations), -1)
    out.written[0] = written
    return DONE


@njit(cache=True)
def _trigger(s, rows, posts):
    """The worker whose post triggers the free run's exchange: the ``posts``-th post since the run started, in the
    engine's order (time, then wave, then worker); ``s.before[i]``: worker i's posts ahead of it (for the initiator,
    those before the trigger). Returns (status, worker); worker -1 when no exchange comes: some worker posts its last
    iteration ahead of the trigger, or fewer posts remain.

    Each worker's posts are computed up to a horizon, about ``posts / P`` at first (doubled while fewer posts than
    ``posts`` are computed); then the workers whose computed posts all come no later than the trigger found step on
    until one is later (:func:`_past`), and the trigger is selected again: it moves only earlier, so every post ahead
    of it is computed. (Doubling those workers' horizons instead computed a third more posts than the run keeps, at
    compute of cv 1.0.)
    """
    P = s.t_start.shape[0]
    iteration, before = s.iteration, s.before
    if iteration.max() == s.iterations:  # a worker joined the last exchange with its last iteration
        return DONE, -1
    end = rows.at[BASE] + rows.post.shape[0]
    t = s.t_start.copy()  # each worker's next start (its last computed post, plus the update)
    reach = iteration.copy()  # the posts are computed up to here (exclusive)
    grow = np.minimum(iteration + posts // P + 2, s.iterations)
    if grow.max() > end:
        return NEED_ROWS, -1
    while True:
        _steps(s, rows, t, reach, grow, s.at[ROUND])
        reach[:] = grow
        w = _select(posts, iteration, reach, rows.post, rows.at[BASE], before)
        if w >= 0:
            status, more = _past(s, rows, t, reach, grow, w, rows.post[iteration[w] + before[w] - rows.at[BASE], w])
            if status != DONE:
                return status, -1
        else:
            more = False
            for i in range(P):
                if reach[i] < s.iterations:
                    grow[i] = min(reach[i] + max(reach[i] - iteration[i], 1), s.iterations, end)
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
def _past(s, rows, t, reach, grow, w, trigger):
    """Every worker but ``w`` whose computed posts (up to ``reach``, which ``grow`` equals) all come at or before
    ``trigger`` steps on, a post at a time, until one comes after it or it has no iteration left. Returns (status,
    whether any stepped): NEED_ROWS when one needs a row past the window."""
    P = reach.shape[0]
    post = rows.post
    base = rows.at[BASE]
    end = base + post.shape[0]
    active = np.empty(P, dtype=np.int64)
    m = 0
    for i in range(P):
        if i != w and reach[i] < s.iterations and post[reach[i] - 1 - base, i] <= trigger:
            active[m] = i
            m += 1
    stepped = m > 0
    while m:
        for a in range(m):
            i = active[a]
            if reach[i] == end:
                return NEED_ROWS, stepped
            grow[i] = reach[i] + 1
        _steps(s, rows, t, reach, grow, s.at[ROUND])
        kept = 0
        for a in range(m):
            i = active[a]
            reach[i] = grow[i]
            if reach[i] < s.iterations and post[reach[i] - 1 - base, i] <= trigger:
                active[kept] = i
                kept += 1
        m = kept
    return DONE, stepped


@njit(cache=True)
def _select(posts, iteration, reach, post, base, before):
    """The worker of the ``posts``-th of the computed posts (rows [iteration, reach) of each worker) in (time, wave,
    worker) order, -1 when there are fewer; into ``before``, how many of each worker's come ahead of it. The posts
    at the trigger's instant come in waves: a worker's q-th post at one instant computed nothing after a release at
    it, so it is in wave q."""
    P = iteration.shape[0]
    count = (reach - iteration).sum()
    if count < posts:
        return -1
    times = np.empty(count)
    j = 0
    for a in range(0, P, TILE):  # a tile at a time, row by row in it
        for r in range((reach[a : a + TILE] - iteration[a : a + TILE]).max()):
            for i in range(a, min(a + TILE, P)):
                if iteration[i] + r < reach[i]:
                    times[j] = post[iteration[i] + r - base, i]
                    j += 1
    v = kth_smallest(times, posts, np.empty(count))
    before[:] = 0
    equal = np.zeros(P, dtype=np.int64)
    j = 0
    for a in range(0, P, TILE):  # in the order gathered
        for r in range((reach[a : a + TILE] - iteration[a : a + TILE]).max()):
            for i in range(a, min(a + TILE, P)):
                if iteration[i] + r < reach[i]:
                    before[i] += times[j] < v
                    equal[i] += times[j] == v
                    j += 1
    rank = posts - before.sum()
    q = 0
    while True:
        for w in range(P):
            if equal[w] > q:
                rank -= 1
                if rank == 0:
                    for i in range(P):
                        before[i] += min(equal[i], q + 1 if i < w else q)
                    return w
        q += 1


@njit(cache=True)
def _steps(s, rows, t, first, last, m):
    """Free steps: worker i's iterations [first[i], last[i]) from time t[i], each released at its post (returning
    after its call cost) and on the model of the exchanges so far; t[i] ends as the next start (the last return plus
    the update). Each is carried, fresh, by exchange ``m`` (-1: by none): those that come after their worker's join
    are computed again in the next free run, so the exchange itself writes no row but its joins. A tile of workers at
    a time, row by row in it, for locality."""
    compute, calls, start, post, done, version, round_, fresh = (
        rows.compute, rows.calls, rows.start, rows.post, rows.done, rows.version, rows.round, rows.fresh
    )  # fmt: skip
    carried = m >= 0
    base = rows.at[BASE]
    model = s.at[ROUND]
    update = s.update
    P = t.shape[0]
    for a in range(0, P, TILE):
        for r in range((last[a : a + TILE] - first[a : a + TILE]).max()):
            for i in range(a, min(a + TILE, P)):
                if first[i] + r < last[i]:
                    k = first[i] + r - base
                    x = t[i]
                    start[k, i] = x
                    x += compute[k, i]
                    post[k, i] = x
                    x += calls[k, i]
                    done[k, i] = x
                    version[k, i] = model
                    round_[k, i] = m
                    fresh[k, i] = carried
                    t[i] = x + update
