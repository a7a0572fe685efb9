"""The simulator's subcommands of ``stragglerlab``: each module has ``configure(parser)`` and ``run(args)``; here
what several commands (the real-run plane's too) share: the scenario arguments, ``--force`` and ``--json``."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from stragglerlab.simulator.catalog import example_path
from stragglerlab.simulator.scenario import Scenario, load


def scenario_arguments(parser: argparse.ArgumentParser, set_help: str, defaults: bool = False) -> None:
    """The scenario to start from: a file or ``--example NAME`` (or, where ``defaults``, neither: every key's
    default), and ``--set key=value`` overrides."""
    source = parser.add_mutually_exclusive_group(required=not defaults)
    more = "; neither: every key's default (docs/scenarios.md), named scenario" if defaults else ""
    source.add_argument("scenario", nargs="?", type=Path, help=f"scenario file (TOML){more}")
    source.add_argument("--example", metavar="NAME", help="a shipped example (see: stragglerlab examples)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=set_help)


def load_scenario(args: argparse.Namespace, *extra: str) -> Scenario:
    """The scenario :func:`scenario_arguments` named, with its overrides (and ``extra`` ones after them)."""
    overrides = [*args.overrides, *extra]
    if args.example is None and args.scenario is None:
        return load(None, overrides, text="")
    return load(example_path(args.example) if args.example else args.scenario, overrides)


def output_arguments(parser: argparse.ArgumentParser, force_help: str) -> None:
    """``--force`` (what it allows to be replaced: ``force_help``) and ``--json``."""
    parser.add_argument("--force", action="store_true", help=force_help)
    parser.add_argument(
        "--json", action="store_true", help="print the summary as one JSON object on stdout instead of a table"
    )


def _plain(value: Any) -> Any:
    """``value`` with NaN and infinities as None and numpy scalars as Python numbers (strict JSON)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def print_json(record: dict[str, Any]) -> None:
    """Print ``record`` as one strict JSON object (NaN as null), the machine-readable form of a summary."""
    print(json.dumps(_plain(record), default=str))
