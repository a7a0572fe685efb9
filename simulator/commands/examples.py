"""``stragglerlab examples [NAME [-o FILE]]``: the shipped example scenarios, one line each; with NAME, that example's
TOML (printed, or written to FILE to edit and run: ``stragglerlab simulate FILE``)."""

from __future__ import annotations

import argparse
import sys

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.outputs import check_new_file, output_path, write_text
from stragglerlab.simulator.catalog import example_path, examples


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", metavar="NAME", help="print this example's scenario (TOML)")
    parser.add_argument("-o", "--output", type=output_path, metavar="FILE", help="with NAME: write it here instead")
    parser.add_argument("--force", action="store_true", help="replace FILE if it exists")
    parser.epilog = "Run one: stragglerlab simulate --example NAME; edit a copy: stragglerlab examples NAME -o FILE"


def run(args: argparse.Namespace) -> int:
    table = examples()
    if args.name is None:
        if args.output:
            raise UserError("-o: name the example to write, e.g. stragglerlab examples eager-injected -o my.toml")
        width = max(map(len, table))
        for name, description in table.items():
            print(f"{name:<{width}}  {description}")
        return 0
    if args.name not in table:
        raise UserError(f"{args.name}: no such example (known: {', '.join(table)})")
    text = example_path(args.name).read_text()
    if args.output is None:
        sys.stdout.write(text)
        return 0
    write_text(check_new_file(args.output, args.force), text)
    print(f"{args.output}: the {args.name} example; run it with: stragglerlab simulate {args.output}")
    return 0
