"""What a real run evaluates: the model the simulator evaluates, the mean of the P replicas (worker −1).

The schedule is the simulator's (:class:`~stragglerlab.simulator.convergence.Evaluations`), decided on rank 0 as its
rounds complete. Where the exchange keeps the replicas identical after every round (:attr:`Exchange.identical`:
sync, eager-SGD, and local SGD right after an average), rank 0's replica *is* the mean then and rank 0 evaluates it
at once. Where they differ (WAGMA between global averages, LSGD), the mean needs every rank's replica: rank 0 notes
the evaluation point, keeps a copy of its own replica and sends every other rank a request; a rank answers by
keeping a copy of its replica at the end of the iteration during which the request reached it (the first point
where it can look, without stopping anyone: **(choice)** the other replicas are taken up to one iteration after rank
0's). When training ends every rank adds its copies (a rank that finished before a request came adds its final
model), rank 0 evaluates their means and writes those rows. The last evaluation (after any trailing local steps, as
in the simulator) is always of the mean, whatever the exchange, since local SGD's replicas differ after their last
average. Rank 0's own model is left as it trained (``--save-model`` saves it). In a run the time budget stopped, the
last evaluation is at the latest release over the ranks, its ``iteration`` the most iterations any rank ran (each
final replica holds its own rank's iterations).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stragglerlab.realrun.algorithms.base import Sink
from stragglerlab.realrun.clock import RunClock
from stragglerlab.realrun.replica import Replica
from stragglerlab.simulator.convergence import Evaluations
from stragglerlab.simulator.scenario import Scenario

TAG = 7303
STAND_IN = np.zeros((1, 1))  # the replicas matrix Evaluations is handed: the replica stands for it


class _Schedule:
    """Evaluations' workload when only its schedule is wanted: the evaluations themselves are made here."""

    def evaluate(self, w: np.ndarray) -> tuple[float, float]:
        return float("nan"), float("nan")


class MeanEvaluations:
    """One rank's side of a run's evaluations (module doc). Collective to create (every rank of a run with a model)."""

    def __init__(self, scenario: Scenario, replica: Replica, comm: Any, clock: RunClock, identical: bool, sink: Sink):
        self.replica, self.clock, self.identical, self.sink = replica, clock, identical, sink
        self.comm = comm.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.schedule = Evaluations(scenario, _Schedule()) if self.rank == 0 else None
        self.points: list[tuple[float, int]] = []  # rank 0: the evaluations of the mean yet to make (t, iteration)
        self.copies: list[np.ndarray] = []  # this rank's replica at each request seen

    def _own(self) -> np.ndarray:
        return self.replica.host(self.replica.params()).astype(np.float64)

    def _take(self, rows: list[tuple], now: bool) -> None:
        """Rank 0: evaluate its replica at the schedule's points (``now``), or request the mean's."""
        for t, iteration, worker, _, _ in rows:
            if worker >= 0:
                continue
            if now:
                self.sink("evals", (t, iteration, -1, *self.replica.evaluate()))
                continue
            self.points.append((t, iteration))
            self.copies.append(self._own())
            for r in range(1, self.size):
                self.comm.send(len(self.points) - 1, dest=r, tag=TAG)

    def start(self) -> None:
        """The evaluation before training (every replica is the initial model)."""
        if self.schedule is not None:
            self._take(self.schedule.rows(self.clock.now(), 0, STAND_IN), now=True)

    def after_iteration(self, completed: tuple[float, int] | None) -> None:
        """After each iteration: rank 0 evaluates if a round completed and one is due; others answer requests."""
        if self.schedule is not None:
            if completed is not None:
                self._take(self.schedule.after_round(*completed, STAND_IN), now=self.identical)
            return
        while self.comm.Iprobe(source=0, tag=TAG):
            self.comm.recv(source=0, tag=TAG)
            self.copies.append(self._own())

    def latest(self, t: float, iterations: int) -> tuple[float, int]:
        """Collective: the latest ``t`` and the most ``iterations`` over the ranks (a run the time budget stopped ends
        at its last release, its replicas holding each rank's own iterations)."""
        ends = self.comm.allgather((t, iterations))
        return max(t for t, _ in ends), max(n for _, n in ends)

    def finish(self, t_end: float, iterations: int) -> None:
        """Collective when training ends: the requested means and the final one evaluated (rank 0 writes them)."""
        from mpi4py import MPI

        requested = len(self.points)
        if self.schedule is not None:
            final = self.schedule.final(t_end, iterations, STAND_IN)
            self.points += [(t, it) for t, it, worker, _, _ in final if worker < 0]
        requested, total = self.comm.bcast((requested, len(self.points)) if self.rank == 0 else None, root=0)
        if self.rank != 0:
            for _ in range(len(self.copies), requested):  # requests that came after this rank's last iteration
                self.comm.recv(source=0, tag=TAG)
        own = self._own()
        self.copies += [own] * (total - len(self.copies))
        if total:  # the last point is the end of training (the final one, or a request made at it): final replicas
            self.copies[total - 1] = own
        for k in range(total):
            mean = np.empty_like(own) if self.rank == 0 else None
            self.comm.Reduce(self.copies[k], mean, op=MPI.SUM, root=0)
            if self.rank == 0:
                self.replica.load(mean / self.size)
                self.sink("evals", (*self.points[k], -1, *self.replica.evaluate()))
        if self.rank == 0 and total:
            self.replica.load(own)
        self.comm.Free()
