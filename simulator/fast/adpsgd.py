"""The fast path of AD-PSGD: the rules of :class:`~stragglerlab.simulator.algorithms.adpsgd.AdPsgdRules` as a
compiled step, taking the posts in batches that commute.

The posts wait in a calendar queue (:mod:`.calendar`) in the reference engine's order, so a post costs O(1), never a
sweep over the workers, whatever the batch's length. Workers drift apart (nothing
synchronises them), so rows are final up to the least advanced worker's iteration, and the window grows when that one
lags a whole window behind. A post writes its worker's return; the starts and posts follow from the returns and are
written by a sweep in row order once the rows are final (:func:`_carried`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numba import njit

from stragglerlab.simulator.algorithms.eager import SPLITMIX
from stragglerlab.simulator.fast import engine
from stragglerlab.simulator.fast.calendar import Queue, add, queue, take
from stragglerlab.simulator.fast.engine import BASE, DONE, FINAL, NEED_ROWS, OUT_FULL, Kernel, returned
from stragglerlab.simulator.fast.order import by_worker, next_compute

if TYPE_CHECKING:
    from stragglerlab.simulator.algorithms.adpsgd import AdPsgdRules

_GOLDEN, _MIX1, _MIX2 = (np.uint64(c) for c in SPLITMIX)  # numba's uint64 wraps as splitmix's mask does


class State(NamedTuple):
    pending: np.ndarray  # per worker: its next post not yet taken
    wave: np.ndarray  # its wave at its instant
    bound: np.ndarray  # the earliest its post after the pending one can be (inf: it has none)
    ahead: np.ndarray  # the compute time of its row after the pending one's, read with it (-1: not read)
    parked: np.ndarray  # its next post is still to compute (at first: every worker's)
    next: np.ndarray  # its next iteration
    t_start: np.ndarray  # when the one after starts
    first_start: np.ndarray  # the start of its first row whose start and post are still to write (:func:`_carried`)
    free: np.ndarray  # when its communication thread is next free
    peer: np.ndarray  # the peer of its pending post
    node: np.ndarray  # its node
    begin: np.ndarray  # its exchange's start and end
    end: np.ndarray
    queue: Queue  # the pending posts, in order
    batch: np.ndarray  # scratch: the batch, and its workers' marks (all False between batches)
    mark: np.ndarray
    hashes: np.ndarray  # the peer draws (AdPsgdRules.draws)
    flat: np.ndarray
    offset: np.ndarray
    degree: np.ndarray
    t_inter: float  # an exchange across nodes, inside one
    t_intra: float
    spread: bool  # whether exchanges vary by the window's factors (else every factor is 1)
    update: float
    budget: float
    iterations: int


def kernel(rules: AdPsgdRules) -> Kernel:
    """The fast path of ``rules``."""
    P = rules.P
    spread = not rules.variation.exact
    state = State(
        np.full(P, np.inf), np.zeros(P, dtype=np.int64), np.full(P, np.inf), np.full(P, -1.0),
        np.ones(P, dtype=np.bool_), np.zeros(P, dtype=np.int64), np.zeros(P), np.zeros(P),
        np.zeros(P), np.zeros(P, dtype=np.int64), np.arange(P, dtype=np.int64) // rules.per_node,
        np.zeros(P), np.zeros(P), queue(P), np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.bool_),
        *rules.draws(),
        float(rules.link[False]), float(rules.link[True]), spread, float(rules.update), float(rules.budget),
        int(rules.N),
    )  # fmt: skip
    return Kernel(step, state, (rules.kind,), rules.factors if spread else None)


@njit(cache=True, inline="always")  # in the step's loops: no call per post
def drawn_peer(hashes, flat, offset, degree, w, n):
    """:func:`~stragglerlab.simulator.algorithms.adpsgd.peer` of worker ``w`` at iteration ``n`` from the draws
    (:meth:`~stragglerlab.simulator.algorithms.adpsgd.AdPsgdRules.draws`), in numba's uint64. It takes arrays, not
    the state: an inlined call passing the state's tuple counts a reference to each of its arrays, a hundred times
    the hash."""
    z = hashes[w] + np.uint64(n + 1) * _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z ^= z >> np.uint64(31)
    d = degree[w]
    # z mod d; a power of two (a ring's 2, a torus's 4) by its mask, as a division costs more than the whole hash
    return flat[offset[w] + np.int64(z & (d - np.uint64(1)) if d & (d - np.uint64(1)) == 0 else z % d)]


@njit(cache=True)
def _post(s, rows, out, workers, count, served, hold):
    """Each of ``workers[:count]`` computes its next window row from its start and posts into the queue (its wave holds
    only if it computes nothing), and draws the peer of that post. ``served``: the workers' posts were just taken, and
    each first returns from its exchange (its rows and round row written; a worker past its last iteration or the time
    budget stops). A worker that needs a row past the window is parked, to post once the window has slid. Returns
    ``hold`` lowered to the parked workers' starts (the earliest they can post); ``workers`` is scratch."""
    # the arrays as locals: read through the tuples, every access in a loop would load them again
    next_, t_start, pending, wave, bound, ahead, parked, peer = (
        s.next, s.t_start, s.pending, s.wave, s.bound, s.ahead, s.parked, s.peer
    )  # fmt: skip
    hashes, flat, offset, degree, begin_, end_ = s.hashes, s.flat, s.offset, s.degree, s.begin, s.end
    head, link, run, span, at = s.queue
    compute, calls, done_ = rows.compute, rows.calls, rows.done
    o_round, o_kind, o_initiator, o_trigger, o_done, o_contributors, o_fresh, o_group = out[:8]
    iterations, update, budget = s.iterations, s.update, s.budget
    base = rows.at[BASE]
    size = done_.shape[0]
    written = out.written[0]
    going = 0
    for a in range(count):
        w = workers[a]
        if served:  # its exchange: it returns, and its next iteration starts after the update
            t = pending[w]
            n = next_[w]
            k = n - base
            j = peer[w]
            done = end_[w] if j >= 0 else t
            done_[k, w] = returned(t, done, calls, k, w)
            o_round[written] = n
            o_initiator[written] = w
            o_trigger[written] = begin_[w] if j >= 0 else t
            o_done[written] = done
            o_contributors[written] = 2 if j >= 0 else 1
            o_group[written] = j
            written += 1
            next_[w] = n + 1
            if n + 1 == iterations or done >= budget:
                continue
            t_start[w] = done_[k, w] + update
            # back at the instant it was released, the worker posts in the next wave if it computes nothing
            wave[w] = (wave[w] + 1 if done == t else 1) if update == 0.0 and done_[k, w] == done else 0
        k = next_[w] - base
        if k == size:
            parked[w] = True
            hold = min(hold, t_start[w])
            continue
        parked[w] = False
        c = compute[k, w] if ahead[w] < 0.0 else ahead[w]
        pending[w] = t = t_start[w] + c
        wave[w] = wave[w] if c == 0.0 else 0
        # its next post: after this one, the update and a compute (its exchange's time left out); that compute read
        # now, beside this row's, where its own read would be a cache miss of its own
        c = next_compute(compute, k, w)
        ahead[w] = c if k + 1 < size else -1.0
        bound[w] = t + update + c if next_[w] + 1 < iterations else np.inf
        workers[going] = w
        going += 1
    if served:
        o_kind[written - count : written] = 0
        o_fresh[written - count : written] = 1
        out.written[0] = written
    add(head, link, run, span, at, pending, workers, going)
    for a in range(going):  # the peers in a loop of their own, where the hashes overlap
        w = workers[a]
        peer[w] = drawn_peer(hashes, flat, offset, degree, w, next_[w])
    return hold


