"""Building the native core: the cache, the one-line errors, and the build-native command."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from stragglerlab.analysis.errors import UserError
from stragglerlab.cli import main
from stragglerlab.realrun import build


def fake_compiler(folder: Path, script: str) -> Path:
    path = folder / "mpicc"
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_missing_compiler_is_a_user_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MPICC", str(tmp_path / "no-such-mpicc"))
    with pytest.raises(UserError, match="MPICC="):
        build.build()


def test_compiler_message_is_shown_on_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    mpicc = fake_compiler(tmp_path, 'echo "pcoll.c:1: error: broken" >&2; echo "second line" >&2; exit 1')
    monkeypatch.setenv("MPICC", str(mpicc))
    monkeypatch.setenv("STRAGGLERLAB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(UserError) as err:
        build.build()
    assert "pcoll.c:1: error: broken | second line" in str(err.value)
    assert "\n" not in str(err.value)
    assert not list((tmp_path / "cache").rglob("*.so")), "a failed build must leave nothing in the cache"


def test_cache_is_keyed_by_flags_and_reused(native_library: Path) -> None:
    assert build.build(werror=True) == native_library  # a cache hit: the same path, not rebuilt
    assert build.build(werror=True).stat().st_mtime == native_library.stat().st_mtime
    mpicc = build.find_mpicc()
    assert build.build_key(mpicc, build.CFLAGS) != build.build_key(mpicc, (*build.CFLAGS, "-Werror"))


def test_build_native_command_prints_the_library(native_library: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["build-native"]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed.name == build.LIBRARY_NAME and printed.exists()


def test_build_native_command_reports_user_errors(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("MPICC", os.path.join(os.sep, "nonexistent", "mpicc"))
    assert main(["build-native"]) == 2
    assert capsys.readouterr().err.startswith("stragglerlab build-native: error: MPICC=")


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_thread_level_below_multiple_is_a_user_error(mpirun_command) -> None:
    worker = str(Path(__file__).with_name("thread_level_worker.py"))
    done = mpirun_command(1, [sys.executable, worker], timeout=50)
    assert "UserError: the native core needs MPI initialised with MPI_THREAD_MULTIPLE" in done.stdout


def test_the_round_layout_is_checked_against_the_binding() -> None:
    """The binding states the core's record layout; a mismatch with the dtype that reads it is a one-line error."""
    from stragglerlab.realrun.collectives import ROUND_DTYPE, check_layout, round_layout

    fields = round_layout()
    check_layout(fields, ROUND_DTYPE.itemsize)
    moved = (fields[0], (fields[1][0], fields[1][1] + 4, fields[1][2]), *fields[2:])
    for wrong in ((moved, ROUND_DTYPE.itemsize), (fields, ROUND_DTYPE.itemsize + 8)):
        with pytest.raises(UserError, match="does not match the binding"):
            check_layout(*wrong)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_the_compiled_binding_states_the_layout_numpy_reads(native_library: Path) -> None:
    """The extension beside the library reports pcoll_round's offsets and size as compiled: ROUND_DTYPE's."""
    import importlib.util

    from stragglerlab.realrun.collectives import check_layout

    spec = importlib.util.spec_from_file_location("_pcoll", build.binding_path(native_library))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    check_layout(module.ROUND_FIELDS, module.ROUND_SIZE)
    assert {name for name, _, _ in module.ROUND_FIELDS} >= {"round", "hops", "t_trigger"}
