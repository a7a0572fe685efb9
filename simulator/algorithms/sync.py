"""Synchronous SGD, the baseline: every round waits for all P gradients, then one allreduce, and every worker steps
with their mean.

With ``workload.buckets = B`` > 1 the gradient is all-reduced in B equal buckets while backward still runs, as
Horovod and PyTorch's DDP do: bucket b of a worker is ready once its share of backward (``workload.backward`` of the
compute) has reached it, each bucket's allreduce starts when every worker has it ready and the previous bucket's is
done, and the round completes with the last bucket (:func:`bucketed_end`, which the fast engine compiles).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.algorithms.rounds import KERNEL, RoundProcess, RoundRules, gradient_rounds

if TYPE_CHECKING:
    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.engine import Call
    from stragglerlab.simulator.scenario import Scenario


def bucketed_end(starts, posts, buckets, backward, t_bucket):
    """When the last of ``buckets`` gradient buckets of a synchronous round is all-reduced: bucket b of worker i is
    ready at start + c·(1 − f) + c·f·(b + 1)/B (c = post − start, f = ``backward``, the share of the compute that is
    backward; the last bucket is ready at the post itself), its allreduce starts when every worker has it ready and
    the previous bucket's is done (one stream), and takes ``t_bucket``. Plain loops over the workers' arrays, so
    numba compiles it as it is."""
    end = -np.inf
    for b in range(buckets):
        ready = -np.inf
        for i in range(starts.shape[0]):
            c = posts[i] - starts[i]
            at = posts[i] if b == buckets - 1 else starts[i] + c * (1 - backward) + c * backward * (b + 1) / buckets
            ready = max(ready, at)
        end = max(ready, end) + t_bucket
    return end


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
        return float(bucketed_end(starts, posts, self.buckets, self.backward, t_bucket))


RECORD = Algorithm(
    name="sync",
    legend="stale 0 (every round carries every worker's gradient); fresh: all",
    summary="synchronous SGD: every round waits for all workers' gradients (the baseline)",
    keys=(),
    rules=SyncRules,
    process=RoundProcess,
    kernel=KERNEL,
    apply=gradient_rounds,
    exchanges={
        "native": "stragglerlab.realrun.algorithms.native:GradientExchange",
        "torch": "stragglerlab.realrun.algorithms.torch_sync:TorchSync",
    },
    style=Style("#000000", "o"),
)
