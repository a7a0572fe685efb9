"""The distribution of staleness per algorithm: grouped bars of the share of carried contributions at each
staleness, pooled over each algorithm's runs (contributions no round carried are left out and counted in the
legend)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from stragglerlab.analysis.metrics import staleness_histogram
from stragglerlab.analysis.plots.base import Options, by_algorithm, figure
from stragglerlab.analysis.runfolder import Run
from stragglerlab.analysis.style import algorithm_style


def draw(runs: list[Run], options: Options) -> Figure:
    pooled = {
        a: pd.concat([staleness_histogram(r) for r in group]).groupby(level=0).sum()
        for a, group in by_algorithm(runs).items()
    }
    values = np.arange(max(int(h.index.max()) if len(h) else 0 for h in pooled.values()) + 1)
    width = 0.8 / len(pooled)
    fig, (ax,) = figure()
    for i, (algorithm, hist) in enumerate(pooled.items()):
        carried = hist[hist.index >= 0]
        share = carried.reindex(values, fill_value=0) / max(int(carried.sum()), 1)
        lost = hist.get(-1, 0) / max(int(hist.sum()), 1)
        label = f"{algorithm} ({100 * lost:.0f}% not carried)" if lost else algorithm
        ax.bar(
            values + (i - (len(pooled) - 1) / 2) * width, share, width, color=algorithm_style(algorithm)[0], label=label
        )
    ax.set_xlabel("staleness [rounds]")
    ax.set_ylabel("share of contributions")
    ax.set_xticks(values if len(values) <= 12 else np.linspace(0, values[-1], 7).round().astype(int))
    ax.legend()
    return fig
