"""What a real run evaluates: the model the simulator evaluates, the mean of the P replicas (worker −1), with the mean
of their buffers (BatchNorm's running statistics, which each rank keeps its own of).

The schedule is the simulator's (:class:`~stragglerlab.simulator.convergence.Evaluations`), decided on rank 0 as its
rounds complete. An evaluation after a round is of every replica right after it applied that round, as the
simulator's replay has them, so that a replay of the run's own tables reproduces it. During training the ranks only
keep copies (parameters as float32, buffers); the evaluations are made when training ends, so they take none of the
run's time **(choice: an evaluation on rank 0 in the middle of a run would hold up the ranks that wait for it, which
the simulator does not model; the price is a copy per evaluation in memory, and a run killed before its end has no
evaluations)**:

- Where the exchange keeps the replicas identical after every round (:attr:`Exchange.identical`: sync, eager-SGD,
  quorum, and local SGD right after an average) and the model has no buffers, rank 0's replica *is* the mean then:
  rank 0 alone keeps its copy, at every point of the schedule.
- Otherwise every rank keeps a copy of its replica right after each round that is an evaluation point, which it
  knows by itself where ``evals.every_iterations`` makes the point: every rank completes the same rounds, and each
  completion says how many iterations per worker the model holds, alike on every rank (:meth:`Exchange.iteration`).
  A point that only ``evals.every_seconds`` makes is decided on rank 0's clock and reaches the other ranks as a
  request: a rank keeps its copy at the end of the iteration during which the request reached it **(choice: up to
  one iteration after rank 0's point, so that no rank stops for an evaluation)**.
- A run that keeps a central model (a parameter server's, :attr:`Exchange.central`) evaluates that model, as the
  simulator does: the server's thread keeps a copy of it after each push the schedule makes an evaluation point,
  evaluated with the mean of the ranks' final buffers.

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
from stragglerlab.realrun.replica import Replica
from stragglerlab.simulator.convergence import Evaluations
from stragglerlab.simulator.scenario import Scenario

TAG = 7303
STAND_IN = np.zeros((1, 1))  # the replicas matrix Evaluations is handed: the replica stands for it
FINAL = ("final", 0)  # the key of the last evaluation's copies: every rank's final replica
Copy = tuple[np.ndarray, np.ndarray]  # a replica's parameters (float32) and buffers (float64)


class Unevaluated:
    """Evaluations' workload when only its schedule is wanted: the evaluations themselves are made elsewhere."""

    def evaluate(self, w: np.ndarray, replica: int | None = None) -> tuple[float, float]:
        return float("nan"), float("nan")