@njit(cache=True)
def _carried(s, rows, last):
    """Every row of the window before iteration ``last`` as its own round carries it, fresh, on the model of its
    iteration; and its start and post, which the steps leave to this sweep (:func:`.engine.starts_and_posts`)."""
    engine.starts_and_posts(rows, s.first_start, s.update, last)
    round_, version, fresh = rows.round, rows.version, rows.fresh
    base = rows.at[BASE]
    for k in range(last - base):
        round_[k] = base + k
        version[k] = base + k
        fresh[k] = True


@njit(cache=True)
def _need_rows(s, rows):
    """The window must slide: rows are final up to the least advanced worker's iteration."""
    rows.at[FINAL] = s.next.min()
    _carried(s, rows, rows.at[FINAL])
    return NEED_ROWS


@njit(cache=True)
def step(s, rows, out):
    """Take the posts as the reference engine does, in (time, wave, worker) order, until the run ends, the round
    output is full, or the first post waits for a parked worker (its next row is past the window: its post is
    computed once the window has slid; it posts no earlier than its start). A worker stops after its last iteration
    or its first exchange completing at or after the time budget.

    Posts of one instant are taken in waves, as the reference engine's ties have them: a worker released at the
    instant it posts again (no update, no compute, no software cost) posts after the completion that released it,
    one wave after that completion's post when the exchange took no time, else in wave 1; the order is (time, wave,
    worker).

    Posts are taken a batch at a time: the first post while it is earlier than the *horizon*, the earliest instant a
    post taken so far in the batch could make its worker post again (its post + the update + its next compute, added
    as the worker adds them; 0 for a compute past the window). Nothing posts inside the batch's span
    but the batch, so its exchanges are timed in the queue's order, each at its peer's thread, which gives the
    reference engine's times exactly; everything else (the rows, the next posts) is done in worker order, where the
    window's rows are read and written one after the other."""
    # the arrays as locals: read through the tuples, every access in a loop would load them again
    pending, wave, bound, next_, free, peer, node = s.pending, s.wave, s.bound, s.next, s.free, s.peer, s.node
    batch, begin_, end_ = s.batch, s.begin, s.end
    head, link, run, span, at = s.queue
    factors = rows.factors
    o_round = out.round
    t_intra, t_inter, spread = s.t_intra, s.t_inter, s.spread
    P = pending.shape[0]
    base = rows.at[BASE]
    count = 0
    for w in range(P):
        if s.parked[w]:
            batch[count] = w
            count += 1
    hold = _post(s, rows, out, batch, count, False, np.inf)  # the parked workers' starts: no post after them is taken
    while True:
        if out.written[0] + P > o_round.shape[0]:
            return OUT_FULL
        count = take(head, link, run, span, at, pending, wave, bound, -np.inf, hold, batch)
        if count == 0:
            break
        for a in range(count):  # the exchanges, in order at each peer's thread
            w = batch[a]
            j = peer[w]
            if j >= 0:
                cost = (t_intra if node[w] == node[j] else t_inter) * (factors[next_[w] - base, w] if spread else 1.0)
                begin_[w] = max(pending[w], free[j])
                end_[w] = free[j] = begin_[w] + cost
        by_worker(batch, count, s.mark)
        hold = _post(s, rows, out, batch, count, True, hold)
    if hold < np.inf:
        return _need_rows(s, rows)
    rows.stop[:] = next_  # each worker's rows: fewer once it stopped
    _carried(s, rows, next_.max())
    return DONE
