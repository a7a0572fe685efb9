"""What the plot kinds share: their options, a styled figure, axis labels and plain ticks, one legend outside the
data, the algorithms' styles, facets by key, and the rule that no key a figure does not show is averaged unseen."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

import matplotlib as mpl
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.colors import is_color_like
from matplotlib.container import Container
from matplotlib.figure import Figure
from matplotlib.markers import MarkerStyle
from matplotlib.ticker import (
    FixedLocator,
    FuncFormatter,
    Locator,
    LogLocator,
    MaxNLocator,
    NullFormatter,
    NullLocator,
)

from stragglerlab.analysis.collection import differing_keys, distinct, keys_of, keys_table
from stragglerlab.analysis.compare import ALGORITHM
from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.runfolder import Run
from stragglerlab.analysis.style import COLUMN_WIDTH, PANEL_HEIGHT, RC, TEXT_WIDTH, Style, assign

#: the most runs a per-run kind (timeline, contributions) draws, one panel each
MOST_PANELS = 4
#: facets side by side before they wrap to the next row
FACET_COLUMNS = 3
#: keys every kind pools on purpose: a run's seed is a repetition of the same experiment
POOLED = ("seed",)
#: where every figure's legend goes: above the panels, outside the data
LEGEND_AT: Final = "outside upper center"

METRIC_LABELS = {
    "samples_per_s": "throughput [samples/s]",
    "raw_samples_per_s": "raw throughput [samples/s]",
    "mean_iteration": "mean iteration time [s]",
    "p95_iteration": "95th pct. iteration time [s]",
    "mean_wait": "mean wait [s]",
    "wait_fraction": "wait fraction",
    "fresh_fraction": "fresh fraction",
    "mean_staleness": "mean staleness",
    "makespan": "makespan [s]",
    "span": "span of the rounds [s]",
    "time_to_loss": "time to target loss [s]",
    "loss": "test loss (averaged model)",
    "accuracy": "test accuracy (averaged model; R² for a regression)",
}
KEY_LABELS = {
    "cluster.workers": "workers",
    "imbalance.delay": "injected delay [s]",
    "imbalance.slow": "slow workers per iteration",
    "workload.compute.cv": "compute-time CV",
    "workload.compute.mean": "mean compute time [s]",
    "algorithm.group_size": "group size",
    "network.allreduce": "allreduce",
}


@dataclass(frozen=True)
class Options:
    """Choices a user can make on the command line; each kind reads the ones it needs."""

    x: str | None = None  # throughput: the scenario key on the x axis (default: the one that varies)
    metric: str | None = None  # throughput, scaling: a summary metric; curves: loss or accuracy
    axis: str = "time"  # curves: time or iterations
    window: tuple[float, float] | None = None  # timeline: seconds; contributions: rounds
    workers: int | None = None  # timeline, contributions: show workers 0 .. workers-1
    by: tuple[str, ...] = ()  # throughput, staleness, scaling, curves: one panel per value of these keys
    log: bool = False  # throughput, curves: the metric on a log axis


@contextmanager
def styled() -> Iterator[None]:
    """The paper style of :mod:`stragglerlab.analysis.style`, for drawing and saving."""
    with mpl.rc_context(RC):
        yield


def figure(
    panels: int = 1,
    wide: bool = False,
    height: float = PANEL_HEIGHT,
    sharex: bool = False,
    columns: int = 1,
    sharey: bool = False,
) -> tuple[Figure, list[Axes]]:
    """A figure one column (or ``wide``: the text) wide, with ``panels`` axes stacked in ``columns`` columns."""
    rows = -(-panels // columns)
    fig = Figure(figsize=(TEXT_WIDTH if wide else COLUMN_WIDTH, height * rows), layout="constrained")
    axes = fig.subplots(rows, columns, sharex=sharex, sharey=sharey, squeeze=False).ravel().tolist()
    for extra in axes[panels:]:
        extra.remove()
    return fig, axes[:panels]


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric.replace("_", " "))


def key_label(key: str) -> str:
    return KEY_LABELS.get(key, key)


def plain(value: float, _position: int | None = None) -> str:
    """A tick label that is the number itself: ``0.5``, ``64``, ``2,000`` (never ``5×10⁻¹``)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.6g}"


