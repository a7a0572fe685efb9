"""WAGMA-SGD through the native core: ranks contribute their models, summed in butterfly groups.

Each rank's core records its own group's part of a round; a round's ``contributors`` and ``fresh`` count every
group's, as the simulator does, so the ``rounds`` rows are formed when the run ends, from every rank's records
(summed over one member of each group; the round completes with its last group).

The probe slot of a round's result holds the iteration + 1 of the deposit (model) the round read; a deposit's round is
the first round that read it, and a deposit replaced before any round read it has round -1. The core's result is the
group sum, weighed here: ``(Σ_group + w)/(|group| + 1)`` for group rounds, a member that has never posted counting as
the initial model, and ``Σ/P`` for the periodic global average; then the rank steps with its own gradient.

With a time budget, every rank stops after the first global average whose ``t_trigger`` (the last post, which every
rank reads alike) is at or after it; a group round's trigger is known only in its activator's group, so group rounds
never end the budget. Every rank is in a global average, so every rank stops after that same round.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from stragglerlab.realrun.algorithms.base import Sink
from stragglerlab.realrun.algorithms.native import NativeRounds
from stragglerlab.realrun.clock import RunClock
from stragglerlab.realrun.collectives import RoundInfo
from stragglerlab.realrun.replica import Replica
from stragglerlab.simulator.algorithms.wagma import butterfly_group
from stragglerlab.simulator.scenario import Scenario


class WagmaExchange(NativeRounds):
    bytes_per_parameter = 68
    identical = False

    def __init__(self, scenario: Scenario, rules: Any, comm: Any, replica: Replica, clock: RunClock, sink: Sink):
        super().__init__(scenario, rules, comm, replica, clock, sink, group_size=rules.group_size)
        self.w0 = self.replica.host(self.replica.params()).copy()
        self.total = np.empty_like(self.w0)  # the weighed model of each round (_average)

    def iteration(self, n, g, loss, t_start, t_post):
        out, info = self.exchange(n, self.replica.params())
        t_done = self.clock.now()
        self.stopped = self.budget_reached()
        self.waiting.append((n, t_start, t_post, t_done, info.fresh))
        self._average(out, info)
        self.replica.step(g)
        self._read_deposit(int(round(self.probe(out))), info.round)
        return t_done, n + 1

    def rounds(self) -> list[tuple]:
        """Nothing until the run ends: a round's row needs every group's records (:meth:`close`)."""
        return super().rounds() if self.final is not None else []

    def close(self) -> None:
        for call in self.waiting:
            self.emit(call, -1)
        self.waiting.clear()
        records = self.comm.gather(self.coll.rounds(), root=0)
        self.final = self.rows(self._whole_rounds(records)) if self.rank == 0 else []
        self.coll.close()

    def _whole_rounds(self, records: list[pd.DataFrame]) -> pd.DataFrame:
        """One record per round from every rank's: rank 0's, with contributors and fresh summed over the groups
        (each counted once, by its lowest rank) and the completion of the last group."""
        every = pd.concat([frame.assign(rank=r) for r, frame in enumerate(records)], ignore_index=True)
        S = self.rules.group_size
        counted = np.array(
            [
                butterfly_group(r, g, self.size, S)[0] == r if g >= 0 else r == 0
                for r, g in zip(every["rank"], every["group"], strict=True)
            ]
        )
        sums = every[counted].groupby("round")[["contributors", "fresh"]].sum()
        whole = records[0].set_index("round")
        whole[["contributors", "fresh"]] = sums
        whole["t_done"] = every.groupby("round")["t_done"].max()
        return whole.reset_index()[records[0].columns]

    def _read_deposit(self, value: int, round_: int) -> None:
        """Round ``round_`` read this rank's deposit of iteration ``value - 1``; older unread ones never will be."""
        while self.waiting and self.waiting[0][0] < value:
            call = self.waiting.pop(0)
            self.emit(call, round_ if call[0] == value - 1 else -1)

    def _average(self, out: np.ndarray, info: RoundInfo) -> None:
        """Weigh the round's sum into the model, in a buffer kept across rounds: every fresh temporary of the model's
        size costs page faults, and three of them took 4-7 ms an iteration (the whole of a timed run's gap after its
        round, on ranks that share the cores with the exchanges)."""
        d, total = self.d, self.total
        if info.group < 0:
            np.divide(out[:d], self.size, out=total)
            self.replica.load(total)
            return
        members = butterfly_group(self.rank, info.group, self.size, self.rules.group_size)
        missing = sum(not info.mask[j] for j in members)
        if missing:
            np.multiply(self.w0, missing, out=total)
            total += out[:d]
        else:
            total[:] = out[:d]
        total += self.buffer[:d]
        total /= len(members) + 1
        self.replica.load(total)
