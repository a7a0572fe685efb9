"""``stragglerlab algorithms``: every algorithm the toolkit runs, what it does, the ``[algorithm]`` keys it reads
(with their defaults), its engines and its real-run backends."""

from __future__ import annotations

import argparse
import json

from stragglerlab.simulator.algorithms import RECORDS
from stragglerlab.simulator.algorithms.record import Algorithm


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Choose one with --set algorithm.name=NAME; every algorithm also reads lr, momentum, weight_decay."


def describe(record: Algorithm) -> list[str]:
    """The lines that describe one algorithm."""
    engines = "reference, fast" if record.kernel is not None else "reference"
    lines = [record.summary, f"engines: {engines}; real runs: --backend {' or '.join(record.exchanges)}"]
    lines += [f"{key.name} = {json.dumps(key.default)}: {key.doc}" for key in record.keys]
    return lines


def run(args: argparse.Namespace) -> int:
    width = max(len(r.name) for r in RECORDS)
    for record in RECORDS:
        first, *rest = describe(record)
        print(f"{record.name:<{width}}  {first}")
        for line in rest:
            print(f"{'':<{width}}    {line}")
    return 0
