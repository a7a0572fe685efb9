"""Spawner for the native-core tests: build the library once (with -Werror), run worker scripts under mpiexec.

Every spawned job has a timeout, so a deadlock fails its test instead of hanging the suite. The tests are
skipped only when mpiexec or an MPI C compiler is absent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import mpiexec_or_skip, run_bounded

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture(scope="session")
def native_library() -> Path:
    """Path of the library, compiled with -Werror (so a warning fails the suite)."""
    from stragglerlab.analysis.errors import UserError
    from stragglerlab.realrun.build import build, find_mpicc

    mpiexec_or_skip()
    try:
        find_mpicc()
    except UserError as err:
        pytest.skip(str(err))
    return build(werror=True)


@pytest.fixture
def mpirun_command(native_library: Path):
    """Run argv on P ranks; returns the completed process, fails on timeout or a non-zero exit."""

    def run(ranks: int, argv: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        done = run_bounded([mpiexec_or_skip(), "-n", str(ranks), *argv], timeout, env, ROOT)
        assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    return run


@pytest.fixture
def mpirun(mpirun_command):
    """Run the Python script tests/native/<script> on P ranks under ``python -m mpi4py`` (an exception on one rank
    aborts the job)."""

    def run(ranks: int, script: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        return mpirun_command(ranks, [sys.executable, "-m", "mpi4py", str(HERE / script), *args], timeout=timeout)

    return run
