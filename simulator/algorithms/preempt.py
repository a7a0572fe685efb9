"""Synchronous SGD with preemption of stragglers (DD-PPO, Wijmans et al., ICLR'20): ``preempt``.

Every round is synchronous, but once q = ⌈f·P⌉ workers (``algorithm.fraction`` = f) have finished their iteration's
work, the others stop computing and contribute what they have done: the step ends with the q-th finisher instead of
the slowest. The compute of a worker-iteration is divisible: worker i, starting at s_i with its draw c_i, finishes at
e_i = s_i + c_i; the q-th smallest of the e_i is the cut T. A worker with e_i ≤ T posts at e_i with its whole batch
b; any other posts at T (s_i + (T − s_i)) having processed ⌊b·(T − s_i)/c_i⌋ samples, **(choice)** at least one and at
most b (:func:`cut`). Round n then starts at the last post, T, and takes the synchronous allreduce: every round is
``sync``'s with the posts cut at T, so f = 1 (q = P) is ``sync`` exactly. **(choice)** Telling the others that q have
finished costs nothing in the simulator (in DD-PPO a counter in a shared store, read between rollout steps); real
runs pay it, since a rank stops at the next micro-batch boundary after it learns of it.

The applied result is the mean gradient over every sample processed: a preempted worker's gradient is over the first
k of its b samples, and the round applies Σ_i k_i·g_i / Σ_i k_i (:func:`apply`). The ``iterations`` table's
``samples`` column records each k_i.

The fast engine steps through the same rules (:mod:`stragglerlab.simulator.fast.preempt`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.algorithms.rounds import Round, RoundProcess, RoundRules
from stragglerlab.simulator.keys import POSITIVE_INT, Key, number
from stragglerlab.simulator.replicas import Observer, Optimizer, matrix

if TYPE_CHECKING:
    import pandas as pd

    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.engine import Call, Engine
    from stragglerlab.simulator.scenario import Scenario

FRACTION = Key(
    "fraction",
    0.6,
    number(lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "preempt: once this fraction of the workers (rounded up) have finished a step, the others stop and contribute "
    "what they have processed (1: sync); 0.6 is DD-PPO's released setting",
)
MICROBATCHES = Key(
    "microbatches",
    16,
    POSITIVE_INT,
    "preempt, real runs: micro-batches per step (at most one per sample); a rank told to stop does so at the next "
    "micro-batch boundary",
)


def cut(start: float, compute: float, T: float, batch: int) -> tuple[float, int]:
    """A worker preempted at ``T`` (after its start and before it finishes at ``start + compute``): its post time
    ``start + (T − start)`` and the samples of its ``batch`` it processed, ⌊batch·(T − start)/compute⌋ within
    [1, batch]; a count within 1e-9 below an integer is that integer (T − start carries the rounding of the clock's
    sums: 16 samples' time, 0.1 s at 0.2 s for 32, reads as 15.999999999). Scalar arithmetic only, so the fast
    engine compiles it as it is."""
    elapsed = T - start
    samples = int(math.floor(batch * elapsed / compute + 1e-9))
    return start + elapsed, min(max(samples, 1), batch)


class PreemptRules(RoundRules):
    """Every round synchronous; the posts are cut at the q-th finisher (:func:`cut`)."""

    def __init__(self, scenario: Scenario, costs: CostModel):
        super().__init__(scenario, costs)
        self.fraction = scenario.algorithm.fraction
        # q = ⌈f·P⌉ of the decimal f: f·P in floating point can land just above an integer (0.6·5 = 3.0000000000000004)
        self.finishers = math.ceil(round(self.fraction * self.P, 9))
        self.microbatches = min(scenario.algorithm.microbatches, scenario.workload.batch)  # at most one per sample
        self.batch = scenario.workload.batch

    def synchronous(self, m: int) -> bool:
        return True

    def cut_time(self, ends: np.ndarray) -> float:
        """The instant the q-th worker finishes, given when each would finish (``ends``)."""
        return float(np.partition(ends, self.finishers - 1)[self.finishers - 1])


class PreemptProcess(RoundProcess):
    """Sync's process, and the cut of every worker's compute: asked by the first worker to start an iteration, it
    draws every worker's compute time of it (every worker starts it when the previous round releases them all)."""

    def __init__(self, rules: PreemptRules, engine: Engine):
        super().__init__(rules, engine)
        self.starts = np.zeros(rules.P)  # when each worker starts the iteration being computed
        self.T = (-1, 0.0)  # (iteration, its cut)

    def cut(self, call: Call, compute: float) -> float:
        rules, n = self.rules, call.iteration
        assert isinstance(rules, PreemptRules)
        if self.T[0] != n:
            computes = np.array([self.engine.compute_time(n, j) for j in range(rules.P)])
            self.T = (n, rules.cut_time(self.starts + computes))
        T = self.T[1]
        if call.t_start + compute <= T:
            return compute
        post, call.samples = cut(call.t_start, compute, T, rules.batch)
        return post - call.t_start

    def complete(self, r: Round) -> None:
        super().complete(r)
        for call in r.waiting:
            self.starts[call.worker] = call.t_done + self.rules.update


def apply(
    rules: PreemptRules,
    workload: Any,
    it: pd.DataFrame,
    rounds: pd.DataFrame,
    W: np.ndarray,
    opt: Optimizer,
    note: Observer,
) -> Iterator[int]:
    """Round m applies the mean gradient over every sample of iteration m: worker i's over the first k_i samples of
    its batch (its ``samples``), weighted by k_i. Every replica applies every round, so replicas stay identical."""
    P = rules.P
    target, samples = matrix(it, "round", P, -1), matrix(it, "samples", P, 0)
    for m in range(len(rounds)):
        rows = np.flatnonzero(target[:, m] == m)
        g, total = np.zeros(W.shape[1]), 0
        if len(rows):
            batches = workload.batches(rows, np.full(len(rows), m))
            k = samples[rows, m]
            for size in np.unique(k).tolist():
                part = np.flatnonzero(k == size)
                G, _ = workload.gradient(W[rows[part]], batches[part, :size])
                g += size * G.sum(axis=0)
            total = int(k.sum())
        note("applied", m, g)
        opt.step(W, g / max(total, 1))
        yield m


RECORD = Algorithm(
    name="preempt",
    summary="sync SGD with preemption (DD-PPO): once a fraction finish, the others stop and contribute what they did",
    keys=(FRACTION, MICROBATCHES),
    rules=PreemptRules,
    process=PreemptProcess,
    kernel="stragglerlab.simulator.fast.preempt:kernel",
    apply=apply,
    exchanges={"native": "stragglerlab.realrun.algorithms.preempt:PreemptExchange"},
    style=Style("#7570B3", "d"),
)
