"""Spawner for the real-run tests: ``stragglerlab`` subcommands on P ranks under mpiexec, each with a timeout.

Runs are timing-only or tiny torch models, a few seconds each; ranks oversubscribe small machines. Skipped when
mpiexec, mpi4py or an MPI C compiler is absent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import run_bounded

ROOT = Path(__file__).resolve().parents[2]


def environment() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture(scope="session")
def native_ready() -> None:
    pytest.importorskip("mpi4py")
    from stragglerlab.analysis.errors import UserError
    from stragglerlab.realrun.build import build

    try:
        build()
    except UserError as err:
        pytest.skip(str(err))


@pytest.fixture
def spawn(native_ready):
    """``spawn(P, argv, timeout)``: ``stragglerlab argv`` on P ranks; the completed process (any exit status)."""
    from stragglerlab.analysis.errors import UserError
    from stragglerlab.realrun.mpiexec import launch

    def run(ranks: int, argv: list[str], timeout: float = 90.0) -> subprocess.CompletedProcess:
        try:
            command = launch(ranks, argv)
        except UserError as err:
            pytest.skip(str(err))
        return run_bounded(command, timeout, environment(), ROOT)

    return run


@pytest.fixture
def scenario_file(tmp_path):
    """Write a scenario TOML (text) and return its path."""

    def write(text: str, name: str = "real") -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(text)
        return path

    return write


def stragglerlab(*argv: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """A single-process ``stragglerlab`` command (no MPI)."""
    return subprocess.run(
        [sys.executable, "-m", "stragglerlab.cli", *argv],
        capture_output=True,
        text=True,
        env=environment(),
        cwd=ROOT,
        timeout=timeout,
    )
