"""eager-SGD (Li et al., PPoPP'20): gradients summed by a *partial* allreduce.

``eager-solo``: the first post of call n anywhere activates round n. ``eager-majority``: only the post of the
round's initiator does; the initiator of round n is :func:`initiator`, a pure function of (seed, n, P) that every
worker (and the native core) computes identically. Workers that have not posted call n when the exchange starts
contribute their pending late gradients (``late = accumulate``: every gradient is applied exactly once) or nothing
(``late = drop``, as the released code does). Every ``sync_period``-th round is synchronous, which bounds staleness.
"""

from __future__ import annotations

from stragglerlab.simulator.algorithms.rounds import RoundAlgorithm
from stragglerlab.simulator.engine import Call

_MASK = (1 << 64) - 1


def initiator(seed: int, n: int, workers: int) -> int:
    """The initiator of majority round ``n``: splitmix64 of (seed, n), modulo the number of workers.

    ``z = seed + (n + 1)·0x9E3779B97F4A7C15``, then the splitmix64 finaliser, all modulo 2^64.
    """
    z = (seed + (n + 1) * 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return (z ^ (z >> 31)) % workers


class EagerSolo(RoundAlgorithm):
    """Solo allreduce: the first arrival activates the round."""

    def __init__(self, scenario, engine):
        super().__init__(scenario, engine)
        self.late_rule = self.options.late

    def late(self, call: Call, target: int | None) -> None:
        if self.late_rule == "accumulate" and target is not None:
            call.round = target
            self.round(target).add_pending(call.worker)
        else:
            call.round = -1


class EagerMajority(EagerSolo):
    """Majority allreduce: the seeded initiator's arrival activates the round (about half arrive before it)."""

    def fixed_initiator(self, m: int) -> int:
        return initiator(self.seed, m, self.P)
