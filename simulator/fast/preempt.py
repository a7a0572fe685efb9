"""The fast path of ``preempt``: the rules of :class:`~stragglerlab.simulator.algorithms.preempt.PreemptRules` as a
compiled step.

Every round is synchronous, so every worker starts iteration n when round n − 1 releases it: a round is one O(P)
sweep (every worker's end, the q-th smallest of them by selection, the cut posts, the exchange, the releases).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numba import njit

from stragglerlab.simulator.algorithms.preempt import cut as _cut
from stragglerlab.simulator.fast.engine import BASE, DONE, FINAL, NEED_ROWS, OUT_FULL, Kernel, returned
from stragglerlab.simulator.fast.order import kth_smallest

if TYPE_CHECKING:
    from stragglerlab.simulator.algorithms.preempt import PreemptRules

cut = njit(cache=True)(_cut)


class State(NamedTuple):
    """Each round's exchange time, each worker's next start, scratch, the next round and the rules' parameters."""

    t_exchange: np.ndarray  # per round
    t_start: np.ndarray  # per worker
    ends: np.ndarray  # P floats: when each worker would finish the iteration being swept
    scratch: np.ndarray  # P floats for the selection
    next: np.ndarray  # int64[1]: the next round
    finishers: int
    batch: int
    update: float
    budget: float


def kernel(rules: PreemptRules) -> Kernel:
    """The fast path of ``rules``."""
    P = rules.P
    state = State(
        np.array([rules.exchange_time(m) for m in range(rules.total)], dtype=np.float64), np.zeros(P), np.zeros(P),
        np.zeros(P), np.zeros(1, dtype=np.int64), int(rules.finishers), int(rules.batch), float(rules.update),
        float(rules.budget),
    )  # fmt: skip
    return Kernel(step, state, (rules.sync_kind,))


@njit(cache=True)
def step(s, rows, out):
    """Sweep rounds from ``s.next[0]`` until the run ends (its last round, or the first triggered at or after the time
    budget, by whose release every worker stops), or the window or the round output does."""
    t_exchange, t_start, ends, scratch = s.t_exchange, s.t_start, s.ends, s.scratch
    compute, calls, start, post, done_, round_, version, fresh, samples = (
        rows.compute,
        rows.calls,
        rows.start,
        rows.post,
        rows.done,
        rows.round,
        rows.version,
        rows.fresh,
        rows.samples,
    )
    P = t_start.shape[0]
    total = t_exchange.shape[0]
    base = rows.at[BASE]
    q, batch, update = s.finishers, s.batch, s.update
    written = out.written[0]
    while True:
        n = s.next[0]
        if n == total:
            break
        if n - base == post.shape[0]:
            out.written[0] = written
            rows.at[FINAL] = n
            return NEED_ROWS
        if written == out.round.shape[0]:
            out.written[0] = written
            return OUT_FULL
        k = n - base
        for i in range(P):
            start[k, i] = t_start[i]
            ends[i] = t_start[i] + compute[k, i]
        T = ends.max() if q == P else kth_smallest(ends, q, scratch)
        last = 0
        for i in range(P):
            if ends[i] <= T:
                post[k, i] = ends[i]
            else:
                post[k, i], samples[k, i] = cut(t_start[i], compute[k, i], T, batch)
            if post[k, i] >= post[k, last]:
                last = i
        t_trigger = post[k, last]
        done = t_trigger + t_exchange[n]
        for i in range(P):
            released = returned(post[k, i], done, calls, k, i)
            done_[k, i] = released
            t_start[i] = released + update
        round_[k] = n
        version[k] = n
        fresh[k] = True
        out.round[written] = n
        out.kind[written] = 0
        out.initiator[written] = last
        out.t_trigger[written] = t_trigger
        out.t_done[written] = done
        out.contributors[written] = P
        out.fresh[written] = P
        out.group[written] = -1
        written += 1
        s.next[0] = n + 1
        if t_trigger >= s.budget:
            rows.stop[:] = n + 1
            break
    out.written[0] = written
    return DONE
