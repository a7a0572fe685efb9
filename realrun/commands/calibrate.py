"""``stragglerlab calibrate``: fit the network model and time the workload on this machine (or allocation); write
a scenario fragment (``[network]`` and ``workload.compute``) that ``stragglerlab simulate`` accepts as is.

Run it under ``mpiexec -n P`` / ``srun`` like ``stragglerlab run``, or with ``--np P`` on one machine (P ≥ 2).
The optional scenario names the workload to time and the allreduce algorithm to fit (default: timing only, ring).
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from stragglerlab.analysis.errors import UserError
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
        help="gradient computations timed per rank (default 30)",
    )


def run(args: argparse.Namespace) -> int:
    scenario = (
        load(args.scenario, args.overrides)
        if args.scenario
        else load(text="", name="calibration", overrides=args.overrides)
    )
    if args.np is not None:
        from stragglerlab.realrun.commands.run import launch

        if args.np < 2:
            raise UserError(f"--np {args.np}: calibration needs at least 2 ranks")
        argv = [
            "calibrate",
            *([str(args.scenario)] if args.scenario else []),
            *[x for kv in args.overrides for x in ("--set", kv)],
            "--compute-iterations",
            str(args.compute_iterations),
            *(["-o", str(args.output)] if args.output else []),
        ]
        return subprocess.run(launch(args.np, argv)).returncode
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_size() < 2:
        raise UserError("calibration needs at least 2 ranks: run it under mpiexec -n P or with --np P")
    from stragglerlab.realrun.calibration import calibrate

    text = calibrate(scenario, args.compute_iterations)
    if text is not None:
        if args.output:
            args.output.write_text(text)
            print(args.output)
        else:
            print(text, end="")
    return 0
