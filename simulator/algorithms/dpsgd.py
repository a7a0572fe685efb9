"""D-PSGD (Lian et al., NeurIPS'17): synchronous gossip on a fixed graph (``algorithm.topology``).

At iteration n every worker sends its model to all its neighbours at once and waits for theirs:
t_done(n, i) = max(t_post(n, i), max_{j ∈ N(i)} t_post(n, j)) + p2p(n) (:mod:`.gossip`). Then
w_i ← mean of the posted models of {i} ∪ N(i), and its own gradient step (computed on the model it posted).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from stragglerlab.simulator.algorithms.gossip import KERNEL, TOPOLOGY, GossipProcess, GossipRules, iteration_rows
from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.replicas import Observer, Optimizer
from stragglerlab.simulator.topology import neighbours

if TYPE_CHECKING:
    import pandas as pd


class DpsgdRules(GossipRules):
    """One phase: every worker receives from (and sends to) its neighbours in ``algorithm.topology``."""

    def __init__(self, scenario, costs):
        self.topology = scenario.algorithm.topology
        super().__init__(scenario, costs)

    def phase_peers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        lists = neighbours(self.topology, self.P)
        return [
            (np.array([len(peers) for peers in lists]), np.array([j for peers in lists for j in peers], dtype=np.int64))
        ]


def apply(
    rules: DpsgdRules,
    workload: Any,
    it: pd.DataFrame,
    rounds: pd.DataFrame,
    W: np.ndarray,
    opt: Optimizer,
    note: Observer,
) -> Iterator[int]:
    """Every iteration: all gradients on the posted models, w_i ← mean over {i} ∪ N(i), then each worker's step.

    The means are sums of whole rows: the k-th member of every worker's set at once, sets of fewer members padded
    with a row of zeros (a reduction over segments of a gathered copy took three quarters of the replay)."""
    P = rules.P
    ranks = np.arange(P)
    members = [[i, *rules.peers(0, i)] for i in range(P)]
    sizes = np.array([len(m) for m in members])
    slots = np.full((sizes.max(), P), P)  # slot k: every worker's k-th member, or P (the zero row)
    for i, m in enumerate(members):
        slots[: len(m), i] = m
    padded = np.zeros((P + 1, W.shape[1]))
    for n, row in enumerate(iteration_rows(rounds, P)):
        G, _ = workload.gradient(W, workload.batches(ranks, np.full(P, n)))
        padded[:P] = W
        W[:] = padded[slots[0]]
        for k in range(1, len(slots)):
            W += padded[slots[k]]
        W /= sizes[:, None]
        note("averaged", n, W)
        opt.step(W, G)
        yield int(row)


RECORD = Algorithm(
    name="d-psgd",
    legend="stale 0 (each exchange mixes the models held then); fresh: all",
    summary="D-PSGD: synchronous gossip; each worker averages its model with its neighbours' every iteration",
    keys=(TOPOLOGY,),
    rules=DpsgdRules,
    process=GossipProcess,
    kernel=KERNEL,
    apply=apply,
    exchanges={"native": "stragglerlab.realrun.algorithms.gossip:GossipExchange"},
    style=Style("#999999", "<"),
    own_step=True,
)
