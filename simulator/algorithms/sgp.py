"""SGP, Stochastic Gradient Push (Assran et al., ICML'19): push-sum gossip over the time-varying exponential graph.

At iteration n worker i sends half of its push-sum numerator and weight to (i + 2^(n mod ⌈log2 P⌉)) mod P and keeps
the other half; it waits only for the message of its source src = i − 2^(n mod ⌈log2 P⌉), not for its own send:
t_done(n, i) = max(t_post(n, i), t_post(n, src) + p2p(n)) (:mod:`.gossip`). The gradient is taken on the de-biased
model x/weight, the step applied to the numerator x before it is sent (the SGP paper's order), then
x ← (x + x_src)/2 and weight ← (weight + weight_src)/2.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from stragglerlab.simulator.algorithms.gossip import KERNEL, GossipProcess, GossipRules, iteration_rows
from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.replicas import Observer, Optimizer
from stragglerlab.simulator.topology import exponential_phases, exponential_shift

if TYPE_CHECKING:
    import pandas as pd


class SgpRules(GossipRules):
    """Phase s = n mod ⌈log2 P⌉: worker i receives from (i − 2^s) mod P only (nothing with one worker)."""

    waits_for_sends = False

    def phase_peers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        count = 1 if self.P > 1 else 0
        return [(np.full(self.P, count), self.source(s)[: count * self.P]) for s in range(exponential_phases(self.P))]

    def source(self, n: int) -> np.ndarray:
        """Each worker's source at iteration ``n`` (itself with one worker)."""
        return (np.arange(self.P) - exponential_shift(n, self.P)) % self.P


def apply(
    rules: SgpRules,
    workload: Any,
    it: pd.DataFrame,
    rounds: pd.DataFrame,
    W: np.ndarray,
    opt: Optimizer,
    note: Observer,
) -> Iterator[int]:
    """Push-sum: ``W`` holds the de-biased models x/weight, which the gradients are taken on; the steps go to the
    numerators x, which are then mixed with the source's halves, and so are the weights."""
    P = rules.P
    ranks = np.arange(P)
    X, weight = W.copy(), np.ones(P)
    for n, row in enumerate(iteration_rows(rounds, P)):
        G, _ = workload.gradient(W, workload.batches(ranks, np.full(P, n)))
        opt.step(X, G)
        src = rules.source(n)
        X = (X + X[src]) / 2
        weight = (weight + weight[src]) / 2
        W[:] = X / weight[:, None]
        note("averaged", n, W)
        yield int(row)


RECORD = Algorithm(
    name="sgp",
    legend="stale 0 (each exchange mixes the models held then); fresh: all",
    summary="SGP: push-sum gossip; each worker pushes half its model to one peer of a time-varying exponential graph",
    keys=(),
    rules=SgpRules,
    process=GossipProcess,
    kernel=KERNEL,
    apply=apply,
    exchanges={"native": "stragglerlab.realrun.algorithms.gossip:GossipExchange"},
    style=Style("#999933", "p"),
    own_step=True,
)
