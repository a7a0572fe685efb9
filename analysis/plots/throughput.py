"""Throughput (or another summary metric) against an imbalance or scale key: one line per algorithm with the
t-interval across seeds as error bars; with no key that varies, one bar per algorithm."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from stragglerlab.analysis.collection import summary_table, varying_keys
from stragglerlab.analysis.compare import ALGORITHM, aggregate
from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.plots.base import Options, figure, key_label, metric_label
from stragglerlab.analysis.runfolder import Run
from stragglerlab.analysis.style import algorithm_order, algorithm_style

#: scenario keys tried for the x axis, in this order, when the user names none
PREFERRED_X = ("imbalance.", "cluster.workers", "workload.compute.")
#: a numeric x axis with at most this many values gets a tick at each value
MOST_TICKS = 8


def default_x(table: pd.DataFrame) -> str | None:
    """The varying key (besides the algorithm) to plot against: imbalance keys first, then scale keys."""
    keys = [k for k in varying_keys(table) if k != ALGORITHM]
    for prefix in PREFERRED_X:
        for k in keys:
            if k.startswith(prefix):
                return k
    return keys[0] if keys else None


def error_bars(agg: pd.DataFrame, metric: str) -> np.ndarray:
    """The (2, n) lower and upper error-bar lengths of an :func:`..compare.aggregate` table (0 for one run)."""
    low = (agg[metric] - agg[f"{metric}_lo"]).fillna(0.0)
    high = (agg[f"{metric}_hi"] - agg[metric]).fillna(0.0)
    return np.vstack([low.to_numpy(), high.to_numpy()])


def draw_table(table: pd.DataFrame, metric: str, x: str | None, ax: Axes) -> None:
    """Draw a :func:`stragglerlab.analysis.collection.summary_table` on ``ax``."""
    if metric not in table.columns:
        raise UserError(
            f"--metric {metric}: not a run metric (metrics: samples_per_s, mean_iteration, wait_fraction, "
            "fresh_fraction, mean_staleness, ...)"
        )
    algorithms = algorithm_order(table[ALGORITHM])
    if x is None:
        agg = aggregate(table, [ALGORITHM], [metric]).set_index(ALGORITHM).loc[algorithms].reset_index()
        ax.bar(
            range(len(agg)),
            agg[metric],
            yerr=error_bars(agg, metric),
            capsize=2,
            color=[algorithm_style(a)[0] for a in algorithms],
        )
        ax.set_xticks(range(len(agg)), algorithms, rotation=20)
    else:
        numeric = pd.api.types.is_numeric_dtype(table[x])
        ticks = sorted(table[x].unique(), key=str) if not numeric else None
        for algorithm in algorithms:
            agg = aggregate(table[table[ALGORITHM] == algorithm], [x], [metric])
            where = agg[x] if numeric else [ticks.index(v) for v in agg[x]]
            colour, marker = algorithm_style(algorithm)
            ax.errorbar(
                where,
                agg[metric],
                yerr=error_bars(agg, metric),
                color=colour,
                marker=marker,
                capsize=2,
                label=algorithm,
            )
        if ticks is not None:
            ax.set_xticks(range(len(ticks)), [str(t) for t in ticks])
        elif table[x].nunique() <= MOST_TICKS:
            ax.set_xticks(sorted(table[x].unique()), [f"{v:g}" for v in sorted(table[x].unique())])
        ax.set_xlabel(key_label(x))
        ax.legend()
    ax.set_ylabel(metric_label(metric))


def draw(runs: list[Run], options: Options) -> Figure:
    table = summary_table(runs)
    x = options.x or default_x(table)
    if x is not None and x not in table.columns:
        raise UserError(f"--x {x}: not a scenario key of these runs")
    fig, (ax,) = figure()
    draw_table(table, options.metric or "samples_per_s", x, ax)
    return fig
