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
    "throughput": "samples/s (or --metric) against an imbalance or scale key, a series per algorithm, "
    "seeds as error bars",
    "curves": "loss or accuracy against time or iterations, from the runs' evaluations",
    "staleness": "distribution of staleness per algorithm",
    "timeline": "per-worker Gantt chart of compute, wait and communication over a window, rounds marked",
    "scaling": "iteration time (or --metric) against workers on log axes, with the collective's lower bound",
    "contributions": "round x worker map of fresh, stale and missing contributions",
    "validation": "simulated against real runs: iteration-time distributions and the error of the mean",
}
#: file suffixes savefig writes
FORMATS = (".pdf", ".png", ".svg")

__all__ = ["FORMATS", "KINDS", "Options", "draw", "save"]


def draw(kind: str, runs: list[Run], options: Options | None = None) -> Figure:
    """The figure of ``kind`` over ``runs``."""
    if kind not in KINDS:
        raise UserError(f"--kind {kind}: no such plot (kinds: {', '.join(KINDS)})")
    if not runs:
        raise UserError("no runs to plot")
    module = importlib.import_module(f"stragglerlab.analysis.plots.{kind}")
    with styled():
        return module.draw(runs, options or Options())


def save(figure: Figure, path: str | Path) -> Path:
    """Write ``figure`` as PDF, PNG or SVG, chosen by the suffix of ``path``."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise UserError(f"{path}: the file must end in {', '.join(FORMATS)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with styled():
        figure.savefig(path)
    return path
