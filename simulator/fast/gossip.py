"""The fast engine's sweep of synchronous gossip (d-psgd, sgp): the rules of
:class:`~stragglerlab.simulator.algorithms.gossip.GossipRules` compiled.

Every exchange of iteration n depends only on the posts of iteration n, so an iteration is two O(P·peers) passes:
every worker's post, then every worker's exchange (its release and its round row). Rows are final once their
iteration is swept, so the window slides by whole sweeps. The first iteration whose earliest exchange completes at
or after the time budget is the last.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from stragglerlab.simulator.fast.engine import DONE, NEED_ROWS, OUT_FULL, returned

if TYPE_CHECKING:
    from stragglerlab.simulator.algorithms.gossip import GossipRules
    from stragglerlab.simulator.fast.engine import FastEngine

_ROWS_OUT = 1 << 18  # round rows handed over at a time (at least one iteration's)


def run(rules: GossipRules, fast: FastEngine) -> None:
    """Run ``rules`` on the fast engine ``fast``."""
    P, N = fast.P, fast.N
    window = fast.window(fast.window_size(), rules.factors)
    state = np.zeros(1, dtype=np.int64)  # the next iteration to sweep (the rows there are, once the budget ended it)
    t_start = np.zeros(P)
    out = fast.round_buffers(max(P, _ROWS_OUT // P * P))
    group = np.zeros(len(out["round"]), dtype=np.int64)
    kind = np.full(len(group), rules.kind, dtype=object)

    def version(iteration: np.ndarray, _: np.ndarray) -> np.ndarray:
        return iteration

    while True:
        status, written = gossip_kernel(
            state, t_start, window.base,
            window.times, window.calls, window.factors,
            window.start, window.post, window.done, window.round, window.fresh,
            rules.indptr, rules.index, rules.cost, rules.own, rules.update, N, rules.budget,
            out["round"], out["initiator"], out["t_trigger"], out["t_done"], out["contributors"], out["fresh"], group,
        )  # fmt: skip
        fast.emit_rounds(written, out, kind[:written], group[:written].copy())
        if status == DONE:
            break
        if status == NEED_ROWS:
            fast.flush(window, int(state[0]), version)
            window.slide(int(state[0]))
    fast.flush(window, int(state[0]), version)


@njit(cache=True)
def gossip_kernel(
    state,
    t_start,
    base,
    compute,
    calls,
    factors,
    r_start,
    r_post,
    r_done,
    r_round,
    r_fresh,
    indptr,
    index,
    cost,
    own,
    update,
    iterations,
    budget,
    out_round,
    out_initiator,
    out_trigger,
    out_done,
    out_contributors,
    out_fresh,
    out_group,
):
    """Sweep iterations from ``state[0]`` until the run (its last iteration, or the first whose earliest exchange
    completes at or after ``budget``), the window or the round output ends; ``t_start[i]``: when worker i starts its
    next iteration. Returns (status, round rows written)."""
    P = t_start.shape[0]
    phases = indptr.shape[0]
    written = 0
    while True:
        n = state[0]
        if n == iterations:
            return DONE, written
        if n - base == r_post.shape[0]:
            return NEED_ROWS, written
        if written + P > out_round.shape[0]:
            return OUT_FULL, written
        k = n - base
        s = n % phases
        for i in range(P):
            r_start[k, i] = t_start[i]
            r_post[k, i] = t_start[i] + compute[k, i]
        posts = r_post[k]
        first = np.inf  # the earliest exchange's completion
        for i in range(P):
            t = posts[i]
            f = factors[k, i]
            done = t + f * own[s, i]
            trigger = t
            group = -1
            for e in range(indptr[s, i], indptr[s, i + 1]):
                j = index[e]
                done = max(done, posts[j] + f * cost[e])
                if group < 0 or posts[j] > posts[group]:
                    group = j
                trigger = max(trigger, posts[j])
            first = min(first, done)
            r_done[k, i] = returned(t, done, calls[k, i])
            r_round[k, i] = n
            r_fresh[k, i] = True
            t_start[i] = r_done[k, i] + update
            out_round[written] = n
            out_initiator[written] = i
            out_trigger[written] = trigger
            out_done[written] = done
            out_contributors[written] = 1 + indptr[s, i + 1] - indptr[s, i]
            out_fresh[written] = out_contributors[written]
            out_group[written] = group
            written += 1
        state[0] = n + 1
        if first >= budget:
            return DONE, written
