"""Rounds through the native core's partial collectives (docs/native.md): what every native exchange shares, and the
gradient-averaging exchange of sync, eager-SGD and quorum.

Each contribution carries P trailing *probe* slots, riding along with the real vector: rank r writes its iteration
+ 1 into slot r. A round's result then says exactly which of this rank's calls it carried, so the ``iterations``
table's ``round`` is read off the data, not guessed from timing. For gradients, the calls a round carries are this
rank's oldest calls not yet carried (pending ones go in order, with the fresh one last), and their iterations + 1
add up to the slot's value; ``late = drop`` discards a late call (round -1). Calls still pending when the run ends
are discarded by the core (round -1). The core's results are Σ/P or Σ/D for gradients, and the rank steps with them.

The core's round records are rank 0's, on the core's clock (aligned to rank 0 like the run's, from the core's
creation), shifted to the run's start by rank 0's reading of its clock when the core was created (within
microseconds).

With a time budget, the first round whose ``t_trigger`` is at or after it is the last (of the rounds that may end it:
wagma's global averages): a round's ``t_trigger`` comes from its reduced metadata, so every rank reads the same
value, and each rank stops at its first release once such a round has completed on it (its own round, or a later
one completed while it lagged).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from stragglerlab.realrun.algorithms.base import Exchange, Sink, iteration_row
from stragglerlab.realrun.clock import RunClock
from stragglerlab.realrun.collectives import Collective, RoundInfo
from stragglerlab.realrun.replica import Replica
from stragglerlab.simulator.scenario import Scenario


class NativeRounds(Exchange):
    """An exchange whose rounds run in the native core, as the collective kind named like the algorithm (or
    ``collective``, where the algorithm runs its rounds as another's kind)."""

    collective: str | None = None

    def __init__(
        self, scenario: Scenario, rules: Any, comm: Any, replica: Replica, clock: RunClock, sink: Sink, **options: Any
    ):
        super().__init__(scenario, rules, comm, replica, clock, sink)
        self.buffer = np.zeros(self.d + self.size, dtype=np.float32)
        self.coll = Collective(
            self.collective or self.scenario.algorithm.name,
            count=self.d + self.size,
            comm=self.comm,
            sync_period=self.rules.sync_period,
            seed=self.scenario.seed,
            **options,
        )
        self.created = self.comm.bcast(self.clock.reading() if self.rank == 0 else None, root=0)
        self.waiting: list[tuple] = []  # (n, t_start, t_post, t_done, fresh) of calls whose round is not known yet
        self.written = 0
        self.final: list[tuple] | None = None
        self.seen = 0  # records of this rank's core already checked against the time budget

    @classmethod
    def stops(cls, rules: Any) -> bool:
        """Every kind's rounds that may end the budget say their ``t_trigger`` alike on every rank (wagma's group
        rounds, which do not, may not end it), so each rank decides the budget alone."""
        return True

    def exchange(self, n: int, contribution: Any) -> tuple[np.ndarray, RoundInfo]:
        """Post ``contribution`` (a vector of this replica) with the probe of call ``n`` and wait for its round."""
        buf, d = self.buffer, self.d
        buf[:d] = self.replica.host(contribution)
        buf[d:] = 0.0
        buf[d + self.rank] = n + 1
        self.coll.post(buf)
        return self.coll.wait()

    def probe(self, out: np.ndarray) -> float:
        """This rank's probe slot of a round's result."""
        return float(out[self.d + self.rank])

    def emit(self, call: tuple, round_: int) -> None:
        n, t_start, t_post, t_done, fresh = call
        self.sink("iterations", iteration_row(self.rank, n, t_start, t_post, t_done, round_, n, fresh, self.batch))

    def rounds(self) -> list[tuple]:
        if self.final is not None:
            rows, self.final = self.final, []
            return rows
        if self.rank != 0:
            return []
        frame = self.coll.rounds().iloc[self.written :]
        self.written += len(frame)
        return self.rows(frame)

    @property
    def origin(self) -> float:
        """When the core was created on the run's clock, from which its records count (before the run started:
        negative)."""
        return self.created - self.clock.started

    def run_time(self, t_trigger: float) -> float:
        """A record's ``t_trigger`` on the run's clock, as the ``rounds`` table has it (-1: unknown)."""
        return float(t_trigger) + self.origin if t_trigger >= 0 else -1.0

    def budget_reached(self) -> bool:
        """Whether the time budget's last round (triggered at or after it, and one that may end it: the rules'
        ``ends_budget``) has completed on this rank, by the records it has not checked yet (the round just waited
        for, and any completed while this rank lagged). False at no cost without a budget."""
        if self.rules.budget == float("inf"):
            return False
        rounds, triggers = self.coll.triggers(self.seen)
        self.seen += len(rounds)
        return any(self.rules.last_by_budget(int(m), self.run_time(t)) for m, t in zip(rounds, triggers, strict=True))

    def rows(self, frame: pd.DataFrame) -> list[tuple]:
        """The ``rounds`` rows of the core's records, their times shifted to the run's origin."""
        origin = self.origin
        return [
            (
                int(r.round),
                r.kind,
                int(r.initiator),
                self.run_time(r.t_trigger),
                float(r.t_done) + origin,
                int(r.contributors),
                int(r.fresh),
                int(r.group),
            )
            for r in frame.itertuples(index=False)
        ]

    def close(self) -> None:
        for call in self.waiting:
            self.emit(call, -1)
        self.waiting.clear()
        self.final = self.rounds()
        self.coll.close()


class GradientExchange(NativeRounds):
    """sync, eager-SGD and quorum: gradients are summed, the rank steps with the round's Σ/P or Σ/D (the rules add
    the options of their kind, such as quorum's k)."""

    bytes_per_parameter = 48

    def __init__(self, scenario: Scenario, rules: Any, comm: Any, replica: Replica, clock: RunClock, sink: Sink):
        options = {"late": rules.late, "divide_by": rules.divide_by, **rules.native_options()}
        super().__init__(scenario, rules, comm, replica, clock, sink, **options)
        self.late = rules.late
        self.by_workers = rules.divide_by == "workers"

    def iteration(self, n, g, loss, t_start, t_post):
        out, info = self.exchange(n, g)
        t_done = self.clock.now()
        self.stopped = self.budget_reached()
        self.waiting.append((n, t_start, t_post, t_done, info.fresh))
        self.replica.step(out[: self.d])
        divisor = self.size if self.by_workers else max(info.gradients, 1)
        self._carried(int(round(self.probe(out) * divisor)), info.round, info.fresh)
        return t_done, n + 1

    def _carried(self, value: int, round_: int, fresh: bool) -> None:
        """The oldest waiting calls whose iterations + 1 sum to ``value`` went into ``round_``."""
        if self.late == "drop" and not fresh:
            self.emit(self.waiting.pop(), -1)
        total = 0
        while self.waiting and total < value:
            call = self.waiting.pop(0)
            total += call[0] + 1
            self.emit(call, round_)
