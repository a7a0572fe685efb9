"""Loss or accuracy against time or iterations, one line per run, coloured by algorithm (from the evals table)."""

from __future__ import annotations

from matplotlib.figure import Figure

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.metrics import model_evals
from stragglerlab.analysis.plots.base import Options, algorithm_of, by_algorithm, figure, metric_label
from stragglerlab.analysis.runfolder import Run
from stragglerlab.analysis.style import algorithm_style

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
    fig, (ax,) = figure()
    for algorithm, group in by_algorithm(runs).items():
        colour, _ = algorithm_style(algorithm)
        drawn = [r for r in group if not evals[r.path].empty]
        for i, run in enumerate(drawn):
            ev = evals[run.path]
            ax.plot(
                ev[column],
                ev[metric],
                color=colour,
                alpha=1.0 if len(drawn) == 1 else 0.7,
                label=algorithm_of(run) if i == 0 else "_nolegend_",
            )
    ax.set_xlabel(label)
    ax.set_ylabel(metric_label(metric))
    ax.legend()
    return fig
