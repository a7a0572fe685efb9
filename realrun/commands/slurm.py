"""``stragglerlab slurm``: print an sbatch script that runs a scenario with ``srun``, one rank per worker.

The job has ``--nodes`` × ``--tasks-per-node`` ranks; the script sets ``cluster.workers`` and
``cluster.workers_per_node`` to match (so LSGD's node groups and the hierarchical network model follow the
allocation) and asks for one GPU per task when the scenario's device is ``cuda`` (or ``--gpus-per-node``). Every
value pasted into the script is shell-quoted, and one holding a line break or other control character is refused,
so no value can add a command; ``--setup`` lines are pasted as the shell lines they are. Submit it with
``stragglerlab slurm ... > job.sh && sbatch job.sh``.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.outputs import output_path
from stragglerlab.simulator.commands import load_scenario, scenario_arguments

#: the time limits sbatch accepts: minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]]
TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|UNLIMITED|INFINITE")


def configure(parser: argparse.ArgumentParser) -> None:
    scenario_arguments(parser, "override a scenario key in the job's command line (repeatable)")
    parser.add_argument("--nodes", type=int, required=True, metavar="N", help="nodes to allocate")
    parser.add_argument("--tasks-per-node", type=int, required=True, metavar="G", help="ranks (GPUs) per node")
    parser.add_argument(
        "--gpus-per-node",
        type=int,
        metavar="N",
        help="GPUs to ask for per node (default: one per task when workload.device is cuda, else none; 0: none)",
    )
    parser.add_argument("--time", default="01:00:00", help="wall-clock limit (default 01:00:00)")
    parser.add_argument("--partition", help="partition to submit to")
    parser.add_argument("--account", help="account to charge")
    parser.add_argument("--backend", choices=("native", "torch"), default="native", help="as stragglerlab run")
    parser.add_argument(
        "-o", "--output", type=output_path, metavar="DIR", help="run folder (default runs/<name>-<job id>)"
    )
    parser.add_argument(
        "--setup",
        action="append",
        default=[],
        metavar="LINE",
        help="a shell line run before srun, e.g. 'module load mpich' or 'source venv/bin/activate'",
    )
    parser.add_argument(
        "--srun-args",
        default="",
        metavar="ARGS",
        help="extra srun arguments, e.g. --srun-args=--mpi=pmi2 where the MPI needs it",
    )


def _quoted(option: str, value: str) -> str:
    """``value`` shell-quoted for the script; a value with a line break or another control character is refused,
    as it could end the line it is pasted into."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise UserError(f"{option} {value!r}: holds a line break or another control character")
    return shlex.quote(value)


def script(args: argparse.Namespace) -> str:
    if not TIME.fullmatch(args.time):
        raise UserError(
            f"--time {args.time}: not a Slurm time limit (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, UNLIMITED)"
        )
    scenario = load_scenario(args)
    if args.nodes < 1 or args.tasks_per_node < 1:
        raise UserError("--nodes and --tasks-per-node must be at least 1")
    if args.gpus_per_node is not None and args.gpus_per_node < 0:
        raise UserError(f"--gpus-per-node {args.gpus_per_node}: must be at least 0")
    P = args.nodes * args.tasks_per_node
    cuda = scenario.workload.device.startswith("cuda")
    gpus = args.gpus_per_node if args.gpus_per_node is not None else (args.tasks_per_node if cuda else 0)
    source = ["--example", args.example] if args.example else [str(Path(args.scenario).resolve())]
    sets = [*args.overrides, f"cluster.workers={P}", f"cluster.workers_per_node={args.tasks_per_node}"]
    run = ["stragglerlab", "run", *source, *[x for kv in sets for x in ("--set", kv)], "--backend", args.backend]
    output = (
        _quoted("-o", str(args.output))
        if args.output
        else _quoted("name", f"runs/{scenario.name}-") + '"${SLURM_JOB_ID}"'  # expanded by the shell
    )
    command = " ".join(_quoted("argument", a) for a in run) + f" -o {output}"
    srun = ["srun", "--kill-on-bad-exit=1", *(_quoted("--srun-args", a) for a in shlex.split(args.srun_args))]
    name = _quoted("name", scenario.name)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={args.nodes}",
        f"#SBATCH --ntasks-per-node={args.tasks_per_node}",
        f"#SBATCH --time={_quoted('--time', args.time)}",
        f"#SBATCH --output={_quoted('name', scenario.name + '-%j.out')}",
    ]
    if args.partition:
        lines.append(f"#SBATCH --partition={_quoted('--partition', args.partition)}")
    if args.account:
        lines.append(f"#SBATCH --account={_quoted('--account', args.account)}")
    if gpus:
        lines += [f"#SBATCH --gpus-per-node={gpus}", "#SBATCH --gpu-bind=none"]
    lines += [
        "",
        "set -euo pipefail",
        *args.setup,
        f"# {P} ranks = {args.nodes} nodes x {args.tasks_per_node}, one rank per worker"
        + (", one GPU per rank (device cuda = cuda:<local rank>)" if cuda else ""),
        "export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}",
        "stragglerlab build-native  # compile the native core once, before the ranks start",
        " ".join([*srun, command]),
        "",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    print(script(args), end="")
    return 0
