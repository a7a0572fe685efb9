"""What every real-run exchange shares: the :class:`Exchange` interface the harness drives, and the rows it writes.

An algorithm's record names its exchange per backend (``"module:Class"``); :func:`exchange_class` resolves the name.
Every exchange follows the algorithm's rules (the same rules object the simulator runs), hands this rank's
``iterations`` rows to the sink (a row may wait until its round is known) and, on rank 0, the ``rounds`` rows; times
come from the run's aligned clock.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from stragglerlab.analysis.errors import UserError
from stragglerlab.realrun.clock import RunClock
from stragglerlab.realrun.injection import Injection
from stragglerlab.realrun.replica import Replica
from stragglerlab.simulator.algorithms.record import Algorithm
from stragglerlab.simulator.scenario import Scenario

Sink = Callable[[str, tuple], None]


def iteration_row(
    worker: int,
    n: int,
    t_start: float,
    t_post: float,
    t_done: float,
    round_: int,
    model_version: int,
    fresh: bool,
    samples: int,
) -> tuple:
    """What a rank records of one iteration (:data:`~stragglerlab.analysis.runfolder.RECORDED`); ``samples``: of
    its batch it processed."""
    return (worker, n, t_start, t_post, t_done, round_, model_version, bool(fresh), int(samples))


def synchronous_round(m: int, kind: str, posts: np.ndarray, t_done: float, group: int = -1) -> tuple:
    """A ``rounds`` row of a round every rank joined: its initiator is the last to post."""
    last = int(np.argmax(posts))
    return (m, kind, last, float(posts[last]), t_done, len(posts), len(posts), group)


class Exchange:
    """One rank's side of an algorithm. ``iteration`` is called after each computation (gradient ``g`` of
    iteration ``n``, training ``loss``) and returns ``(t_done, iterations)`` when a round completed on this rank, else
    None. ``iterations`` is the iterations per worker the model holds after that round, as the convergence replay
    counts them, and a rank's k-th completion reports the same ``iterations`` on every rank, so that every rank knows
    the evaluation points of ``evals.every_iterations`` by itself (:mod:`..evaluation`)."""

    #: replicas are identical after every round this rank completes, so rank 0's replica is then their mean and it
    #: evaluates it at once; otherwise the mean is gathered from every rank (:mod:`..evaluation`)
    identical = True
    #: the time budget is spent: this rank stops after the current iteration (every rank of a round stops with it)
    stopped = False
    #: what one rank holds at its peak per parameter of the model, in bytes (float32 copies of the gradient and
    #: the model, the native core's buffers, the messages in flight): measured by tests/benchmarks/bench_footprint.py
    #: and rounded up; ``run`` and ``calibrate`` estimate their ranks' memory from it (:mod:`..footprint`)
    bytes_per_parameter: float
    #: the run keeps a central model (a parameter server's), which its evaluations evaluate instead of the replicas'
    #: mean (:meth:`central_models`)
    central = False

    def __init__(self, scenario: Scenario, rules: Any, comm: Any, replica: Replica, clock: RunClock, sink: Sink):
        self.scenario, self.rules, self.comm, self.replica = scenario, rules, comm, replica
        self.clock, self.sink = clock, sink
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.d = replica.dimension
        self.batch = scenario.workload.batch  # the samples of an iteration's computation, unless cut short

    @classmethod
    def check(cls, scenario: Scenario, replica: Replica) -> None:
        """Setup checks that need the replica, made on every rank before any collective (raise a UserError)."""

    @classmethod
    def as_run(cls, scenario: Scenario, replica: Replica) -> tuple[Scenario, str]:
        """The scenario as this exchange really runs it, which the run folder records, and a note for the user
        where that differs from what ``scenario`` asked for (else "")."""
        return scenario, ""

    @classmethod
    def stops(cls, rules: Any) -> bool:
        """Whether this exchange runs the time budget (``duration``) of an algorithm with these rules."""
        return False

    def budget_spent(self, t_done: float) -> bool:
        """Collective, at a round every rank completes: whether it is the time budget's last, as rank 0 saw its
        completion (``t_done`` on rank 0), so that every rank stops after the same round. Without a budget, False
        at no cost."""
        if self.scenario.duration <= 0:
            return False
        return bool(self.comm.bcast(t_done >= self.scenario.duration if self.rank == 0 else None, root=0))

    def compute(self, n: int, injection: Injection, t_start: float) -> tuple[Any, float, float]:
        """This rank's computation of iteration ``n``, begun at ``t_start``: its gradient, training loss and post
        time, the injected imbalance spent between the gradient and the post."""
        g, loss = self.replica.gradient(n)
        injection.spend(injection.extra(n, self.clock.now() - t_start))
        return g, loss, self.clock.now()

    def iteration(self, n: int, g: Any, loss: float, t_start: float, t_post: float) -> tuple[float, int] | None:
        raise NotImplementedError

    def rounds(self) -> list[tuple]:
        """``rounds`` rows completed since the last call (rank 0 writes them)."""
        return []

    def close(self) -> None:
        """Collective: finish the exchange and hand over every row still held."""

    def central_models(self, t_end: float, iterations: int) -> list[tuple[float, int, np.ndarray]]:
        """Rank 0, after :meth:`close`, where the run keeps a central model: (t, iterations, model) at each of its
        evaluation points after the first, then its final model at (``t_end``, ``iterations``)."""
        return []


def exchange_class(record: Algorithm, backend: str) -> type[Exchange]:
    """The exchange ``record`` names for ``backend``; a backend it has none for is a one-line error."""
    name = record.exchanges.get(backend)
    if name is None:
        raise UserError(f"--backend {backend}: {record.name} runs with --backend {' or '.join(record.exchanges)}")
    module, _, attribute = name.partition(":")
    return getattr(importlib.import_module(module), attribute)
