"""Synchronous SGD with backup workers (Chen et al., 2016) as a k-of-P partial allreduce: ``quorum``.

Round n is activated by the k-th post of call n (``algorithm.quorum = k``; 0, the default, means half the workers,
rounded up), then the activation token and the exchange follow as in eager-SGD's solo allreduce, and so do the
contributions, the late posts (``late``), the divisor (``divide_by``) and the periodic synchronous rounds
(``sync_period``). k = 1 is ``eager-solo``; k = P − b with ``late = drop`` is synchronous SGD with b backup workers:
every round takes the first P − b gradients (and any that arrive during the activation) and drops the rest.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from stragglerlab.simulator.algorithms.eager import DIVIDE_BY, EXCHANGES, LATE, LEGEND, SoloRules
from stragglerlab.simulator.algorithms.record import Algorithm, Fail, Style
from stragglerlab.simulator.algorithms.rounds import KERNEL, SYNC_PERIOD, RoundProcess, gradient_rounds
from stragglerlab.simulator.keys import Check, Key

if TYPE_CHECKING:
    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.scenario import Scenario

QUORUM = Key(
    "quorum",
    0,
    Check(int, lambda v: v >= 0, "an integer from 1 to cluster.workers, or 0 for half the workers, rounded up"),
    "quorum: the k-th post of a call activates its round (1: as eager-solo); 0: half the workers, rounded up",
)


def quorum_size(k: int, workers: int) -> int:
    """The quorum that ``algorithm.quorum = k`` sets among ``workers``: k itself, or ⌈P/2⌉ for 0."""
    return k or math.ceil(workers / 2)


class QuorumRules(SoloRules):
    """Solo's rules, but round n is activated by the k-th post of call n rather than the first."""

    def __init__(self, scenario: Scenario, costs: CostModel):
        super().__init__(scenario, costs)
        self.k = quorum_size(scenario.algorithm.quorum, self.P)

    def quorum(self, m: int) -> int:
        return self.P if self.synchronous(m) else self.k

    def native_options(self) -> dict[str, Any]:
        return {"quorum": self.k}


def check(scenario: Scenario, fail: Fail) -> None:
    k, P = scenario.algorithm.quorum, scenario.workers
    if k > P:
        raise fail("algorithm.quorum", k, f"from 1 to cluster.workers = {P}, or 0 for {quorum_size(0, P)} (half)")


RECORD = Algorithm(
    name="quorum",
    summary="k-of-P partial allreduce (sync SGD with backup workers): the k-th arrival starts a round",
    keys=(SYNC_PERIOD, LATE, DIVIDE_BY, QUORUM),
    rules=QuorumRules,
    process=RoundProcess,
    kernel=KERNEL,
    apply=gradient_rounds,
    exchanges=EXCHANGES,
    legend=LEGEND,
    style=Style("#A50026", "*"),
    check=check,
)
