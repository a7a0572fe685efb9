"""A round x worker map of one run (a panel per run, up to four): whether each worker's contribution to each round
was fresh (its own current iteration), stale (only older, late iterations) or missing, from the iterations table,
over the rounds of the window that the run has."""

from __future__ import annotations

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.plots.base import LEGEND_AT, Options, figure, panel_runs, panel_title
from stragglerlab.analysis.runfolder import Run
from stragglerlab.analysis.style import CONTRIBUTION_COLOURS

#: rounds and workers shown unless --window and --workers say otherwise
DEFAULT_ROUNDS = 64
DEFAULT_WORKERS = 64
MISSING, STALE, FRESH = 0, 1, 2


def contribution_map(run: Run, rounds: tuple[int, int], workers: int) -> np.ndarray:
    """``(workers, rounds)`` array of :data:`MISSING`, :data:`STALE` or :data:`FRESH` for rounds [first, last)."""
    first, last = rounds
    it = run.iterations
    it = it[(it["round"] >= first) & (it["round"] < last) & (it["worker"] < workers)]
    out = np.full((workers, last - first), MISSING, dtype=np.int8)
    best = it.groupby(["worker", "round"])["fresh"].max()
    w = best.index.get_level_values("worker").to_numpy()
    r = best.index.get_level_values("round").to_numpy() - first
    out[w, r] = np.where(best.to_numpy(), FRESH, STALE)
    return out


def draw(runs: list[Run], options: Options) -> Figure:
    runs = panel_runs(runs, "contributions")
    fig, axes = figure(len(runs), wide=True)
    cmap = ListedColormap(list(CONTRIBUTION_COLOURS.values()))
    for ax, run in zip(axes, runs, strict=True):
        total = int(run.rounds["round"].max()) + 1 if len(run.rounds) else 0
        asked = tuple(int(v) for v in options.window) if options.window else (0, DEFAULT_ROUNDS)
        first, last = max(asked[0], 0), min(asked[1], total)
        if last <= first:
            raise UserError(f"{run.path}: no round in the window {asked[0]}:{asked[1]} (the run has {total} rounds)")
        workers = min(options.workers or DEFAULT_WORKERS, run.meta["scenario"]["cluster"]["workers"])
        ax.imshow(
            contribution_map(run, (first, last), workers),
            cmap=cmap,
            vmin=0,
            vmax=2,
            aspect="auto",
            interpolation="nearest",
            extent=(first - 0.5, last - 0.5, workers - 0.5, -0.5),
        )
        ax.grid(False)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("worker")
        ax.set_title(panel_title(run, runs))
    axes[-1].set_xlabel("round")
    fig.legend(
        handles=[
            Patch(facecolor=c, edgecolor="0.5", linewidth=0.4, label=name) for name, c in CONTRIBUTION_COLOURS.items()
        ],
        ncols=3,
        loc=LEGEND_AT,
    )
    return fig
