"""Simulate one scenario into a run folder: the composition of the toolkit's pieces. The scenario's plan
(:mod:`.plan`: its algorithm's record, cost model and rules, built once) gives the reference engine's process or the
fast engine's kernel, the convergence replay's apply and ``meta.json``'s figures; the run-folder writer takes the
rows."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stragglerlab.analysis.metrics import Tally
from stragglerlab.analysis.runfolder import NEVER, RunWriter, columns, iteration_columns
from stragglerlab.simulator import algorithms
from stragglerlab.simulator.algorithms.record import resolve
from stragglerlab.simulator.convergence import Schedule, replay
from stragglerlab.simulator.engine import Engine
from stragglerlab.simulator.fast.engine import FastEngine
from stragglerlab.simulator.plan import Plan, plan
from stragglerlab.simulator.provenance import meta
from stragglerlab.simulator.replicas import Observer
from stragglerlab.simulator.scenario import Scenario
from stragglerlab.simulator.workloads import load as load_workload


class _Tables:
    """Where an engine's rows go: column blocks to the run folder (the tables kept), the summary tally, and the
    convergence replay's schedule when there is a model to train."""

    def __init__(self, writer: RunWriter, keep: tuple[str, ...], tally: Tally, schedule: Schedule | None):
        self.writer, self.keep, self.tally, self.schedule = writer, keep, tally, schedule

    def iterations(self, recorded: Mapping[str, Any]) -> None:
        """A block of recorded rows; its arrays may be views the engine reuses, so what is kept is copied."""
        block = iteration_columns(recorded)
        if "iterations" in self.keep:
            self.writer.add_block("iterations", {name: np.array(column) for name, column in block.items()})
        self.tally.add(block)
        if self.schedule is not None:
            self.schedule.add_iterations(block)

    def rounds(self, columns: Mapping[str, Any]) -> None:
        if "rounds" in self.keep:
            self.writer.add_block("rounds", columns)
        if self.schedule is not None:
            self.schedule.add_rounds(columns)


class _Gather:
    """The reference engine's rows, which come one at a time, gathered into blocks of columns."""

    BLOCK = 8192

    def __init__(self, rows: Callable[[Mapping[str, Any]], None], rounds: Callable[[Mapping[str, Any]], None]):
        self._to = {"iterations": rows, "rounds": rounds}
        self._rows: dict[str, list[tuple]] = {"iterations": [], "rounds": []}

    def iteration(self, row: tuple) -> None:
        self._add("iterations", row)

    def round(self, row: tuple) -> None:
        self._add("rounds", row)

    def _add(self, table: str, row: tuple) -> None:
        rows = self._rows[table]
        rows.append(row)
        if len(rows) == self.BLOCK:
            self._hand_over(table)

    def _hand_over(self, table: str) -> None:
        rows = self._rows[table]
        if rows:
            self._to[table](columns(table, rows))
            rows.clear()

    def close(self) -> None:
        """Hand over what is gathered."""
        for table in self._rows:
            self._hand_over(table)


def engine_for(scenario: Scenario) -> str:
    """The engine that runs ``scenario``: ``auto`` takes the fast one when the algorithm has a fast kernel."""
    if scenario.engine != "auto":
        return scenario.engine
    return "fast" if algorithms.get(scenario.algorithm.name).kernel is not None else "reference"


def run_engine(
    plan: Plan,
    engine: str,
    rows: Callable[[Mapping[str, Any]], None],
    rounds: Callable[[Mapping[str, Any]], None],
    progress: Callable[[int], None] | None = None,
    window: int | None = None,
) -> None:
    """Run ``plan``'s rules on ``engine`` (``fast`` or ``reference``); blocks of recorded iteration rows go to
    ``rows``, blocks of round rows to ``rounds`` (columns). ``window``: the fast engine's first window size."""
    record, scenario = plan.record, plan.scenario
    if engine == "fast":
        assert record.kernel is not None, "the scenario's checks allow the fast engine only with a kernel"
        FastEngine(scenario, rows, rounds, progress, window).run(resolve(record.kernel)(plan.rules))
    else:
        gather = _Gather(rows, rounds)
        reference = Engine(scenario, gather, progress)
        reference.run(record.process(plan.rules, reference))
        gather.close()


def train(
    plan: Plan,
    workload: Any,
    iterations: pd.DataFrame,
    rounds: pd.DataFrame,
    observe: Observer | None = None,
    points: Sequence[int] | None = None,
) -> Iterator[tuple]:
    """The ``evals`` rows of training ``workload`` along a finished schedule of ``plan``'s scenario (its
    ``iterations`` and ``rounds`` tables, simulated or real): the convergence replay with the algorithm's apply,
    evaluated by the scenario's schedule or at ``points`` (iteration counts)."""
    apply, central = plan.record.apply, plan.record.central
    return replay(plan.scenario, plan.rules, apply, workload, iterations, rounds, observe, central, points)


def simulate(
    scenario: Scenario,
    folder: str | Path,
    progress: Callable[[int], None] | None = None,
    tables: tuple[str, ...] = ("iterations", "rounds"),
    replace: str = NEVER,
) -> Path:
    """Run ``scenario`` and write its run folder; returns the folder.

    ``tables``: which of ``iterations`` and ``rounds`` to keep (the summary's tally is always in ``meta.json``, so
    a run too large to keep its tables still has its summary). With a model (``workload.model`` not ``none``) its
    data are made first, ``workload.params`` becomes the model's parameter count (message sizes follow the model),
    and after the engine the model is trained along the schedule (:mod:`.convergence`), its ``evals`` rows
    written as they come. ``replace``: which earlier run ``folder`` may hold (see
    :func:`~stragglerlab.analysis.runfolder.check_replaceable`; by default none).
    """
    workload = None
    if scenario.workload.model != "none":
        workload = load_workload(scenario)
        scenario = scenario.replace(**{"workload.params": workload.dimension})
    engine = engine_for(scenario)
    started = time.perf_counter()
    the_plan = plan(scenario)
    with RunWriter(folder, meta(the_plan, "sim", engine=engine), replace=replace) as writer:
        tally = Tally()
        schedule = Schedule() if workload is not None else None
        sink = _Tables(writer, tables, tally, schedule)
        run_engine(the_plan, engine, sink.iterations, sink.rounds, progress)
        if schedule is not None:
            for row in train(the_plan, workload, *schedule.tables()):
                writer.add("evals", row)
        writer.meta["tally"] = tally.sums
        writer.meta["wall_seconds"] = round(time.perf_counter() - started, 3)
    return Path(folder)
