"""What a real run evaluates: the model the simulator evaluates, the mean of the P replicas (worker −1), with the mean
of their buffers (BatchNorm's running statistics, which each rank keeps its own of).

The schedule is the simulator's (:class:`~stragglerlab.simulator.convergence.Evaluations`), decided on rank 0 as its
rounds complete. An evaluation after a round is of every replica right after it applied that round, as the
simulator's replay has them, so that a replay of the run's own tables reproduces it:

- Where the exchange keeps the replicas identical after every round (:attr:`Exchange.identical`: sync, eager-SGD,
  quorum, and local SGD right after an average) and the model has no buffers, rank 0's replica *is* the mean then, and
  rank 0 evaluates it at once.
- Otherwise every rank keeps a copy of its replica (parameters and buffers) right after each round that is an
  evaluation point, which it knows by itself where ``evals.every_iterations`` makes the point: every rank completes
  the same rounds, and each completion says how many iterations per worker the model holds, alike on every rank
  (:meth:`Exchange.iteration`). A point that only ``evals.every_seconds`` makes is decided on rank 0's clock and
  reaches the other ranks as a request: a rank keeps its copy at the end of the iteration during which the request
  reached it **(choice: up to one iteration after rank 0's point, so that no rank stops for an evaluation)**.

A run that keeps a central model (a parameter server's, :attr:`Exchange.central`) evaluates that model, as the
simulator does: the server's thread keeps a copy of it after each push the schedule makes an evaluation point, and
rank 0 evaluates the copies when the run ends, with the mean of the ranks' final buffers.

When training ends, the copies are summed on rank 0 point by point (a rank that finished before a request came adds
its final replica), and rank 0 evaluates their means and writes those rows. The last evaluation (after any trailing
local steps, as in the simulator) is always of the final replicas' mean, whatever the exchange, since local SGD's
replicas differ after their last average. Rank 0's own model is left as it trained (``--save-model`` saves it). In a
run the time budget stopped, the last evaluation is at the latest release over the ranks, its ``iteration`` the most
iterations any rank ran (each final replica holds its own rank's iterations).
"""

from __future__ import annotations

import numpy as np

from stragglerlab.realrun.algorithms.base import Exchange, Sink
from stragglerlab.realrun.clock import RunClock
from stragglerlab.realrun.replica import Replica
from stragglerlab.simulator.convergence import Evaluations
from stragglerlab.simulator.scenario import Scenario

TAG = 7303
STAND_IN = np.zeros((1, 1))  # the replicas matrix Evaluations is handed: the replica stands for it
FINAL = ("final", 0)  # the key of the last evaluation's copies: every rank's final replica


class Unevaluated:
    """Evaluations' workload when only its schedule is wanted: the evaluations themselves are made elsewhere."""

    def evaluate(self, w: np.ndarray, replica: int | None = None) -> tuple[float, float]:
        return float("nan"), float("nan")


