"""SGP, Stochastic Gradient Push (Assran et al., ICML'19): push-sum gossip over the time-varying exponential graph.

At iteration n (phase s = n mod ⌈log2 P⌉) worker i pushes to ``algorithm.push_peers`` = k peers and keeps a share of
1/(k + 1) of its push-sum numerator and weight, sending the same share to each:

- k = 1 (Assran et al.'s SGP): the peer (i + 2^s) mod P; i waits only for the message of its source i − 2^s, not for
  its own send: t_done(n, i) = max(t_post(n, i), t_post(n, src) + p2p(n)) (:mod:`.gossip`);
- k = 2 (the SGP of the WAGMA-SGD repository, ``optimizer_sgp_imagenet.py``): the peers i + 2^s and
  i + 2^((s+1) mod ⌈log2 P⌉), each a third; i waits for both its sources' messages and for its own two sends (the
  release's ``MPI_Waitall`` over all four). **(choice)** Where both shifts name one peer (P ≤ 2), it is pushed to
  once, a half.

The gradient is taken on the de-biased model x/weight, the step applied to the numerator x before it is sent (the
SGP paper's order), then x ← (x + Σ x_src)/(k + 1) and weight ← (weight + Σ weight_src)/(k + 1) over the sources.
(The release sends its de-biased model divided by 3, and steps after the average; its weights stay 1 on a graph
where every worker pushes to as many as it receives from, so its average is the same.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from stragglerlab.simulator.algorithms.gossip import KERNEL, GossipProcess, GossipRules, iteration_rows
from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.keys import Check, Key
from stragglerlab.simulator.replicas import Observer, Optimizer
from stragglerlab.simulator.topology import exponential_phases, exponential_shift

if TYPE_CHECKING:
    import pandas as pd


PUSH_PEERS = Key(
    "push_peers",
    1,
    Check(int, lambda v: v in (1, 2), "1 or 2"),
    "sgp: peers each worker pushes to per iteration: 1 (i + 2^s, a half: Assran et al.), 2 (i + 2^s and "
    "i + 2^(s+1), a third each, waiting for its sends: the WAGMA-SGD repository's release)",
)


class SgpRules(GossipRules):
    """Phase s = n mod ⌈log2 P⌉: worker i receives from i − 2^s (and, pushing to two, from i − 2^(s+1)) mod P;
    nothing with one worker."""

    push_sum = True

    def __init__(self, scenario: Any, costs: Any):
        self.push_peers = scenario.algorithm.push_peers
        self.waits_for_sends = self.push_peers > 1  # the release's MPI_Waitall covers its sends
        super().__init__(scenario, costs)

    def phase_peers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for s in range(exponential_phases(self.P)):
            sources = self.sources(s)
            out.append((np.full(self.P, sources.shape[1]), sources.ravel()))
        return out

    def sources(self, n: int) -> np.ndarray:
        """Each worker's sources at iteration ``n``, one row per worker, sorted (no column with one worker)."""
        shifts = sorted({exponential_shift(n + k, self.P) for k in range(self.push_peers)} - {0})
        ranks = np.arange(self.P)[:, None]
        return np.sort((ranks - np.array(shifts, dtype=np.int64)[None, :]) % self.P, axis=1)


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
        sources = rules.sources(n)
        share = 1 + sources.shape[1]
        X = (X + X[sources].sum(axis=1)) / share
        weight = (weight + weight[sources].sum(axis=1)) / share
        W[:] = X / weight[:, None]
        note("averaged", n, W)
        yield int(row)


RECORD = Algorithm(
    name="sgp",
    legend="stale 0 (each exchange mixes the models held then); fresh: all",
    summary="SGP: push-sum gossip; each worker pushes a share of its model to one or two peers of a time-varying "
    "exponential graph",
    keys=(PUSH_PEERS,),
    rules=SgpRules,
    process=GossipProcess,
    kernel=KERNEL,
    apply=apply,
    exchanges={"native": "stragglerlab.realrun.algorithms.gossip:GossipExchange"},
    style=Style("#999933", "p"),
    own_step=True,
)
