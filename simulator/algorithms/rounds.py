"""Round-per-call algorithms (sync, eager-SGD, WAGMA, local SGD): the common part of their rules, and the reference
engine's process that carries them out.

Call n of every worker belongs to round n (local SGD: only every ``period``-th iteration calls). A round is
*triggered* by the algorithm's rule, its data exchange starts ``T_act`` later (at once for a synchronous round, which
is triggered by the last of the P posts), and it completes one exchange time after that. A post of call n made no
later than round n's exchange start is *fresh*: it is in round n. Otherwise it is *late*: it is released when round
n completes (at once if it already has), and what becomes of its contribution is the rules' ``late``:

- ``accumulate``: it waits in the worker's pending sum and goes into the first round whose exchange has not started;
- ``drop``: it is discarded;
- ``deposit`` (models, not gradients): the worker's latest deposit stands in for it; the first round that reads a
  deposit carries it, and a deposit replaced before any round read it is carried by none.

With a time budget (``duration``), the first round triggered at or after it is the last (its ``t_trigger``, a post
time every rank of a real run agrees on), of the rounds that may end it (the rules' ``ends_budget``: any, except for
WAGMA, whose group rounds do not): every worker stops at its release by that round, or, lagging behind it, at its
first release after that round completed.

The fast engine steps through the same rules (:data:`KERNEL`).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from stragglerlab.simulator.imbalance import ExchangeSpread, Spread
from stragglerlab.simulator.keys import NONNEG_INT, Key
from stragglerlab.simulator.network import message_bytes
from stragglerlab.simulator.replicas import Observer, Optimizer, matrix

if TYPE_CHECKING:
    import pandas as pd

    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.engine import Call, Engine
    from stragglerlab.simulator.scenario import Scenario

INF = float("inf")
ACCUMULATE, DROP, DEPOSIT = "accumulate", "drop", "deposit"

#: the fast path of every round-per-call algorithm
KERNEL = "stragglerlab.simulator.fast.rounds:kernel"

SYNC_PERIOD = Key("sync_period", 33, NONNEG_INT, "every k-th round is synchronous, which bounds staleness; 0: never")


class RoundRules:
    """Which rounds are synchronous, what activates the others, what each costs, and the late rule; subclasses (one
    per algorithm) override what differs."""

    sync_kind = "sync"  # the kind of a synchronous round in the rounds table
    async_kind = "async"  # ... and of any other
    late = ACCUMULATE
    divide_by = "workers"  # gradient algorithms: a round's sum is divided by P (or by the gradients summed)
    sync_period = 0  # every sync_period-th round is synchronous (0: never)
    # the exchange of a synchronous round in gradient buckets overlapped with backward (sync only; 1: no overlap)
    buckets, backward, t_bucket = 1, 1.0, 0.0

    def __init__(self, scenario: Scenario, costs: CostModel, stride: int = 1):
        self.P, self.N, self.seed = scenario.workers, scenario.iterations, scenario.seed
        self.nbytes = message_bytes(scenario)
        self.stride = stride  # iterations per call: only every stride-th iteration calls the collective
        self.total = self.N // stride  # rounds
        self.t_act = costs.activation(self.P)
        self.update = scenario.workload.update  # the optimizer step after each iteration
        self.budget = scenario.budget  # the first round triggered at or after it is the last
        self.costs = costs
        self._spread = {kind: costs.spread(kind, self.nbytes, self.P) for kind in (self.sync_kind, self.async_kind)}
        self.spread = ExchangeSpread(scenario)

    def call_round(self, n: int) -> int | None:
        """The round iteration ``n`` posts to, or None when it does not call the collective."""
        return n // self.stride if (n + 1) % self.stride == 0 else None

    def synchronous(self, m: int) -> bool:
        """Round ``m`` waits for all P posts: every ``sync_period``-th round (m = k·sync_period − 1)."""
        k = self.sync_period
        return k > 0 and m % k == k - 1

    def kind(self, m: int) -> str:
        return self.sync_kind if self.synchronous(m) else self.async_kind

    def fixed_initiator(self, m: int) -> int:
        """The only worker whose post can trigger asynchronous round ``m``; -1: the :meth:`quorum`-th poster."""
        return -1

    def quorum(self, m: int) -> int:
        """How many posts of call ``m`` trigger round ``m`` (the posts of one instant count in worker order): all P
        for a synchronous round, else the first one."""
        return self.P if self.synchronous(m) else 1

    def variation(self, m: int) -> Spread:
        """The spread of round ``m``'s exchange time (the cost model's, for its kind)."""
        return self._spread[self.kind(m)]

    @cached_property
    def factors(self) -> np.ndarray:
        """Each round's factor on its exchange time (all 1 where the cost model has no spread)."""
        return self.spread.rounds([self.variation(m) for m in range(self.total)])

    @cached_property
    def global_times(self) -> dict[str, float]:
        """The exchange of a round over every worker, per kind its rounds take (priced when first asked, once the
        subclass has said which rounds are synchronous, so a cost model is asked only for what the rounds use)."""
        kinds = dict.fromkeys(self.kind(m) for m in range(min(self.total, 2 * self.sync_period + 2)))
        return {kind: self.costs.collective(kind, self.nbytes, self.P) for kind in kinds if self.priced_globally(kind)}

    def priced_globally(self, kind: str) -> bool:
        """Whether rounds of ``kind`` exchange over every worker (as all do here)."""
        return True

    def exchange_time(self, m: int) -> float:
        """Seconds of round ``m``'s data exchange."""
        return self.global_times[self.kind(m)] * self.factors[m]

    def done(self, m: int, x: float, calls: list[Call]) -> float:
        """When round ``m`` completes, its exchange starting at ``x`` with ``calls`` (every worker's, for a
        synchronous round)."""
        return x + self.exchange_time(m)

    def group(self, m: int) -> int:
        """The ``group`` column of round ``m``: -1 when it spans every worker."""
        return -1

    def ends_budget(self, m: int) -> bool:
        """Whether round ``m``, triggered at or after the time budget, is the run's last: any round may."""
        return True

    def last_by_budget(self, m: int, t_trigger: float) -> bool:
        """Whether round ``m``, triggered at ``t_trigger``, is the time budget's last round."""
        return t_trigger >= self.budget and self.ends_budget(m)

    def native_options(self) -> dict[str, Any]:
        """Options of the native core's collective that the rules set beyond the ones every exchange passes."""
        return {}


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


