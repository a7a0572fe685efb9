"""``stragglerlab calibrate``: fit the network model and time the workload on this machine (or allocation); write
a scenario fragment (``[network]`` and ``workload.compute``) that ``stragglerlab simulate`` accepts as is.

Run it under ``mpiexec -n P`` / ``srun`` like ``stragglerlab run``, or with ``--np P`` on one machine (P ≥ 2), or
``--np 2,3`` for several rank counts, each a launch of its own, all fitted at once (:mod:`..fragment`). The optional
scenario names the workload to time and the allreduce algorithm to fit (default: timing only, ring). With ``-o
FILE`` it prints what it measured (the fragment's comments) and where it wrote it, or with ``--json`` the same as a
JSON object; an existing FILE is replaced only with ``--force``. With ``--np`` it refuses ranks whose estimated memory
exceeds the machine's (:mod:`stragglerlab.realrun.footprint`) unless ``--force``, warns when they outnumber the
cores, and keeps its ranks' temporary files in a folder removed however it ends (:mod:`stragglerlab.realrun.scratch`).

``--collectives`` (needs ``-o FILE``) also measures the round times of every kind real runs use through the real
harness, under the scenario's compute and imbalance (``--balanced``: back to back), through the native core or
(``--backend torch``) ``torch.distributed`` (:mod:`stragglerlab.realrun.roundtimes`), with a progress bar, and
writes them as the cost table ``FILE`` with ``.csv`` in place of its suffix, which the fragment names as
``network.table``; its update gap is the fragment's ``workload.update``. With ``--np``, DDP's buckets (``--backend
torch``, a torch workload) are timed in blocks each launched on its own, as runs are
(:mod:`stragglerlab.realrun.launched`). Each job hands what it measured to the launching process (a hidden
``--dump FILE``), which fits and writes."""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import tomllib
import traceback
from pathlib import Path

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.outputs import check_new_file, output_path, write_text
from stragglerlab.realrun import roundtimes, testbed
from stragglerlab.realrun.calibration import measure_job
from stragglerlab.realrun.footprint import calibration_memory
from stragglerlab.realrun.fragment import fragment
from stragglerlab.realrun.launched import Launched
from stragglerlab.realrun.mpiexec import launch, start, testbed_argument
from stragglerlab.realrun.scratch import scratch_folder, stop_on_sigterm
from stragglerlab.simulator import algorithms
from stragglerlab.simulator.commands import output_arguments, print_json
from stragglerlab.simulator.estimate import check
from stragglerlab.simulator.scenario import Scenario, load


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
    parser.add_argument(
        "--np",
        metavar="P[,P...]",
        help="start mpiexec -n P on this machine (P >= 2); several counts: a launch each, fitted together",
    )
    testbed_argument(parser)
    parser.add_argument(
        "-o", "--output", type=output_path, metavar="FILE", help="write the fragment here (default: print it)"
    )
    parser.add_argument(
        "--compute-iterations",
        type=int,
        default=30,
        metavar="K",
        help="gradient computations timed per rank (default 30, at least 2)",
    )
    parser.add_argument(
        "--collectives",
        action="store_true",
        help="also measure every round kind through the real harness and write the cost table FILE.csv (needs -o)",
    )
    parser.add_argument(
        "--algorithms",
        metavar="A,B",
        help="with --collectives: the algorithms whose rounds to time (default: every one with an exchange on the "
        "backend)",
    )
    parser.add_argument(
        "--backend",
        choices=["native", "torch"],
        default="native",
        help="with --collectives: time the rounds of the native core (default) or of torch.distributed (gloo on "
        "CPU), as run --backend does",
    )
    parser.add_argument(
        "--sizes",
        metavar="BYTES,...",
        help="with --collectives: message sizes in bytes per rank (default 4 kB to 4 MiB; with --backend torch and a "
        "torch workload, DDP's buckets of that workload instead)",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.05,
        metavar="X",
        help="with --collectives: stop when the last 3 block medians lie within X of each other and the mean's "
        "standard error over the blocks is at most X of it (default 0.05)",
    )
    parser.add_argument(
        "--balanced",
        action="store_true",
        help="with --collectives: time rounds back to back (0.1 ms compute, no imbalance), not under the scenario's "
        "compute and imbalance (the default without a SCENARIO)",
    )
    parser.add_argument(
        "--max-blocks", type=int, default=10, metavar="K", help="with --collectives: blocks at most (default 10)"
    )
    parser.add_argument("--dump", type=Path, help=argparse.SUPPRESS)  # --np's jobs: what they measured, pickled
    output_arguments(
        parser,
        "replace the -o file (and its .csv table) if it exists; start the ranks even when their estimated memory "
        "exceeds what the machine has",
    )


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


