"""``stragglerlab run``: train a scenario for real on MPI ranks and write its run folder (``source = "real"``).

Under ``mpiexec -n P`` or ``srun`` every rank runs this command (one rank per worker; ``cluster.workers`` must equal
P). ``--np P`` starts ``mpiexec -n P`` itself on this machine, with this very command line minus ``--np``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from stragglerlab.analysis.errors import UserError
from stragglerlab.simulator.commands import load_scenario, scenario_arguments


def configure(parser: argparse.ArgumentParser) -> None:
    scenario_arguments(parser, "override a scenario key, e.g. --set algorithm.name=eager-solo (repeatable)")
    parser.add_argument("-o", "--output", type=Path, metavar="DIR", help="run folder (default runs/<name>-real)")
    parser.add_argument("--np", type=int, metavar="P", help="start mpiexec -n P on this machine")
    parser.add_argument(
        "--backend",
        choices=("native", "torch"),
        default="native",
        help="native: every algorithm through the native core and MPI (default); torch: sync "
        "through torch.distributed (gloo on CPU, NCCL on GPU), the usual baseline",
    )
    parser.add_argument(
        "--save-model", type=Path, metavar="FILE", help="rank 0 saves its final model here as a flat float32 .npy"
    )
    parser.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="a rank silent this long is declared lost and the run stops (default 10)",
    )


def mpiexec() -> str:
    """The ``mpiexec`` on PATH, else the one beside the running Python (pip's mpich)."""
    found = (
        os.environ.get("MPIEXEC")
        or shutil.which("mpiexec")
        or shutil.which("mpiexec", path=str(Path(sys.executable).parent))
    )
    if found is None:
        raise UserError("--np needs mpiexec, which is not on PATH (install mpich or an MPI, or run under srun)")
    return found


def launch(np_: int, argv: list[str]) -> list[str]:
    """The mpiexec command running ``stragglerlab argv`` on ``np_`` ranks of this machine. With MPICH's hydra,
    ranks are not killed when one exits, so the survivors' watchdogs can report which rank was lost."""
    command = [mpiexec()]
    version = subprocess.run([command[0], "--version"], capture_output=True, text=True).stdout
    if "HYDRA" in version.upper():
        command.append("-disable-auto-cleanup")
    return [*command, "-n", str(np_), sys.executable, "-m", "stragglerlab.cli", *argv]


def _rank_argv(args: argparse.Namespace, folder: Path) -> list[str]:
    """The command line every rank runs: this one, without ``--np``."""
    source = ["--example", args.example] if args.example else [str(args.scenario)]
    sets = [x for kv in args.overrides for x in ("--set", kv)]
    return [
        "run",
        *source,
        *sets,
        "-o",
        str(folder),
        "--backend",
        args.backend,
        "--heartbeat-timeout",
        str(args.heartbeat_timeout),
        *(["--save-model", str(args.save_model)] if args.save_model else []),
    ]


def _launch_and_watch(np_: int, argv: list[str], folder: Path) -> int:
    """Run the job and wait for it; when it fails, name the rank that died first (:func:`watch_job`)."""
    import socket

    from stragglerlab.realrun.watchdog import watch_job

    proc = subprocess.Popen(launch(np_, argv))
    lost = watch_job(proc, folder, socket.gethostname())
    if proc.returncode != 0 and lost is not None:
        print(
            f"stragglerlab run: error: {lost}; the run stopped (exit status {proc.returncode}), "
            f"{folder} holds what was written",
            file=sys.stderr,
        )
    return proc.returncode or 0


def run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args)
    folder = args.output or Path("runs") / f"{scenario.name}-real"
    if args.np is not None:
        if args.np < 1:
            raise UserError(f"--np {args.np}: needs at least one rank")
        return _launch_and_watch(args.np, _rank_argv(args, folder), folder)
    from mpi4py import MPI

    from stragglerlab.realrun.harness import SharedError, run_rank

    rank = MPI.COMM_WORLD.Get_rank()
    try:
        run_rank(scenario, folder, args.backend, args.heartbeat_timeout, args.save_model)
    except SharedError:
        if rank == 0:
            raise
        return 2  # every rank has it; rank 0 says it
    if rank == 0:
        print(folder)
    return 0
