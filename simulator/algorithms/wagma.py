"""WAGMA-SGD (Li et al., TPDS'21): wait-avoiding group model averaging.

Round n is activated globally by the first post (as solo), but the models are summed inside butterfly groups of
``group_size`` workers (by default 8, the released code's, or all P where there are fewer): each worker contributes the
model it last deposited (stale if it is late), and applies (Σ_group + w)/(|group| + 1), then its own gradient step.
Every ``sync_period``-th round is a global average.

Groups for any P and S (:func:`butterfly_group`): write ranks in base S; there are as many phases as base-S digits
of P − 1 (at least one), round n uses phase n mod phases, and the group of rank i at phase s is every rank below P
that differs from i only in digit s. For powers of two this is exactly "differ only in bits [s·log2 S,
(s+1)·log2 S)"; otherwise the groups of the top digit are smaller than S.

With a time budget, the first global average triggered at or after it is the last round; group rounds never end it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from stragglerlab.simulator.algorithms.record import Algorithm, Fail, Style
from stragglerlab.simulator.algorithms.rounds import DEPOSIT, KERNEL, SYNC_PERIOD, RoundProcess, RoundRules
from stragglerlab.simulator.keys import Check, Key
from stragglerlab.simulator.replicas import Observer, Optimizer, matrix

if TYPE_CHECKING:
    import pandas as pd

    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.scenario import Scenario

GROUP_SIZE = Key(
    "group_size",
    0,
    Check(int, lambda v: v >= 0, "an integer from 1 to cluster.workers, or 0 for min(8, cluster.workers)"),
    "models are averaged in butterfly groups of this many workers (1 … P); 0: 8, or P when fewer",
)


def resolved_group_size(S: int, workers: int) -> int:
    """The group size that ``algorithm.group_size = S`` sets among ``workers``: S itself, or min(8, P) for 0 (the
    released code's 8, where there are that many workers)."""
    return S or min(8, workers)


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


class WagmaRules(RoundRules):
    """Group rounds activated by the first post; a late worker's last deposit stands in for it; the groups of a
    phase run at the same time (sharing the inter-node links of the nodes they span) and every one completes with
    the phase's slowest."""

    sync_kind = "average"
    async_kind = "group"
    late = DEPOSIT

    def __init__(self, scenario: Scenario, costs: CostModel):
        super().__init__(scenario, costs)
        self.sync_period = scenario.algorithm.sync_period
        self.group_size = S = resolved_group_size(scenario.algorithm.group_size, self.P)
        self.phases = phase_count(self.P, S)
        # the groups of a phase run at the same time, sharing the nodes' links; all complete with the slowest
        self.t_phase = [
            max(costs.concurrent(self.async_kind, self.nbytes, phase_groups(s, self.P, S))) for s in range(self.phases)
        ]
        self._spread[self.async_kind] = costs.spread(self.async_kind, self.nbytes, min(S, self.P))

    def priced_globally(self, kind: str) -> bool:
        return kind != self.async_kind  # group rounds reduce in their groups (t_phase)

    def exchange_time(self, m: int) -> float:
        if self.synchronous(m):
            return super().exchange_time(m)
        return self.t_phase[m % self.phases] * self.factors[m]

    def group(self, m: int) -> int:
        return -1 if self.synchronous(m) else m % self.phases

    def ends_budget(self, m: int) -> bool:
        """Only a periodic global average ends the time budget: every worker is in it, fresh, and every rank of a
        real run reads its trigger (the last post) alike, while a group round's trigger is known only in the
        activator's group; replicas are then averaged alike."""
        return self.synchronous(m)


def apply(
    rules: WagmaRules,
    workload: Any,
    it: pd.DataFrame,
    rounds: pd.DataFrame,
    W: np.ndarray,
    opt: Optimizer,
    note: Observer,
) -> Iterator[int]:
    """Group (or global) average of the deposits read at each exchange, then each worker's own step.

    A deposit is the model a worker computed its gradient on; the ``round`` of its row is the first round that read
    it (−1: replaced unread, or never read), so round m reads each worker's latest deposit whose round is in
    [0, m], and before that the initial model (which is what every worker deposits first). Reading the tables, not
    the times, replays a real run's rounds as its core ran them. A group round applies
    w ← (Σ_group deposits + w)/(|group| + 1), a global one w ← mean of all deposits (every worker is fresh there, as
    the released code's Σ_all W_j / P); then each worker steps with its own gradient. Every worker has a call in
    every round: the time budget ends the run at a global average, which every worker's call m is in.
    """
    P, S = rules.P, rules.group_size
    target = matrix(it, "round", P, -1)
    groups = []  # per phase: ranks ordered by group, where each group starts in that order, group of each rank
    for s in range(rules.phases):
        members = phase_groups(s, P, S)
        gid = np.empty(P, dtype=np.int64)
        for g, ranks_of in enumerate(members):
            gid[ranks_of] = g
        sizes = np.array([len(g) for g in members])
        groups.append((np.concatenate(members), np.cumsum(sizes) - sizes, gid, sizes.astype(np.float64)))
    ranks = np.arange(P)
    workers, calls = np.nonzero(target >= 0)
    first = np.argsort(target[workers, calls], kind="stable")  # deposits in the order rounds first read them
    workers, calls, read_by = workers[first], calls[first], target[workers, calls][first]
    deposit = W.copy()  # the deposit each worker's group reads
    saved: dict[tuple[int, int], np.ndarray] = {}
    group_of = rounds["group"].to_numpy()
    at = 0
    for m in range(len(rounds)):
        G, _ = workload.gradient(W, workload.batches(ranks, np.full(P, m)))
        kept = np.flatnonzero(target[:, m] >= 0) if m < target.shape[1] else ranks[:0]
        for j, row in zip(kept, W[kept], strict=True):  # W[kept] is a copy
            saved[(int(j), m)] = row
        while at < len(read_by) and read_by[at] == m:
            deposit[workers[at]] = saved.pop((int(workers[at]), int(calls[at])))
            at += 1
        group = int(group_of[m])
        if group < 0:
            W[:] = deposit.mean(axis=0)
        else:
            order, starts, gid, sizes = groups[group]
            sums = np.add.reduceat(deposit[order], starts, axis=0)
            W[:] = (sums[gid] + W) / (sizes[gid] + 1)[:, None]
        note("averaged", m, W)
        opt.step(W, G)
        yield m


def check(scenario: Scenario, fail: Fail) -> None:
    S, P = scenario.algorithm.group_size, scenario.workers
    if S > P:
        raise fail("algorithm.group_size", S, f"from 1 to cluster.workers = {P}, or 0 for {resolved_group_size(0, P)}")
    if scenario.duration > 0 and scenario.algorithm.sync_period == 0:
        raise fail("algorithm.sync_period", 0, "at least 1 with a time budget (duration > 0): a global average ends it")


RECORD = Algorithm(
    name="wagma",
    legend="stale: group rounds from the model it deposited to the round first reading it; "
    "fresh: deposited by its own round's start",
    summary="WAGMA-SGD: the first arrival starts a round; models are averaged in butterfly groups, late ones stale",
    keys=(SYNC_PERIOD, GROUP_SIZE),
    rules=WagmaRules,
    process=RoundProcess,
    kernel=KERNEL,
    apply=apply,
    exchanges={"native": "stragglerlab.realrun.algorithms.wagma:WagmaExchange"},
    style=Style("#009E73", "D"),
    check=check,
    own_step=True,
)