def collectives_options(args: argparse.Namespace, model: str) -> tuple[list[str], list[int]]:
    """The algorithms and sizes of ``--collectives`` for a scenario of workload ``model``, checked (one-line
    errors)."""
    if args.algorithms is None:
        names = [r.name for r in algorithms.RECORDS if args.backend in r.exchanges]
    else:
        names = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    for name in names:
        if args.backend not in algorithms.get(name).exchanges:
            raise UserError(f"--algorithms: {name} has no {args.backend} exchange to time")
    if roundtimes.ddp_rounds(args.backend, model):
        if args.sizes is not None:
            raise UserError(f"--sizes: with --backend torch the rounds of {model} are DDP's buckets of its own size")
        sizes = []
    else:
        try:
            given = args.sizes if args.sizes is not None else ",".join(map(str, roundtimes.SIZES))
            sizes = sorted({int(x) for x in given.split(",") if x.strip()})
        except ValueError:
            raise UserError(f"--sizes {args.sizes}: not a list of byte counts") from None
        if not sizes or sizes[0] < 4:
            raise UserError("--collectives needs sizes of at least 4 bytes")
    if not names:
        raise UserError("--collectives needs at least one algorithm")
    if args.max_blocks < 3 or not 0 < args.tolerance < 1:
        raise UserError("--max-blocks must be at least 3 and --tolerance between 0 and 1")
    if not args.output:
        raise UserError("--collectives writes a cost table beside the fragment: give -o FILE")
    return names, sizes


