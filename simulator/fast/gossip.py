"""The fast path of synchronous gossip (d-psgd, sgp, swarm-sgd): the rules of
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
    peers: np.ndarray
    cost: np.ndarray
    own: np.ndarray
    r_indptr: np.ndarray  # who receives from each worker, where sends wait for their receivers (else empty)
    r_index: np.ndarray
    r_cost: np.ndarray
    t_start: np.ndarray
    next: np.ndarray  # int64[1]: the next iteration to sweep
    update: float
    budget: float
    iterations: int


def kernel(rules: GossipRules) -> Kernel:
    """The fast path of ``rules``."""
    receivers = (rules.r_indptr, rules.r_index, rules.r_cost)
    if not rules.rendezvous:
        receivers = (np.zeros_like(rules.r_indptr), rules.r_index[:0], rules.r_cost[:0])
    state = State(
        rules.indptr, rules.index, rules.cost, rules.own, *receivers, np.zeros(rules.P), np.zeros(1, dtype=np.int64),
        float(rules.update), float(rules.budget), int(rules.N),
    )  # fmt: skip
    return Kernel(step, state, (rules.kind,), rules.factors)


@njit(cache=True)
def step(s, rows, out):
    """Sweep iterations from ``s.next[0]`` until the run ends (its last iteration, or the first whose earliest
    exchange completes at or after the time budget), or the window or the round output does."""
    # the arrays as locals: read through the tuples, every access in a loop would load them again
    indptr, index, cost, own, t_start = s.indptr, s.peers, s.cost, s.own, s.t_start
    r_indptr, r_index, r_cost = s.r_indptr, s.r_index, s.r_cost
    compute, calls, factors, start, post, done_, round_, version, fresh = (
        rows.compute,
        rows.calls,
        rows.factors,
        rows.start,
        rows.post,
        rows.done,
        rows.round,
        rows.version,
        rows.fresh,
    )
    o_round, o_kind, o_initiator, o_trigger, o_done, o_contributors, o_fresh, o_group = out[:8]
    P = t_start.shape[0]
    phases = indptr.shape[0]
    base = rows.at[BASE]
    update = s.update
    written = out.written[0]
    while True:
        n = s.next[0]
        if n == s.iterations:
            break
        if n - base == post.shape[0]:
            out.written[0] = written
            rows.at[FINAL] = n
            return NEED_ROWS
        if written + P > o_round.shape[0]:
            out.written[0] = written
            return OUT_FULL
        k = n - base
        p = n % phases
        for i in range(P):
            start[k, i] = t_start[i]
            post[k, i] = t_start[i] + compute[k, i]
        posts = post[k]
        first = np.inf  # the earliest exchange's completion
        for i in range(P):
            t = posts[i]
            f = factors[k, i]
            done = t + f * own[p, i]
            trigger = t
            group = -1
            for e in range(indptr[p, i], indptr[p, i + 1]):
                j = index[e]
                done = max(done, posts[j] + f * cost[e])
                if group < 0 or posts[j] > posts[group]:
                    group = j
                trigger = max(trigger, posts[j])
            for e in range(r_indptr[p, i], r_indptr[p, i + 1]):
                done = max(done, posts[r_index[e]] + f * r_cost[e])
            first = min(first, done)
            released = returned(t, done, calls, k, i)
            done_[k, i] = released
            t_start[i] = released + update
            o_round[written] = n
            o_kind[written] = 0
            o_initiator[written] = i
            o_trigger[written] = trigger
            o_done[written] = done
            o_contributors[written] = o_fresh[written] = 1 + indptr[p, i + 1] - indptr[p, i]
            o_group[written] = group
            written += 1
        round_[k] = n  # every row of iteration n: its own round carries it, on the model of iteration n
        version[k] = n
        fresh[k] = True
        s.next[0] = n + 1
        if first >= s.budget:
            rows.stop[:] = n + 1
            break
    out.written[0] = written
    return DONE
