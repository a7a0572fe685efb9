"""Paper-style figures from run folders, one module per kind; :func:`draw` makes one and :func:`save` writes it.

Every kind is ``draw(runs, options) -> Figure`` over loaded runs (simulated and real alike), drawn without pyplot
(``matplotlib.figure.Figure`` and the Agg-family canvases: no global state, no display) in the style of
:mod:`stragglerlab.analysis.style`. matplotlib is imported by this package only, never by ``import analysis``.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from matplotlib.figure import Figure

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.plots.base import Options, styled
from stragglerlab.analysis.runfolder import Run

#: kind -> what it shows (the module ``stragglerlab.analysis.plots.<kind>`` draws it)
KINDS: dict[str, str] = {
    "throughput": "applied samples/s (or --metric) against an imbalance or scale key, a series per algorithm, "
    "seeds as error bars",
    "curves": "loss or accuracy against time or iterations, from the runs' evaluations",
    "staleness": "distribution of staleness per algorithm",
    "timeline": "per-worker Gantt chart of compute, wait and communication over a window, rounds marked",
    "scaling": "iteration time (or --metric) against workers on log axes, with the collective's lower bound",
    "contributions": "round x worker map of fresh, stale and missing contributions",
    "validation": "simulated against real runs: iteration-time distributions and the error of the mean",
}
#: the kinds that draw a panel per value of --by, and those that take --log
BY_KINDS = ("throughput", "staleness", "scaling", "curves")
LOG_KINDS = ("throughput", "curves")
#: file suffixes savefig writes
FORMATS = (".pdf", ".png", ".svg")

__all__ = ["BY_KINDS", "FORMATS", "KINDS", "LOG_KINDS", "Options", "draw", "save"]


def draw(kind: str, runs: list[Run], options: Options | None = None) -> Figure:
    """The figure of ``kind`` over ``runs``."""
    if kind not in KINDS:
        raise UserError(f"--kind {kind}: no such plot (kinds: {', '.join(KINDS)})")
    if not runs:
        raise UserError("no runs to plot")
    options = options or Options()
    if options.by and kind not in BY_KINDS:
        raise UserError(f"--by: only {', '.join(BY_KINDS)} split runs into panels; pick runs with --where KEY=VALUE")
    if options.log and kind not in LOG_KINDS:
        raise UserError(f"--log: only for {', '.join(LOG_KINDS)} (scaling is always on log axes)")
    module = importlib.import_module(f"stragglerlab.analysis.plots.{kind}")
    with styled():
        return module.draw(runs, options)


def save(figure: Figure, path: str | Path) -> Path:
    """Write ``figure`` as PDF, PNG or SVG, chosen by the suffix of ``path`` (making its folder); a path that
    cannot be written is a one-line error."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise UserError(f"{path}: the file must end in {', '.join(FORMATS)}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with styled():
            figure.savefig(path)
    except OSError as err:
        raise UserError(f"{path}: cannot write the figure ({err.strerror or err})") from None
    return path
