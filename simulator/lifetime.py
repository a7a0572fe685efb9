"""Child processes that do not outlive the command that started them: a sweep's workers, and the ``mpiexec`` of a
real run or a calibration.

On Linux a child asks the kernel for a signal when its parent dies (``prctl(PR_SET_PDEATHSIG)``), which comes even
when the parent is killed outright (SIGKILL), where no handler of the parent could run. Elsewhere a child whose
parent was killed runs on until it ends or its process group is killed.
"""

from __future__ import annotations

import ctypes
import os
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h
LINUX = sys.platform.startswith("linux")
_LIBC = ctypes.CDLL(None) if LINUX else None  # loaded here, not in a freshly forked child


def die_with_parent(signal: int, parent: int) -> None:
    """In a child process: receive ``signal`` when its parent, process ``parent``, dies (on Linux; elsewhere
    nothing). A parent that died before the signal was armed ends the child at once."""
    if _LIBC is None:
        return
    _LIBC.prctl(PR_SET_PDEATHSIG, signal)
    if os.getppid() != parent:
        os._exit(1)
