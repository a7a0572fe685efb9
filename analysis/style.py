"""The one paper style of every figure: sizes for a two-column paper, fonts, a colour-blind-safe palette, and the
rule that gives each algorithm its colour, marker and place in legends.

An algorithm's style is its own: each run folder's ``meta.json`` carries it (``"style": {"colour": "#E69F00",
"marker": "s", "order": 1}``), so an algorithm looks the same in every figure without analysis knowing its name.
Algorithms whose runs carry no style (older or hand-made run folders) get one here, from what is left.

No matplotlib here: it is imported by :mod:`.plots`, which applies :data:`RC` around each figure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import cycle
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

#: inches: one column of a two-column paper (ACM / IEEE), and the full text width
COLUMN_WIDTH = 3.4
TEXT_WIDTH = 7.0
#: inches: the height of one panel
PANEL_HEIGHT = 2.3

#: Okabe and Ito's palette (Color Universal Design), distinguishable with every common colour-vision deficiency
OKABE_ITO = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")

#: the markers of algorithms without a style of their own, in the order they are handed out
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")

#: the categories of timelines and contribution maps
PHASE_COLOURS = {"compute": "#56B4E9", "wait": "#E69F00", "communication": "#0072B2"}
CONTRIBUTION_COLOURS = {"missing": "#FFFFFF", "stale": "#E69F00", "fresh": "#009E73"}
#: simulated runs are drawn dashed beside the solid real ones
SOURCE_LINESTYLE = {"real": "-", "sim": "--"}

RC: dict[RcKeyType, Any] = {
    "font.family": "serif",
    "font.serif": ["Times New Roman", "Times", "Nimbus Roman", "DejaVu Serif"],
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,  # the grid behind bars, not across them
    "grid.linewidth": 0.4,
    "grid.alpha": 0.4,
    "lines.linewidth": 1.2,
    "lines.markersize": 4,
    "legend.frameon": False,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
    "savefig.dpi": 300,
    "axes.formatter.useoffset": False,  # tick labels say the value, never "+1e3" beside the axis
    "pdf.fonttype": 42,  # TrueType in PDFs: editable text, accepted by publishers
    "ps.fonttype": 42,
}


@dataclass(frozen=True)
class Style:
    """How an algorithm is drawn: its colour, its marker and its place in legends (smaller first)."""

    colour: str
    marker: str
    order: float


def assign(declared: Mapping[str, Style | None]) -> dict[str, Style]:
    """Every algorithm's style, in legend order. Algorithms with a declared style keep it and come first, by
    ``order`` then name; the others follow in sorted name order, each taking the next of :data:`OKABE_ITO` and of
    :data:`MARKERS` that no declared style uses (all of them again, in turn, once those run out)."""
    styled = sorted(((s.order, name, s) for name, s in declared.items() if s is not None), key=lambda t: t[:2])
    out = {name: s for _, name, s in styled}
    rest = sorted(name for name, s in declared.items() if s is None)
    colours = _left(OKABE_ITO, {s.colour.lower() for s in out.values()})
    markers = _left(MARKERS, {s.marker for s in out.values()})
    last = max((s.order for s in out.values()), default=0)
    for i, name in enumerate(rest, start=1):
        out[name] = Style(next(colours), next(markers), last + i)
    return out


def _left(choices: tuple[str, ...], used: set[str]) -> Iterator[str]:
    """``choices`` not in ``used``, in order, then all of them over and over."""
    free = [c for c in choices if c.lower() not in used]
    yield from free
    yield from cycle(choices)
