"""``stragglerlab sweep SCENARIO --grid key=v1,v2 [--grid ...] [--seeds N] [-j JOBS] -o DIR``: simulate every cell of
the cross product into ``DIR/<cell>/`` (see :mod:`..sweep` for names, resuming and MPI), then print a summary
per grid point (means across seeds) and write one row per cell to ``DIR/summary.csv``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

from stragglerlab.analysis.collection import summary_table
from stragglerlab.analysis.compare import aggregate
from stragglerlab.analysis.runfolder import load_run
from stragglerlab.simulator.commands import load_scenario, scenario_arguments
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
        type=Path,
        required=True,
        metavar="DIR",
        help="the sweep folder: one run folder per cell; a re-run resumes it",
    )


def format_summary(table: pd.DataFrame, keys: list[str], seeds: int) -> str:
    """One row per grid point (without a grid: one row), the mean of each :data:`SHOWN` metric across seeds."""
    keys = keys or ["name"]
    shown = aggregate(table, keys, list(SHOWN))[[*keys, *(["runs"] if seeds > 1 else []), *SHOWN]]
    return shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")


def run(args: argparse.Namespace) -> int:
    base = load_scenario(args)
    grid = parse_grid(args.grid)
    all_cells = cells(base, grid, args.seeds)
    counts = sweep(all_cells, args.output, max(args.jobs, 1), args.mpi or mpi_world_size() > 1)
    if counts is None:
        return 0  # an MPI rank that served cells; rank 0 reports
    skipped, ran = counts
    table = summary_table([load_run(args.output / c.name) for c in all_cells])
    table.insert(0, "cell", [c.name for c in all_cells])
    table.to_csv(args.output / "summary.csv", index=False)
    print(f"{base.name}: {len(all_cells)} cells ({ran} run, {skipped} already finished) in {args.output}")
    print(format_summary(table, list(grid), args.seeds))
    print(f"one row per cell: {args.output / 'summary.csv'}")
    return 0
