"""Synchronous gossip (d-psgd, sgp): at iteration n every worker exchanges models with its peers of that iteration,
and each exchange's time depends only on the posts of iteration n.

Worker i's exchange of iteration n waits for the models of its *peers* (the workers it receives from: d-psgd's
neighbours, sgp's source) and, where its own sends are waited for too (d-psgd), for its own sends:

    t_done(n, i) = max(t_post(n, i) + own(i), max_{j ∈ peers(n, i)} t_post(n, j) + p2p(i, j))

and, where a send is done only once its receiver has posted too (``rendezvous``: swarm-sgd, whose receivers are not
its sources), also ``t_post(n, j) + p2p(j ← i)`` for every j that receives from i.

with ``p2p(i, j)`` the time of the message j → i when every worker sends its models of that phase at once, sharing
links (a rank sending to k neighbours shares its node's link among them, and each message leaves o after the one
before: :meth:`~stragglerlab.simulator.costs.CostModel.gossip`; a measured table's gossip exchange where it has one),
each term times worker i's factor of iteration n where the table gives the exchange a spread, and own(i) the latest
arrival of i's own sends when i waits for them (0 otherwise). A worker without peers (one worker) is released at its
post. **(choice)** Every exchange of a phase is priced as if all workers sent at once, as they do when balanced.

Each exchange is one ``rounds`` row (kind ``gossip``): ``round`` n, ``initiator`` i, ``t_trigger`` the latest post
among i and its peers, ``t_done``, ``contributors`` = ``fresh`` = 1 + peers (everyone's iteration n), ``group`` the
peer that posted last (ties: the lowest rank; −1 without peers). Every iteration n is carried by round n, on model
version n: staleness 0.

With a time budget (``duration``), the first iteration whose earliest exchange completes at or after it is the last
of every worker: a neighbour's model is needed at every iteration, so all stop at one iteration.

The fast engine steps through the same rules (:data:`KERNEL`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from stragglerlab.simulator.imbalance import ExchangeSpread
from stragglerlab.simulator.keys import Key, one_of
from stragglerlab.simulator.network import message_bytes
from stragglerlab.simulator.topology import TOPOLOGIES

if TYPE_CHECKING:
    import pandas as pd

    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.engine import Call, Engine
    from stragglerlab.simulator.scenario import Scenario

KIND = "gossip"
#: the fast path of synchronous gossip
KERNEL = "stragglerlab.simulator.fast.gossip:kernel"
TOPOLOGY = Key(
    "topology",
    "ring",
    one_of(TOPOLOGIES),
    "d-psgd, ad-psgd: the gossip graph: ring (i ± 1), torus (a near-square grid), exponential (i ± 2^k)",
)


class PeerCosts:
    """What every gossip algorithm's exchanges share: sizes, budget, and how each worker's exchange varies."""

    def __init__(self, scenario: Scenario, costs: CostModel):
        self.P, self.N, self.seed = scenario.workers, scenario.iterations, scenario.seed
        self.nbytes = message_bytes(scenario)
        self.update = scenario.workload.update  # the optimizer step after each iteration
        self.budget = scenario.budget  # the time budget (infinity: none)
        self.per_node = scenario.cluster.workers_per_node
        self.costs = costs
        self.variation = costs.spread(KIND, self.nbytes, self.P)  # each worker's exchange varies by its own factor
        self.spread = ExchangeSpread(scenario)

    def factor(self, n: int, i: int) -> float:
        """The factor on the times of worker ``i``'s exchange at iteration ``n``."""
        return self.spread.at(self.variation, n, i)

    def factors(self, n0: int, n1: int, out: np.ndarray) -> None:
        """The factors of every worker's exchange at iterations ``n0 .. n1-1`` into ``out``."""
        self.spread.block(self.variation, n0, n1, out)


