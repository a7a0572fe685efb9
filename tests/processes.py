"""Running a command (usually ``mpiexec``) from a test with a hard time limit, so a deadlock fails the test instead
of hanging the suite; the processes a command started, to see that none outlives it; and how a child takes Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest


def ctrl_c_default() -> None:
    """A child's ``preexec_fn``: Ctrl-C's default action, as in a terminal. A test runner started in the background
    (``pytest &`` in a script) ignores SIGINT, and its children would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_bounded(command: list[str], timeout: float, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """Run ``command``; past ``timeout`` seconds terminate it (mpiexec forwards that to its ranks), kill it if that
    does not end it, and fail the test."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        pytest.fail(f"{' '.join(command)} did not finish in {timeout} s (deadlock?)")
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def mpiexec_or_skip() -> str:
    """The ``mpiexec`` real runs would use (:func:`~stragglerlab.realrun.commands.run.mpiexec`); skip the test without
    one."""
    from stragglerlab.analysis.errors import UserError
    from stragglerlab.realrun.mpiexec import mpiexec

    try:
        return mpiexec()
    except UserError:
        pytest.skip("no mpiexec (install the mpi extra)")


def descendants(pid: int) -> set[int]:
    """The processes that ``pid`` started, and theirs, down the tree (from ``/proc``: Linux)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def still_running(pids: set[int], within: float) -> set[int]:
    """Those of ``pids`` still running (zombies, dead but not yet reaped, do not count) ``within`` seconds from now,
    or sooner once none is."""
    from stragglerlab.realrun.watchdog import alive

    deadline = time.monotonic() + within
    while True:
        running = {pid for pid in pids if alive(pid)}
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.1)


def end_all(proc: subprocess.Popen, job: set[int]) -> None:
    """Kill what a test started and did not see end (``job``, ``proc``'s descendants, ``proc``): for its ``finally``,
    so a failed test leaves no process behind."""
    for pid in still_running(job | descendants(proc.pid), within=0):
        os.kill(pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.kill()
    proc.communicate()
