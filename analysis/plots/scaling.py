"""Mean iteration time (or another summary metric) against the number of workers on log axes, one line per
algorithm with seeds as error bars, and two references from the simulated runs' network record: the mean compute
time plus the cost model's allreduce, and plus the collective's lower bound (``meta["network"]``). With
``--metric samples_per_s`` the references become the throughput they allow, ``P * batch / time``. ``--by`` draws a
panel per value of other keys (each with its own references); runs that differ in any other key are refused."""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from stragglerlab.analysis.collection import distinct, summary_table
from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.plots.base import Options, algorithm_styles, draw_faceted, series_labels
from stragglerlab.analysis.plots.throughput import draw_table, of_runs
from stragglerlab.analysis.runfolder import Run

WORKERS = "cluster.workers"
REFERENCES = {"allreduce": ("compute + allreduce (model)", ":"), "lower_bound": ("compute + lower bound", "--")}


def references(runs: list[Run]) -> pd.DataFrame:
    """Per worker count: the mean compute time and the network record's allreduce and lower bound (simulated runs)."""
    rows = [
        {
            WORKERS: r.meta["scenario"]["cluster"]["workers"],
            "batch": r.meta["scenario"]["workload"]["batch"],
            "compute": float(r.iterations["compute"].mean()),
            **{k: r.meta["network"][k] for k in REFERENCES},
        }
        for r in runs
        if "network" in r.meta
    ]
    return pd.DataFrame(rows).groupby(WORKERS).mean().reset_index() if rows else pd.DataFrame()


def draw(runs: list[Run], options: Options) -> Figure:
    table = summary_table(runs)
    metric = options.metric or "mean_iteration"
    if table[WORKERS].nunique() < 2:
        raise UserError("scaling needs runs at two or more worker counts (cluster.workers)")
    if WORKERS in options.by:
        raise UserError(f"--by {WORKERS}: it is the x axis already")
    styles, labels = algorithm_styles(runs), series_labels(runs)
    values = distinct(table[WORKERS])

    def panel(ax: Axes, group: list[Run]) -> None:
        draw_table(of_runs(table, group), metric, WORKERS, ax, styles, labels, values, log_x=True)
        refs = references(group)
        if metric in ("mean_iteration", "samples_per_s") and not refs.empty:
            for key, (label, style) in REFERENCES.items():
                t = refs["compute"] + refs[key]
                ax.plot(
                    refs[WORKERS],
                    refs[WORKERS] * refs["batch"] / t if metric == "samples_per_s" else t,
                    color="0.4",
                    linestyle=style,
                    linewidth=0.8,
                    label=label,
                )

    return draw_faceted(runs, options, [WORKERS], panel, log=True, legend_columns=2)
