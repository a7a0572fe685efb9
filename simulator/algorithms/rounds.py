"""Rounds numbered by call, shared by sync, eager-SGD, WAGMA and local SGD (DESIGN §4).

Call n of every worker belongs to round n (local SGD: only every ``period``-th iteration calls). A round is
*triggered* by the algorithm's rule, its data exchange starts ``T_act`` later (at once for a synchronous round, which
is triggered by the last of the P posts), and it completes one exchange time after that. A post of call n made no
later than round n's exchange start is *fresh*: it is in round n. Otherwise it is *late*: it is released when round
n completes (at once if it already has), and what becomes of its contribution is the subclass's ``late`` rule.
"""

from __future__ import annotations

from stragglerlab.simulator.engine import COMPLETIONS, Call, Engine
from stragglerlab.simulator.network import NetworkModel, message_bytes
from stragglerlab.simulator.scenario import Scenario

INF = float("inf")


class Round:
    """The state of one round while it is open."""

    __slots__ = ("index", "initiator", "t_trigger", "t_start", "t_done", "posted", "pending", "contributors", "waiting")

    def __init__(self, index: int):
        self.index = index
        self.initiator = -1
        self.t_trigger = INF
        self.t_start = INF  # its data exchange starts: contributions are taken then
        self.t_done = INF
        self.posted = 0  # fresh posts
        self.pending: set[int] = set()  # workers contributing late (accumulated) gradients
        self.contributors = 0  # workers contributing anything
        self.waiting: list[Call] = []

    def add_pending(self, worker: int) -> None:
        """A late contribution of ``worker`` goes into this round (before any fresh one of the same worker)."""
        if worker not in self.pending:
            self.pending.add(worker)
            self.contributors += 1

    @property
    def triggered(self) -> bool:
        return self.t_trigger < INF


class RoundAlgorithm:
    """The shared machinery; subclasses say which rounds are synchronous, what activates the others, what a
    round costs and what a late contribution becomes."""

    async_kind = "async"  # kind of a round that is not synchronous
    sync_kind = "sync"
    late_rule = "accumulate"  # what a late contribution becomes: accumulate | drop | deposit (see ``late``)

    def __init__(self, scenario: Scenario, engine: Engine):
        self.engine = engine
        self.P = scenario.workers
        self.options = scenario.algorithm
        self.seed = scenario.seed
        self.stride = 1  # iterations per call: only every stride-th iteration calls the collective
        self.net = NetworkModel.of(scenario)
        self.nbytes = message_bytes(scenario)
        self.t_act = self.net.activation(self.P)
        self.t_global = self.net.allreduce(self.P, self.nbytes)
        self.total = self.round_count(scenario.iterations)
        self.open: dict[int, Round] = {}
        self.completed = -1  # rounds complete in order: every round <= this one is done

    # -- the rules, overridden per algorithm ---------------------------------------------------------------------
    def round_count(self, iterations: int) -> int:
        return iterations

    def call_round(self, n: int) -> int | None:
        """The round iteration ``n`` posts to, or None when it does not call the collective."""
        return n // self.stride if (n + 1) % self.stride == 0 else None

    def synchronous(self, m: int) -> bool:
        """Every ``sync_period``-th round (m = k·sync_period − 1) waits for all P posts."""
        k = self.options.sync_period
        return k > 0 and m % k == k - 1

    def fixed_initiator(self, m: int) -> int:
        """The only worker whose post can trigger asynchronous round ``m``; -1: whoever posts first."""
        return -1

    def activates(self, call: Call, m: int) -> bool:
        """Whether this post triggers round ``m`` (not synchronous, not yet triggered)."""
        return self.fixed_initiator(m) in (-1, call.worker)

    def exchange_time(self, m: int) -> float:
        return self.t_global

    def group(self, m: int) -> int:
        return -1

    def contributors(self, r: Round) -> int:
        return r.contributors

    def late(self, call: Call, target: int | None) -> None:
        """A late post: ``target`` is the first round whose exchange has not started yet (None: there is none)."""
        raise NotImplementedError

    def settle(self, call: Call) -> None:
        """Called after each post that went to a round; the row is final unless a subclass says otherwise."""
        call.final = True

    # -- the machinery -------------------------------------------------------------------------------------------
    def round(self, m: int) -> Round:
        r = self.open.get(m)
        if r is None:
            r = self.open[m] = Round(m)
        return r

    def post(self, call: Call) -> None:
        engine, m = self.engine, self.call_round(call.iteration)
        if m is None:
            self.local_step(call)
            return
        if m <= self.completed:
            self.late(call, self.next_open(m))
            engine.release(call)
        else:
            r = self.round(m)
            if not r.triggered or engine.now <= r.t_start:
                call.round, call.fresh = m, True
                r.posted += 1
                if call.worker not in r.pending:
                    r.contributors += 1
                r.waiting.append(call)
                if not r.triggered and (r.posted == self.P if self.synchronous(m) else self.activates(call, m)):
                    self.trigger(r, call.worker)
            else:
                self.late(call, self.next_open(m))
                r.waiting.append(call)
        self.settle(call)

    def local_step(self, call: Call) -> None:
        """An iteration that does not call the collective (local SGD between averages)."""
        raise NotImplementedError

    def next_open(self, m: int) -> int | None:
        """The first round after ``m`` whose data exchange has not started before now."""
        now = self.engine.now
        k = max(m, self.completed) + 1
        while k in self.open and self.open[k].t_start < now:
            k += 1
        return k if k < self.total else None

    def trigger(self, r: Round, worker: int) -> None:
        now = self.engine.now
        r.initiator, r.t_trigger = worker, now
        r.t_start = now if self.synchronous(r.index) else now + self.t_act
        r.t_done = r.t_start + self.exchange_time(r.index)
        self.engine.at(r.t_done - now, COMPLETIONS, lambda: self.complete(r))

    def complete(self, r: Round) -> None:
        m = r.index
        del self.open[m]
        self.completed = m
        for call in r.waiting:
            self.engine.release(call)
        fresh = r.posted
        kind = self.sync_kind if self.synchronous(m) else self.async_kind
        self.engine.sink.round(
            (m, kind, r.initiator, r.t_trigger, r.t_done, self.contributors(r), fresh, self.group(m))
        )