class RoundProcess:
    """The reference engine's side of a round-per-call algorithm: takes every post in the engine's order, triggers
    and completes rounds, releases the calls and writes the round rows."""

    def __init__(self, rules: RoundRules, engine: Engine):
        self.rules, self.engine = rules, engine
        self.open: dict[int, Round] = {}
        self.completed = -1  # rounds complete in order: every round <= this one is done
        self.total = rules.total  # rounds of the run: fewer once a round is triggered at or after the time budget
        self.over = False  # the budget's last round has completed: every worker stops at its next release
        self.first_post = np.full(rules.P, INF)  # deposit: when each worker first had a model deposited
        self.last: list[Call | None] = [None] * rules.P  # deposit: each worker's latest deposit

    def round(self, m: int) -> Round:
        r = self.open.get(m)
        if r is None:
            r = self.open[m] = Round(m)
        return r

    def post(self, call: Call) -> None:
        rules, engine = self.rules, self.engine
        m = rules.call_round(call.iteration)
        if m is None:
            self.local_step(call)
            return
        if m <= self.completed:
            self.late(call, self.next_open(m))
            engine.release(call, last=self.over)
        else:
            r = self.round(m)
            if not r.triggered or engine.now <= r.t_start:
                call.round, call.fresh = m, True
                r.posted += 1
                if call.worker not in r.pending:
                    r.contributors += 1
                r.waiting.append(call)
                if not r.triggered and self.activates(call, r):
                    self.trigger(r, call.worker)
            else:
                self.late(call, self.next_open(m))
                r.waiting.append(call)
        self.settle(call)

    def activates(self, call: Call, r: Round) -> bool:
        """Whether this fresh post triggers round ``r`` (not yet triggered): the fixed initiator's post, else the
        ``quorum``-th fresh post (every round's posts are fresh until it is triggered)."""
        rules, m = self.rules, r.index
        fixed = -1 if rules.synchronous(m) else rules.fixed_initiator(m)
        return call.worker == fixed if fixed >= 0 else r.posted == rules.quorum(m)

    def late(self, call: Call, target: int | None) -> None:
        """A late post: ``target`` is the first round whose exchange has not started yet (None: there is none)."""
        late = self.rules.late
        if late == ACCUMULATE and target is not None:
            call.round = target
            self.round(target).add_pending(call.worker)
        elif late == DEPOSIT and target is not None:
            call.round = target
        else:
            call.round = -1

    def settle(self, call: Call) -> None:
        """After each post that went to a round: the row is final, except a deposit, which is final when the next
        one is made (it is overwritten unread if both go to one round)."""
        if self.rules.late != DEPOSIT:
            call.final = True
            return
        w = call.worker
        self.first_post[w] = min(self.first_post[w], call.t_post)
        prev = self.last[w]
        if prev is not None:
            if prev.round == call.round:
                prev.round, prev.fresh = -1, False
            prev.final = True
        self.last[w] = call

    def contributors(self, r: Round) -> int:
        """Workers that contributed anything: for deposits, every worker that had deposited by the exchange start."""
        if self.rules.late == DEPOSIT:
            return int(np.count_nonzero(self.first_post <= r.t_start))
        return r.contributors

    def local_step(self, call: Call) -> None:
        """An iteration that does not call the collective: no wait; the round that will carry it is the coming one
        (none after the last)."""
        m = call.iteration // self.rules.stride
        carried = m < self.total
        call.round, call.fresh, call.final = (m if carried else -1), carried, True
        self.engine.release(call, applied=False, last=self.over)

    def next_open(self, m: int) -> int | None:
        """The first round after ``m`` whose data exchange has not started before now."""
        now = self.engine.now
        k = max(m, self.completed) + 1
        while k in self.open and self.open[k].t_start < now:
            k += 1
        return k if k < self.total else None

    def trigger(self, r: Round, worker: int) -> None:
        rules, now = self.rules, self.engine.now
        r.initiator, r.t_trigger = worker, now
        r.t_start = now if rules.synchronous(r.index) else now + rules.t_act
        r.t_done = rules.done(r.index, r.t_start, r.waiting)
        if rules.last_by_budget(r.index, r.t_trigger):
            self.total = r.index + 1
        self.engine.at(r.t_done, lambda: self.complete(r))

    def complete(self, r: Round) -> None:
        rules, m = self.rules, r.index
        del self.open[m]
        self.completed = m
        self.over = m == self.total - 1 and rules.last_by_budget(m, r.t_trigger)
        for call in r.waiting:
            self.engine.release(call, last=self.over)
        self.engine.sink.round(
            (m, rules.kind(m), r.initiator, r.t_trigger, r.t_done, self.contributors(r), r.posted, rules.group(m))
        )


