"""``stragglerlab plot RUNS... --kind K [-o FILE]``: one paper-style figure from run folders (or folders holding
them, such as a sweep's), written as PDF, PNG or SVG by the file's suffix. ``--where`` picks runs by their keys,
and unfinished runs are plotted with a warning (and marked in the figure)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from stragglerlab.analysis.collection import load_runs, select
from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.outputs import output_path
from stragglerlab.analysis.plots import KINDS, Options, draw, save

#: unfinished runs named in the warning before "..."
NAMED = 3


def _window(text: str) -> tuple[float, float]:
    start, sep, end = text.partition(":")
    try:
        window = float(start), float(end)
    except ValueError:
        window = None
    if not sep or window is None or not (-math.inf < window[0] < window[1] < math.inf):
        raise argparse.ArgumentTypeError(f"{text}: expected START:END, finite, with START < END, e.g. 0:2.5")
    return window


def _condition(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise argparse.ArgumentTypeError(f"{text}: expected KEY=VALUE, e.g. imbalance.delay=0.32")
    return key.strip(), value.strip()


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="run folders, or folders holding run folders (a sweep's output)",
    )
    parser.add_argument("--kind", required=True, choices=KINDS, help="; ".join(f"{k}: {v}" for k, v in KINDS.items()))
    parser.add_argument(
        "-o", "--output", type=output_path, metavar="FILE", help="the figure: .pdf, .png or .svg (default: <kind>.pdf)"
    )
    parser.add_argument(
        "--x",
        metavar="KEY",
        help="throughput: the scenario key on the x axis (default: the imbalance or scale key that varies)",
    )
    parser.add_argument(
        "--where",
        type=_condition,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="plot only the runs whose KEY (a scenario key, seed or source) is VALUE; repeat for more keys "
        "(all must hold) or values of one key (any may)",
    )
    parser.add_argument(
        "--by",
        action="append",
        default=[],
        metavar="KEY",
        help="throughput, staleness, scaling, curves: one panel per value of KEY (repeatable); "
        "runs differing in a key that is neither shown nor split by are refused, never averaged",
    )
    parser.add_argument("--log", action="store_true", help="throughput, curves: the metric on a log axis")
    parser.add_argument(
        "--metric",
        help="throughput, scaling: a run metric (samples_per_s, mean_iteration, "
        "wait_fraction, ...); curves: loss or accuracy",
    )
    parser.add_argument("--axis", choices=("time", "iterations"), default="time", help="curves: the x axis")
    parser.add_argument(
        "--window",
        type=_window,
        metavar="START:END",
        help="timeline: seconds (default: the first rounds); contributions: rounds",
    )
    parser.add_argument("--workers", type=int, metavar="N", help="timeline, contributions: show workers 0..N-1")


def run(args: argparse.Namespace) -> int:
    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers {args.workers}: must be at least 1")
    runs = load_runs(args.runs)
    if args.where:
        where: dict[str, list[str]] = {}
        for key, value in args.where:
            where.setdefault(key, []).append(value)
        runs = select(runs, where)
    late = [str(r.path) for r in runs if not r.finished]
    if late:
        named = ", ".join(late[:NAMED]) + (", ..." if len(late) > NAMED else "")
        print(
            f"stragglerlab plot: warning: {len(late)} of {len(runs)} runs did not finish (killed, failed or still "
            f"running), marked unfinished in the figure: {named}",
            file=sys.stderr,
        )
    options = Options(
        x=args.x,
        metric=args.metric,
        axis=args.axis,
        window=args.window,
        workers=args.workers,
        by=tuple(args.by),
        log=args.log,
    )
    path = save(draw(args.kind, runs, options), args.output or Path(f"{args.kind}.pdf"))
    print(f"{args.kind}: {len(runs)} run{'s' if len(runs) != 1 else ''} -> {path}")
    return 0
