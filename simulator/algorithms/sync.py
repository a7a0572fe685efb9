"""Synchronous SGD, the baseline: every round waits for all P gradients, then one allreduce, and every worker steps
with their mean.

With ``workload.buckets = B`` > 1 the gradient is all-reduced in B equal buckets while backward still runs, as
Horovod and PyTorch's DDP do: bucket b of a worker is ready once its share of backward (``workload.backward`` of the
compute) has reached it, each bucket's allreduce starts when every worker has it ready and the previous bucket's is
done, and the round completes with the last bucket (:func:`~stragglerlab.simulator.fast.rounds.bucketed_end`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.algorithms.rounds import RoundProcess, RoundRules
from stragglerlab.simulator.convergence import gradient_rounds
from stragglerlab.simulator.engine import Call
from stragglerlab.simulator.fast import rounds

if TYPE_CHECKING:
    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.scenario import Scenario


class SyncRules(RoundRules):
    """Round n is triggered by the last of the P posts of call n; its exchange starts at once."""

    def __init__(self, scenario: Scenario, costs: CostModel):
        super().__init__(scenario, costs)
        self.buckets, self.backward = scenario.workload.buckets, scenario.workload.backward
        self.t_bucket = costs.collective(self.sync_kind, self.nbytes / self.buckets, self.P)

    def synchronous(self, m: int) -> bool:
        return True

    def done(self, m: int, x: float, calls: list[Call]) -> float:
        if self.buckets == 1:
            return super().done(m, x, calls)
        starts, posts = np.array([c.t_start for c in calls]), np.array([c.t_post for c in calls])
        t_bucket = self.t_bucket * self.factors[m]
        return float(rounds.bucketed_end(starts, posts, self.buckets, self.backward, t_bucket))


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
