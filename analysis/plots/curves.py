"""The averaged model's test loss or accuracy against time or iterations, one line per run, coloured by algorithm
(from the evals table); ``--log`` puts the metric on a log axis, ``--by`` draws a panel per value of other keys. Runs
that differ in any other key than the algorithm and the seed are refused: their lines would look alike.

The x axis ends :data:`TAIL` times past the point where the last run to settle came within :data:`SETTLED` of its
final value (of the way from its first value), or at the end of the longest run if that is sooner: a curve's flat
tail is not what is compared."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.metrics import model_evals
from stragglerlab.analysis.plots.base import (
    Options,
    algorithm_of,
    algorithm_styles,
    draw_faceted,
    metric_label,
    series_labels,
)
from stragglerlab.analysis.runfolder import Run

AXES = {"time": ("t", "simulated time [s]"), "iterations": ("iteration", "iterations per worker")}
#: a run has settled once its metric stays within this share of the way from its first value to its last
SETTLED = 0.02
#: the x axis runs this many times as far as the last run took to settle
TAIL = 1.5


def draw(runs: list[Run], options: Options) -> Figure:
    metric = options.metric or "loss"
    if metric not in ("loss", "accuracy"):
        raise UserError(f"--metric {metric}: curves draw loss or accuracy")
    if options.axis not in AXES:
        raise UserError(f"--axis {options.axis}: curves are against {' or '.join(AXES)}")
    column, label = AXES[options.axis]
    evals = {r.path: model_evals(r) for r in runs}
    if all(e.empty for e in evals.values()):
        raise UserError("these runs have no evaluations (timing-only runs, workload.model = none): nothing to draw")
    styles, labels = algorithm_styles(runs), series_labels(runs)

    def panel(ax: Axes, group: list[Run]) -> None:
        for algorithm, style in styles.items():
            drawn = [r for r in group if algorithm_of(r) == algorithm and not evals[r.path].empty]
            for i, run in enumerate(drawn):
                ev = evals[run.path]
                ax.plot(
                    ev[column],
                    ev[metric],
                    color=style.colour,
                    alpha=1.0 if len(drawn) == 1 else 0.7,
                    label=labels[algorithm] if i == 0 else "_nolegend_",
                )
        shown = [evals[r.path] for r in group if not evals[r.path].empty]
        if shown:
            end = max(float(e[column].max()) for e in shown)
            ax.set_xlim(0, min(end, TAIL * max(settled(e[column], e[metric]) for e in shown)) or None)
        ax.set_xlabel(label)
        ax.set_ylabel(metric_label(metric))

    return draw_faceted(runs, options, [], panel, log=options.log)


def settled(x: pd.Series, y: pd.Series) -> float:
    """The first ``x`` from which ``y`` stays within :data:`SETTLED` of its last value, as a share of the way from
    its first one (its last ``x`` when it never moved)."""
    values = y.to_numpy(dtype=float)
    span = abs(values[-1] - values[0])
    away = np.flatnonzero(np.abs(values - values[-1]) > SETTLED * span) if span > 0 else np.array([], dtype=int)
    at = away[-1] + 1 if len(away) else len(values) - 1
    return float(x.to_numpy(dtype=float)[min(at, len(values) - 1)])