def ticks_at(axis: Axis, values: Iterable[float]) -> None:
    """Ticks at exactly these values, labelled plainly (the few values of a scenario key)."""
    axis.set_major_locator(FixedLocator(sorted(values)))
    axis.set_major_formatter(FuncFormatter(plain))
    axis.set_minor_locator(NullLocator())


#: where a log axis may put its ticks within each decade, from the sparsest choice to the densest
LOG_SUBS = ((1.0,), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0), tuple(float(m) for m in range(1, 10)))


def log_ticks(axis: Axis, low: float, high: float) -> None:
    """Plain labels on a log axis over [low, high]: the sparsest of :data:`LOG_SUBS` that puts three ticks in
    view, or evenly spaced ticks where none does (a range within one decade)."""
    locator: Locator
    for subs in LOG_SUBS:
        locator = LogLocator(subs=subs)
        if sum(low <= t <= high for t in locator.tick_values(low, high)) >= 3:
            break
    else:
        locator = MaxNLocator(nbins=4)
    axis.set_major_locator(locator)
    axis.set_major_formatter(FuncFormatter(plain))
    axis.set_minor_formatter(NullFormatter())


def log_y(ax: Axes) -> None:
    """Put ``ax``'s y axis on a log scale with plain labels."""
    ax.set_yscale("log")
    log_ticks(ax.yaxis, *ax.get_ylim())


def legend(fig: Figure, columns: int = 3, order: Iterable[str] = ()) -> None:
    """One legend for the whole figure, above its panels (never over the data): each label drawn, once; the series
    (bars, error bars) before the lines drawn for reference, and the labels in ``order`` first, in that order."""
    rank = {label: i for i, label in enumerate(order)}
    drawn = [entry for ax in fig.axes for entry in zip(*ax.get_legend_handles_labels(), strict=True)]
    drawn.sort(key=lambda entry: (rank.get(entry[1], len(rank)), not isinstance(entry[0], Container)))
    entries: dict[str, Artist] = {}
    for handle, label in drawn:
        entries.setdefault(label, handle)
    if entries:
        fig.legend(list(entries.values()), list(entries), loc=LEGEND_AT, ncols=min(columns, len(entries)))


def algorithm_of(run: Run) -> str:
    return run.meta["scenario"]["algorithm"]["name"]


def style_of(run: Run) -> Style | None:
    """The style a run's ``meta.json`` declares for its algorithm, or None; a malformed one is a one-line error."""
    raw = run.meta.get("style")
    if raw is None:
        return None
    try:
        style = Style(str(raw["colour"]), str(raw["marker"]), float(raw["order"]))
        MarkerStyle(style.marker)
    except (TypeError, KeyError, ValueError):
        style = None
    if style is None or not is_color_like(style.colour):
        raise UserError(
            f"{run.path / 'meta.json'}: style must be "
            f'{{"colour": "#RRGGBB", "marker": a matplotlib marker, "order": a number}}; got {raw}'
        )
    return style


def algorithm_styles(runs: Iterable[Run]) -> dict[str, Style]:
    """Each algorithm's style, in legend order: the one its runs declare, else one given by
    :func:`stragglerlab.analysis.style.assign`."""
    declared: dict[str, Style | None] = {}
    for run in runs:
        name = algorithm_of(run)
        declared[name] = declared.get(name) or style_of(run)
    return assign(declared)


def by_algorithm(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs grouped by algorithm, in legend order."""
    return {a: [r for r in runs if algorithm_of(r) == a] for a in algorithm_styles(runs)}


def series_labels(runs: list[Run]) -> dict[str, str]:
    """Each algorithm's legend label: its name, marked by :func:`marked` over all its runs (so every panel of a
    figure labels it alike)."""
    return {a: marked(a, [r.finished for r in group]) for a, group in by_algorithm(runs).items()}


def marked(label: str, finished: Iterable[bool]) -> str:
    """A series' label, marked when some of its runs did not finish (killed, failed or still running)."""
    flags = [bool(f) for f in finished]
    late = flags.count(False)
    if not late:
        return label
    return f"{label} (unfinished)" if late == len(flags) else f"{label} ({late} of {len(flags)} unfinished)"