def gradient_rounds(
    rules: Any, workload: Any, it: pd.DataFrame, rounds: pd.DataFrame, W: np.ndarray, opt: Optimizer, note: Observer
) -> Iterator[int]:
    """The apply of the gradient-averaging algorithms (sync, eager-SGD, quorum): the gradient of worker i's iteration
    n is computed on model version n (all P of a version at once) and kept until its round m consumes it; round m
    applies Σ(rows with ``round == m``) / D with D = P (``divide_by = workers``) or the number of gradients summed
    (``contributors``). Rows of round −1 (dropped, or after the last exchange) are never applied. Every replica applies
    every round, so replicas stay identical."""
    P = rules.P
    if not (it["model_version"] == it["iteration"]).all():
        raise ValueError("a round-per-call schedule must have model_version == iteration")
    target = matrix(it, "round", P, -1)  # a worker stopped by the time budget contributes to no later round
    sums: dict[int, list] = {}  # round -> [gradient sum, count]
    by_workers = rules.divide_by == "workers"
    for m in range(len(rounds)):
        rows = np.flatnonzero(target[:, m] >= 0)
        if len(rows):
            G, _ = workload.gradient(W[rows], workload.batches(rows, np.full(len(rows), m)))
            goes = target[rows, m]
            parts = [(m, G)] if (goes == m).all() else [(int(r), G[goes == r]) for r in np.unique(goes)]
            for r, part in parts:
                acc = sums.setdefault(r, [np.zeros(W.shape[1]), 0])
                acc[0] += part.sum(axis=0)
                acc[1] += len(part)
        g, count = sums.pop(m, [np.zeros(W.shape[1]), 0])
        note("applied", m, g)
        opt.step(W, g / (P if by_workers else max(count, 1)))
        yield m
