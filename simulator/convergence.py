"""Convergence: real model updates replayed along the engine's schedule, yielding ``evals`` rows.

Timing never depends on model values, so the model is trained *after* the engine has run, from its tables alone:
which iteration's contribution went into which round, and on which model version it was computed. Rounds are
replayed in order by the algorithm's *apply* (its record's ``apply``: what a round does to the replicas) on the P
replicas (:mod:`.replicas`). With the time budget (``duration``) the final evaluation is at the last row's
``t_done``, with ``iteration`` the most iterations any worker ran.

Evaluations of the averaged model (worker −1: the mean of the replicas, or the central model of an algorithm that
keeps one, a parameter server's), and of each replica with ``evals.replicas``, are taken at the start,
after the first round completing at or past each multiple of ``evals.every_seconds`` (simulated) or of
``evals.every_iterations``, and at the end (after any trailing local steps). ``iteration`` is the iterations per
worker that the evaluated model contains. ``observe(event, round, value)`` lets tests look inside: ``applied``
(the gradient sum a round applies, before division), ``averaged`` (replicas after a model average), ``exchange``
(LSGD: (models, running-mean losses) before the pulls) and ``round`` (replicas after each round).

The replay's linear algebra runs on one thread: with several BLAS threads on a busy machine, the small batched
products of a replay spend far longer waiting for each other than computing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from stragglerlab.analysis.runfolder import SCHEMAS, SORT_KEYS
from stragglerlab.simulator.replicas import Apply, Observer, Optimizer, row_counts

if TYPE_CHECKING:
    from stragglerlab.simulator.scenario import Scenario


class Schedule:
    """Keeps the columns of the engine's tables that the replay needs; :meth:`tables` gives them as frames."""

    COLUMNS = ("worker", "iteration", "round", "model_version", "t_post", "t_done", "samples")

    def __init__(self):
        self.it: list[pd.DataFrame] = []
        self.rounds: list[pd.DataFrame] = []

    def add_iterations(self, columns) -> None:
        """A block of ``iterations`` rows (column arrays)."""
        self.it.append(pd.DataFrame({c: np.asarray(columns[c]) for c in self.COLUMNS}))

    def add_rounds(self, columns) -> None:
        """A block of ``rounds`` rows (column arrays)."""
        self.rounds.append(pd.DataFrame({c: np.asarray(columns[c]) for c in SCHEMAS["rounds"].names}))

    def tables(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(iterations, rounds) with the columns of the run folder's tables that the replay reads."""
        it = pd.concat(self.it, ignore_index=True) if self.it else pd.DataFrame(columns=list(self.COLUMNS))
        rounds = (
            pd.concat(self.rounds, ignore_index=True) if self.rounds else pd.DataFrame(columns=SCHEMAS["rounds"].names)
        )
        return it, rounds


class Evaluations:
    """Decides when to evaluate and produces the ``evals`` rows (t, iteration, worker, loss, accuracy). ``points``:
    evaluate after the first round that reaches each of these iteration counts instead of by ``evals.every_*`` (a
    replay of a real run evaluates where the run did)."""

    def __init__(self, scenario: Scenario, workload, central: bool = False, points: Sequence[int] | None = None):
        e = scenario.evals
        self.workload, self.replicas = workload, e.replicas
        self.central = central  # the matrix's last row is the central model, not a replica
        self.every_s, self.every_it = e.every_seconds, e.every_iterations
        self.next_s, self.next_it = e.every_seconds, e.every_iterations
        self.points = None if points is None else sorted(set(points))
        self.last: tuple[float, int] | None = None  # (t, iteration) of the last evaluation, if no round came since

    def rows(self, t: float, iteration: int, W: np.ndarray) -> list[tuple]:
        self.last = (t, iteration)
        averaged = W[-1] if self.central else W.mean(axis=0)
        out = [(t, iteration, -1, *self.workload.evaluate(averaged))]
        if self.replicas:
            out += [(t, iteration, j, *self.workload.evaluate(W[j], j)) for j in range(len(W) - self.central)]
        return out

    def after_round(self, t: float, iteration: int, W: np.ndarray) -> list[tuple]:
        if self.points is not None:
            due = bool(self.points) and iteration >= self.points[0]
            while self.points and self.points[0] <= iteration:
                self.points.pop(0)
        else:
            due = bool(self.every_it and iteration >= self.next_it) or bool(self.every_s and t >= self.next_s)
        if not due:
            self.last = None  # the model has changed since the last evaluation
            return []
        if self.every_it:
            self.next_it = (iteration // self.every_it + 1) * self.every_it
        if self.every_s:
            self.next_s = (np.floor(t / self.every_s) + 1) * self.every_s
        return self.rows(t, iteration, W)

    def final(self, t: float, iteration: int, W: np.ndarray) -> list[tuple]:
        """The evaluation at the end, unless the last round's was at the same point; with ``points``, always (the
        run being replayed has its own final evaluation)."""
        return [] if self.points is None and self.last == (t, iteration) else self.rows(t, iteration, W)


def replay(
    scenario: Scenario,
    rules: Any,
    apply: Apply,
    workload: Any,
    iterations: pd.DataFrame,
    rounds: pd.DataFrame,
    observe: Observer | None = None,
    central: bool = False,
    points: Sequence[int] | None = None,
) -> Iterator[tuple]:
    """Train ``workload`` along the schedule in the (finished) ``iterations`` and ``rounds`` tables with the
    algorithm's ``apply`` and ``rules``; yields the ``evals`` rows as they are computed. ``central``: the algorithm
    keeps a central model (a parameter server's), row P of the replicas' matrix, which starts as every replica does
    and is what the averaged model's evaluations (worker −1) evaluate. ``points``: the iteration counts to evaluate
    at (:class:`Evaluations`), instead of the scenario's schedule."""
    it = iterations.sort_values(["worker", "iteration"], kind="stable").reset_index(drop=True)
    rounds = rounds.sort_values(SORT_KEYS["rounds"], kind="stable").reset_index(drop=True)
    P = scenario.workers
    W = np.tile(workload.initial().astype(np.float64), (P + central, 1))
    evals = Evaluations(scenario, workload, central, points)
    carried = it[it["round"] >= 0]
    reached = rounds["round"].map(carried.groupby("round")["iteration"].max() + 1).fillna(0).astype(np.int64)
    note = observe or (lambda event, m, value: None)
    t_done, reached = rounds["t_done"].to_numpy(), reached.to_numpy()
    with threadpool_limits(limits=1, user_api="blas"):
        yield from evals.rows(0.0, 0, W)
        for step in apply(rules, workload, it, rounds, W, Optimizer(scenario, W.shape), note):
            m, replicas = step if isinstance(step, tuple) else (step, W)
            note("round", m, W)
            yield from evals.after_round(float(t_done[m]), int(reached[m]), replicas)
        yield from evals.final(float(it["t_done"].max()), int(row_counts(it, P).max(initial=0)), W)