class GossipRules(PeerCosts):
    """Peers of every worker in each phase (iteration n is in phase n mod phases) and whether a worker waits for
    its own sends, and whether a send waits for its receiver's post; subclasses say which. Kept as flat arrays,
    which the fast engine reads: worker i's peers in phase s are ``index[indptr[s, i]:indptr[s, i + 1]]``, their
    messages' times ``cost[...]``, ``own[s, i]`` the time of its own sends; who receives from i is
    ``r_index[r_indptr[s, i]:r_indptr[s, i + 1]]``, the times of those messages ``r_cost[...]``."""

    kind = KIND
    waits_for_sends = True
    push_sum = False  # models mixed as push-sum numerators with weights (sgp), or averaged (d-psgd)
    rendezvous = False  # a send is done once its receiver has posted (and the message arrived)

    def __init__(self, scenario: Scenario, costs: CostModel):
        super().__init__(scenario, costs)
        phases = self.phase_peers()
        P = self.P
        self.phases = len(phases)
        self.indptr, self.r_indptr = np.zeros((2, self.phases, P + 1), dtype=np.int64)
        self.own = np.zeros((self.phases, P))
        index, cost, r_index, r_cost = [], [], [], []
        offset = 0
        for s, (counts, peers) in enumerate(phases):
            self.indptr[s] = offset + np.concatenate([[0], np.cumsum(counts)])
            owner = np.repeat(np.arange(P), counts)
            times = costs.gossip(self.nbytes, peers, owner) if len(peers) else np.zeros(0)  # peer -> owner, all at once
            if self.waits_for_sends:
                np.maximum.at(self.own[s], peers, times)
            order = np.argsort(peers, kind="stable")  # receivers of each worker, by rank
            self.r_indptr[s] = offset + np.searchsorted(peers[order], np.arange(P + 1))
            index.append(peers)
            cost.append(times)
            r_index.append(owner[order])
            r_cost.append(times[order])
            offset += len(peers)
        self.index, self.cost, self.r_index, self.r_cost = (np.concatenate(a) for a in (index, cost, r_index, r_cost))

    def phase_peers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per phase: (counts, peers): worker i receives a model from the next ``counts[i]`` entries of ``peers``
        (int64), sorted by rank."""
        raise NotImplementedError

    def peers(self, n: int, i: int) -> list[int]:
        """The workers ``i`` receives from at iteration ``n``."""
        s = n % self.phases
        return self.index[self.indptr[s, i] : self.indptr[s, i + 1]].tolist()

    def receivers(self, n: int, i: int) -> list[int]:
        """The workers that receive from ``i`` at iteration ``n``."""
        s = n % self.phases
        return self.r_index[self.r_indptr[s, i] : self.r_indptr[s, i + 1]].tolist()

    def most_peers(self) -> int:
        return int(np.diff(self.indptr, axis=1).max(initial=0))

    def exchange(self, n: int, i: int, posts: np.ndarray) -> tuple[float, float, int]:
        """(t_trigger, t_done, group) of worker ``i``'s exchange of iteration ``n``, ``posts`` the posts of n."""
        s, f = n % self.phases, self.factor(n, i)
        t_done, t_trigger, group = posts[i] + f * self.own[s, i], posts[i], -1
        for e in range(self.indptr[s, i], self.indptr[s, i + 1]):
            j = self.index[e]
            t_done = max(t_done, posts[j] + f * self.cost[e])
            if group < 0 or posts[j] > posts[group]:
                group = int(j)
            t_trigger = max(t_trigger, posts[j])
        if self.rendezvous:
            for e in range(self.r_indptr[s, i], self.r_indptr[s, i + 1]):
                t_done = max(t_done, posts[self.r_index[e]] + f * self.r_cost[e])
        return float(t_trigger), float(t_done), group

    def waits_on(self, n: int, i: int) -> list[int]:
        """The workers whose posts of iteration ``n`` worker ``i``'s exchange waits for: its peers, and its receivers
        where sends wait for them."""
        return self.peers(n, i) + (self.receivers(n, i) if self.rendezvous else [])


def iteration_rows(rounds: pd.DataFrame, P: int) -> np.ndarray:
    """For each iteration of a gossip schedule (P rows per round, sorted by round): the position of the row that
    completes last (evaluations of the model after iteration n are taken then)."""
    done = rounds["t_done"].to_numpy().reshape(-1, P)
    return np.arange(len(done)) * P + done.argmax(axis=1)


class GossipProcess:
    """The reference engine's side: keeps the posts of each iteration until every worker's exchange of it is done;
    a worker's exchange is settled as soon as it and its peers have posted, and released at its ``t_done``."""

    def __init__(self, rules: GossipRules, engine: Engine):
        self.rules, self.engine = rules, engine
        self.posts: dict[int, np.ndarray] = {}
        self.waiting: dict[int, dict[int, Call]] = {}
        self.settled: dict[int, int] = {}
        self.released: dict[int, tuple[float, int]] = {}  # (first release, releases) of each iteration in progress

    def post(self, call: Call) -> None:
        rules, n, i = self.rules, call.iteration, call.worker
        posts = self.posts.setdefault(n, np.full(rules.P, np.inf))
        posts[i] = self.engine.now
        waiting = self.waiting.setdefault(n, {})
        waiting[i] = call
        for k in (i, *rules.receivers(n, i), *(rules.peers(n, i) if rules.rendezvous else ())):
            if k in waiting and all(posts[j] < np.inf for j in rules.waits_on(n, k)):
                self.settle(waiting.pop(k), posts)

    def settle(self, call: Call, posts: np.ndarray) -> None:
        rules, engine, n, i = self.rules, self.engine, call.iteration, call.worker
        t_trigger, t_done, group = rules.exchange(n, i, posts)
        call.round, call.fresh, call.final = n, True, True
        count = 1 + len(rules.peers(n, i))
        row = (n, rules.kind, i, t_trigger, t_done, count, count, group)
        self.settled[n] = self.settled.get(n, 0) + 1
        if self.settled[n] == rules.P:
            del self.posts[n], self.waiting[n], self.settled[n]

        def release() -> None:
            first, count = self.released.get(n, (engine.now, 0))
            if count + 1 == rules.P:
                self.released.pop(n, None)
            else:
                self.released[n] = (first, count + 1)
            engine.release(call, last=first >= rules.budget)  # no exchange of n completed before the budget
            engine.sink.round(row)

        engine.at(t_done, release)
