"""Simulated against real runs: (a) the distribution of iteration times per algorithm, real solid and simulated
dashed; (b) the relative error of the simulated mean iteration time per algorithm, with the 3 % target of DESIGN §9
shaded. Takes any mix of runs with ``source`` sim and real (``stragglerlab validate`` reuses it)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from stragglerlab.analysis.collection import summary_table
from stragglerlab.analysis.compare import ALGORITHM, sim_vs_real
from stragglerlab.analysis.metrics import iteration_times
from stragglerlab.analysis.plots.base import Options, by_algorithm, figure
from stragglerlab.analysis.runfolder import Run
from stragglerlab.analysis.style import SOURCE_LINESTYLE, algorithm_order, algorithm_style

#: DESIGN §9: the mean iteration time, trace-driven
TARGET_ERROR = 0.03


def draw(runs: list[Run], options: Options) -> Figure:
    errors = sim_vs_real(summary_table(runs), ["mean_iteration"]).set_index(ALGORITHM)
    fig, (cdf, bars) = figure(2, wide=True, columns=2)
    for algorithm, group in by_algorithm(runs).items():
        colour, _ = algorithm_style(algorithm)
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
                    label=f"{algorithm} ({source})",
                )
    cdf.set_xlabel("iteration time [s]")
    cdf.set_ylabel("CDF")
    cdf.legend()
    algorithms = algorithm_order(errors.index)
    error = 100 * errors.loc[algorithms, "mean_iteration_error"]
    bars.axhspan(-100 * TARGET_ERROR, 100 * TARGET_ERROR, color="0.9", label=f"±{100 * TARGET_ERROR:.0f}%")
    bars.bar(range(len(algorithms)), error.fillna(0.0), color=[algorithm_style(a)[0] for a in algorithms])
    bars.axhline(0, color="0.3", linewidth=0.6)
    bars.set_xticks(range(len(algorithms)), algorithms, rotation=20)
    bars.set_ylabel("error of mean iteration time [%]")
    bars.legend()
    return fig
