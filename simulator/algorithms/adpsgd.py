"""AD-PSGD (Lian et al., ICML'18): asynchronous pairwise gossip.

After each gradient, worker i averages its model with one neighbour j in ``algorithm.topology``, drawn uniformly by
:func:`peer`, a pure function of (seed, i, n). Every worker has a communication thread that serves the exchanges other
workers start with it, one at a time, first come first served (requests of one instant in worker order): the exchange
starts at max(t_post(n, i), when j's thread is free) and takes two messages, t_done = start + 2·p2p(n); j itself
computes on meanwhile. **(choice)** p2p(n) is a message's time when every worker sends one at once (to the next, i → i +
1), as the workers' exchanges overlap when balanced: links they share (a node's, the fabric) are shared; inside a node
or across, whichever the pair is. At the start j moves halfway toward the model i sent, and at its release i takes
their average, plus what its own thread served meanwhile, and applies its gradient step (its gradient and the model it
sent are its model as its last step left it): :func:`apply`.

Rounds: one row per exchange (kind ``gossip``): ``round`` n, ``initiator`` i, ``t_trigger`` the start (when j's
thread takes it), ``t_done``, ``contributors`` 2, ``fresh`` 1 (i's own iteration; j's model is whatever it holds),
``group`` j. With one worker there is no peer: the iteration is released at its post (``group`` −1, 1 contributor).

With a time budget (``duration``), a worker stops at its first exchange that completes at or after it; its thread
still serves the others' exchanges (which move its model as always).

The fast engine (:mod:`stragglerlab.simulator.fast.adpsgd`) takes the posts in the same order, a batch of posts that
commute at a time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from stragglerlab.simulator.algorithms.eager import splitmix
from stragglerlab.simulator.algorithms.gossip import KIND, TOPOLOGY, PeerCosts
from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.replicas import Observer, Optimizer, matrix, row_counts
from stragglerlab.simulator.topology import neighbours

if TYPE_CHECKING:
    import pandas as pd

    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.engine import Call, Engine


def peer(seed: int, worker: int, n: int, peers: list[int]) -> int:
    """The neighbour ``worker`` averages with at iteration ``n``: ``peers[h mod len(peers)]``, h the splitmix64 hash
    of majority's initiator applied twice, h = splitmix(splitmix(seed, worker), n) in uint64 (-1 without peers)."""
    if not peers:
        return -1
    return peers[splitmix(splitmix(seed, int(worker)), int(n)) % len(peers)]


