"""Simulate one scenario into a run folder: the engine, the run-folder writer and the ``meta.json`` record."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from stragglerlab.analysis.metrics import Tally
from stragglerlab.analysis.runfolder import NEVER, RunWriter, columns, iteration_columns
from stragglerlab.simulator.convergence import Schedule, replay
from stragglerlab.simulator.engine import Engine
from stragglerlab.simulator.provenance import meta
from stragglerlab.simulator.scenario import Scenario


class _Tables:
    """Where an engine's rows go: column blocks to the run folder (the tables kept), the summary tally, and the
    convergence replay's schedule when there is a model to train. The reference engine's rows, which come one at
    a time, are gathered into blocks first."""

    BLOCK = 8192

    def __init__(self, writer: RunWriter, keep: tuple[str, ...], tally: Tally, schedule: Schedule | None):
        self.writer, self.keep, self.tally, self.schedule = writer, keep, tally, schedule
        self._rows: dict[str, list[tuple]] = {"iterations": [], "rounds": []}

    def iterations(self, recorded: Mapping[str, Any]) -> None:
        """A block of recorded rows; its arrays may be views the engine reuses, so what is kept is copied."""
        self._iterations(iteration_columns(recorded))

    def _iterations(self, block: dict[str, np.ndarray]) -> None:
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

    # the reference engine's sink interface
    def iteration(self, row: tuple) -> None:
        self._gather("iterations", row)

    def round(self, row: tuple) -> None:
        self._gather("rounds", row)

    def _gather(self, table: str, row: tuple) -> None:
        rows = self._rows[table]
        rows.append(row)
        if len(rows) == self.BLOCK:
            self.close(table)

    def close(self, *tables: str) -> None:
        """Hand over the gathered rows of ``tables`` (default: all)."""
        for table in tables or tuple(self._rows):
            rows = self._rows[table]
            if rows:
                (self._iterations if table == "iterations" else self.rounds)(columns(table, rows))
                rows.clear()


def engine_for(scenario: Scenario) -> str:
    """The engine that runs ``scenario``: ``auto`` takes the fast one when it supports the scenario and numba is
    importable, the reference one otherwise."""
    if scenario.engine != "auto":
        return scenario.engine
    try:
        import numba  # noqa: F401
    except ImportError:
        return "reference"
    from stragglerlab.simulator.fast.engine import supports

    return "fast" if supports(scenario) else "reference"


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
        from stragglerlab.simulator.workloads import load as load_workload

        workload = load_workload(scenario)
        scenario = scenario.replace(**{"workload.params": workload.dimension})
    engine = engine_for(scenario)
    started = time.perf_counter()
    with RunWriter(folder, meta(scenario, "sim", engine=engine), replace=replace) as writer:
        tally = Tally()
        schedule = Schedule() if workload is not None else None
        sink = _Tables(writer, tables, tally, schedule)
        if engine == "fast":
            from stragglerlab.simulator.fast.engine import FastEngine

            FastEngine(scenario, sink.iterations, sink.rounds, progress).run()
        else:
            Engine(scenario, sink, progress).run()
            sink.close()
        if schedule is not None:
            for row in replay(scenario, workload, *schedule.tables()):
                writer.add("evals", row)
        writer.meta["tally"] = tally.sums
        writer.meta["wall_seconds"] = round(time.perf_counter() - started, 3)
    return Path(folder)
