"""``stragglerlab testbed up|status|probe|down``: an emulated cluster on this machine (:mod:`..testbed`).

``up`` builds it and writes its file (into ``/run/stragglerlab/PREFIX/testbed.toml``, and to ``-o FILE``); ``status``
shows what stands; ``probe`` measures the bandwidth and latency between two of its nodes beside the shaped rate;
``down`` removes everything it made. ``run`` and ``calibrate`` take the file with ``--testbed``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.outputs import check_new_file, write_text
from stragglerlab.realrun import testbed
from stragglerlab.realrun.netprobe import probe, tcp_cpu
from stragglerlab.simulator.commands import print_json


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="build an emulated cluster: nodes on shaped links")
    up.add_argument("--nodes", type=int, required=True, metavar="N", help="emulated nodes")
    up.add_argument(
        "--link", required=True, metavar="RATE", help="every node's link, each way, as tc spells rates (50mbit)"
    )
    up.add_argument("--racks", type=int, default=1, metavar="R", help="racks the nodes are grouped in (default 1)")
    up.add_argument("--uplink", default="", metavar="RATE", help="with --racks: every rack's uplink, each way")
    up.add_argument(
        "--ranks-per-node",
        type=int,
        default=1,
        metavar="K",
        help="ranks a node holds at most (default 1)",
    )
    up.add_argument("--prefix", default="sl", help="what every name it makes starts with (default sl)")
    up.add_argument("-o", "--output", type=Path, metavar="FILE", help="also write the testbed file here")
    up.add_argument(
        "--force", action="store_true", help="replace the -o file; build links faster than the cores can carry"
    )
    for name, text in (
        ("status", "show what of a testbed stands"),
        ("probe", "measure bandwidth and latency between two nodes beside the shaped rate"),
        ("down", "remove everything a testbed made"),
    ):
        action = sub.add_parser(name, help=text)
        action.add_argument(
            "file", nargs="?", type=Path, metavar="FILE", help="its testbed file (default: the prefix's)"
        )
        action.add_argument("--prefix", default="sl", help="the testbed's prefix, where no FILE is given (default sl)")
        if name == "probe":
            action.add_argument("--json", action="store_true", help="print {bandwidth, latency, rate} as JSON")


def _file(args: argparse.Namespace) -> Path:
    return args.file or testbed.default_file(args.prefix)


def run(args: argparse.Namespace) -> int:
    return {"up": _up, "status": _status, "probe": _probe, "down": _down}[args.action](args)


def _up(args: argparse.Namespace) -> int:
    if args.output:
        check_new_file(args.output, args.force)
    tb = testbed.up(
        args.nodes,
        args.link,
        args.racks,
        args.uplink,
        args.prefix,
        args.ranks_per_node,
        args.force,
        progress=sys.stderr.isatty(),
        tcp_cpu=tcp_cpu,
    )
    print("\n".join(testbed.summary(tb)))
    written = testbed.default_file(tb.prefix)
    if args.output:
        write_text(args.output, written.read_text())
        written = args.output
    print(f"testbed file: {written} (stragglerlab run|calibrate --testbed {written}; testbed down removes it)")
    return 0


def _status(args: argparse.Namespace) -> int:
    path = _file(args)
    if not path.exists():
        stale = testbed.leftovers(args.prefix)
        if stale:
            print(
                f"no testbed file at {path}, but these stand: {', '.join(stale)} (testbed down --prefix {args.prefix})"
            )
            return 1
        print(f"no testbed {args.prefix} stands")
        return 1
    tb = testbed.load(path)
    print("\n".join(testbed.summary(tb)))
    parts = list(testbed.standing(tb))
    missing = [name for name, up in parts if not up]
    running = testbed.processes(tb.prefix)
    print(
        f"{len(parts) - len(missing)} of {len(parts)} parts stand"
        + (f"; missing: {', '.join(missing)}" if missing else "")
        + f"; {len(running)} process(es) running on its nodes"
    )
    return 1 if missing else 0


def _probe(args: argparse.Namespace) -> int:
    tb = testbed.use(_file(args))
    found = probe(tb)
    if args.json:
        print_json(found)
        return 0
    share = found["bandwidth"] / found["rate"]
    print(
        f"{tb.nodes[0].name} -> {tb.nodes[1].name}: bandwidth {found['bandwidth'] / 1e6:.3f} MB/s "
        f"({share:.1%} of the shaped {tb.link} = {found['rate'] / 1e6:.3f} MB/s), "
        f"latency {found['latency'] * 1e6:.0f} us one way"
    )
    return 0


def _down(args: argparse.Namespace) -> int:
    prefix = args.prefix
    if args.file is not None:
        if not args.file.exists():
            raise UserError(f"{args.file}: no such testbed file (give --prefix to remove a testbed by its prefix)")
        prefix = testbed.load(args.file).prefix
    testbed.check_privileges()
    removed = testbed.down(prefix)
    print(f"removed {len(removed)} part(s) of the testbed {prefix}" if removed else f"no testbed {prefix} stood")
    return 0
