"""The fast path of AD-PSGD: the rules of :class:`~stragglerlab.simulator.algorithms.adpsgd.AdPsgdRules` as a
compiled step, taking the posts in batches that commute.

Workers drift apart (nothing synchronises them), so rows are final up to the least advanced worker's iteration, and
the window grows when that one lags a whole window behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numba import njit

from stragglerlab.simulator.algorithms.eager import SPLITMIX
from stragglerlab.simulator.fast.engine import BASE, DONE, FINAL, NEED_ROWS, OUT_FULL, Kernel, returned

if TYPE_CHECKING:
    from stragglerlab.simulator.algorithms.adpsgd import AdPsgdRules

_GOLDEN, _MIX1, _MIX2 = (np.uint64(c) for c in SPLITMIX)  # numba's uint64 wraps as splitmix's mask does


class State(NamedTuple):
    pending: np.ndarray  # per worker: its next post not yet taken (inf: none)
    wave: np.ndarray  # its wave at its instant
    parked: np.ndarray  # its next post is still to compute (at first: every worker's)
    next: np.ndarray  # its next iteration
    t_start: np.ndarray  # when the one after starts
    free: np.ndarray  # when its communication thread is next free
    peer: np.ndarray  # the peer of its pending post
    batch: np.ndarray  # scratch: the batch in worker order, in peer order (P each), where each peer's requests end
    order: np.ndarray
    first: np.ndarray
    cost: np.ndarray  # scratch: each worker's exchange time, start and end
    begin: np.ndarray
    end: np.ndarray
    hashes: np.ndarray  # the peer draws (AdPsgdRules.draws)
    flat: np.ndarray
    offset: np.ndarray
    degree: np.ndarray
    t_inter: float  # an exchange across nodes, inside one
    t_intra: float
    per_node: int
    update: float
    budget: float
    iterations: int


def kernel(rules: AdPsgdRules) -> Kernel:
    """The fast path of ``rules``."""
    P = rules.P
    state = State(
        np.full(P, np.inf), np.zeros(P, dtype=np.int64), np.ones(P, dtype=np.bool_), np.zeros(P, dtype=np.int64),
        np.zeros(P), np.zeros(P), np.zeros(P, dtype=np.int64),
        np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64), np.zeros(P + 2, dtype=np.int64),
        np.zeros(P), np.zeros(P), np.zeros(P),
        *rules.draws(),
        float(rules.link[False]), float(rules.link[True]), int(rules.per_node), float(rules.update),
        float(rules.budget), int(rules.N),
    )  # fmt: skip
    return Kernel(step, state, (rules.kind,), rules.factors)


@njit(cache=True, inline="always")  # in the step's loops: no call per post
def drawn_peer(s, w, n):
    """:func:`~stragglerlab.simulator.algorithms.adpsgd.peer` of worker ``w`` at iteration ``n`` from the draws, in
    numba's uint64 (no branch: a branch here costs the step more than the hash)."""
    z = s.hashes[w] + np.uint64(n + 1) * _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z ^= z >> np.uint64(31)
    return s.flat[s.offset[w] + np.int64(z % s.degree[w])]


@njit(cache=True, inline="always")  # in the step's loops: no call per post
def _post(s, rows, w, k):
    """Worker ``w`` computes window row ``k`` from its start and posts: its wave holds only if it computes nothing."""
    rows.start[k, w] = s.t_start[w]
    rows.post[k, w] = s.pending[w] = s.t_start[w] + rows.compute[k, w]
    s.wave[w] = s.wave[w] if rows.compute[k, w] == 0.0 else 0


@njit(cache=True)
def _carried(rows, last):
    """Every row of the window before iteration ``last`` as its own round carries it, fresh, on the model of its
    iteration."""
    base = rows.at[BASE]
    for k in range(last - base):
        for w in range(rows.round.shape[1]):
            rows.round[k, w] = base + k
            rows.version[k, w] = base + k
            rows.fresh[k, w] = True


