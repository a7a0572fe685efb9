"""The ``stragglerlab`` command: one entry point, subcommands implemented in each plane.

Subcommands are registered here by name and imported only when used, so ``stragglerlab simulate`` never imports
torch or mpi4py, and the arrows analysis <- simulator <- realrun stay one way (this module sits above all three).
Each subcommand module provides ``configure(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from stragglerlab import __version__
from stragglerlab.analysis.errors import UserError

#: name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("stragglerlab.simulator.commands.simulate", "simulate a scenario and write its run folder(s)"),
    "examples": (
        "stragglerlab.simulator.commands.examples",
        "list the example scenarios shipped with the package, or print or write one to edit",
    ),
    "algorithms": ("stragglerlab.simulator.commands.algorithms", "list the algorithms, their keys and backends"),
    "sweep": (
        "stragglerlab.simulator.commands.sweep",
        "simulate the cross product of scenario keys, in parallel, resumably",
    ),
    "plot": ("stragglerlab.analysis.commands.plot", "paper-style figures from run folders"),
    "build-native": ("stragglerlab.realrun.commands.build_native", "compile the native partial-collective library"),
    "run": (
        "stragglerlab.realrun.commands.run",
        "train a scenario for real on MPI ranks (mpiexec, srun or --np) into a run folder",
    ),
    "profile": (
        "stragglerlab.realrun.commands.profile",
        "time a torch workload's forward and backward: its compute, buckets and size as a scenario fragment",
    ),
    "calibrate": (
        "stragglerlab.realrun.commands.calibrate",
        "measure alpha, beta, gamma and compute times: a scenario fragment",
    ),
    "validate": (
        "stragglerlab.realrun.commands.validate",
        "simulate real runs again, trace-driven or out of sample: the errors",
    ),
    "slurm": ("stragglerlab.realrun.commands.slurm", "print an sbatch script that runs a scenario with srun"),
    "testbed": (
        "stragglerlab.realrun.commands.testbed",
        "an emulated cluster on this machine: nodes as network namespaces on shaped links (up, status, probe, down)",
    ),
}


def build_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = argparse.ArgumentParser(
        prog="stragglerlab",
        description="Data-parallel SGD with stragglers: simulate, run for real, compare.",
    )
    parser.add_argument("--version", action="version", version=f"stragglerlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text)
    return parser, sub


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, _ = build_parser()
    if not argv or argv[0] not in COMMANDS:
        parser.parse_args(argv)  # prints help, version or the usage error and exits
        parser.print_help()
        return 2
    name = argv[0]
    module = importlib.import_module(COMMANDS[name][0])
    sub = argparse.ArgumentParser(prog=f"stragglerlab {name}", description=COMMANDS[name][1])
    module.configure(sub)
    args = sub.parse_args(argv[1:])
    warnings.showwarning = lambda message, *_, **__: print(f"stragglerlab {name}: warning: {message}", file=sys.stderr)
    try:
        return int(module.run(args) or 0)
    except UserError as err:
        print(f"stragglerlab {name}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"stragglerlab {name}: interrupted", file=sys.stderr)
        return 130
    except MemoryError:  # past the size guard with --force: the allocation it warned of failed
        print(
            f"stragglerlab {name}: error: out of memory (run fewer workers or iterations, or keep less)",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly, as other command-line tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the interpreter's final flush is quiet
        return 141
    except OSError as err:  # a file no check foresaw failing (a name longer than the system allows): one line too
        where = f"{err.filename}: " if err.filename else ""
        print(f"stragglerlab {name}: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
