"""Simulate one scenario into a run folder: the engine, the run-folder writer and the ``meta.json`` record."""

from __future__ import annotations

import platform
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from analysis.runfolder import RunWriter
from simulator.convergence import Schedule, replay
from simulator.engine import Engine
from simulator.network import NetworkModel, message_bytes
from simulator.scenario import Scenario, to_dict


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for package in ("stragglerlab", "numpy", "pandas", "pyarrow", "simpy"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


def network_record(scenario: Scenario) -> dict[str, float]:
    """The cost model's figures for this scenario, reported beside the simulated rounds."""
    net, n, P = NetworkModel.of(scenario), message_bytes(scenario), scenario.workers
    return {"message_bytes": n, "activation": net.activation(P), "allreduce": net.allreduce(P, n),
            "lower_bound": net.lower_bound(P, n)}


class _Sink:
    """Rows to the run folder, and to the convergence replay's schedule when there is a model to train."""

    def __init__(self, writer: RunWriter, schedule: Schedule | None):
        self.writer, self.schedule = writer, schedule

    def iteration(self, row: tuple) -> None:
        self.writer.add("iterations", row)
        if self.schedule is not None:
            self.schedule.iteration(row)

    def round(self, row: tuple) -> None:
        self.writer.add("rounds", row)
        if self.schedule is not None:
            self.schedule.round(row)


def simulate(scenario: Scenario, folder: str | Path, progress: Callable[[int], None] | None = None) -> Path:
    """Run ``scenario`` on the reference engine and write its run folder; returns the folder.

    With a model (``workload.model`` not ``none``) its data are made first, ``workload.params`` becomes the model's
    parameter count (message sizes follow the model), and after the engine the model is trained along the schedule
    (:mod:`simulator.convergence`), its ``evals`` rows written as they come.
    """
    workload = None
    if scenario.workload.model != "none":
        from simulator.workloads import load as load_workload

        workload = load_workload(scenario)
        scenario = scenario.replace(**{"workload.params": workload.dimension})
    meta = {
        "source": "sim",
        "engine": "reference",
        "scenario": to_dict(scenario),
        "seed": scenario.seed,
        "network": network_record(scenario),
        "versions": versions(),
        "host": socket.gethostname(),
        "start_time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    started = time.perf_counter()
    with RunWriter(folder, meta) as writer:
        schedule = Schedule() if workload is not None else None
        Engine(scenario, _Sink(writer, schedule), progress).run()
        if schedule is not None:
            for row in replay(scenario, workload, *schedule.tables()):
                writer.add("evals", row)
        writer.meta["wall_seconds"] = round(time.perf_counter() - started, 3)
    return Path(folder)
