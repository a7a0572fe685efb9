"""AD-PSGD (Lian et al., ICML'18): asynchronous pairwise gossip.

After each gradient, worker i averages its model with one neighbour j in ``algorithm.topology``, drawn uniformly by
:func:`peer`, a pure function of (seed, i, n). Every worker has a communication thread that serves the exchanges
other workers start with it, one at a time, first come first served (requests of one instant in worker order): the
exchange starts at max(t_post(n, i), when j's thread is free) and takes two messages, t_done = start + 2·p2p(n); j
itself computes on meanwhile. At the start w_i, w_j ← (w_i + w_j)/2, then i applies its gradient step (taken on the
model it had when it started the iteration; exchanges it served meanwhile are in the model it steps).

Rounds: one row per exchange (kind ``gossip``): ``round`` n, ``initiator`` i, ``t_trigger`` the start (when j's
thread takes it), ``t_done``, ``contributors`` 2, ``fresh`` 1 (i's own iteration; j's model is whatever it holds),
``group`` j. With one worker there is no peer: the iteration is released at its post (``group`` −1, 1 contributor).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from stragglerlab.simulator.algorithms.eager import initiator
from stragglerlab.simulator.algorithms.gossip import KIND, TOPOLOGY, PeerCosts
from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.convergence import Observer, Optimizer, matrix
from stragglerlab.simulator.engine import Call, Engine
from stragglerlab.simulator.topology import neighbours


def peer(seed: int, worker: int, n: int, peers: list[int]) -> int:
    """The neighbour ``worker`` averages with at iteration ``n``: ``peers[h mod len(peers)]``, h the splitmix64 hash
    of majority's initiator applied twice, h = init(init(seed, worker), n) in uint64 (-1 without peers)."""
    if not peers:
        return -1
    return peers[initiator(initiator(seed, int(worker), 1 << 64), int(n), len(peers))]


class AdPsgdRules(PeerCosts):
    """Each worker's neighbours, the peer of each exchange and what an exchange costs."""

    kind = KIND

    def __init__(self, scenario, costs):
        super().__init__(scenario, costs)
        self.topology = scenario.algorithm.topology
        self.neighbours = neighbours(self.topology, self.P)

    def peer(self, worker: int, n: int) -> int:
        return peer(self.seed, worker, n, self.neighbours[worker])

    def exchange_time(self, i: int, j: int) -> float:
        """A request and a reply between ``i`` and ``j``."""
        return 2 * self.p2p(i, j)


class AdPsgdProcess:
    """The reference engine's side: each worker's communication thread as the time it is next free; posts come in
    the engine's order, which is the threads' first-come-first-served order."""

    def __init__(self, rules: AdPsgdRules, engine: Engine):
        self.rules, self.engine = rules, engine
        self.free = [0.0] * rules.P

    def post(self, call: Call) -> None:
        rules, engine = self.rules, self.engine
        i, n, now = call.worker, call.iteration, engine.now
        j = rules.peer(i, n)
        start = done = now
        if j >= 0:
            start = max(now, self.free[j])
            done = self.free[j] = start + rules.exchange_time(i, j)
        call.round, call.fresh, call.final = n, True, True
        row = (n, rules.kind, i, start, done, 1 + (j >= 0), 1, j)

        def release() -> None:
            engine.release(call)
            engine.sink.round(row)

        engine.after(done - now, release)


def update(
    rules: AdPsgdRules,
    workload: Any,
    it: pd.DataFrame,
    rounds: pd.DataFrame,
    W: np.ndarray,
    opt: Optimizer,
    note: Observer,
) -> Iterator[int]:
    """The exchanges in the order they start (ties: by request time, initiator, iteration); before each, the
    gradients of every iteration begun strictly earlier are taken on the models as they are then, and the
    initiator's own gradient of this iteration in any case (an exchange at the very instant an iteration starts
    comes first, unless it is that iteration's own). Each exchange averages the pair, then steps the initiator."""
    P, N = rules.P, rules.N
    t_post, t_done = matrix(it, "t_post", P), matrix(it, "t_done", P)
    t_start = np.zeros((P, N))
    t_start[:, 1:] = t_done[:, :-1] + rules.update
    worker, n_of = rounds["initiator"].to_numpy(), rounds["round"].to_numpy()
    start, j_of = rounds["t_trigger"].to_numpy(), rounds["group"].to_numpy()
    order = np.lexsort((n_of, worker, t_post[worker, n_of], start))
    begun = np.zeros(P, dtype=np.int64)  # each worker's next iteration whose gradient is still to take
    G = np.zeros_like(W)

    def take(rows: np.ndarray) -> None:
        if len(rows):
            G[rows], _ = workload.gradient(W[rows], workload.batches(rows, begun[rows]))
            begun[rows] += 1

    for r in order:
        i, n, j, s = int(worker[r]), int(n_of[r]), int(j_of[r]), start[r]
        ahead = (begun < N) & (t_start[np.arange(P), np.minimum(begun, N - 1)] < s)
        ahead[i] |= begun[i] == n
        while ahead.any():
            take(np.flatnonzero(ahead))
            ahead = (begun < N) & (t_start[np.arange(P), np.minimum(begun, N - 1)] < s)
        if j >= 0:
            W[[i, j]] = (W[i] + W[j]) / 2
        opt.step(W, G[i], np.array([i]))
        note("averaged", n, W)
        yield int(r)


RECORD = Algorithm(
    name="ad-psgd",
    summary="AD-PSGD: after each gradient a worker averages with one random neighbour, served by its thread",
    keys=(TOPOLOGY,),
    rules=AdPsgdRules,
    process=AdPsgdProcess,
    kernel=None,
    update=update,
    exchanges={"native": "stragglerlab.realrun.algorithms.adpsgd:AdPsgdExchange"},
    style=Style("#44AA99", "X"),
)
