"""Starting MPI jobs on this machine: the ``mpiexec`` to start them with, the command line that runs ``stragglerlab``
(or another module) on P ranks under it, and starting that job so that it dies with its starter. ``stragglerlab run
--np`` and ``calibrate --np`` start their jobs so, and so does a calibration whose blocks are launches of their own
(:mod:`.launched`)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from stragglerlab.analysis.errors import UserError
from stragglerlab.realrun import testbed
from stragglerlab.simulator.lifetime import die_with_parent


def mpiexec() -> str:
    """The ``mpiexec`` on PATH, else the one beside the running Python (pip's mpich)."""
    found = (
        os.environ.get("MPIEXEC")
        or shutil.which("mpiexec")
        or shutil.which("mpiexec", path=str(Path(sys.executable).parent))
    )
    if found is None:
        raise UserError("--np needs mpiexec, which is not on PATH (install mpich or an MPI, or run under srun)")
    return found


def launch(np_: int, argv: list[str], module: str = "stragglerlab.cli", per_node: int = 1) -> list[str]:
    """The mpiexec command running ``stragglerlab argv`` (``python -m module argv``) on ``np_`` ranks of this
    machine, or, where this process has a testbed (:func:`.testbed.active`), across its nodes, ``per_node`` ranks to
    a node. With MPICH's hydra on this machine, ranks are not killed when one exits, so the survivors' watchdogs can
    report which rank was lost, and ranks beyond the cores are bound to them round-robin (:func:`binding`). On a
    testbed hydra cleans up as it does by default, and each node's ranks are placed by the system, a node's first
    rank being no more tied to a core than another's. **(choice)** Without its cleanup, hydra (MPICH 5.0) takes every
    rank's normal exit for a failure and signals every other node's proxy; a proxy whose rank has just ended has
    closed its socket, and writing to it killed mpiexec by SIGPIPE (exit status 243 after a finished run) in 3 of
    13 runs of 8 nodes on a loaded machine, and in none of 31 with the cleanup (docs/testbed.md)."""
    command = [mpiexec()]
    tb = testbed.active()
    version = subprocess.run([command[0], "--version"], capture_output=True, text=True).stdout
    if "HYDRA" in version.upper():
        command += testbed.launcher_options(tb, np_, per_node) if tb else ["-disable-auto-cleanup", *binding(np_)]
    elif tb is not None:
        raise UserError(f"--testbed needs MPICH's mpiexec (hydra); {command[0]} is another")
    return [*command, "-n", str(np_), sys.executable, "-m", module, *argv]


def testbed_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--testbed [FILE]`` option of the commands that start ranks."""
    parser.add_argument(
        "--testbed",
        type=Path,
        nargs="?",
        const=testbed.default_file(),
        metavar="FILE",
        help=f"start the ranks across an emulated cluster (stragglerlab testbed up; default FILE "
        f"{testbed.default_file()}), cluster.workers_per_node to a node",
    )


def binding(ranks: int) -> list[str]:
    """Hydra's options placing ``ranks`` ranks on the cores this process may run on: none while each rank can have
    a core of its own (the system places them), else rank r bound to the (r mod C)-th of those C cores. **(choice)**
    Unbound ranks that outnumber the cores are moved between them as the system likes, so which ranks share a core
    changes from one launch to the next and within one, and that decides their rounds: on 2 cores, a 4-rank gossip
    round took 1.5 ms while each rank's neighbours ran on the other core and 3.3 ms while one shared its core, and
    an unbound run's rounds flipped between the two. Bound, every launch on this machine, a calibration's and the
    runs it is to predict, places its ranks alike."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    cores = sorted(os.sched_getaffinity(0))
    if ranks <= len(cores):
        return []
    return ["-bind-to", "user:" + ",".join(str(cores[r % len(cores)]) for r in range(ranks))]


def start(command: list[str], **options: Any) -> subprocess.Popen:
    """Start the job ``command`` (:func:`launch`; ``options`` as ``subprocess.Popen``'s) so that it ends with this
    process: on Linux its launcher gets SIGTERM when this process dies, however it dies (even by SIGKILL), and takes
    its ranks down with it; a killed ``run`` leaves no rank behind."""
    return subprocess.Popen(command, preexec_fn=partial(die_with_parent, signal.SIGTERM, os.getpid()), **options)


#: the lines of the banner MPICH's hydra prints on its standard output when a rank ends by a signal ("BAD TERMINATION
#: OF ONE OF YOUR APPLICATION PROCESSES ... YOUR APPLICATION TERMINATED WITH THE EXIT STRING ..."): after a user's
#: Ctrl-C or kill, or a rank lost, the command says what happened in its own line instead
BANNER = re.compile(
    rb"(={20,}|=   [A-Z].*|YOUR APPLICATION TERMINATED WITH THE EXIT STRING.*"
    rb"|This typically refers to a problem with your application\."
    rb"|Please see the FAQ page for debugging suggestions)\s*"
)


#: a line hydra's own processes write on the standard error ("[proxy:3@node] ...", "[mpiexec@host] ..."): when a job
#: is taken down, every node's proxy reports the lost connection so
HYDRA = re.compile(rb"\[(proxy:[^\]]*|mpiexec@[^\]]*)\] ")


def relay(lines: Iterable[bytes], out: BinaryIO, held: list[bytes] | None = None) -> threading.Thread:
    """Copy a job's output (``lines``, one of the launcher's pipes) to ``out`` in a thread of its own, without the
    launcher's termination banner (:data:`BANNER`); with ``held``, hydra's own lines (:data:`HYDRA`) go there
    instead, for the caller to print where nothing else says why the job failed. Join the thread to have every line
    written."""

    def copy() -> None:
        for line in lines:
            if held is not None and HYDRA.match(line):
                held.append(line)
            elif not BANNER.fullmatch(line):
                out.write(line)
                out.flush()

    thread = threading.Thread(target=copy, name="stragglerlab-relay", daemon=True)
    thread.start()
    return thread