def check_shown(runs: list[Run], shown: Iterable[str]) -> None:
    """Refuse runs that differ in a key the figure neither shows (``shown``: its axis, series and facets) nor pools
    on purpose (:data:`POOLED`): their numbers would be averaged, or their lines drawn alike, unseen."""
    skip = {*shown, *POOLED}
    keys = keys_table(runs)
    hidden = [k for k in differing_keys(keys) if k not in skip]
    if hidden:
        differ = "; ".join(f"{k} ({', '.join(map(value_text, distinct(keys[k])))})" for k in hidden)
        raise UserError(
            f"these runs differ in {differ}, which this figure would mix: "
            f"pick runs with --where {hidden[0]}=VALUE or split them with --by {hidden[0]}"
        )


def facets(runs: list[Run], by: Iterable[str]) -> list[tuple[str, list[Run]]]:
    """The runs split by the values of the ``by`` keys, in sorted order, each with its title (one untitled facet of
    every run when ``by`` is empty)."""
    by = list(by)
    if not by:
        return [("", runs)]
    idents = [keys_of(r) for r in runs]
    for key in by:
        if all(key not in ident for ident in idents):
            raise UserError(f"--by {key}: not a key of these runs")
    combos = [tuple(ident.get(k) for k in by) for ident in idents]
    levels = [distinct(c[i] for c in combos) for i in range(len(by))]
    ordered = sorted(set(combos), key=lambda c: [levels[i].index(v) for i, v in enumerate(c)])
    return [
        (
            ", ".join(f"{key_label(k)} = {value_text(v)}" for k, v in zip(by, c, strict=True)),
            [r for r, combo in zip(runs, combos, strict=True) if combo == c],
        )
        for c in ordered
    ]


def value_text(value: object) -> str:
    """A key's value as a title shows it: numbers plainly, lists as ``1-4``, as in a sweep's cell names."""
    if isinstance(value, tuple):
        return "-".join(map(value_text, value))
    return plain(value) if isinstance(value, float) else str(value)


def draw_faceted(
    runs: list[Run],
    options: Options,
    shown: Iterable[str],
    panel: Callable[[Axes, list[Run]], None],
    log: bool = False,
    legend_columns: int = 3,
) -> Figure:
    """A figure of one panel per facet of ``options.by`` (:func:`facets`), sharing the y axis, drawn by ``panel``
    (one column wide for one, else the text width with up to :data:`FACET_COLUMNS` side by side), after
    :func:`check_shown` of the keys a panel shows (the algorithm, ``shown``) and the facets' keys. ``log``: the y
    axis on a log scale. One legend above all."""
    by = list(options.by)
    check_shown(runs, [ALGORITHM, *shown, *by])
    groups = facets(runs, by)
    if len(groups) == 1:
        fig, axes = figure()
    else:
        fig, axes = figure(len(groups), wide=True, columns=min(len(groups), FACET_COLUMNS), sharey=True)
    for ax, (title, group) in zip(axes, groups, strict=True):
        panel(ax, group)
        ax.set_title(title)
        spec = ax.get_subplotspec()
        if spec is not None and not spec.is_first_col():
            ax.set_ylabel("")
    if log:
        for ax in axes:
            log_y(ax)
    legend(fig, legend_columns, series_labels(runs).values())
    return fig


def panel_runs(runs: list[Run], kind: str) -> list[Run]:
    """The runs of a kind that draws one panel per run: at most :data:`MOST_PANELS`."""
    if len(runs) > MOST_PANELS:
        raise UserError(
            f"--kind {kind} draws one panel per run, at most {MOST_PANELS}; got {len(runs)} runs: "
            f"pick some with --where KEY=VALUE (e.g. --where seed={runs[0].meta['scenario']['seed']})"
        )
    return runs


def panel_title(run: Run, runs: list[Run]) -> str:
    """A per-run panel's title: the algorithm, P, the seed and every other key the panels differ in; marked when
    the run did not finish."""
    s = run.meta["scenario"]
    ident = keys_of(run)
    shown = (ALGORITHM, "cluster.workers", "seed")
    others = [k for k in differing_keys(keys_table(runs)) if k not in shown]
    parts = [s["algorithm"]["name"], f"P = {s['cluster']['workers']}", f"seed {s['seed']}"]
    parts += [f"{key_label(k)} = {value_text(ident.get(k))}" for k in others]
    return marked(", ".join(parts), [run.finished])