def rank_counts(text: str) -> list[int]:
    """``--np``'s rank counts, each at least 2 (one-line errors)."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--np {text}: not a rank count or a list of them (2 or 2,3)") from None
    if not counts or min(counts) < 2:
        raise UserError(f"--np {text}: calibration needs at least 2 ranks")
    return sorted(set(counts))


def run(args: argparse.Namespace) -> int:
    scenario = (
        load(args.scenario, args.overrides)
        if args.scenario
        else load(text="", name="calibration", overrides=args.overrides)
    )
    if args.compute_iterations < 2:
        raise UserError(f"--compute-iterations {args.compute_iterations}: must be at least 2 (a mean and a spread)")
    names, sizes = collectives_options(args, scenario.workload.model) if args.collectives else ([], [])
    table = args.output.with_suffix(".csv") if args.collectives else None
    if args.testbed is not None and args.np is None:
        raise UserError("--testbed starts the ranks itself: give --np P (or several counts, --np 2,4)")
    if args.np is not None:
        counts = rank_counts(args.np)
        if args.testbed is not None:
            tb = testbed.use(args.testbed)
            for P in counts:
                tb.placement(-(-P // scenario.cluster.workers_per_node))
        most = max(counts)  # the jobs run one after the other
        need = calibration_memory(scenario, most, args.backend, names, max(sizes, default=0))
        note = check(f"calibrate on {most} ranks", need, args.force, "calibrate on fewer ranks (--np)")
        for path in (args.output, table):
            if path:
                check_new_file(path, args.force)
        if note:
            print(f"stragglerlab {note}", file=sys.stderr)
        if most > (os.cpu_count() or 1) and args.testbed is None:
            print(
                f"stragglerlab calibrate: warning: {most} ranks on {os.cpu_count()} cores; they share cores, so "
                "every time measured includes waits for a core: expect measurements marked UNSTABLE, fits flagged, "
                "a slow calibration, and figures that hold only for runs that share cores as much",
                file=sys.stderr,
            )
        ddp = args.collectives and roundtimes.ddp_rounds(args.backend, scenario.workload.model)
        jobs = []
        stop_on_sigterm()
        with scratch_folder() as tmp:  # the ranks' temporary folder too: removed however the calibration ends
            for P in counts:
                rounds = None  # DDP's buckets, each block a launch of its own (realrun.launched)
                if ddp:
                    print(
                        f"stragglerlab calibrate: timing DDP's buckets of {scenario.workload.model}, each block an "
                        f"mpiexec -n {P} launch of its own "
                        f"({min(Launched.least, args.max_blocks)} to {args.max_blocks} blocks a size)",
                        file=sys.stderr,
                        flush=True,
                    )
                    rounds = measure(args, scenario, Launched(P), names, sizes)
                dump = tmp / f"{P}.pickle"
                argv = calibrate_argv(args, [] if ddp else names, dump)
                per_node = scenario.cluster.workers_per_node
                code = start(launch(P, argv, per_node=per_node), env={**os.environ, "TMPDIR": str(tmp)}).wait()
                if code != 0:
                    return code  # the job said why
                job = pickle.loads(dump.read_bytes())
                job.rounds = rounds or job.rounds
                jobs.append(job)
        finish(args, fragment(scenario, jobs, table, args.tolerance))
        return 0
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        raise UserError("calibration needs at least 2 ranks: run it under mpiexec -n P or with --np P")
    try:
        for path in (args.output, table) if args.dump is None else ():
            if path:
                check_new_file(path, args.force)
    except UserError:  # every rank sees the same files; rank 0 says it
        if comm.Get_rank() == 0:
            raise
        return 2
    try:
        rounds = measure(args, scenario, roundtimes.InProcess(comm), names, sizes) if names else None
        job = measure_job(scenario, comm, args.compute_iterations)
    except UserError:  # raised alike on every rank
        raise
    except Exception:  # a failure on one rank would leave the others waiting in their next collective
        traceback.print_exc()
        comm.Abort(1)
    if job is None:
        return 0
    job.rounds = rounds
    if args.dump is not None:
        args.dump.write_bytes(pickle.dumps(job))
    else:
        finish(args, fragment(scenario, [job], table, args.tolerance))
    return 0


def finish(args: argparse.Namespace, text: str) -> None:
    """Write the fragment where ``-o`` says, and report it."""
    if args.output:
        write_text(args.output, text)
    report(text, args.output, args.json)


def measure(
    args: argparse.Namespace, scenario: Scenario, blocks: roundtimes.Blocks, names: list[str], sizes: list[int]
) -> roundtimes.Measurement | None:
    """``--collectives``' round times in ``blocks``."""
    return roundtimes.measure(
        scenario,
        blocks,
        names,
        sizes,
        tolerance=args.tolerance,
        max_blocks=args.max_blocks,
        balanced=args.balanced or args.scenario is None,  # no scenario: no compute or imbalance to time under
        backend=args.backend,
    )


def calibrate_argv(args: argparse.Namespace, names: list[str], dump: Path) -> list[str]:
    """The command line every rank of one of ``--np``'s jobs runs: this one without ``--np``, timing the rounds of
    ``names`` (none: DDP's are timed in launched blocks), handing what it measured to ``dump``."""
    return [
        "calibrate",
        *([str(args.scenario)] if args.scenario else []),
        *[x for kv in args.overrides for x in ("--set", kv)],
        "--compute-iterations",
        str(args.compute_iterations),
        *(
            [
                "--collectives",
                "-o",
                str(args.output),
                f"--algorithms={','.join(names)}",
                f"--backend={args.backend}",
                *([f"--sizes={args.sizes}"] if args.sizes is not None else []),
                f"--tolerance={args.tolerance}",
                f"--max-blocks={args.max_blocks}",
                *(["--balanced"] if args.balanced else []),
            ]
            if names
            else []
        ),
        "--dump",
        str(dump),
    ]
