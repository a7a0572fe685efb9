"""``stragglerlab calibrate``: fit the network model and time the workload on this machine (or allocation); write
a scenario fragment (``[network]`` and ``workload.compute``) that ``stragglerlab simulate`` accepts as is.

Run it under ``mpiexec -n P`` / ``srun`` like ``stragglerlab run``, or with ``--np P`` on one machine (P ≥ 2).
The optional scenario names the workload to time and the allreduce algorithm to fit (default: timing only, ring).
With ``-o FILE`` it prints what it measured (the fragment's comments) and where it wrote it, or with ``--json`` the
same as a JSON object; an existing FILE is replaced only with ``--force``.
"""

from __future__ import annotations

import argparse
import subprocess
import tomllib
from pathlib import Path

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.outputs import check_new_file, write_text
from stragglerlab.realrun.calibration import calibrate
from stragglerlab.realrun.commands.run import launch
from stragglerlab.simulator.commands import output_arguments, print_json
from stragglerlab.simulator.scenario import load


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", nargs="?", type=Path, help="scenario whose workload to time (optional)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key, e.g. --set workload.model=torch:cnn (repeatable)",
    )
    parser.add_argument("--np", type=int, metavar="P", help="start mpiexec -n P on this machine (P >= 2)")
    parser.add_argument("-o", "--output", type=Path, metavar="FILE", help="write the fragment here (default: print it)")
    parser.add_argument(
        "--compute-iterations",
        type=int,
        default=30,
        metavar="K",
        help="gradient computations timed per rank (default 30, at least 2)",
    )
    output_arguments(parser, "replace the -o file if it exists")


def report(text: str, output: Path | None, as_json: bool) -> None:
    """What calibrate prints: the fragment itself without ``-o``; else what was measured (the fragment's comments)
    and where it went; with ``as_json`` a JSON object of the fitted values, the notes and the fragment or file."""
    notes = [line[2:] for line in text.splitlines() if line.startswith("# ")]
    if as_json:
        values = tomllib.loads(text)
        where = {"output": str(output)} if output else {"fragment": text}
        print_json({"network": values["network"], "compute": values["workload"]["compute"], "notes": notes, **where})
    elif output:
        print("\n".join(notes))
        print(f"fragment: {output}")
    else:
        print(text, end="")


def run(args: argparse.Namespace) -> int:
    scenario = (
        load(args.scenario, args.overrides)
        if args.scenario
        else load(text="", name="calibration", overrides=args.overrides)
    )
    if args.compute_iterations < 2:
        raise UserError(f"--compute-iterations {args.compute_iterations}: must be at least 2 (a mean and a spread)")
    if args.np is not None:
        if args.np < 2:
            raise UserError(f"--np {args.np}: calibration needs at least 2 ranks")
        if args.output:
            check_new_file(args.output, args.force)
        argv = [
            "calibrate",
            *([str(args.scenario)] if args.scenario else []),
            *[x for kv in args.overrides for x in ("--set", kv)],
            "--compute-iterations",
            str(args.compute_iterations),
            *(["-o", str(args.output)] if args.output else []),
            *(["--force"] if args.force else []),
            *(["--json"] if args.json else []),
        ]
        return subprocess.run(launch(args.np, argv)).returncode
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_size() < 2:
        raise UserError("calibration needs at least 2 ranks: run it under mpiexec -n P or with --np P")
    if args.output:
        try:
            check_new_file(args.output, args.force)
        except UserError:  # every rank sees the same files; rank 0 says it
            if MPI.COMM_WORLD.Get_rank() == 0:
                raise
            return 2
    text = calibrate(scenario, args.compute_iterations)
    if text is not None:
        if args.output:
            write_text(args.output, text)
        report(text, args.output, args.json)
    return 0
