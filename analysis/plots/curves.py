"""Loss or accuracy against time or iterations, one line per run, coloured by algorithm (from the evals table);
``--log`` puts the metric on a log axis, ``--by`` draws a panel per value of other keys. Runs that differ in any
other key than the algorithm and the seed are refused: their lines would look alike."""

from __future__ import annotations

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

AXES = {"time": ("t", "time [s]"), "iterations": ("iteration", "iteration")}


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
        ax.set_xlabel(label)
        ax.set_ylabel(metric_label(metric))

    return draw_faceted(runs, options, [], panel, log=options.log)
