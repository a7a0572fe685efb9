"""The one paper style of every figure: sizes for a two-column paper, fonts, and a colour-blind-safe palette with a
fixed colour (and marker) per algorithm, so sync is the same black and eager-solo the same orange in every figure.

Plain data only: matplotlib is imported by :mod:`.plots`, which applies :data:`RC` around each figure.
"""

from __future__ import annotations

#: inches: one column of a two-column paper (ACM / IEEE), and the full text width
COLUMN_WIDTH = 3.4
TEXT_WIDTH = 7.0
#: inches: the height of one panel
PANEL_HEIGHT = 2.3

#: Okabe and Ito's palette (Color Universal Design), distinguishable with every common colour-vision deficiency
OKABE_ITO = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")

#: algorithm -> (colour, marker); the baseline is black
ALGORITHM_STYLE: dict[str, tuple[str, str]] = {
    "sync": ("#000000", "o"),
    "eager-solo": ("#E69F00", "s"),
    "eager-majority": ("#56B4E9", "^"),
    "wagma": ("#009E73", "D"),
    "lsgd": ("#CC79A7", "v"),
    "local-sgd": ("#0072B2", "P"),
}
#: the order algorithms appear in legends
ALGORITHM_ORDER = tuple(ALGORITHM_STYLE)

#: the categories of timelines and contribution maps
PHASE_COLOURS = {"compute": "#56B4E9", "wait": "#E69F00", "communication": "#0072B2"}
CONTRIBUTION_COLOURS = {"missing": "#FFFFFF", "stale": "#E69F00", "fresh": "#009E73"}
#: simulated runs are drawn dashed beside the solid real ones
SOURCE_LINESTYLE = {"real": "-", "sim": "--"}

RC = {
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
    "grid.linewidth": 0.4,
    "grid.alpha": 0.4,
    "lines.linewidth": 1.2,
    "lines.markersize": 4,
    "legend.frameon": False,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
    "savefig.dpi": 300,
    "pdf.fonttype": 42,  # TrueType in PDFs: editable text, accepted by publishers
    "ps.fonttype": 42,
}


def algorithm_style(name: str) -> tuple[str, str]:
    """Colour and marker of an algorithm; an unknown name gets a fixed grey rather than failing."""
    return ALGORITHM_STYLE.get(name, ("#999999", "x"))


def algorithm_order(names) -> list[str]:
    """``names`` in the legend order (unknown names last, alphabetically)."""
    known = {n: i for i, n in enumerate(ALGORITHM_ORDER)}
    return sorted(set(names), key=lambda n: (known.get(n, len(known)), n))