class AdPsgdRules(PeerCosts):
    """Each worker's neighbours, the peer of each exchange and what an exchange costs."""

    kind = KIND

    def __init__(self, scenario, costs):
        super().__init__(scenario, costs)
        self.topology = scenario.algorithm.topology
        self.neighbours = neighbours(self.topology, self.P)
        self.link = self.exchanges(costs)

    def exchanges(self, costs: CostModel) -> dict[bool, float]:
        """An exchange's time, a request and its reply (module doc), between two ranks of one node (True) or of two
        (False): that of the slowest such pair in a step where every worker sends to the next at once (a pair alone
        where the step has none of that sort, and no exchange of that sort happens)."""
        src = np.arange(self.P)
        dst = (src + 1) % self.P
        times = costs.gossip(self.nbytes, src, dst, messages=2)
        inside = src // self.per_node == dst // self.per_node
        return {
            intra: float(times[inside == intra].max()) if (inside == intra).any() else 2 * costs.p2p(self.nbytes, intra)
            for intra in (False, True)
        }

    def exchange_time(self, n: int, i: int, j: int) -> float:
        """Worker ``i``'s exchange with ``j`` at iteration ``n``."""
        return self.link[i // self.per_node == j // self.per_node] * self.factor(n, i)

    def peer(self, worker: int, n: int) -> int:
        return peer(self.seed, worker, n, self.neighbours[worker])

    def draws(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What the fast engine draws :meth:`peer` from: each worker's first hash
        splitmix(seed, worker) (uint64); every worker's neighbours one after the other, then a −1; where each worker's
        begin (a worker without neighbours: at the −1) and how many each has (1 for the −1)."""
        deg = np.array([len(peers) for peers in self.neighbours], dtype=np.int64)
        flat = np.array([*(j for peers in self.neighbours for j in peers), -1], dtype=np.int64)
        begin = np.where(deg > 0, np.cumsum(deg) - deg, len(flat) - 1)
        h = splitmix(self.seed, np.arange(self.P, dtype=np.uint64))
        return h, flat, begin, np.maximum(deg, 1).astype(np.uint64)


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
            done = self.free[j] = start + rules.exchange_time(n, i, j)
        call.round, call.fresh, call.final = n, True, True
        row = (n, rules.kind, i, start, done, 1 + (j >= 0), 1, j)

        def release() -> None:
            engine.release(call, last=engine.now >= rules.budget)
            engine.sink.round(row)

        engine.at(done, release)


def apply(
    rules: AdPsgdRules,
    workload: Any,
    it: pd.DataFrame,
    rounds: pd.DataFrame,
    W: np.ndarray,
    opt: Optimizer,
    note: Observer,
) -> Iterator[tuple[int, np.ndarray]]:
    """Each worker's iterations, and the exchanges its thread serves, in the order its own clock puts them.

    Worker i's gradient of iteration n, and the model it sends, are its model as its own step n − 1 left it (``W[i]``);
    what its thread serves meanwhile is held aside (``held[i]``). Exchange (i, n) with peer j, served at ``t_trigger``
    (on j's clock, the clock of j's ``t_done``): j holds ``W[j] + held[j]`` and moves halfway toward what i sent,
    ``held[j] += (W[i] − (W[j] + held[j]))/2``, and answers with the average; at its release i takes the average plus
    what it held, and steps. Both move halfway toward each other, so the sum of the models moves by the steps alone.
    A serve comes after every iteration of j released at or before it (its *version*: j's iterations then). The
    serves of one peer go in the order they started (ties: request time, initiator, iteration); a worker's release
    waits for its own exchange's serve, and for every serve of its thread that came before it.

    Yields after iteration n of the last worker to complete it, with the replicas each as its own step n left it
    (what an evaluation after iteration n averages), a worker's last iteration as its final model: the replicas end
    holding everything their threads served, as a real run's ranks do once every rank has ended.
    """
    P = rules.P
    counts = row_counts(it, P)  # a worker stopped by the time budget begins no iteration after its rows
    t_post, t_done = matrix(it, "t_post", P, np.inf), matrix(it, "t_done", P, np.inf)
    worker, n_of = rounds["initiator"].to_numpy(), rounds["round"].to_numpy()
    start, j_of = rounds["t_trigger"].to_numpy(), rounds["group"].to_numpy()
    version = np.zeros(len(rounds), dtype=np.int64)
    for e in np.flatnonzero(j_of >= 0).tolist():
        version[e] = np.searchsorted(t_done[j_of[e]], start[e], side="right")
    own = np.full(t_done.shape, -1, dtype=np.int64)
    own[worker, n_of] = np.arange(len(rounds))
    queues: list[deque[int]] = [deque() for _ in range(P)]  # the serves of each worker's thread, in order
    for e in np.lexsort((n_of, worker, t_post[worker, n_of], start)).tolist():
        if j_of[e] >= 0:
            queues[j_of[e]].append(e)
    held = np.zeros_like(W)
    answers: dict[int, np.ndarray] = {}
    done = np.zeros(P, dtype=np.int64)  # iterations each worker has completed
    snapshots: dict[int, np.ndarray] = {}  # iteration -> each worker's model after it (rows of those that did)
    last_row: dict[int, int] = {}  # iteration -> the exchange of the worker released last from it

    def serve() -> bool:
        served = False
        for j in range(P):
            while queues[j]:
                r = queues[j][0]
                i = worker[r]
                if done[j] != version[r] or done[i] != n_of[r]:
                    break
                mine = W[j] + held[j]
                answers[r] = (W[i] + mine) / 2
                held[j] += answers[r] - mine
                queues[j].popleft()
                served = True
        return served

    finish = rounds["t_done"].to_numpy()
    while (done < counts).any():
        served = serve()
        ready = []
        for i in range(P):
            if done[i] >= counts[i]:
                continue
            exchange = int(own[i, done[i]])
            if j_of[exchange] >= 0 and exchange not in answers:
                continue  # its own exchange is not served yet
            if queues[i] and version[queues[i][0]] <= done[i]:
                continue  # its thread serves first
            ready.append(i)
        if not ready:
            if not served:
                raise ValueError("the ad-psgd tables are not one schedule: no exchange can go on")
            continue
        rows = np.array(ready, dtype=np.int64)
        n = done[rows]
        G, _ = workload.gradient(W[rows], workload.batches(rows, n))
        for i, k in zip(rows.tolist(), n.tolist(), strict=True):
            r = int(own[i, k])
            W[i] = (answers.pop(r) if j_of[r] >= 0 else W[i]) + held[i]
            held[i] = 0.0
        opt.step(W, G, rows)
        done[rows] += 1
        for i, k in zip(rows.tolist(), n.tolist(), strict=True):
            r = int(own[i, k])
            note("averaged", r, W)
            if k < counts[i] - 1:  # (after its last iteration a worker's model is its final one: taken at the end)
                snapshots.setdefault(k, np.zeros_like(W))[i] = W[i]
            if k not in last_row or finish[r] > finish[last_row[k]]:
                last_row[k] = r
        while last_row and (done > min(last_row)).all() and (counts - 1 > min(last_row)).all():
            k = min(last_row)
            yield last_row.pop(k), snapshots.pop(k)
    W += held  # what each thread served after its worker's last iteration
    for k in sorted(last_row):  # the iterations some worker ended at or never ran (the time budget stopped it)
        replicas = snapshots.pop(k, np.zeros_like(W))
        final = counts - 1 <= k
        replicas[final] = W[final]
        yield last_row.pop(k), replicas


RECORD = Algorithm(
    name="ad-psgd",
    legend="stale 0 (each exchange averages the models the pair holds then); fresh: all",
    summary="AD-PSGD: after each gradient a worker averages with one random neighbour, served by its thread",
    keys=(TOPOLOGY,),
    rules=AdPsgdRules,
    process=AdPsgdProcess,
    kernel="stragglerlab.simulator.fast.adpsgd:kernel",
    apply=apply,
    exchanges={"native": "stragglerlab.realrun.algorithms.adpsgd:AdPsgdExchange"},
    style=Style("#555555", ">"),
    own_step=True,
)