class MeanEvaluations:
    """One rank's side of a run's evaluations (module doc). Collective to create (every rank of a run with a model)."""

    def __init__(self, scenario: Scenario, replica: Replica, exchange: Exchange, sink: Sink):
        self.replica, self.exchange, self.sink = replica, exchange, sink
        self.comm = exchange.comm.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.alone = exchange.identical and not exchange.central and not replica.buffers().size  # rank 0's copy is all
        self.schedule = Evaluations(scenario, Unevaluated()) if self.rank == 0 else None
        # the points every rank knows by itself: those of evals.every_iterations (a central model's: its server's)
        by_iterations = scenario.replace(**{"evals.every_seconds": 0.0})
        self.exact = None if self.alone or exchange.central else Evaluations(by_iterations, Unevaluated())
        self.points: list[tuple[float, int, tuple[str, int]]] = []  # rank 0: (t, iteration, key) yet to evaluate
        self.copies: dict[tuple[str, int], Copy] = {}  # this rank's replica at each point, by key
        self.completed = 0  # rounds completed on this rank
        self.settled = False  # this rank's last iteration completed a round (its replica has not changed since)
        self.requests = 0  # requests sent (rank 0) or received

    def _own(self) -> Copy:
        """A copy of this rank's replica: its parameters and its buffers."""
        return self.replica.host(self.replica.params()).copy(), self.replica.buffers()

    def start(self) -> None:
        """The evaluation before training (every replica is the initial model, with the initial buffers), at time 0:
        called before the run's clock starts, so that rank 0 does not begin its first iteration later than the others
        by the evaluation's time (a test-set pass of 45-75 ms for ``torch:cnn`` on this VM, over which the other ranks
        had run ahead), which the simulation, evaluating for no time, does not."""
        if self.schedule is not None:
            self.schedule.rows(0.0, 0, STAND_IN)
            self.sink("evals", (0.0, 0, -1, *self.replica.evaluate()))

    def after_iteration(self, completed: tuple[float, int] | None) -> None:
        """After each iteration: at a round's completion, the copy of an evaluation point; on other ranks, a copy for
        each request that has come. (A central model's server keeps its own copies.)"""
        if self.exchange.central:
            return
        self.settled = completed is not None
        if completed is not None:
            key = ("round", self.completed)
            self.completed += 1
            exact = self.exact is not None and bool(self.exact.after_round(*completed, STAND_IN))
            if exact:
                self.copies[key] = self._own()
            if self.schedule is not None and self.schedule.after_round(*completed, STAND_IN):
                self._point(*completed, key if exact or self.alone else None)
        if self.rank != 0:
            while self.comm.Iprobe(source=0, tag=TAG):
                self.copies[("request", self.comm.recv(source=0, tag=TAG))] = self._own()
                self.requests += 1

    def _point(self, t: float, iteration: int, key: tuple[str, int] | None) -> None:
        """Rank 0: an evaluation is due after the round just completed; ``key``: the copies of it every rank that
        needs one keeps (None: a request asks the others for theirs)."""
        if key is None:
            key = ("request", self.requests)
            for r in range(1, self.size):
                self.comm.send(self.requests, dest=r, tag=TAG)
            self.requests += 1
        if key not in self.copies:  # (every rank has copied an exact point already)
            self.copies[key] = self._own()
        self.points.append((t, iteration, key))

    def latest(self, t: float, iterations: int) -> tuple[float, int]:
        """Collective: the latest ``t`` and the most ``iterations`` over the ranks (a run the time budget stopped ends
        at its last release, its replicas holding each rank's own iterations)."""
        ends = self.comm.allgather((t, iterations))
        return max(t for t, _ in ends), max(n for _, n in ends)

    def finish(self, t_end: float, iterations: int) -> None:
        """Collective when training ends (and the exchange has closed): every point evaluated on rank 0, which writes
        the rows, the final one last."""
        own = self._own()
        if self.exchange.central:
            points = self.exchange.central_models(t_end, iterations) if self.rank == 0 else []
            self._evaluate([(t, it, (w, own[1])) for t, it, w in points], mean_buffers=True)
            return
        # the last evaluation point is the end of training only if every rank's replica is as its last round left it,
        # the same round on every rank (a free-running LSGD worker steps on after its last exchange, rank 0 or not)
        ends = self.comm.allgather((self.settled, self.completed))
        settled = all(done for done, _ in ends) and len({rounds for _, rounds in ends}) == 1
        if self.schedule is not None:
            final = (self.schedule.final if settled else self.schedule.rows)(t_end, iterations, STAND_IN)
            self.points += [(t, it, FINAL) for t, it, worker, _, _ in final if worker < 0]
        keys = self.comm.bcast([key for _, _, key in self.points] if self.rank == 0 else None, root=0)
        if self.rank != 0:
            for _ in range(self.requests, sum(kind == "request" for kind, _ in keys)):  # came after the last iteration
                self.comm.recv(source=0, tag=TAG)
        # the final replicas are averaged whatever the exchange (local SGD's differ after its last average)
        means = [
            self.copies.get(key, own) if self.alone and key != FINAL else self._mean(self.copies.get(key, own))
            for key in keys
        ]
        self._evaluate([(t, it, m) for (t, it, _), m in zip(self.points, means, strict=True)] if self.rank == 0 else [])

    def _mean(self, copy: Copy) -> Copy:
        """Collective: the mean of every rank's ``copy`` (on rank 0; the others get theirs back)."""
        from mpi4py import MPI

        mine = np.concatenate([copy[0].astype(np.float64), copy[1]])
        total = np.empty_like(mine) if self.rank == 0 else None
        self.comm.Reduce(mine, total, op=MPI.SUM, root=0)
        if total is None:
            return copy
        d = self.replica.dimension
        return total[:d] / self.size, total[d:] / self.size

    def _evaluate(self, points: list[tuple[float, int, Copy]], mean_buffers: bool = False) -> None:
        """Rank 0 evaluates each (t, iteration, copy) and writes the rows (``mean_buffers``: with every rank's final
        buffers averaged, a collective); then its own model is restored."""
        own = self._own()
        buffers = self._mean(own)[1] if mean_buffers else None
        if self.rank == 0:
            for t, iteration, (params, copied) in points:
                self.replica.load(np.asarray(params))
                self.replica.load_buffers(copied if buffers is None else buffers)
                self.sink("evals", (t, iteration, -1, *self.replica.evaluate()))
            self.replica.load(own[0])
            self.replica.load_buffers(own[1])
        self.comm.Free()
