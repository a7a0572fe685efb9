"""Synchronous SGD, the baseline: every round waits for all P gradients, then one allreduce, and every worker steps
with their mean."""

from __future__ import annotations

from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.algorithms.rounds import RoundProcess, RoundRules
from stragglerlab.simulator.convergence import gradient_rounds
from stragglerlab.simulator.fast import rounds


class SyncRules(RoundRules):
    """Round n is triggered by the last of the P posts of call n; its exchange starts at once."""

    def synchronous(self, m: int) -> bool:
        return True


RECORD = Algorithm(
    name="sync",
    summary="synchronous SGD: every round waits for all workers' gradients (the baseline)",
    keys=(),
    rules=SyncRules,
    process=RoundProcess,
    kernel=rounds.run,
    update=gradient_rounds,
    exchanges={
        "native": "stragglerlab.realrun.algorithms.native:GradientExchange",
        "torch": "stragglerlab.realrun.algorithms.torch_sync:TorchSync",
    },
    style=Style("#000000", "o"),
)
