"""``stragglerlab examples``: the shipped example scenarios, one line each."""

from __future__ import annotations

import argparse

from stragglerlab.simulator.catalog import examples


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Run one with: stragglerlab simulate --example NAME"


def run(args: argparse.Namespace) -> int:
    table = examples()
    width = max(map(len, table))
    for name, description in table.items():
        print(f"{name:<{width}}  {description}")
    return 0
