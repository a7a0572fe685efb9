"""A per-worker Gantt chart of one run (a panel per run, up to four): compute, wait and communication over a
window, with the completion of each round marked.

A worker's time between posting and release splits at the start of the communication of the round that released
it (the round completing at its ``t_done``): before it the worker waits for others, from it on the collective runs
(from ``t_trigger``: for partial rounds this includes the activation). A worker released without a round completing
then (a late post, a free-running step) has no communication.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from stragglerlab.analysis.plots.base import Options, figure, legend, panel_runs, panel_title
from stragglerlab.analysis.runfolder import Run
from stragglerlab.analysis.style import PANEL_HEIGHT, PHASE_COLOURS

#: workers shown unless --workers says otherwise, and the rounds the default window spans
DEFAULT_WORKERS = 16
DEFAULT_ROUNDS = 8


def phases(run: Run) -> pd.DataFrame:
    """Per worker-iteration: worker, t_start, compute, wait (to the communication) and communication lengths."""
    it, rounds = run.iterations, run.rounds.sort_values("t_done")
    comm_start = it["t_done"].to_numpy(copy=True)
    if len(rounds):
        done, trigger = rounds["t_done"].to_numpy(), rounds["t_trigger"].to_numpy()
        at = np.clip(np.searchsorted(done, it["t_done"].to_numpy()), 0, len(done) - 1)
        released = np.isclose(done[at], it["t_done"].to_numpy(), rtol=0, atol=1e-9)
        comm_start[released] = np.maximum(it["t_post"].to_numpy()[released], trigger[at][released])
    return pd.DataFrame(
        {
            "worker": it["worker"],
            "t_start": it["t_start"],
            "compute": it["compute"],
            "t_post": it["t_post"],
            "wait": comm_start - it["t_post"],
            "comm_start": comm_start,
            "communication": it["t_done"] - comm_start,
        }
    )


def default_window(run: Run) -> tuple[float, float]:
    """From 0 to the completion of the first :data:`DEFAULT_ROUNDS` rounds (or a tenth of the run without rounds);
    several runs share the longest of their windows."""
    done = run.rounds["t_done"].sort_values()
    if len(done):
        return 0.0, float(done.iloc[min(DEFAULT_ROUNDS, len(done)) - 1])
    return 0.0, float(run.iterations["t_done"].max()) / 10


def draw(runs: list[Run], options: Options) -> Figure:
    runs = panel_runs(runs, "timeline")
    fig, axes = figure(len(runs), wide=True, height=PANEL_HEIGHT * 0.9, sharex=True)
    start, end = options.window or max((default_window(r) for r in runs), key=lambda w: w[1])
    for ax, run in zip(axes, runs, strict=True):
        shown = min(options.workers or DEFAULT_WORKERS, run.meta["scenario"]["cluster"]["workers"])
        ph = phases(run)
        ph = ph[
            (ph["worker"] < shown)
            & (ph["t_start"] < end)
            & (ph["t_start"] + ph["compute"] + ph["wait"] + ph["communication"] > start)
        ]
        for name, left in (("compute", "t_start"), ("wait", "t_post"), ("communication", "comm_start")):
            ax.barh(
                ph["worker"],
                ph[name],
                left=ph[left],
                height=0.8,
                color=PHASE_COLOURS[name],
                label=name,
                edgecolor="white",
                linewidth=0.3,
            )
        rounds = run.rounds[(run.rounds["t_done"] >= start) & (run.rounds["t_done"] <= end)]
        ax.vlines(
            rounds["t_done"], -0.5, shown - 0.5, color="0.3", linewidth=0.5, linestyles="dotted", label="round done"
        )
        ax.set_xlim(start, end)
        ax.set_ylim(shown - 0.5, -0.5)  # worker 0 on top, and no tick beyond the last worker shown
        ax.grid(False)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("worker")
        ax.set_title(panel_title(run, runs))
    axes[-1].set_xlabel("time [s]")
    legend(fig, columns=4)
    return fig
