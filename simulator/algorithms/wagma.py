"""WAGMA-SGD (Li et al., TPDS'21): wait-avoiding group model averaging.

Round n is activated globally by the first post (as solo), but the models are summed inside butterfly groups of
``group_size``: each worker contributes the model it last deposited (stale if it is late), and applies
(Σ_group + w)/(|group| + 1), then its own gradient step. Every ``sync_period``-th round is a global average.

Groups for any P and S (:func:`butterfly_group`): write ranks in base S; there are as many phases as base-S digits
of P − 1 (at least one), round n uses phase n mod phases, and the group of rank i at phase s is every rank below P
that differs from i only in digit s. For powers of two this is exactly "differ only in bits [s·log2 S,
(s+1)·log2 S)"; otherwise the groups of the top digit are smaller than S.
"""

from __future__ import annotations

import numpy as np

from stragglerlab.simulator.algorithms.rounds import INF, Round, RoundAlgorithm
from stragglerlab.simulator.engine import Call


def phase_count(workers: int, group_size: int) -> int:
    """Number of butterfly phases: the base-``group_size`` digits of ``workers`` − 1 (at least 1)."""
    if group_size < 2:
        return 1
    digits, x = 0, workers - 1
    while x > 0:
        x //= group_size
        digits += 1
    return max(digits, 1)


def butterfly_group(rank: int, phase: int, workers: int, group_size: int) -> list[int]:
    """The ranks averaged with ``rank`` at ``phase``: those that differ from it only in base-S digit ``phase``."""
    if group_size < 2:
        return [rank]
    stride = group_size**phase
    base = rank - (rank // stride) % group_size * stride
    return [base + d * stride for d in range(group_size) if base + d * stride < workers]


def phase_groups(phase: int, workers: int, group_size: int) -> list[list[int]]:
    """All groups of one phase (a partition of the ranks)."""
    stride = group_size**phase if group_size >= 2 else 1
    return [
        butterfly_group(r, phase, workers, group_size)
        for r in range(workers)
        if group_size < 2 or (r // stride) % group_size == 0
    ]


class Wagma(RoundAlgorithm):
    """Group rounds activated by the first post; a late worker's last deposit stands in for it."""

    async_kind = "group"
    sync_kind = "average"
    late_rule = "deposit"

    def __init__(self, scenario, engine):
        super().__init__(scenario, engine)
        S = self.options.group_size
        self.phases = phase_count(self.P, S)
        # every group of a phase completes with the phase's slowest group
        self.t_phase = [
            max(self.net.allreduce(g, self.nbytes) for g in phase_groups(s, self.P, S)) for s in range(self.phases)
        ]
        self.first_post = np.full(self.P, INF)
        self.last: list[Call | None] = [None] * self.P

    def exchange_time(self, m: int) -> float:
        return self.t_global if self.synchronous(m) else self.t_phase[m % self.phases]

    def group(self, m: int) -> int:
        return -1 if self.synchronous(m) else m % self.phases

    def contributors(self, r: Round) -> int:
        """Every worker that has deposited a model by the exchange start."""
        return int(np.count_nonzero(self.first_post <= r.t_start))

    def late(self, call: Call, target: int | None) -> None:
        call.round = -1 if target is None else target

    def settle(self, call: Call) -> None:
        """A deposit is final when the next one is made: it is overwritten unread if both go to one round."""
        w = call.worker
        self.first_post[w] = min(self.first_post[w], call.t_post)
        prev = self.last[w]
        if prev is not None:
            if prev.round == call.round:
                prev.round, prev.fresh = -1, False
            prev.final = True
        self.last[w] = call
