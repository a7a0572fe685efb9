"""The simulator's subcommands of ``stragglerlab``: each module has ``configure(parser)`` and ``run(args)``."""

from __future__ import annotations

import argparse
from pathlib import Path

from stragglerlab.simulator.catalog import example_path
from stragglerlab.simulator.scenario import Scenario, load


def scenario_arguments(parser: argparse.ArgumentParser, set_help: str) -> None:
    """The scenario to start from: a file or ``--example NAME``, and ``--set key=value`` overrides."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("scenario", nargs="?", type=Path, help="scenario file (TOML)")
    source.add_argument("--example", metavar="NAME", help="a shipped example (see: stragglerlab examples)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=set_help)


def load_scenario(args: argparse.Namespace, *extra: str) -> Scenario:
    """The scenario :func:`scenario_arguments` named, with its overrides (and ``extra`` ones after them)."""
    return load(example_path(args.example) if args.example else args.scenario, [*args.overrides, *extra])
