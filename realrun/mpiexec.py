"""Starting MPI jobs on this machine: the ``mpiexec`` to start them with, the command line that runs ``stragglerlab``
(or another module) on P ranks under it, and starting that job so that it dies with its starter. ``stragglerlab run
--np`` and ``calibrate --np`` start their jobs so, and so does a calibration whose blocks are launches of their own
(:mod:`.launched`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

from stragglerlab.analysis.errors import UserError
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


def launch(np_: int, argv: list[str], module: str = "stragglerlab.cli") -> list[str]:
    """The mpiexec command running ``stragglerlab argv`` (``python -m module argv``) on ``np_`` ranks of this
    machine. With MPICH's hydra, ranks are not killed when one exits, so the survivors' watchdogs can report which
    rank was lost."""
    command = [mpiexec()]
    version = subprocess.run([command[0], "--version"], capture_output=True, text=True).stdout
    if "HYDRA" in version.upper():
        command.append("-disable-auto-cleanup")
    return [*command, "-n", str(np_), sys.executable, "-m", module, *argv]


def start(command: list[str], **options: Any) -> subprocess.Popen:
    """Start the job ``command`` (:func:`launch`; ``options`` as ``subprocess.Popen``'s) so that it ends with this
    process: on Linux its launcher gets SIGTERM when this process dies, however it dies (even by SIGKILL), and takes
    its ranks down with it; a killed ``run`` leaves no rank behind."""
    return subprocess.Popen(command, preexec_fn=partial(die_with_parent, signal.SIGTERM, os.getpid()), **options)
