"""LSGD (Teng et al., NeurIPS'19): local steps, with pulls toward the best worker at communication events.

Workers run free. When the total number of iterations over all workers reaches a multiple of P·period (a local
exchange: each worker is pulled toward the best worker of its node) or of P·global_period (also a global one:
toward the best worker overall), every worker joins one blocking exchange after its current iteration, as the
released code's counting server does (:meth:`LsgdRules.trigger` is that rule, for the simulator and real runs
alike). The exchange starts when the last worker joins and, like every round's data exchange, costs one allreduce
of the model over all workers, which bounds what the released code sends (an allgather of running-mean losses, then
broadcasts of the leaders' models). A blocking exchange needs every worker, so none is triggered once some worker
has posted its last iteration (before the post that would trigger it, in the engine's order). With a time budget
(``duration``), the first exchange that completes at or after it is the last: every worker stops when it is
released from it, as the released code's stop answer reaches every worker at its next communication.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from stragglerlab.simulator.algorithms.local_sgd import PERIOD
from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.bounds import MAX_PERIOD
from stragglerlab.simulator.imbalance import ExchangeSpread
from stragglerlab.simulator.keys import FRACTION, Key, at_most
from stragglerlab.simulator.network import message_bytes
from stragglerlab.simulator.replicas import Observer, Optimizer, matrix, row_counts

if TYPE_CHECKING:
    import pandas as pd

    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.engine import Call, Engine
    from stragglerlab.simulator.scenario import Scenario

GLOBAL_PERIOD = Key(
    "global_period", 64, at_most(MAX_PERIOD, "2^31"), "a global exchange every P·global_period iterations in all"
)
PULL = Key(
    "pull",
    0.1,
    FRACTION,
    "lsgd: λ, the pull toward the best worker of the node; easgd: a, the elastic pull between a worker and the server",
)
GLOBAL_PULL = Key("global_pull", 0.1, FRACTION, "λ_G: the pull toward the best worker overall, in [0, 1]")
LOSS_WINDOW = 10  # the leader is chosen on the mean of each worker's last training losses
LOCAL, GLOBAL = "local", "global"


class LsgdRules:
    """When exchanges happen, what they cost and how hard they pull."""

    def __init__(self, scenario: Scenario, costs: CostModel):
        a = scenario.algorithm
        self.P, self.N = scenario.workers, scenario.iterations
        self.local_every, self.global_every = self.P * a.period, self.P * a.global_period
        nbytes = message_bytes(scenario)
        self.t_exchange = costs.collective("leader", nbytes, self.P)
        # exchange m takes t_exchange·factors[m]; each is triggered at a multiple of P·period or P·global_period posts
        exchanges = scenario.iterations // a.period + scenario.iterations // a.global_period + 1
        self.factors = ExchangeSpread(scenario).rounds([costs.spread("leader", nbytes, self.P)] * exchanges)
        self.pull, self.global_pull = a.pull, a.global_pull
        self.workers_per_node = scenario.cluster.workers_per_node
        self.update = scenario.workload.update  # the optimizer step after each iteration
        self.budget = scenario.budget  # the first exchange completing at or after it is the last

    def trigger(self, count: int) -> str | None:
        """The exchange that the ``count``-th post over all workers triggers: ``global`` (which also does the local
        pulls), ``local`` or None."""
        if count % self.global_every == 0:
            return GLOBAL
        return LOCAL if count % self.local_every == 0 else None


@dataclass
class _Exchange:
    initiator: int
    t_trigger: float
    kind: str


class LsgdProcess:
    """The reference engine's side: counts posts in the engine's order and runs the exchanges they trigger."""

    def __init__(self, rules: LsgdRules, engine: Engine):
        self.rules, self.engine = rules, engine
        self.count = 0
        self.ending = 0  # workers that have posted their last iteration
        self.rounds = 0
        self.exchange: _Exchange | None = None  # the exchange being joined
        self.joined: list[Call] = []
        self.open: list[list[Call]] = [[] for _ in range(rules.P)]  # each worker's steps since its last exchange

    def post(self, call: Call) -> None:
        rules = self.rules
        self.count += 1
        self.open[call.worker].append(call)
        ex = self.exchange
        kind = rules.trigger(self.count) if ex is None and self.ending == 0 else None
        if kind is not None:
            ex = self.exchange = _Exchange(call.worker, self.engine.now, kind)
        self.ending += call.iteration == rules.N - 1
        if ex is None:
            self.engine.release(call, applied=False)
            return
        self.joined.append(call)
        if len(self.joined) == rules.P:
            t_exchange = rules.t_exchange * rules.factors[self.rounds]
            t_done = self.engine.now + t_exchange
            self.engine.at(t_done, lambda: self.complete(ex, t_done))

    def complete(self, ex: _Exchange, t_done: float) -> None:
        m = self.rounds
        for calls in self.open:
            for call in calls:
                call.round, call.fresh, call.final = m, True, True
            calls.clear()
        last = t_done >= self.rules.budget
        for call in self.joined:
            self.engine.release(call, last=last)
        self.joined = []
        self.exchange = None
        self.rounds += 1
        group = -1 if ex.kind == GLOBAL else 0
        self.engine.sink.round((m, "leader", ex.initiator, ex.t_trigger, t_done, self.rules.P, self.rules.P, group))


def leaders(losses: np.ndarray, node: np.ndarray) -> tuple[np.ndarray, int]:
    """The best worker of each worker's node and the best overall: the lowest running mean of the last training
    losses, ties to the lowest rank."""
    local = np.empty(len(losses), dtype=np.int64)
    for k in np.unique(node):
        members = np.flatnonzero(node == k)
        local[members] = members[np.argmin(losses[members])]
    return local, int(np.argmin(losses))


def apply(
    rules: LsgdRules,
    workload: Any,
    it: pd.DataFrame,
    rounds: pd.DataFrame,
    W: np.ndarray,
    opt: Optimizer,
    note: Observer,
) -> Iterator[int]:
    """Each worker's free-running steps up to its exchange, then the pulls
    x ← x − pull·(x − x_local_leader) − global_pull·(x − x_global_leader) (the global term only at global
    exchanges, ``group == -1``), all from the models as they were when the exchange started; a leader's own term is
    zero."""
    P = rules.P
    node = np.arange(P) // rules.workers_per_node
    target, global_ = matrix(it, "round", P, -1), rounds["group"].to_numpy() < 0
    losses = np.full((P, LOSS_WINDOW), np.nan)  # ring of each worker's last training losses
    done = np.zeros(P, dtype=np.int64)  # iterations each worker has stepped

    def steps(count: np.ndarray) -> None:
        for s in range(int(count.max(initial=0))):
            rows = np.flatnonzero(count > s)
            n = done[rows] + s
            G, loss = workload.gradient(W[rows], workload.batches(rows, n))
            losses[rows, n % LOSS_WINDOW] = loss
            opt.step(W, G, rows)
        done[:] += count

    for m in range(len(rounds)):
        steps((target == m).sum(axis=1))
        mean = np.nanmean(losses, axis=1)
        note("exchange", m, (W.copy(), mean))
        X = W.copy()
        local, best = leaders(mean, node)
        W -= rules.pull * (X - X[local])
        if global_[m]:
            W -= rules.global_pull * (X - X[best])
        yield m
    steps(row_counts(it, P) - done)


RECORD = Algorithm(
    name="lsgd",
    legend="stale 0 (each worker steps its own model at once); "
    "fresh: carried by some exchange (not steps after its last)",
    summary="LSGD: workers run free; every P·period iterations in all they pull toward the best worker",
    keys=(PERIOD, GLOBAL_PERIOD, PULL, GLOBAL_PULL),
    rules=LsgdRules,
    process=LsgdProcess,
    kernel="stragglerlab.simulator.fast.lsgd:kernel",
    apply=apply,
    exchanges={"native": "stragglerlab.realrun.algorithms.lsgd:LsgdExchange"},
    style=Style("#CC79A7", "v"),
    own_step=True,
)
