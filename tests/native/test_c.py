"""C-level tests of the native core (native/tests/*.c), declared MPICH-testlist style: program, ranks, timeout,
arguments.

Each program is compiled with -Werror against the built library and run at every listed size; its exit status is
the verdict (each rank counts its errors, one reduction decides).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stragglerlab.native import SOURCE_DIR
from stragglerlab.realrun.build import find_mpicc
from stragglerlab.simulator.schedules import NATIVE_RING_MIN, flat

#: (program, rank counts, seconds, arguments): odd sizes on purpose; a broken partial collective hangs rather than
#: fails. activation counts the messages on each activation's path at up to 16 ranks (sharing cores: it does not
#: time); stress is the short version of bench_native_stress.py's 10^5 rounds (600 rounds of each kind).
TESTLIST = [
    ("allreduce", [1, 2, 3, 4, 5], 60, []),
    ("quorum", [1, 2, 3, 4], 60, []),
    ("activation", [2, 3, 5, 8, 16], 90, []),
    ("stress", [2, 3, 5], 90, ["600"]),
]


@pytest.fixture(scope="module")
def programs(native_library: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("native-c")
    built = {}
    for name, _, _, _ in TESTLIST:
        exe = out / name
        command = [
            find_mpicc(),
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            str(SOURCE_DIR / "include"),
            str(SOURCE_DIR / "tests" / f"{name}.c"),
            str(native_library),
            "-lm",
            f"-Wl,-rpath,{native_library.parent}",
            "-o",
            str(exe),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        built[name] = exe
    return built


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("name", "ranks", "seconds", "args"), [(name, p, t, a) for name, sizes, t, a in TESTLIST for p in sizes]
)
def test_c_program(programs: dict[str, Path], mpirun_command, name: str, ranks: int, seconds: int, args) -> None:
    done = mpirun_command(ranks, [str(programs[name]), *args], timeout=seconds)
    assert "No Errors" in done.stdout


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_native_schedules_take_the_steps_the_cost_model_counts(native_library: Path, tmp_path: Path) -> None:
    """The native core's schedules take the steps of the simulator's ``native`` schedule at every group size: a
    small vector's recursive doubling (the fold included), a large one's recursive doubling of the round's metadata
    and then the ring."""
    exe = tmp_path / "schedule"
    command = [
        find_mpicc(),
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-I",
        str(SOURCE_DIR / "include"),
        str(SOURCE_DIR / "tests" / "schedule.c"),
        str(native_library),
        f"-Wl,-rpath,{native_library.parent}",
        "-o",
        str(exe),
    ]
    built = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for line in done.stdout.splitlines():
        m, small, large = map(int, line.split())
        members = tuple(range(m))
        assert small == sum(s.repeat for s in flat("native", members, 64.0, m)), line
        assert large == sum(s.repeat for s in flat("native", members, float(NATIVE_RING_MIN), m)), line
    assert len(done.stdout.splitlines()) == 9
