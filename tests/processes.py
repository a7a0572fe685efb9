"""Running a command (usually ``mpiexec``) from a test with a hard time limit, so a deadlock fails the test instead
of hanging the suite."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


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
    from stragglerlab.realrun.commands.run import mpiexec

    try:
        return mpiexec()
    except UserError:
        pytest.skip("no mpiexec (install the mpi extra)")
