"""SwarmSGD (Nadiradze et al., NeurIPS'21) as the WAGMA-SGD repository releases it (``optimizer_swarm_imagenet.py``):
``swarm-sgd``.

The paper's SwarmSGD pairs random workers, each after a few local steps, without a global barrier. The released
optimizer, which this module follows, makes these choices:

- **(choice, the release's)** Local steps per interaction: one. Even iterations exchange, odd ones are local steps
  (``t_done = t_post``, no message).
- **(choice, the release's)** Peer choice: deterministic, over the time-varying exponential graph. With R =
  ⌊log2 P⌋ (at least 1) and r = (n/2) mod R at even iteration n, worker i sends its model to i + 2^r and to
  i + 2^((r+1) mod R) and receives from i − 2^r and i − 2^((r+1) mod R) (mod P). Where both shifts coincide (P = 2,
  3) the two messages go to, and come from, one worker, as in the release. One worker has no peer.
- **(choice, the release's)** What the peers do: every worker exchanges in every even iteration, so the peer is not
  passive: it waits for the two models it receives (its own exchange) as the initiator does for its; no global
  barrier. Worker i waits for its two receives and its two sends (the release's ``MPI_Waitall``), and a send is done
  once its receiver has posted too (a model-sized send meets its receive: ``rendezvous``): t_done(n, i) = the latest
  of t_post(n, j) + p2p over its sources j (j → i) and its receivers j (i → j), and t_post(n, i) + its sends' time
  (:mod:`.gossip`).
- **(choice, the release's)** The averaging weighs three models alike: the release runs push-sum with weights that
  stay 1 (each sends a third of its model and weight, keeps a third and receives two thirds), so
  w_i ← (w_i + w_src + w_src')/3 on the posted models, then i's own gradient step (the gradient taken on the model
  it posted). With P = 2 the one peer's model counts twice: w_i ← (w_i + 2·w_j)/3.

Rounds: one row per worker and iteration (kind ``gossip``), as :mod:`.gossip` writes them: ``contributors`` = 1 +
messages received (3 at an exchange, one peer's counted twice where P < 4; 1 at a local step), ``group`` the source
that posted last (−1 at a local step). The gossip time budget applies.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from stragglerlab.simulator.algorithms.gossip import KERNEL, GossipProcess, GossipRules, iteration_rows
from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.replicas import Observer, Optimizer

if TYPE_CHECKING:
    import pandas as pd

#: the models an exchange averages: the worker's own and the two it receives
AVERAGED = 3


def shifts(P: int) -> list[tuple[int, int]]:
    """The two shifts of each exchange phase: (2^r, 2^((r+1) mod R)) for r < R = max(1, ⌊log2 P⌋)."""
    R = max(1, P.bit_length() - 1)
    return [(1 << r, 1 << ((r + 1) % R)) for r in range(R)]


class SwarmRules(GossipRules):
    """Phase s = n mod 2R: an even phase exchanges with the sources of shifts s/2 (:func:`shifts`), an odd one is a
    local step (no peers)."""

    rendezvous = True

    def phase_peers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        P = self.P
        ranks = np.arange(P)
        local = (np.zeros(P, dtype=np.int64), np.zeros(0, dtype=np.int64))
        phases = []
        for a, b in shifts(P):
            if P > 1:
                sources = np.sort(np.stack([(ranks - a) % P, (ranks - b) % P], axis=1), axis=1)
                phases.append((np.full(P, 2), sources.reshape(-1)))
            else:
                phases.append(local)
            phases.append(local)
        return phases


def apply(
    rules: SwarmRules,
    workload: Any,
    it: pd.DataFrame,
    rounds: pd.DataFrame,
    W: np.ndarray,
    opt: Optimizer,
    note: Observer,
) -> Iterator[int]:
    """Every iteration: all gradients on the posted models; at an exchange w_i ← (w_i + Σ received)/3; then each
    worker's step."""
    P = rules.P
    ranks = np.arange(P)
    for n, row in enumerate(iteration_rows(rounds, P)):
        G, _ = workload.gradient(W, workload.batches(ranks, np.full(P, n)))
        if P > 1 and n % 2 == 0:
            mixed = W.copy()
            for k in range(2):
                mixed += W[[rules.peers(n, i)[k] for i in range(P)]]
            W[:] = mixed / AVERAGED
        note("averaged", n, W)
        opt.step(W, G)
        yield int(row)


RECORD = Algorithm(
    name="swarm-sgd",
    summary="SwarmSGD as released: every other iteration each worker averages with two peers of an exponential graph",
    keys=(),
    rules=SwarmRules,
    process=GossipProcess,
    kernel=KERNEL,
    apply=apply,
    exchanges={"native": "stragglerlab.realrun.algorithms.gossip:GossipExchange"},
    style=Style("#AA3377", "H"),
    own_step=True,
)
