"""Local SGD (periodic model averaging): ``period`` local steps, then a synchronous average of all models.

Iteration n is a local step, released at once, unless it ends a period ((n + 1) mod period = 0): then it posts to
average ⌊n/period⌋, a synchronous round over all workers. A local step's round is the average that will carry it,
or −1 after the last full period.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.algorithms.rounds import KERNEL, RoundProcess, RoundRules
from stragglerlab.simulator.bounds import MAX_PERIOD
from stragglerlab.simulator.keys import Key, at_most
from stragglerlab.simulator.replicas import Observer, Optimizer, row_counts

if TYPE_CHECKING:
    import pandas as pd

    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.scenario import Scenario

PERIOD = Key(
    "period",
    16,
    at_most(MAX_PERIOD, "2^31"),
    "local-sgd: local steps between averages; lsgd: a local exchange every P·period iterations in all; "
    "easgd: every period-th iteration exchanges with the server",
)


class LocalSgdRules(RoundRules):
    """Every ``period``-th iteration calls a synchronous average (kind ``average``)."""

    sync_kind = "average"

    def __init__(self, scenario: Scenario, costs: CostModel):
        super().__init__(scenario, costs, stride=scenario.algorithm.period)

    def synchronous(self, m: int) -> bool:
        return True


def apply(
    rules: LocalSgdRules,
    workload: Any,
    it: pd.DataFrame,
    rounds: pd.DataFrame,
    W: np.ndarray,
    opt: Optimizer,
    note: Observer,
) -> Iterator[int]:
    """``period`` local steps of every worker, then w ← mean(w) at each average; steps after the last average stay
    local, each worker's up to its own row count."""
    P, period = rules.P, rules.stride
    counts = row_counts(it, P)

    def steps(first: int, last: int) -> None:
        for n in range(first, last):
            rows = np.flatnonzero(counts > n)
            G, _ = workload.gradient(W[rows], workload.batches(rows, np.full(len(rows), n)))
            opt.step(W, G, rows)

    for m in range(len(rounds)):
        steps(m * period, (m + 1) * period)
        W[:] = W.mean(axis=0)
        note("averaged", m, W)
        yield m
    steps(len(rounds) * period, int(counts.max(initial=0)))


RECORD = Algorithm(
    name="local-sgd",
    legend="stale 0 (local steps on its own model); fresh: carried by some average (not steps after the last)",
    summary="local SGD: period local steps, then a synchronous average of every model",
    keys=(PERIOD,),
    rules=LocalSgdRules,
    process=RoundProcess,
    kernel=KERNEL,
    apply=apply,
    exchanges={"native": "stragglerlab.realrun.algorithms.local_sgd:LocalSgdExchange"},
    style=Style("#0072B2", "P"),
    own_step=True,
)
