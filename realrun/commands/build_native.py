"""``stragglerlab build-native``: compile the native core ahead of time and print where the library is."""

from __future__ import annotations

import argparse

from stragglerlab.realrun.build import build


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="recompile even if the cache holds the library")
    parser.add_argument("--werror", action="store_true", help="treat compiler warnings as errors")


def run(args: argparse.Namespace) -> int:
    print(build(werror=args.werror, force=args.force))
    return 0
