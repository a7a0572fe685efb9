"""``sync``, ``eager-solo``, ``eager-majority`` and ``wagma`` through the native core (DESIGN §4, docs/native.md).

Each contribution carries P trailing *probe* slots (DESIGN §4's probe, riding along with the real vector): rank r
writes its iteration + 1 into slot r. A round's result then says exactly which of this rank's calls it carried, so
the ``iterations`` table's ``round`` is read off the data, not guessed from timing:

- eager kinds: the calls a round carries are this rank's oldest calls not yet carried (pending ones go in order,
  with the fresh one last), and their iterations + 1 add up to the slot's value; ``late = drop`` discards a late
  call (round -1). Calls still pending when the run ends are discarded by the core (round -1).
- wagma: the slot holds the iteration + 1 of the deposit (model) the round read; a deposit's round is the first
  round that read it, and a deposit replaced before any round read it has round -1.

The core's results are Σ/P or Σ/D for gradients (the step follows) and the group sum for wagma, which is weighed
here: ``(Σ_group + w)/(|group| + 1)`` for group rounds, a member that has never posted counting as the initial model
(docs/semantics.md), and ``Σ/P`` for the periodic global average; then the rank steps with its own gradient.
The core's round records are rank 0's, on the core's clock (aligned to rank 0 like the run's), shifted to the
run's origin by rank 0's reading of the run clock when the core was created (within microseconds).
"""

from __future__ import annotations

import numpy as np

from stragglerlab.realrun.algorithms import Exchange, iteration_row
from stragglerlab.realrun.collectives import Collective
from stragglerlab.simulator.algorithms.wagma import butterfly_group


class NativeExchange(Exchange):
    def __init__(self, scenario, comm, replica, clock, sink):
        super().__init__(scenario, comm, replica, clock, sink)
        a = scenario.algorithm
        self.kind, self.late, self.group_size = a.name, a.late, a.group_size
        self.by_workers = a.name == "sync" or a.divide_by == "workers"
        self.identical = a.name != "wagma"
        self.buffer = np.zeros(self.d + self.size, dtype=np.float32)
        self.coll = Collective(
            a.name,
            count=self.d + self.size,
            comm=comm,
            sync_period=a.sync_period,
            late=a.late,
            divide_by=a.divide_by,
            seed=scenario.seed,
            group_size=a.group_size,
        )
        self.origin = comm.bcast(clock.now() if self.rank == 0 else None, root=0)
        self.w0 = replica.host(replica.params()).copy() if a.name == "wagma" else None
        self.waiting: list[tuple] = []  # (n, t_start, t_post, t_done, fresh) of calls whose round is not known yet
        self.written = 0
        self.final: list[tuple] | None = None

    def iteration(self, n, g, loss, t_start, t_post):
        buf, d = self.buffer, self.d
        buf[:d] = self.replica.host(self.replica.params() if self.kind == "wagma" else g)
        buf[d:] = 0.0
        buf[d + self.rank] = n + 1
        self.coll.post(buf)
        out, info = self.coll.wait()
        t_done = self.clock.now()
        self.waiting.append((n, t_start, t_post, t_done, info.fresh))
        if self.kind == "wagma":
            self._average(out, info)
            self.replica.step(g)
            self._read_deposit(int(round(float(out[d + self.rank]))), info.round)
        else:
            self.replica.step(out[:d])
            divisor = self.size if self.by_workers else max(info.gradients, 1)
            self._carried(int(round(float(out[d + self.rank]) * divisor)), info.round, info.fresh)
        return t_done, n + 1

    def _emit(self, call: tuple, round_: int) -> None:
        n, t_start, t_post, t_done, fresh = call
        self.sink("iterations", iteration_row(self.rank, n, t_start, t_post, t_done, round_, n, fresh))

    def _carried(self, value: int, round_: int, fresh: bool) -> None:
        """Eager and sync: the oldest waiting calls whose iterations + 1 sum to ``value`` went into ``round_``."""
        if self.late == "drop" and not fresh:
            self._emit(self.waiting.pop(), -1)
        total = 0
        while self.waiting and total < value:
            call = self.waiting.pop(0)
            total += call[0] + 1
            self._emit(call, round_)

    def _read_deposit(self, value: int, round_: int) -> None:
        """WAGMA: round ``round_`` read this rank's deposit of iteration ``value - 1``; older unread ones never
        will be."""
        while self.waiting and self.waiting[0][0] < value:
            call = self.waiting.pop(0)
            self._emit(call, round_ if call[0] == value - 1 else -1)

    def _average(self, out: np.ndarray, info) -> None:
        d = self.d
        if info.group < 0:
            self.replica.load(out[:d] / self.size)
            return
        members = butterfly_group(self.rank, info.group, self.size, self.group_size)
        missing = sum(not info.mask[j] for j in members)
        total = out[:d] + missing * self.w0 if missing else out[:d]
        self.replica.load((total + self.buffer[:d]) / (len(members) + 1))

    def rounds(self):
        if self.final is not None:
            rows, self.final = self.final, []
            return rows
        if self.rank != 0:
            return []
        frame = self.coll.rounds().iloc[self.written :]
        self.written += len(frame)
        origin = self.origin
        return [
            (
                int(r.round),
                r.kind,
                int(r.initiator),
                float(r.t_trigger) + origin if r.t_trigger >= 0 else -1.0,
                float(r.t_done) + origin,
                int(r.contributors),
                int(r.fresh),
                int(r.group),
            )
            for r in frame.itertuples(index=False)
        ]

    def close(self):
        for call in self.waiting:
            self._emit(call, -1)
        self.waiting.clear()
        self.final = self.rounds()
        self.coll.close()
