"""``stragglerlab validate RUN [RUN...] [--calibration FILE] [--predict OTHER [--target-loss X]] [-o DIR]``:
simulate real runs again (trace-driven, and out-of-sample with ``--predict``; see :mod:`..validate`), print the
errors, write them to ``DIR/validation.csv`` and draw the ``validation`` figure per mode (``DIR/trace.pdf``,
``DIR/out-of-sample.pdf``).

``--target-loss X`` adds each predicted run's real and predicted time to that test loss (its model trained along the
predicted schedule, :func:`..convergence.time_to_target`). ``--convergence`` instead replays each run's own tables
through the simulator's convergence replay and puts every evaluation beside the run's (:mod:`..convergence`):
``DIR/convergence.csv`` and both loss curves per run in ``DIR/convergence.pdf``."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from stragglerlab.analysis.compare import ALGORITHM
from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.outputs import make_folder, output_path
from stragglerlab.analysis.plots import draw, save
from stragglerlab.analysis.runfolder import Run, load_run
from stragglerlab.realrun import convergence
from stragglerlab.realrun.validate import (
    read_calibration,
    repeats,
    round_warnings,
    run_names,
    share_warnings,
    validate,
)

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
        "--target-loss",
        type=float,
        metavar="X",
        help="with --predict and a model: each OTHER's time to this test loss, real and predicted (its model trained "
        "along the predicted schedule), from its first computation",
    )
    parser.add_argument(
        "--convergence",
        action="store_true",
        help="instead of timings, replay each RUN's own tables through the simulator's convergence replay and compare "
        f"every evaluation (within {convergence.TOLERANCE:g} relative in the loss: float32 rounding); writes "
        "DIR/convergence.csv and DIR/convergence.pdf",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=output_path,
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


def with_time_to_target(table: pd.DataFrame, predicted: list[Run], target: float) -> pd.DataFrame:
    """The out-of-sample rows of ``table`` with each run's real and predicted time to the loss ``target``
    (``predicted``: the real and simulated runs of those rows, in order, as :func:`validate` returns them)."""
    rows = table.index[table["mode"] == "out-of-sample"]
    shared: dict[str, convergence.Schedules] = {}  # repeats of one scenario are predicted alike: train it once
    times = []
    for real, sim in zip(predicted[::2], predicted[1::2], strict=True):
        key = json.dumps([real.meta["scenario"], sim.meta["scenario"]], sort_keys=True)
        if key not in shared:
            shared[key] = convergence.schedules_to_target(real, sim, target)
        times.append(convergence.time_to_target(real, shared[key]))
    extra = pd.DataFrame(times, index=rows)
    return table.join(extra)


def format_time_to_target(table: pd.DataFrame) -> str:
    """The printed table of ``--target-loss``: real and predicted time to the target, and the error in percent."""
    rows = table[table["mode"] == "out-of-sample"]
    shown = pd.DataFrame(
        {
            "run": [Path(r).name for r in rows["run"]],
            "algorithm": rows[ALGORITHM],
            "real [s]": rows["time_to_target_real"],
            "predicted [s]": rows["time_to_target_sim"],
            "over schedules [s]": [
                f"{low:.4g}-{high:.4g}"
                for low, high in zip(rows["time_to_target_sim_low"], rows["time_to_target_sim_high"], strict=True)
            ],
            "err %": 100 * rows["time_to_target_error"],
            "real it": rows["iterations_to_target_real"],
            "predicted it": rows["iterations_to_target_sim"],
        }
    )
    text = shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")
    return (
        f"time to test loss {rows['target_loss'].iloc[0]:g} (out of sample, from the first computation; predicted: "
        f"the median over {convergence.SCHEDULES} simulated schedules, and their least and most):\n{text}"
    )


def check_groups(runs: list[Run], k: int, mode: str) -> None:
    """``--repeat k``, before any run is simulated: ``runs`` (those of one mode, in order) fall into groups of ``k``
    repeats of one algorithm each."""
    if len(runs) % k:
        raise UserError(f"--repeat {k}: {len(runs)} {mode} runs are not groups of {k} repeats")
    for first in range(0, len(runs), k):
        names = list(
            dict.fromkeys(
                str(r.meta.get("scenario", {}).get("algorithm", {}).get("name")) for r in runs[first : first + k]
            )
        )
        if len(names) > 1:
            raise UserError(f"--repeat {k}: one group of repeats mixes {', '.join(names)}")


def replay(args: argparse.Namespace) -> int:
    """``--convergence``: every run's evaluations against the replay of its tables."""
    if args.calibration or args.predict or args.repeat != 1 or args.target_loss is not None:
        raise UserError(
            "--convergence replays each run's own tables: it takes no --calibration, --predict, --repeat or "
            "--target-loss"
        )
    runs = [load_run(p) for p in args.runs]
    table = pd.concat([convergence.compare(r, name) for r, name in zip(runs, run_names(runs), strict=True)])
    make_folder(args.output)
    table.to_csv(args.output / "convergence.csv", index=False)
    worst = table.groupby("run", sort=False)["loss_error"].max()
    agree = convergence.agrees(table)
    algorithm = {name: r.meta["scenario"]["algorithm"]["name"] for r, name in zip(runs, run_names(runs), strict=True)}
    shown = pd.DataFrame(
        {
            "run": worst.index,
            "algorithm": [algorithm[name] for name in worst.index],
            "evaluations": table.groupby("run", sort=False).size().to_numpy(),
            "largest loss difference (relative)": [f"{v:.2e}" for v in worst],
            f"within {convergence.TOLERANCE:g}": ["yes" if agree[name] else "NO" for name in worst.index],
        }
    )
    print(shown.to_string(index=False))
    print(f"figure: {save(convergence.draw(table), args.output / 'convergence.pdf')}")
    print(f"every evaluation: {args.output / 'convergence.csv'}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.convergence:
        return replay(args)
    if args.repeat < 1:
        raise UserError(f"--repeat {args.repeat}: must be at least 1")
    if args.target_loss is not None and not args.predict:
        raise UserError("--target-loss: the time to a loss is predicted out of sample; give --predict OTHER")
    if args.target_loss is not None and not math.isfinite(args.target_loss):
        raise UserError(f"--target-loss {args.target_loss}: must be a finite number")
    calibration = read_calibration(args.calibration) if args.calibration else None
    runs = [load_run(p) for p in args.runs]
    predicted = [load_run(p) for p in args.predict]
    for mode, group in (("trace-driven", runs), ("out-of-sample", predicted)):
        check_groups(group, args.repeat, mode)
    table, pairs = validate(runs, args.output, calibration, predicted)
    if args.target_loss is not None:
        table = with_time_to_target(table, pairs["out-of-sample"], args.target_loss)
    table.to_csv(args.output / "validation.csv", index=False)
    print(format_table(table))
    if args.target_loss is not None:
        print(format_time_to_target(table))
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
