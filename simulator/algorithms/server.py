"""The parameter server that ``async-ps`` and ``easgd`` exchange with: its keys, its timing rule and the reference
engine's process.

The server is ``servers`` shards, each holding n/servers bytes of the n-byte model, on a node of its own; every shard is
alike, so one FIFO queue models them all. A worker's exchange sends its shard-sized pushes at its post: each reaches the
shard one message latency later (``t_post + p2p(0)``: o + alpha), is served one at a time in arrival order (pushes
arriving at one instant in worker order), each for as long as the shard's link takes its bytes in and the shard adds
them (``serve(n/servers)``: n/servers·(beta + gamma)) plus ``(n/servers)·server_gamma`` seconds of any further work per
byte (an optimizer heavier than one addition), and the reply (the server's model) reaches the worker ``p2p(n/servers)``
after its service ends: that is the worker's ``t_done``. Alone, a push so takes two messages and the addition; P pushes
at once queue on the shard's link, the last served after P times one. Where the cost model gives push rounds a spread, a
worker's push at iteration n, its service and its reply each take their time times that worker's factor of iteration n.
Each service is one server update, one ``rounds`` row of kind ``push`` whose initiator is the worker.

Server updates are counted from 0: update k is ``round`` k of the iterations it carries, and a worker's model after
update k's reply is ``model_version`` k + 1 (the server's model holds k + 1 updates then), so ``staleness`` is the
number of updates the server applied between the model a worker computed on and its own.

With a time budget (``duration``), a worker stops at its first reply that reaches it at or after the budget: its
last iteration is an exchange, so every step it took reaches the server.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from stragglerlab.simulator.bounds import MAX_SERVERS
from stragglerlab.simulator.imbalance import ExchangeSpread
from stragglerlab.simulator.keys import NONNEG, Key, at_most
from stragglerlab.simulator.network import message_bytes

if TYPE_CHECKING:
    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.engine import Call, Engine
    from stragglerlab.simulator.scenario import Scenario

SERVERS = Key(
    "servers", 1, at_most(MAX_SERVERS, "2^20"), "async-ps, easgd: shards of the parameter server (each n/servers bytes)"
)
SERVER_GAMMA = Key(
    "server_gamma",
    0.0,
    NONNEG,
    "async-ps, easgd: seconds per byte a server shard spends on a push beyond taking it in and adding it",
)
PUSH = "push"  # the rounds table's kind of a server update
#: the fast path of the server algorithms
KERNEL = "stragglerlab.simulator.fast.server:kernel"


class ServerRules:
    """Which iterations exchange with the server (every ``stride``-th) and what an exchange costs."""

    def __init__(self, scenario: Scenario, costs: CostModel, stride: int = 1):
        a = scenario.algorithm
        self.P, self.N = scenario.workers, scenario.iterations
        self.stride = stride
        self.shard = message_bytes(scenario) / a.servers  # bytes each message carries
        self.t_push = costs.p2p(0.0)  # a push's latency to the server, whose link then takes its bytes in service
        self.t_service = costs.serve(self.shard) + self.shard * a.server_gamma  # the server taking in one push
        self.t_reply = costs.p2p(self.shard)  # the reply's way back
        self.variation = costs.spread(PUSH, message_bytes(scenario), self.P)  # each push varies by its worker's factor
        self.spread = ExchangeSpread(scenario)
        self.update = scenario.workload.update  # the optimizer step after each iteration
        self.budget = scenario.budget  # a worker stops at its first reply at or after it

    def exchanges(self, n: int) -> bool:
        """Whether iteration ``n`` ends with an exchange with the server (else it is a local step)."""
        return (n + 1) % self.stride == 0

    def factor(self, call: Call) -> float:
        """The factor on the times of ``call``'s push, its service and its reply."""
        return self.spread.at(self.variation, call.iteration, call.worker)

    def factors(self, n0: int, n1: int, out: np.ndarray) -> None:
        """The factors of every worker's push at iterations ``n0 .. n1-1`` into ``out``."""
        self.spread.block(self.variation, n0, n1, out)


class ServerProcess:
    """The reference engine's side: the FIFO server. Local steps are released at their post; a push is queued at
    its arrival, pushes of one arrival instant in worker order, and served as soon as the server is free."""

    def __init__(self, rules: ServerRules, engine: Engine):
        self.rules, self.engine = rules, engine
        self.version = [0] * rules.P  # server updates in each worker's model
        self.local: list[list[Call]] = [[] for _ in range(rules.P)]  # local steps waiting for their exchange
        self.arriving: dict[float, list[Call]] = {}  # pushes on their way, grouped by arrival instant
        self.free = 0.0  # when the server has served every push that arrived so far
        self.updates = 0

    def post(self, call: Call) -> None:
        rules, engine = self.rules, self.engine
        call.model_version = self.version[call.worker]
        if not rules.exchanges(call.iteration):
            self.local[call.worker].append(call)
            engine.release(call, applied=False)
            return
        t_push = rules.t_push * rules.factor(call)
        arrival = engine.now + t_push
        if arrival in self.arriving:
            self.arriving[arrival].append(call)
            return
        self.arriving[arrival] = [call]
        engine.at(arrival, partial(self.serve, arrival))

    def serve(self, arrival: float) -> None:
        """The pushes arriving now join the queue in worker order; each is served when the server is free. Replies
        that reach their workers at one instant (services of no length) share one scheduled event."""
        rules, now = self.rules, self.engine.now
        replies: list[tuple[int, Call]] = []  # (update, call) of the replies due at t_reply
        t_reply = now
        for call in sorted(self.arriving.pop(arrival), key=lambda c: c.worker):
            k, i = self.updates, call.worker
            f = rules.factor(call)
            self.updates += 1
            self.free = max(now, self.free) + rules.t_service * f
            for carried in (*self.local[i], call):
                carried.round, carried.fresh, carried.final = k, True, True
            self.local[i].clear()
            self.version[i] = k + 1
            if replies and self.free + rules.t_reply * f != t_reply:
                self.engine.at(t_reply, partial(self.reply, replies))
                replies = []
            t_reply = self.free + rules.t_reply * f
            replies.append((k, call))
        self.engine.at(t_reply, partial(self.reply, replies))

    def reply(self, replies: list[tuple[int, Call]]) -> None:
        """The replies of these updates reach their workers now, in update order."""
        last = self.engine.now >= self.rules.budget
        for k, call in replies:
            self.engine.release(call, last=last)
            self.engine.sink.round((k, PUSH, call.worker, call.t_post, self.engine.now, 1, 1, -1))
