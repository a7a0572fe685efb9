"""What the plot kinds share: their options, a styled figure, axis labels, and grouping runs by algorithm."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.runfolder import Run
from stragglerlab.analysis.style import COLUMN_WIDTH, PANEL_HEIGHT, RC, TEXT_WIDTH, algorithm_order

#: the most runs a per-run kind (timeline, contributions) draws, one panel each
MOST_PANELS = 4

METRIC_LABELS = {
    "samples_per_s": "throughput [samples/s]",
    "mean_iteration": "mean iteration time [s]",
    "p95_iteration": "95th pct. iteration time [s]",
    "mean_wait": "mean wait [s]",
    "wait_fraction": "wait fraction",
    "fresh_fraction": "fresh fraction",
    "mean_staleness": "mean staleness",
    "makespan": "makespan [s]",
    "time_to_loss": "time to target loss [s]",
    "loss": "loss",
    "accuracy": "accuracy",
}
KEY_LABELS = {
    "cluster.workers": "workers",
    "imbalance.delay": "injected delay [s]",
    "imbalance.slow": "slow workers per iteration",
    "workload.compute.cv": "compute-time CV",
    "workload.compute.mean": "mean compute time [s]",
    "algorithm.group_size": "group size",
}


@dataclass(frozen=True)
class Options:
    """Choices a user can make on the command line; each kind reads the ones it needs."""

    x: str | None = None  # throughput: the scenario key on the x axis (default: the one that varies)
    metric: str | None = None  # throughput, scaling: a summary metric; curves: loss or accuracy
    axis: str = "time"  # curves: time or iterations
    window: tuple[float, float] | None = None  # timeline: seconds; contributions: rounds
    workers: int | None = None  # timeline, contributions: show workers 0 .. workers-1


@contextmanager
def styled() -> Iterator[None]:
    """The paper style of :mod:`stragglerlab.analysis.style`, for drawing and saving."""
    with mpl.rc_context(RC):
        yield


def figure(
    panels: int = 1, wide: bool = False, height: float = PANEL_HEIGHT, sharex: bool = False, columns: int = 1
) -> tuple[Figure, list[Axes]]:
    """A figure one column (or ``wide``: the text) wide, with ``panels`` axes stacked in ``columns`` columns."""
    rows = -(-panels // columns)
    fig = Figure(figsize=(TEXT_WIDTH if wide else COLUMN_WIDTH, height * rows), layout="constrained")
    axes = fig.subplots(rows, columns, sharex=sharex, squeeze=False).ravel().tolist()
    for extra in axes[panels:]:
        extra.remove()
    return fig, axes[:panels]


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric.replace("_", " "))


def key_label(key: str) -> str:
    return KEY_LABELS.get(key, key)


def algorithm_of(run: Run) -> str:
    return run.meta["scenario"]["algorithm"]["name"]


def by_algorithm(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs grouped by algorithm, in legend order."""
    return {a: [r for r in runs if algorithm_of(r) == a] for a in algorithm_order(map(algorithm_of, runs))}


def panel_runs(runs: list[Run], kind: str) -> list[Run]:
    """The runs of a kind that draws one panel per run: at most :data:`MOST_PANELS`."""
    if len(runs) > MOST_PANELS:
        raise UserError(f"--kind {kind} draws one panel per run, at most {MOST_PANELS}; got {len(runs)} runs")
    return runs


def panel_title(run: Run) -> str:
    s = run.meta["scenario"]
    return f"{s['algorithm']['name']}, P = {s['cluster']['workers']}, seed {s['seed']}"
