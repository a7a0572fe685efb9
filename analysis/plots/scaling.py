"""Mean iteration time (or another summary metric) against the number of workers on log axes, one line per
algorithm with seeds as error bars, and two references from the simulated runs' network record: the mean compute
time plus the cost model's allreduce, and plus the collective's lower bound (``meta["network"]``). With
``--metric samples_per_s`` the references become the throughput they allow, ``P * batch / time``."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from stragglerlab.analysis.collection import summary_table
from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.plots.base import Options, figure
from stragglerlab.analysis.plots.throughput import draw_table
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
    fig, (ax,) = figure()
    draw_table(table, metric, WORKERS, ax)
    refs = references(runs)
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
        ax.legend()
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(ScalarFormatter())
    return fig
