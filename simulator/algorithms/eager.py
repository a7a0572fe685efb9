"""eager-SGD (Li et al., PPoPP'20): gradients summed by a *partial* allreduce.

``eager-solo``: the first post of call n anywhere activates round n. ``eager-majority``: only the post of the
round's initiator does; the initiator of round n is :func:`initiator`, a pure function of (seed, n, P) that every
worker (and the native core) computes identically. Workers that have not posted call n when the exchange starts
contribute their pending late gradients (``late = accumulate``: every gradient is applied exactly once) or nothing
(``late = drop``, as the released code does). Every ``sync_period``-th round is synchronous, which bounds staleness.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.algorithms.rounds import KERNEL, SYNC_PERIOD, RoundProcess, RoundRules, gradient_rounds
from stragglerlab.simulator.keys import Key, one_of

if TYPE_CHECKING:
    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.scenario import Scenario

_MASK = (1 << 64) - 1
LATE = Key(
    "late",
    "accumulate",
    one_of(("accumulate", "drop")),
    "a gradient that misses its round: accumulate (into the next one) or drop",
)
DIVIDE_BY = Key(
    "divide_by",
    "workers",
    one_of(("workers", "contributors")),
    "a round's sum is divided by the workers, or by the gradients summed",
)
EXCHANGES = {"native": "stragglerlab.realrun.algorithms.native:GradientExchange"}


#: splitmix64's increment and the multipliers of its finaliser
SPLITMIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def splitmix(seed, n):
    """splitmix64 of (seed, n): ``z = seed + (n + 1)·0x9E3779B97F4A7C15``, then the splitmix64 finaliser, all
    modulo 2^64; for Python ints and numpy uint64 arrays alike."""
    golden, mix1, mix2 = SPLITMIX
    z = (seed + (n + 1) * golden) & _MASK
    z = ((z ^ (z >> 30)) * mix1) & _MASK
    z = ((z ^ (z >> 27)) * mix2) & _MASK
    return z ^ (z >> 31)


def initiator(seed: int, n: int, workers: int) -> int:
    """The initiator of majority round ``n``: splitmix64 of (seed, n), modulo the number of workers."""
    return splitmix(seed, n) % workers


class SoloRules(RoundRules):
    """Solo allreduce: the first arrival activates the round."""

    def __init__(self, scenario: Scenario, costs: CostModel):
        super().__init__(scenario, costs)
        a = scenario.algorithm
        self.sync_period, self.late, self.divide_by = a.sync_period, a.late, a.divide_by


class MajorityRules(SoloRules):
    """Majority allreduce: the seeded initiator's arrival activates the round (about half arrive before it)."""

    def fixed_initiator(self, m: int) -> int:
        return initiator(self.seed, m, self.P)


def _record(name: str, summary: str, rules: type[SoloRules], style: Style) -> Algorithm:
    """An eager-SGD record: the two kinds differ only in what activates a round."""
    return Algorithm(
        name=name,
        summary=summary,
        keys=(SYNC_PERIOD, LATE, DIVIDE_BY),
        rules=rules,
        process=RoundProcess,
        kernel=KERNEL,
        apply=gradient_rounds,
        exchanges=EXCHANGES,
        style=style,
        legend=LEGEND,
    )


#: eager-SGD's (and quorum's) staleness and freshness
LEGEND = (
    "stale: rounds from the model it computed on to the round carrying its gradient (late: 1+); fresh: in its own round"
)
SOLO = _record(
    "eager-solo",
    "eager-SGD's solo allreduce: the first worker to arrive starts a round; latecomers' gradients wait",
    SoloRules,
    Style("#E69F00", "s"),
)
MAJORITY = _record(
    "eager-majority",
    "eager-SGD's majority allreduce: a seeded initiator per round starts it (about half have arrived)",
    MajorityRules,
    Style("#56B4E9", "^"),
)