@njit(cache=True)
def step(s, rows, out):
    """Take the posts as the reference engine does, in (time, wave, worker) order, until the run ends, the round
    output is full, or a worker's next row is past the window (it is *parked*: its post is computed once the window
    has slid). A worker stops after its last iteration or its first exchange completing at or after the time budget.

    Posts of one instant are taken in waves, as the reference engine's ties have them: a worker released at the
    instant it posts again (no update, no compute, no software cost) posts after the completion that released it,
    one wave after that completion's post when the exchange took no time, else in wave 1; the order is (time, wave,
    worker).

    Posts are taken a batch at a time: every pending post earlier than the *horizon*, the earliest instant a post
    taken now could make its worker post again (its post + the update + its next compute; 0 for a compute past the
    window), and the least post in any case. Nothing posts inside the batch's span but the batch, and two posts of it
    meet only at a common peer's thread, so the batch is taken peer by peer, each peer's requests in (time, wave,
    worker) order, which gives the reference engine's times exactly; only the times of the exchanges need that order,
    and everything else (the rows, the next posts) is done in worker order, where the window's rows are read and
    written one after the other. A scan and a counting sort per batch instead of a heap operation per post."""
    P = s.pending.shape[0]
    base = rows.at[BASE]
    size = rows.post.shape[0]
    written = out.written[0]
    for w in range(P):
        if s.parked[w]:
            s.parked[w] = False
            _post(s, rows, w, s.next[w] - base)
            s.peer[w] = drawn_peer(s, w, s.next[w])
    while True:
        if written + P > out.round.shape[0]:
            out.written[0] = written
            return OUT_FULL
        horizon, least = np.inf, -1
        for w in range(P):
            t = s.pending[w]
            if t < np.inf:
                if least < 0 or t < s.pending[least] or (t == s.pending[least] and s.wave[w] < s.wave[least]):
                    least = w
                k = s.next[w] - base
                if s.next[w] + 1 < s.iterations:  # its next post: after this exchange, the update and its compute
                    horizon = min(horizon, t + s.update + (rows.compute[k + 1, w] if k + 1 < size else 0.0))
        if least < 0:
            break
        count = 0
        s.first[:] = 0  # counting sort of the batch by peer (no peer: P), stable in worker order
        for w in range(P):
            if s.pending[w] < horizon or w == least:
                j = s.peer[w]
                s.batch[count] = w
                count += 1
                if j >= 0:
                    s.first[j + 1] += 1
                    link = s.t_intra if w // s.per_node == j // s.per_node else s.t_inter
                    s.cost[w] = link * rows.factors[s.next[w] - base, w]
                else:
                    s.first[P + 1] += 1
        for j in range(P + 1):
            s.first[j + 1] += s.first[j]
        for a in range(count):
            w = s.batch[a]
            j = s.peer[w]
            group = j if j >= 0 else P
            s.order[s.first[group]] = w
            s.first[group] += 1
        begin = 0
        for j in range(P + 1):
            stop = s.first[j]
            for a in range(begin + 1, stop):  # one peer's requests in order: its neighbours' at most
                w = s.order[a]
                b = a
                while b > begin and (
                    s.pending[s.order[b - 1]] > s.pending[w]
                    or (s.pending[s.order[b - 1]] == s.pending[w] and s.wave[s.order[b - 1]] > s.wave[w])
                ):
                    s.order[b] = s.order[b - 1]
                    b -= 1
                s.order[b] = w
            begin = stop
        for a in range(s.first[P - 1]):  # the exchanges, each peer's requests in order (those without a peer: none)
            w = s.order[a]
            j = s.peer[w]
            s.begin[w] = max(s.pending[w], s.free[j])
            s.end[w] = s.free[j] = s.begin[w] + s.cost[w]
        parks = False
        for a in range(count):
            w = s.batch[a]
            t = s.pending[w]
            s.pending[w] = np.inf
            n = s.next[w]
            k = n - base
            j = s.peer[w]
            done = s.end[w] if j >= 0 else t
            rows.done[k, w] = returned(t, done, rows.calls[k, w])
            out.round[written] = n
            out.kind[written] = 0
            out.initiator[written] = w
            out.t_trigger[written] = s.begin[w] if j >= 0 else t
            out.t_done[written] = done
            out.contributors[written] = 2 if j >= 0 else 1
            out.fresh[written] = 1
            out.group[written] = j
            written += 1
            s.next[w] = n + 1
            if n + 1 < s.iterations and done < s.budget:
                s.t_start[w] = rows.done[k, w] + s.update
                # back at the instant it was released, the worker posts in the next wave if it computes nothing
                s.wave[w] = (s.wave[w] + 1 if done == t else 1) if s.update == 0.0 and rows.done[k, w] == done else 0
                if k + 1 == size:
                    s.parked[w] = parks = True
                else:
                    _post(s, rows, w, k + 1)
        for a in range(count):  # the peers of the posts just made, in a loop of their own, where the hashes overlap
            w = s.batch[a]
            if s.pending[w] < np.inf:
                s.peer[w] = drawn_peer(s, w, s.next[w])
        if parks:
            out.written[0] = written
            rows.at[FINAL] = s.next.min()
            _carried(rows, rows.at[FINAL])
            return NEED_ROWS
    out.written[0] = written
    rows.stop[:] = s.next  # each worker's rows: fewer once it stopped
    _carried(rows, s.next.max())
    return DONE
