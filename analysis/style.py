"""The one paper style of every figure: sizes for a two-column paper, fonts, a colour-blind-safe palette, and the
rule that gives each algorithm its colour, marker and place in legends.

An algorithm's style is its own: each run folder's ``meta.json`` carries it (``"style": {"colour": "#E69F00",
"marker": "s", "order": 1}``), so an algorithm looks the same in every figure without analysis knowing its name.
Algorithms whose runs carry no style (older or hand-made run folders) get one here, from what is left.

No matplotlib here: it is imported by :mod:`.plots`, which applies :data:`RC` around each figure.
"""

from __future__ import annotations

import math
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

#: the one palette of every figure: Okabe and Ito's colour-blind-safe colours (without their yellow, too light on
#: white, and their vermilion, too near their orange) and others chosen so that any two differ by a CIEDE2000 colour
#: difference (:func:`distance`) of at least :data:`DISTINCT`, so any two algorithms shown together can be told apart
#: (each has a marker of its own as well). Every algorithm's record takes its colour from here; the last two, which
#: none has yet, are for algorithms to come.
PALETTE = (
    "#000000",  # black
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#009E73",  # bluish green
    "#0072B2",  # blue
    "#CC79A7",  # reddish purple
    "#A50026",  # dark red
    "#4B0092",  # violet
    "#994F00",  # brown
    "#555555",  # dark grey
    "#999999",  # grey
    "#999933",  # olive
    "#AA3377",  # wine
    "#7570B3",  # lavender
)
#: the least CIEDE2000 difference between two colours of :data:`PALETTE` (about 2 is just noticeable)
DISTINCT = 18.0

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
    ``order`` then name; the others follow in sorted name order, each taking the next of :data:`PALETTE` and of
    :data:`MARKERS` that no declared style uses (all of them again, in turn, once those run out)."""
    styled = sorted(((s.order, name, s) for name, s in declared.items() if s is not None), key=lambda t: t[:2])
    out = {name: s for _, name, s in styled}
    rest = sorted(name for name, s in declared.items() if s is None)
    colours = _left(PALETTE, {s.colour.lower() for s in out.values()})
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


def lab(colour: str) -> tuple[float, float, float]:
    """The CIELAB coordinates (D65) of a ``#RRGGBB`` colour."""
    linear = [(c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4) for c in _rgb(colour)]
    r, g, b = linear
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    fx, fy, fz = (t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116 for t in (x, y, z))
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def distance(a: str, b: str) -> float:
    """How far apart two ``#RRGGBB`` colours look: CIEDE2000's colour difference (about 2.3 is just noticeable; the
    plain CIELAB distance overrates differences of orange and yellow hues, where orange and vermilion sit)."""
    (l1, a1, b1), (l2, a2, b2) = lab(a), lab(b)
    c_mean = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_mean**7 / (c_mean**7 + 25**7)))
    a1, a2 = a1 * (1 + g), a2 * (1 + g)
    c1, c2 = math.hypot(a1, b1), math.hypot(a2, b2)
    h1, h2 = (math.degrees(math.atan2(y, x)) % 360 if x or y else 0.0 for x, y in ((a1, b1), (a2, b2)))
    dh = 0.0 if c1 * c2 == 0 else (h2 - h1 + 180) % 360 - 180
    dl, dc, dhh = l2 - l1, c2 - c1, 2 * math.sqrt(c1 * c2) * math.sin(math.radians(dh / 2))
    l_mean, c_bar = (l1 + l2) / 2, (c1 + c2) / 2
    h_bar = h1 + h2 if c1 * c2 == 0 else (h1 + h2) / 2 + (180 if abs(h1 - h2) > 180 else 0)
    t = (
        1
        - 0.17 * math.cos(math.radians(h_bar - 30))
        + 0.24 * math.cos(math.radians(2 * h_bar))
        + 0.32 * math.cos(math.radians(3 * h_bar + 6))
        - 0.20 * math.cos(math.radians(4 * h_bar - 63))
    )
    sl = 1 + 0.015 * (l_mean - 50) ** 2 / math.sqrt(20 + (l_mean - 50) ** 2)
    sc, sh = 1 + 0.045 * c_bar, 1 + 0.015 * c_bar * t
    rt = (
        -2
        * math.sqrt(c_bar**7 / (c_bar**7 + 25**7))
        * math.sin(math.radians(60 * math.exp(-(((h_bar - 275) / 25) ** 2))))
    )
    return math.sqrt((dl / sl) ** 2 + (dc / sc) ** 2 + (dhh / sh) ** 2 + rt * (dc / sc) * (dhh / sh))


def _rgb(colour: str) -> tuple[float, float, float]:
    return int(colour[1:3], 16) / 255, int(colour[3:5], 16) / 255, int(colour[5:7], 16) / 255
