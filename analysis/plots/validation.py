"""Simulated against real runs: (a) the distribution of iteration times per algorithm, real solid and simulated
dashed; (b) the relative error of the simulated mean iteration time per algorithm, with validation's targets
shaded: ±2 % for a trace-driven simulation (darker), ±5 % out of sample, each bar labelled with its value (one near
0 is otherwise invisible). Takes any mix of runs with ``source``
sim and real (``stragglerlab validate`` reuses it)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from stragglerlab.analysis.collection import summary_table
from stragglerlab.analysis.compare import ALGORITHM, VALIDATION_TARGETS, sim_vs_real
from stragglerlab.analysis.metrics import iteration_times
from stragglerlab.analysis.plots.base import Options, algorithm_styles, by_algorithm, figure, legend, marked
from stragglerlab.analysis.runfolder import Run
from stragglerlab.analysis.style import SOURCE_LINESTYLE


def draw(runs: list[Run], options: Options) -> Figure:
    errors = sim_vs_real(summary_table(runs), ["mean_iteration"]).set_index(ALGORITHM)
    styles = algorithm_styles(runs)
    fig, (cdf, bars) = figure(2, wide=True, columns=2)
    for algorithm, group in by_algorithm(runs).items():
        colour = styles[algorithm].colour
        for source, style in SOURCE_LINESTYLE.items():
            mine = [r for r in group if r.meta.get("source", "sim") == source]
            if mine:
                times = np.sort(pd.concat([iteration_times(r) for r in mine]).to_numpy())
                cdf.plot(
                    times,
                    np.arange(1, len(times) + 1) / len(times),
                    color=colour,
                    linestyle=style,
                    drawstyle="steps-post",
                    label=marked(f"{algorithm} ({source})", [r.finished for r in mine]),
                )
    cdf.set_xlabel("iteration time [s]")
    cdf.set_ylabel("CDF")
    algorithms = [a for a in styles if a in errors.index]
    error = 100 * errors.loc[algorithms, "mean_iteration_error"]
    widest_first = sorted(VALIDATION_TARGETS.items(), key=lambda kv: -kv[1])
    for (mode, target), shade in zip(widest_first, ("0.93", "0.82"), strict=True):
        bars.axhspan(-100 * target, 100 * target, color=shade, label=f"±{100 * target:.0f}% ({mode})")
    drawn = bars.bar(range(len(algorithms)), error.fillna(0.0), color=[styles[a].colour for a in algorithms])
    bars.bar_label(drawn, ["n/a" if e != e else f"{e:+.1f}" for e in error], fontsize=6, padding=1)
    bars.axhline(0, color="0.3", linewidth=0.6)
    bars.set_xticks(range(len(algorithms)), algorithms, rotation=20)
    bars.set_title("error of the simulated mean iteration time")
    bars.set_ylabel("error [%]")
    legend(fig)
    return fig
