"""LSGD (Teng et al., NeurIPS'19): local steps, with pulls toward the best worker at communication events.

Workers run free. When the total number of iterations over all workers reaches a multiple of P·period (a local
exchange: each worker is pulled toward the best worker of its node) or of P·global_period (also a global one:
toward the best worker overall), every worker joins one blocking exchange after its current iteration, as the
released code's counting server does. The exchange starts when the last worker joins and, like every round's data
exchange (DESIGN §4), takes T_ar: an allreduce of the model over all workers, which bounds what the released code
sends (an allgather of running-mean losses, then broadcasts of the leaders' models). A blocking exchange needs every
worker, so none is triggered once some worker has posted its last iteration (before the post that would trigger it,
in the engine's order).
"""

from __future__ import annotations

from stragglerlab.simulator.engine import COMPLETIONS, Call, Engine
from stragglerlab.simulator.network import NetworkModel, message_bytes
from stragglerlab.simulator.scenario import Scenario


class Lsgd:
    """Counts posts in the engine's order; a count that hits a multiple of P·period triggers an exchange."""

    def __init__(self, scenario: Scenario, engine: Engine):
        self.engine = engine
        self.P = scenario.workers
        o = scenario.algorithm
        self.local_every, self.global_every = self.P * o.period, self.P * o.global_period
        self.t_exchange = NetworkModel.of(scenario).allreduce(self.P, message_bytes(scenario))
        self.count = 0
        self.last = scenario.iterations - 1
        self.ending = 0  # workers that have posted their last iteration
        self.rounds = 0
        self.exchange: dict | None = None  # the exchange being joined
        self.joined: list[Call] = []
        self.open: list[list[Call]] = [[] for _ in range(self.P)]  # each worker's steps since its last exchange

    def post(self, call: Call) -> None:
        self.count += 1
        self.open[call.worker].append(call)
        ex = self.exchange
        if (
            ex is None
            and self.ending == 0
            and (self.count % self.local_every == 0 or self.count % self.global_every == 0)
        ):
            ex = self.exchange = {
                "initiator": call.worker,
                "t_trigger": self.engine.now,
                "global": self.count % self.global_every == 0,
            }
        self.ending += call.iteration == self.last
        if ex is None:
            self.engine.release(call, applied=False)
            return
        self.joined.append(call)
        if len(self.joined) == self.P:
            now = self.engine.now
            self.engine.at(self.t_exchange, COMPLETIONS, lambda: self.complete(ex, now + self.t_exchange))

    def complete(self, ex: dict, t_done: float) -> None:
        m = self.rounds
        for calls in self.open:
            for call in calls:
                call.round, call.fresh, call.final = m, True, True
            calls.clear()
        for call in self.joined:
            self.engine.release(call)
        self.joined = []
        self.exchange = None
        self.rounds += 1
        self.engine.sink.round(
            (m, "leader", ex["initiator"], ex["t_trigger"], t_done, self.P, self.P, -1 if ex["global"] else 0)
        )
