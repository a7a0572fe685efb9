"""Local SGD (periodic model averaging): ``period`` local steps, then a synchronous average of all models."""

from __future__ import annotations

from stragglerlab.simulator.algorithms.rounds import RoundAlgorithm
from stragglerlab.simulator.engine import Call


class LocalSgd(RoundAlgorithm):
    """Iteration n calls the average ⌊n/period⌋ when it ends a period; the others are local steps."""

    sync_kind = "average"

    def __init__(self, scenario, engine):
        super().__init__(scenario, engine)
        self.stride = self.options.period

    def round_count(self, iterations: int) -> int:
        return iterations // self.options.period

    def synchronous(self, m: int) -> bool:
        return True

    def local_step(self, call: Call) -> None:
        """No wait; the step is carried by the coming average (none after the last full period)."""
        m = call.iteration // self.stride
        call.round = m if m < self.total else -1
        call.fresh, call.final = m < self.total, True
        self.engine.release(call, applied=False)
