"""Temporary folders of a calibration (its timed blocks' run folders), which nothing leaves behind in the temporary
folder. ``calibrate --np`` makes one (:func:`scratch_folder`), its own temporary folder meanwhile, and hands it to
its ranks as theirs (``TMPDIR``), so what they and it make goes inside; it is removed when the calibration ends,
fails, is interrupted or terminated (:func:`stop_on_sigterm`), even when the ranks were killed and could not clean
up. Since a process killed outright (SIGKILL) runs no clean-up at all, the folder's name carries its host and
process, and the next calibration on that host removes the folders of processes that no longer run.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stragglerlab.realrun.watchdog import alive

PREFIX = "stragglerlab-calibrate-"


def _owner(folder: Path, host: str) -> int | None:
    """The process that made ``folder`` on ``host`` (None: made elsewhere, or not one of these folders)."""
    rest = folder.name.removeprefix(PREFIX)
    made_on, _, pid = rest.rpartition("-")[0].rpartition("-")
    return int(pid) if made_on == host and pid.isdigit() else None


def remove_stale(root: Path | None = None) -> None:
    """Remove the folders of calibrations on this host whose process no longer runs."""
    root, host = Path(root or tempfile.gettempdir()), socket.gethostname()
    for folder in root.glob(f"{PREFIX}*"):
        pid = _owner(folder, host)
        if pid is not None and not alive(pid):
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def scratch_folder() -> Iterator[Path]:
    """A temporary folder of this process, removed when the body ends however it ends (but for SIGKILL, which the
    next calibration clears up). Meanwhile it is this process's temporary folder too (``tempfile``), so what the
    body makes there goes inside it."""
    remove_stale()
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}{socket.gethostname()}-{os.getpid()}-") as name:
        before, tempfile.tempdir = tempfile.tempdir, name
        try:
            yield Path(name)
        finally:
            tempfile.tempdir = before


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """From now on SIGTERM stops this process as Ctrl-C does (a KeyboardInterrupt), so every clean-up on the way
    out runs. Only for a process that waits on its children: an MPI rank blocked in MPI would not see it until the
    call returned."""
    signal.signal(signal.SIGTERM, _interrupt)
