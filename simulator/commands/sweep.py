"""``stragglerlab sweep SCENARIO --grid key=v1,v2 [--grid ...] [--seeds N] [-j JOBS] -o DIR``: simulate every cell of
the cross product into ``DIR/<cell>/`` (see :mod:`..sweep` for names, resuming and MPI), then print a summary
per grid point (means across seeds), with ``--baseline ALG`` the speedups over ALG per grid point (paired by seed,
95 % t-intervals), and write one row per cell to ``DIR/summary.csv``. ``--json`` prints all of it as one JSON
object."""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd

from stragglerlab.analysis.collection import summary_table
from stragglerlab.analysis.compare import ALGORITHM, aggregate, speedup
from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.outputs import output_path
from stragglerlab.analysis.runfolder import load_run
from stragglerlab.simulator.commands import load_scenario, output_arguments, print_json, scenario_arguments
from stragglerlab.simulator.estimate import check, combined, estimate
from stragglerlab.simulator.run import engine_for
from stragglerlab.simulator.scenario import ALGORITHMS
from stragglerlab.simulator.sweep import cells, mpi_world_size, parse_grid, sweep

#: the metrics of the printed summary
SHOWN = ("samples_per_s", "mean_iteration", "wait_fraction", "mean_staleness", "fresh_fraction")


def configure(parser: argparse.ArgumentParser) -> None:
    scenario_arguments(parser, "override a scenario key for every cell (repeatable)")
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="a scenario key and its values (repeatable: the cross product), e.g. "
        "--grid algorithm.name=sync,eager-solo --grid cluster.workers=64,256",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="seeds per grid point: the scenario's seed + 0 .. N-1 (default 1)",
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        metavar="JOBS",
        help="processes running cells at once (default: the CPU count; ignored under MPI)",
    )
    parser.add_argument(
        "--mpi", action="store_true", help="run cells on MPI ranks (automatic under mpiexec with more than one rank)"
    )
    parser.add_argument(
        "-o",
        "--output",
        type=output_path,
        required=True,
        metavar="DIR",
        help="the sweep folder: one run folder per cell; a re-run resumes it",
    )
    parser.add_argument(
        "--baseline",
        metavar="ALGO",
        choices=ALGORITHMS,
        help="print each algorithm's speedup in samples/s over this one per grid point, paired by seed, with 95%% "
        "t-intervals (needs algorithm.name in --grid)",
    )
    output_arguments(
        parser,
        "replace a cell's simulated run of another scenario (a real run is never replaced); run even when the "
        "estimated memory exceeds what the machine has",
    )


def _as_given(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``frame`` with the grid keys' columns as text, each number as Python writes it (the shortest form that reads
    back the same: 1e-10 and 8e-11 stay apart), so a table's rounding of its metrics never merges grid values."""
    frame = frame.copy()
    for key in keys:
        if key in frame:
            frame[key] = [repr(float(v)) if isinstance(v, float) else str(v) for v in frame[key]]
    return frame


def format_summary(table: pd.DataFrame, keys: list[str], seeds: int) -> str:
    """One row per grid point (without a grid: one row), the mean of each :data:`SHOWN` metric across seeds."""
    keys = keys or ["name"]
    shown = aggregate(table, keys, list(SHOWN))[[*keys, *(["runs"] if seeds > 1 else []), *SHOWN]]
    return _as_given(shown, keys).to_string(index=False, float_format=lambda v: f"{v:.4g}")


def speedup_table(table: pd.DataFrame, keys: list[str], baseline: str) -> pd.DataFrame:
    """Speedups in samples/s over ``baseline`` per grid point (the grid keys but the algorithm), paired by seed."""
    by = [k for k in keys if k != ALGORITHM]
    return speedup(table, baseline, "samples_per_s", by)


def format_speedups(speedups: pd.DataFrame, keys: list[str]) -> str:
    """The speedups with their intervals to three decimals, the grid ``keys`` as given."""
    shown = _as_given(speedups.drop(columns=["low", "high"]), keys)
    shown["95% interval"] = [
        f"[{lo:.3f}, {hi:.3f}]" if lo == lo else "-" for lo, hi in zip(speedups["low"], speedups["high"], strict=True)
    ]
    return shown.to_string(index=False, float_format=lambda v: f"{v:.3f}")


def run(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise UserError(f"-j {args.jobs}: must be at least 1 (processes running cells at once)")
    base = load_scenario(args)
    grid = parse_grid(args.grid)
    all_cells = cells(base, grid, args.seeds)
    algorithms = {c.scenario.algorithm.name for c in all_cells}
    if args.baseline and (ALGORITHM not in grid or args.baseline not in algorithms):
        raise UserError(
            f"--baseline {args.baseline}: needs a grid over algorithm.name that includes it, "
            f"e.g. --grid algorithm.name={args.baseline},eager-solo"
        )
    mpi = args.mpi or mpi_world_size() > 1
    need = combined([estimate(c.scenario, engine_for(c.scenario)) for c in all_cells], 1 if mpi else args.jobs)
    note = check(f"sweep of {len(all_cells)} cells", need, args.force)
    if note:
        print(note, file=sys.stderr)
    counts = sweep(all_cells, args.output, args.jobs, mpi, force=args.force)
    if counts is None:
        return 0  # an MPI rank that served cells; rank 0 reports
    skipped, ran = counts
    table = summary_table([load_run(args.output / c.name) for c in all_cells])
    table.insert(0, "cell", [c.name for c in all_cells])
    csv = args.output / "summary.csv"
    table.to_csv(csv, index=False)
    keys = list(grid) or ["name"]
    speedups = speedup_table(table, list(grid), args.baseline) if args.baseline else None
    if args.json:
        points = aggregate(table, keys, list(SHOWN))
        print_json(
            {
                "scenario": base.name,
                "folder": str(args.output),
                "cells": len(all_cells),
                "ran": ran,
                "skipped": skipped,
                "points": points.to_dict(orient="records"),
                "baseline": args.baseline,
                "speedups": [] if speedups is None else speedups.to_dict(orient="records"),
                "summary_csv": str(csv),
            }
        )
        return 0
    print(f"{base.name}: {len(all_cells)} cells ({ran} run, {skipped} already finished) in {args.output}")
    print(format_summary(table, list(grid), args.seeds))
    if speedups is not None:
        print(f"speedup in samples/s over {args.baseline} (geometric mean over seeds, 95% t-interval):")
        print(format_speedups(speedups, list(grid)))
    print(f"one row per cell: {csv}")
    return 0
