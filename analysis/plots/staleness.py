"""The distribution of staleness per algorithm: grouped bars of the share of worker-iterations at each staleness,
pooled over each algorithm's seeds, with a group "none" for the contributions no round carried (when there are
any). ``--by`` draws a panel per value of other keys; runs that differ in any other key are refused, never pooled."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.metrics import staleness_histogram
from stragglerlab.analysis.plots.base import Options, algorithm_of, algorithm_styles, draw_faceted, series_labels
from stragglerlab.analysis.runfolder import Run

#: with more staleness values than this the axis is ticked at a few of them
MOST_TICKS = 12


def draw(runs: list[Run], options: Options) -> Figure:
    styles, labels = algorithm_styles(runs), series_labels(runs)
    hists = {r.path: staleness_histogram(r) for r in runs}
    seen = pd.concat(list(hists.values())).index
    if not len(seen):
        raise UserError("these runs kept no iterations table (--summary-only, --tables rounds): no staleness to draw")
    values = np.arange(min(int(seen.min()), 0), int(seen.max()) + 1)
    width = 0.8 / len(styles)

    def panel(ax: Axes, group: list[Run]) -> None:
        for i, (algorithm, style) in enumerate(styles.items()):
            mine = [hists[r.path] for r in group if algorithm_of(r) == algorithm]
            if mine:
                hist = pd.concat(mine).groupby(level=0).sum()
                share = hist.reindex(values, fill_value=0) / max(int(hist.sum()), 1)
                offset = (i - (len(styles) - 1) / 2) * width
                ax.bar(values + offset, share, width, color=style.colour, label=labels[algorithm])
        shown = values if len(values) <= MOST_TICKS else np.unique(np.linspace(values[0], values[-1], 7).round())
        ax.set_xticks(shown, ["none" if v < 0 else str(int(v)) for v in shown])
        ax.set_xlabel("staleness [rounds]")
        ax.set_ylabel("share of worker-iterations")

    return draw_faceted(runs, options, [], panel)
