"""Throughput (or another summary metric) against an imbalance or scale key: one line per algorithm with the
t-interval across seeds as error bars; with no key that varies, one bar per algorithm. ``--by`` draws a panel per
value of other keys; runs that differ in any other key (besides the seed) are refused, never averaged."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from stragglerlab.analysis.collection import distinct, summary_table, varying_keys
from stragglerlab.analysis.compare import ALGORITHM, aggregate
from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.plots.base import (
    Options,
    algorithm_styles,
    draw_faceted,
    key_label,
    log_ticks,
    metric_label,
    series_labels,
    ticks_at,
)
from stragglerlab.analysis.runfolder import Run
from stragglerlab.analysis.style import Style

#: scenario keys tried for the x axis, in this order, when the user names none
PREFERRED_X = ("imbalance.", "cluster.workers", "workload.compute.")
#: a numeric x axis with at most this many values gets a tick at each value
MOST_TICKS = 8
#: a numeric x axis whose values span this factor or more is drawn on a log scale
DECADE = 10


def default_x(table: pd.DataFrame, skip: tuple[str, ...] = ()) -> str | None:
    """The varying key (besides the algorithm and ``skip``) to plot against: imbalance keys first, then scale."""
    keys = [k for k in varying_keys(table) if k != ALGORITHM and k not in skip]
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


def draw_table(
    table: pd.DataFrame,
    metric: str,
    x: str | None,
    ax: Axes,
    styles: dict[str, Style],
    labels: dict[str, str],
    values: list | None = None,
    log_x: bool | None = None,
) -> None:
    """Draw a :func:`stragglerlab.analysis.collection.summary_table` on ``ax``: a series per algorithm of ``styles``
    (in its order, with ``labels``) against ``x``, or a bar each when ``x`` is None. ``values``: the x axis's values
    (default: the table's); ``log_x``: a numeric x on a log scale (default: when its values span :data:`DECADE`)."""
    if metric not in table.columns:
        raise UserError(
            f"--metric {metric}: not a run metric (metrics: samples_per_s, raw_samples_per_s, mean_iteration, "
            "wait_fraction, fresh_fraction, mean_staleness, ...)"
        )
    present = set(table[ALGORITHM])
    if x is None:
        algorithms = list(styles)
        agg = aggregate(table, [ALGORITHM], [metric]).set_index(ALGORITHM)
        shown = [a for a in algorithms if a in present]
        ax.bar(
            [algorithms.index(a) for a in shown],
            agg.loc[shown, metric],
            yerr=error_bars(agg.loc[shown], metric),
            capsize=2,
            ecolor="0.5",  # seen on dark bars and light ones
            color=[styles[a].colour for a in shown],
        )
        ax.set_xticks(range(len(algorithms)), [labels[a] for a in algorithms], rotation=20)
    else:
        values = distinct(table[x]) if values is None else values
        numeric = pd.api.types.is_numeric_dtype(table[x])
        for algorithm in (a for a in styles if a in present):
            agg = aggregate(table[table[ALGORITHM] == algorithm], [x], [metric])
            ax.errorbar(
                agg[x] if numeric else [values.index(v) for v in agg[x]],
                agg[metric],
                yerr=error_bars(agg, metric),
                color=styles[algorithm].colour,
                marker=styles[algorithm].marker,
                capsize=2,
                label=labels[algorithm],
            )
        if not numeric:
            ax.set_xticks(range(len(values)), [str(v) for v in values])
        else:
            spans = values[0] > 0 and values[-1] >= DECADE * values[0]
            if spans if log_x is None else log_x:
                ax.set_xscale("log")
            if len(values) <= MOST_TICKS:
                ticks_at(ax.xaxis, values)
            elif ax.get_xscale() == "log":
                log_ticks(ax.xaxis, values[0], values[-1])
        ax.set_xlabel(key_label(x))
    ax.set_ylabel(metric_label(metric))


def of_runs(table: pd.DataFrame, runs: list[Run]) -> pd.DataFrame:
    """The rows of a summary table that are these runs'."""
    return table[table["run"].isin([str(r.path) for r in runs])]


def draw(runs: list[Run], options: Options) -> Figure:
    table = summary_table(runs)
    x = options.x or default_x(table, options.by)
    if x is not None and x not in table.columns:
        raise UserError(f"--x {x}: not a scenario key of these runs")
    if x in options.by:
        raise UserError(f"--by {x}: it is the x axis already")
    styles, labels = algorithm_styles(runs), series_labels(runs)
    values = distinct(table[x]) if x else None
    metric = options.metric or "samples_per_s"

    def panel(ax: Axes, group: list[Run]) -> None:
        draw_table(of_runs(table, group), metric, x, ax, styles, labels, values)

    return draw_faceted(runs, options, [x] if x else [], panel, log=options.log)
