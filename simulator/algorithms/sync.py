"""Synchronous SGD: every round waits for all P gradients, then one allreduce (the baseline)."""

from __future__ import annotations

from stragglerlab.simulator.algorithms.rounds import RoundAlgorithm


class Sync(RoundAlgorithm):
    """Round n is triggered by the last of the P posts of call n; its exchange starts at once."""

    def synchronous(self, m: int) -> bool:
        return True
