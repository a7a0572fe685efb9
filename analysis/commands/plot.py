"""``stragglerlab plot RUNS... --kind K [-o FILE]``: one paper-style figure from run folders (or folders holding
them, such as a sweep's), written as PDF, PNG or SVG by the file's suffix."""

from __future__ import annotations

import argparse
from pathlib import Path

from stragglerlab.analysis.collection import load_runs
from stragglerlab.analysis.errors import UserError


def _window(text: str) -> tuple[float, float]:
    start, sep, end = text.partition(":")
    try:
        window = float(start), float(end)
    except ValueError:
        window = None
    if not sep or window is None or window[1] <= window[0]:
        raise argparse.ArgumentTypeError(f"{text}: expected START:END with START < END, e.g. 0:2.5")
    return window


def configure(parser: argparse.ArgumentParser) -> None:
    from stragglerlab.analysis.plots import KINDS

    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="run folders, or folders holding run folders (a sweep's output)",
    )
    parser.add_argument("--kind", required=True, choices=KINDS, help="; ".join(f"{k}: {v}" for k, v in KINDS.items()))
    parser.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="the figure: .pdf, .png or .svg (default: <kind>.pdf)"
    )
    parser.add_argument(
        "--x",
        metavar="KEY",
        help="throughput: the scenario key on the x axis (default: the imbalance or scale key that varies)",
    )
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
    from stragglerlab.analysis.plots import Options, draw, save

    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers {args.workers}: must be at least 1")
    runs = load_runs(args.runs)
    options = Options(x=args.x, metric=args.metric, axis=args.axis, window=args.window, workers=args.workers)
    path = save(draw(args.kind, runs, options), args.output or Path(f"{args.kind}.pdf"))
    print(f"{args.kind}: {len(runs)} run{'s' if len(runs) != 1 else ''} -> {path}")
    return 0
