"""``stragglerlab validate RUN [RUN...] [--calibration FILE] [--predict OTHER] [-o DIR]``: simulate real runs again
(trace-driven, and out-of-sample with ``--predict``; see :mod:`..validate`), print the errors, write them to
``DIR/validation.csv`` and draw the ``validation`` figure per mode (``DIR/trace.pdf``, ``DIR/out-of-sample.pdf``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from stragglerlab.analysis.compare import ALGORITHM
from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.plots import draw, save
from stragglerlab.analysis.runfolder import load_run
from stragglerlab.realrun.validate import read_calibration, repeats, round_warnings, share_warnings, validate

#: the columns printed (all of them go to the CSV): name -> (column, as a percentage)
SHOWN = {
    "algorithm": (ALGORITHM, False),
    "mean it real [s]": ("mean_iteration_real", False),
    "mean it sim [s]": ("mean_iteration_sim", False),
    "mean err %": ("mean_iteration_error", True),
    "p95 err %": ("p95_iteration_error", True),
    "thru err %": ("throughput_error", True),
    "round real [s]": ("round_time_real", False),
    "round err %": ("round_time_error", True),
    "wait frac real": ("wait_fraction_real", False),
    "wait frac sim": ("wait_fraction_sim", False),
    "KS it": ("ks_iteration", False),
    "KS wait": ("ks_wait", False),
    "TV stale": ("tv_staleness", False),
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="real run folders (stragglerlab run)")
    parser.add_argument(
        "--calibration",
        type=Path,
        metavar="FILE",
        help="a stragglerlab calibrate fragment whose [network] replaces the runs' own",
    )
    parser.add_argument(
        "--predict",
        action="append",
        type=Path,
        default=[],
        metavar="OTHER",
        help="a second real run to predict out of sample from RUN's compute times and network (repeatable)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="K",
        help="RUNs (and OTHERs) are groups of K real runs of one configuration: report each error's mean and its "
        "spread over the K, and how far apart the K runs' own waits lie (written to DIR/repeats.csv)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("validation"),
        metavar="DIR",
        help="where the simulations, validation.csv and the figures go (default ./validation)",
    )


def format_table(table: pd.DataFrame) -> str:
    """The printed table: one row per real run, errors in percent."""
    shown = pd.DataFrame({name: 100 * table[col] if pct else table[col] for name, (col, pct) in SHOWN.items()})
    shown.insert(0, "mode", table["mode"])
    shown.insert(0, "run", [Path(r).name for r in table["run"]])
    return shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")


def format_repeats(table: pd.DataFrame) -> str:
    """The printed table of ``--repeat``: each error as mean ± spread over the repeats, in percent, and how far
    apart the repeats' own waits lie (the KS distance the machine's noise leaves)."""
    shown = pd.DataFrame({"run": [Path(r).name for r in table["run"]], "mode": table["mode"]})
    shown["algorithm"] = table[ALGORITHM]
    for name, col, scale in (
        ("mean err %", "mean_iteration_error", 100),
        ("p95 err %", "p95_iteration_error", 100),
        ("thru err %", "throughput_error", 100),
        ("KS it", "ks_iteration", 1),
        ("KS wait", "ks_wait", 1),
    ):
        pairs = zip(table[col], table[f"{col}_spread"], strict=True)
        shown[name] = [f"{scale * m:.3g} ± {scale * d:.2g}" for m, d in pairs]
    shown["KS wait apart"] = [f"{v:.3g}" for v in table["ks_wait_apart"]]
    return shown.to_string(index=False)


def run(args: argparse.Namespace) -> int:
    if args.repeat < 1:
        raise UserError(f"--repeat {args.repeat}: must be at least 1")
    calibration = read_calibration(args.calibration) if args.calibration else None
    runs = [load_run(p) for p in args.runs]
    table, pairs = validate(runs, args.output, calibration, [load_run(p) for p in args.predict])
    table.to_csv(args.output / "validation.csv", index=False)
    print(format_table(table))
    for line in round_warnings(table) + share_warnings(table):
        print(f"stragglerlab validate: warning: {line}", file=sys.stderr)
    if args.repeat > 1:
        grouped = repeats(table, args.repeat, pairs)
        grouped.to_csv(args.output / "repeats.csv", index=False)
        print(f"over {args.repeat} repeats (mean ± standard deviation):")
        print(format_repeats(grouped))
    for mode, runs in pairs.items():
        if runs:
            print(f"figure ({mode}): {save(draw('validation', runs), args.output / f'{mode}.pdf')}")
    print(f"every metric: {args.output / 'validation.csv'}")
    return 0
