"""The fast path of synchronous gossip (d-psgd, sgp): the rules of
:class:`~stragglerlab.simulator.algorithms.gossip.GossipRules` as a compiled step.

Every exchange of iteration n depends only on the posts of iteration n, so an iteration is two O(P·peers) passes:
every worker's post, then every worker's exchange (its release and its round row). Rows are final once their
iteration is swept. The first iteration whose earliest exchange completes at or after the time budget is the last.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numba import njit

from stragglerlab.simulator.fast.engine import BASE, DONE, FINAL, NEED_ROWS, OUT_FULL, Kernel, returned

if TYPE_CHECKING:
    from stragglerlab.simulator.algorithms.gossip import GossipRules


class State(NamedTuple):
    """The peers of every phase as flat arrays (:class:`~stragglerlab.simulator.algorithms.gossip.GossipRules`),
    each worker's next start, and the next iteration."""

    indptr: np.ndarray
    index: np.ndarray
    cost: np.ndarray
    own: np.ndarray
    t_start: np.ndarray
    next: np.ndarray  # int64[1]: the next iteration to sweep
    update: float
    budget: float
    iterations: int


def kernel(rules: GossipRules) -> Kernel:
    """The fast path of ``rules``."""
    state = State(
        rules.indptr, rules.index, rules.cost, rules.own, np.zeros(rules.P), np.zeros(1, dtype=np.int64),
        float(rules.update), float(rules.budget), int(rules.N),
    )  # fmt: skip
    return Kernel(step, state, (rules.kind,), rules.factors)


@njit(cache=True)
def step(s, rows, out):
    """Sweep iterations from ``s.next[0]`` until the run ends (its last iteration, or the first whose earliest
    exchange completes at or after the time budget), or the window or the round output does."""
    P = s.t_start.shape[0]
    phases = s.indptr.shape[0]
    base = rows.at[BASE]
    written = out.written[0]
    while True:
        n = s.next[0]
        if n == s.iterations:
            break
        if n - base == rows.post.shape[0]:
            out.written[0] = written
            rows.at[FINAL] = n
            return NEED_ROWS
        if written + P > out.round.shape[0]:
            out.written[0] = written
            return OUT_FULL
        k = n - base
        p = n % phases
        for i in range(P):
            rows.start[k, i] = s.t_start[i]
            rows.post[k, i] = s.t_start[i] + rows.compute[k, i]
        posts = rows.post[k]
        first = np.inf  # the earliest exchange's completion
        for i in range(P):
            t = posts[i]
            f = rows.factors[k, i]
            done = t + f * s.own[p, i]
            trigger = t
            group = -1
            for e in range(s.indptr[p, i], s.indptr[p, i + 1]):
                j = s.index[e]
                done = max(done, posts[j] + f * s.cost[e])
                if group < 0 or posts[j] > posts[group]:
                    group = j
                trigger = max(trigger, posts[j])
            first = min(first, done)
            rows.done[k, i] = returned(t, done, rows.calls[k, i])
            rows.round[k, i] = n
            rows.version[k, i] = n
            rows.fresh[k, i] = True
            s.t_start[i] = rows.done[k, i] + s.update
            out.round[written] = n
            out.kind[written] = 0
            out.initiator[written] = i
            out.t_trigger[written] = trigger
            out.t_done[written] = done
            out.contributors[written] = 1 + s.indptr[p, i + 1] - s.indptr[p, i]
            out.fresh[written] = out.contributors[written]
            out.group[written] = group
            written += 1
        s.next[0] = n + 1
        if first >= s.budget:
            rows.stop[:] = n + 1
            break
    out.written[0] = written
    return DONE
