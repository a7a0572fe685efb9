"""``stragglerlab run``: train a scenario for real on MPI ranks and write its run folder (``source = "real"``).

Under ``mpiexec -n P`` or ``srun`` every rank runs this command (one rank per worker; ``cluster.workers`` must equal P).
``--np P`` starts ``mpiexec -n P`` itself on this machine, with this very command line minus ``--np``; outside any MPI
launcher, without ``--np``, it starts ``cluster.workers`` ranks so, first estimating their memory (:mod:`..footprint`):
ranks that would need more than the machine has are refused unless ``--force``. Rank 0 prints the summary ``simulate``
prints; however the job ends (Ctrl-C and a kill included) no rank is left, the run folder holds no ``.live/``, and the
launcher's termination banner is kept off the output (the command says what happened in one line). The default
folder ``runs/<name>-real`` becomes ``-real-2``, ... when it exists; a named one holding a simulated run is replaced
only with ``--force``, and a real run never.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.metrics import summarize
from stragglerlab.analysis.outputs import check_new_file, output_path, unused_name
from stragglerlab.analysis.runfolder import NEVER, SIMULATED, check_replaceable, load_run
from stragglerlab.realrun import testbed
from stragglerlab.realrun.footprint import run_memory
from stragglerlab.realrun.harness import run_rank
from stragglerlab.realrun.mpiexec import launch, relay, start, testbed_argument
from stragglerlab.realrun.watchdog import LIVE, watch_job
from stragglerlab.simulator.commands import load_scenario, output_arguments, scenario_arguments
from stragglerlab.simulator.commands.simulate import print_summary
from stragglerlab.simulator.estimate import check
from stragglerlab.simulator.sweep import MPI_SIZE_VARIABLES

#: environment variables that say this process is a rank some launcher started (hydra, Open MPI, srun)
LAUNCHER_VARIABLES = (*MPI_SIZE_VARIABLES, "PMI_RANK", "SLURM_PROCID")
#: seconds the job is given to stop, and its output to be written, once it is to end
STOP_SECONDS = 5.0


def configure(parser: argparse.ArgumentParser) -> None:
    scenario_arguments(parser, "override a scenario key, e.g. --set algorithm.name=eager-solo (repeatable)")
    parser.add_argument(
        "-o", "--output", type=output_path, metavar="DIR", help="run folder (default runs/<name>-real, or -real-2, ...)"
    )
    parser.add_argument(
        "--np",
        type=int,
        metavar="P",
        help="start mpiexec -n P on this machine (default outside any launcher: cluster.workers)",
    )
    testbed_argument(parser)
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
    output_arguments(
        parser,
        "replace a simulated run where -o points, and the --save-model file (a real run is never replaced); start "
        "the ranks even when their estimated memory exceeds what the machine has",
    )


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
        *(["--force"] if args.force else []),
        *(["--json"] if args.json else []),
    ]


def _terminated(signum: int, frame: object) -> None:
    """A kill (SIGTERM) of ``run --np`` ends its job as Ctrl-C does: the ranks stopped, the folder tidied, one line."""
    raise KeyboardInterrupt


def _launch_and_watch(np_: int, argv: list[str], folder: Path, per_node: int) -> int:
    """Run the job and wait for it; when it fails, name the rank that died first (:func:`watch_job`)."""
    import socket

    tb = testbed.active()
    proc = start(launch(np_, argv, per_node=per_node), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    held: list[bytes] = []
    copiers = (relay(proc.stdout, sys.stdout.buffer), relay(proc.stderr, sys.stderr.buffer, held))
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        hosts = {socket.gethostname(), *(n.name for n in tb.nodes)} if tb else {socket.gethostname()}
        lost = watch_job(proc, folder, hosts)
    finally:  # however the job ends (Ctrl-C and kill included): no rank left, every line out, no .live/
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
        lines_until = time.monotonic() + STOP_SECONDS  # one wait for both pipes: a rank left holding one ends it
        for copier in copiers:
            copier.join(timeout=max(lines_until - time.monotonic(), 0.0))
        shutil.rmtree(folder / LIVE, ignore_errors=True)
        if tb is not None:  # nothing of the job stays on the nodes
            testbed.stop_processes(tb.prefix)
    if proc.returncode == 0:
        return 0
    if lost is not None:
        print(
            f"stragglerlab run: error: {lost}; the run stopped (exit status {proc.returncode}), "
            f"{folder} holds what was written",
            file=sys.stderr,
        )
        return proc.returncode
    sys.stderr.buffer.write(b"".join(held))  # hydra's own lines are then all that says why
    sys.stderr.flush()
    if proc.returncode > 0:
        return proc.returncode
    print(  # the launcher itself was killed: say by what, and exit as a shell would
        f"stragglerlab run: error: mpiexec was killed by {signal.Signals(-proc.returncode).name}; "
        f"{folder} holds what was written",
        file=sys.stderr,
    )
    return 128 - proc.returncode


def under_launcher() -> bool:
    """Whether this process is a rank that mpiexec or srun started (from the launcher's environment)."""
    return any(variable in os.environ for variable in LAUNCHER_VARIABLES)


def _check_outputs(args: argparse.Namespace, folder: Path) -> None:
    """Refuse, before anything starts, a run folder or model file the run may not write."""
    check_replaceable(folder, SIMULATED if args.force else NEVER)
    if args.save_model:
        check_new_file(args.save_model, args.force)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.heartbeat_timeout < math.inf:
        raise UserError(f"--heartbeat-timeout {args.heartbeat_timeout}: must be a number of seconds > 0")
    scenario = load_scenario(args)
    if args.testbed is not None:
        testbed.use(args.testbed)
    default = Path("runs") / f"{scenario.name}-real"
    ranks = args.np if args.np is not None or under_launcher() else scenario.workers
    if ranks is not None:
        if ranks < 1:
            raise UserError(f"--np {ranks}: needs at least one rank")
        need = run_memory(scenario, args.backend, ranks)
        note = check(f"run {scenario.name} on {ranks} ranks", need, args.force, "run fewer ranks or a smaller model")
        folder = args.output or unused_name(default)
        _check_outputs(args, folder)
        if note:
            print(f"stragglerlab {note}", file=sys.stderr)
        if ranks > (os.cpu_count() or 1) and testbed.active() is None:
            print(
                f"stragglerlab run: warning: {ranks} ranks on {os.cpu_count()} cores; they share cores, which the "
                "timings will show",
                file=sys.stderr,
            )
        return _launch_and_watch(ranks, _rank_argv(args, folder), folder, scenario.cluster.workers_per_node)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    folder = comm.bcast(args.output or unused_name(default) if rank == 0 else None)
    try:
        _check_outputs(args, folder)  # every rank sees the same files, so every rank agrees
        run_rank(
            scenario, folder, args.backend, args.heartbeat_timeout, args.save_model, SIMULATED if args.force else NEVER
        )
    except UserError:
        if rank == 0:
            raise
        return 2  # every rank has it; rank 0 says it
    if rank == 0:
        run = load_run(folder)
        print_summary(scenario, [summarize(run)], [folder], None, args.json)
    return 0
