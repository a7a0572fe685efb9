"""``stragglerlab profile SCENARIO``: time a torch workload's forward and backward passes on this machine and write
the scenario fragment (``workload.compute``, ``backward``, ``buckets``, ``params``) that lets ``simulate`` model it,
overlap of communication with backward included (:mod:`stragglerlab.realrun.profile`). One process, no MPI."""

from __future__ import annotations

import argparse
import tomllib

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.outputs import check_new_file, output_path, write_text
from stragglerlab.realrun.profile import DDP_BUCKET_MB, fragment, profile
from stragglerlab.simulator.commands import load_scenario, output_arguments, print_json, scenario_arguments


def configure(parser: argparse.ArgumentParser) -> None:
    scenario_arguments(parser, "override a scenario key, e.g. --set workload.batch=64 (repeatable)")
    parser.add_argument("--iterations", type=int, default=30, metavar="K", help="iterations timed (default 30)")
    parser.add_argument(
        "--bucket-cap-mb",
        type=float,
        default=DDP_BUCKET_MB,
        metavar="MB",
        help=f"the most MiB in one gradient bucket, as DDP's bucket_cap_mb (default {DDP_BUCKET_MB:g})",
    )
    parser.add_argument(
        "-o", "--output", type=output_path, metavar="FILE", help="write the fragment here (default: print it)"
    )
    output_arguments(parser, "replace the -o file if it exists")


def run(args: argparse.Namespace) -> int:
    # one process times the workload: the scenario's cluster, algorithm and imbalance play no part in it
    solo = {"cluster.workers": 1, "cluster.workers_per_node": 1, "algorithm": None, "imbalance": None}
    scenario = load_scenario(args).replace("profile (one process)", **solo)
    if args.iterations < 2:
        raise UserError(f"--iterations {args.iterations}: must be at least 2 (a median and a spread)")
    if args.bucket_cap_mb <= 0:
        raise UserError(f"--bucket-cap-mb {args.bucket_cap_mb:g}: must be > 0")
    if args.output:
        check_new_file(args.output, args.force)
    text = fragment(scenario, profile(scenario, args.iterations), args.bucket_cap_mb)
    if args.output:
        write_text(args.output, text)
    if args.json:
        print_json(
            {"workload": tomllib.loads(text)["workload"], **({"output": str(args.output)} if args.output else {})}
        )
    elif args.output:
        print("\n".join(line[2:] for line in text.splitlines() if line.startswith("# ")))
        print(f"fragment: {args.output}")
    else:
        print(text, end="")
    return 0