class MeanEvaluations:
    """One rank's side of a run's evaluations (module doc). Collective to create (every rank of a run with a model)."""

    def __init__(self, scenario: Scenario, replica: Replica, exchange: Exchange, clock: RunClock, sink: Sink):
        self.replica, self.exchange, self.clock, self.sink = replica, exchange, clock, sink
        self.comm = exchange.comm.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.at_once = exchange.identical and not exchange.central and not replica.buffers().size
        self.schedule = Evaluations(scenario, Unevaluated()) if self.rank == 0 else None
        # the points every rank knows by itself: those of evals.every_iterations (a central model's: its server's)
        by_iterations = scenario.replace(**{"evals.every_seconds": 0.0})
        self.exact = None if self.at_once or exchange.central else Evaluations(by_iterations, Unevaluated())
        self.points: list[tuple[float, int, tuple[str, int]]] = []  # rank 0: (t, iteration, key) yet to evaluate
        self.copies: dict[tuple[str, int], np.ndarray] = {}  # this rank's replica at each point, by key
        self.completed = 0  # rounds completed on this rank
        self.requests = 0  # requests sent (rank 0) or received

    def _own(self) -> np.ndarray:
        """This rank's replica: its parameters, then its buffers, as one float64 vector."""
        params = self.replica.host(self.replica.params()).astype(np.float64)
        return np.concatenate([params, self.replica.buffers()])

    def start(self) -> None:
        """The evaluation before training (every replica is the initial model, with the initial buffers)."""
        if self.schedule is not None:
            t = self.clock.now()
            self.schedule.rows(t, 0, STAND_IN)
            self.sink("evals", (t, 0, -1, *self.replica.evaluate()))

    def after_iteration(self, completed: tuple[float, int] | None) -> None:
        """After each iteration: at a round's completion, the copy of an evaluation point (or rank 0's evaluation);
        on other ranks, a copy for each request that has come. (A central model's server keeps its own points.)"""
        if self.exchange.central:
            return
        if completed is not None:
            key = ("round", self.completed)
            self.completed += 1
            exact = self.exact is not None and bool(self.exact.after_round(*completed, STAND_IN))
            if exact:
                self.copies[key] = self._own()
            if self.schedule is not None and self.schedule.after_round(*completed, STAND_IN):
                self._point(*completed, key if exact else None)
        if self.rank != 0:
            while self.comm.Iprobe(source=0, tag=TAG):
                self.copies[("request", self.comm.recv(source=0, tag=TAG))] = self._own()
                self.requests += 1

    def _point(self, t: float, iteration: int, key: tuple[str, int] | None) -> None:
        """Rank 0: an evaluation is due after the round just completed; ``key``: the copies every rank keeps of it
        (None: none, a request asks for them)."""
        if self.at_once:
            self.sink("evals", (t, iteration, -1, *self.replica.evaluate()))
            return
        if key is None:
            key = ("request", self.requests)
            self.copies[key] = self._own()
            for r in range(1, self.size):
                self.comm.send(self.requests, dest=r, tag=TAG)
            self.requests += 1
        self.points.append((t, iteration, key))

    def latest(self, t: float, iterations: int) -> tuple[float, int]:
        """Collective: the latest ``t`` and the most ``iterations`` over the ranks (a run the time budget stopped ends
        at its last release, its replicas holding each rank's own iterations)."""
        ends = self.comm.allgather((t, iterations))
        return max(t for t, _ in ends), max(n for _, n in ends)

    def finish(self, t_end: float, iterations: int) -> None:
        """Collective when training ends (and the exchange has closed): the means of every point's copies evaluated
        (rank 0 writes them), the final one last; where the run keeps a central model, its copies."""
        from mpi4py import MPI

        if self.exchange.central:
            self._central()
            return
        if self.schedule is not None:
            final = self.schedule.final(t_end, iterations, STAND_IN)
            self.points += [(t, it, FINAL) for t, it, worker, _, _ in final if worker < 0]
        keys = self.comm.bcast([key for _, _, key in self.points] if self.rank == 0 else None, root=0)
        if self.rank != 0:
            for _ in range(self.requests, sum(kind == "request" for kind, _ in keys)):  # came after the last iteration
                self.comm.recv(source=0, tag=TAG)
        own = self._own()
        d = self.replica.dimension
        for k, key in enumerate(keys):
            total = np.empty_like(own) if self.rank == 0 else None
            self.comm.Reduce(self.copies.get(key, own), total, op=MPI.SUM, root=0)
            if total is not None:
                mean = total / self.size
                self.replica.load(mean[:d])
                self.replica.load_buffers(mean[d:])
                self.sink("evals", (*self.points[k][:2], -1, *self.replica.evaluate()))
        if self.rank == 0 and keys:
            self.replica.load(own[:d])
            self.replica.load_buffers(own[d:])
        self.comm.Free()

    def _central(self) -> None:
        """Collective: the server's copies of its model, each with the mean of the ranks' final buffers (a server
        runs no forward pass; **(choice)** the replicas' buffers at its points are not gathered)."""
        from mpi4py import MPI

        own = self.replica.buffers()
        total = np.empty_like(own) if self.rank == 0 else None
        self.comm.Reduce(own, total, op=MPI.SUM, root=0)
        if total is not None:
            params = self.replica.host(self.replica.params()).copy()
            self.replica.load_buffers(total / self.size)
            for t, iteration, w in self.exchange.central_models():
                self.replica.load(w)
                self.sink("evals", (t, iteration, -1, *self.replica.evaluate()))
            self.replica.load(params)
            self.replica.load_buffers(own)
        self.comm.Free()
