"""The memory and time estimate: refuses what cannot fit before allocating, and is of the right size."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from stragglerlab.analysis.errors import UserError
from stragglerlab.simulator.catalog import example_path
from stragglerlab.simulator.estimate import GIB, Estimate, available_memory, check, combined, estimate, window
from stragglerlab.simulator.scenario import load

EXAMPLE = str(example_path("eager-injected"))


def scenario(*overrides: str):
    return load(EXAMPLE, list(overrides))


def test_window_and_what_the_estimate_counts():
    assert window(1) == 2048 and window(2**20) == 64 and window(4096) == 512
    small = estimate(scenario("cluster.workers=8", "iterations=10"), "fast")
    assert small.memory < GIB and small.seconds < 1 and not small.large
    kept = estimate(scenario("cluster.workers=4096", "iterations=1000"), "fast")
    bare = estimate(scenario("cluster.workers=4096", "iterations=1000"), "fast", ())
    assert kept.memory - bare.memory >= 4096 * 1000 * 88  # the iterations table, at least once


def test_a_trained_model_is_estimated_by_its_own_parameter_count():
    # with a model, messages and replicas follow the model, not workload.params (25.5 M in this example)
    base = estimate(scenario("workload.model=hyperplane", "iterations=60"), "fast")
    wide = estimate(scenario("workload.model=hyperplane", "iterations=60", "workload.dimension=10100"), "fast")
    assert base.memory < GIB
    samples = 32_768  # the data set grows too: float32 samples, 10,000 more features each
    assert wide.memory - base.memory == pytest.approx(64 * 10_000 * 8 * 3 + samples * 10_000 * 4)
    mlp = estimate(scenario("workload.model=mlp", "iterations=60", "workload.hidden=[64]"), "fast")
    assert mlp.memory < GIB
    assert estimate(scenario("cluster.workers=4096"), "reference").seconds > estimate(scenario(), "reference").seconds
    both = combined([Estimate(1.0, 10.0), Estimate(3.0, 20.0), Estimate(2.0, 30.0)], jobs=2)
    assert both == Estimate(5.0, 30.0)
    assert combined([Estimate(1.0, 10.0), Estimate(3.0, 20.0)]) == Estimate(3.0, 30.0)


def test_a_built_in_model_s_data_set_is_counted_so_a_huge_one_is_refused_before_it_is_made():
    mixture = estimate(
        scenario("workload.model=logistic", "workload.samples=2000000", "workload.dimension=500"), "fast"
    )
    bare = estimate(scenario("workload.model=logistic", "workload.samples=1000000", "workload.dimension=500"), "fast")
    assert mixture.memory - bare.memory >= 1_000_000 * 500 * 8  # float64 features, at least once
    with pytest.raises(UserError, match="needs about .* TiB of memory"):
        check(
            "simulate", estimate(scenario("workload.model=hyperplane", "workload.samples=1000000000000"), "fast"), False
        )


def test_check_prints_large_runs_and_refuses_beyond_the_memory_available():
    free = available_memory()
    assert free is not None and free > 0
    assert check("small", Estimate(2**20, 1.0), False) is None
    assert "estimated about" in check("long", Estimate(2**20, 3600.0), False)
    with pytest.raises(UserError, match="more than the .* of memory available"):
        check("huge", Estimate(free * 2, 1.0), False)
    assert "huge" in check("huge", Estimate(free * 2, 1.0), True)


# Runs the command after the script's own arguments in a process forked from this small one, not from pytest's: a
# child starts with its parent's resident set as its peak (vfork and fork alike, and exec keeps the peak), so a child
# of a pytest that has grown to a gigabyte would report a gigabyte. Writes the grandchild's peak in bytes to argv[1].
PEAK = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
_, status, usage = os.wait4(pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss * 1024))  # KiB on Linux
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_run(tmp_path, argv: list[str], timeout: float) -> tuple[subprocess.CompletedProcess, int]:
    """``python argv`` in ``tmp_path``, and its peak resident set in bytes; the test fails after ``timeout`` s."""
    peak = tmp_path / "peak"
    command = [sys.executable, "-c", PEAK, str(peak), *argv]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"{' '.join(argv)} did not end within {timeout:.0f} s")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), int(peak.read_text())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork and os.wait4 for the child's peak memory")
def test_a_billion_workers_are_refused_at_once_without_allocating(tmp_path):
    argv = ["-m", "stragglerlab.cli", "simulate", EXAMPLE, "--set", "cluster.workers=1000000000"]
    proc, peak = peak_run(tmp_path, argv, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "estimated" in proc.stderr and "TiB" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert peak < GIB
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork and os.wait4 for the child's peak memory")
@pytest.mark.timeout(180)
def test_the_estimate_is_within_a_factor_two_of_a_measured_run(tmp_path):
    keys = ["cluster.workers=65536", "iterations=64"]
    argv = ["-m", "stragglerlab.cli", "simulate", EXAMPLE, "--summary-only", "-o", "run"]
    proc, measured = peak_run(tmp_path, [*argv, *(x for k in keys for x in ("--set", k))], timeout=170)
    assert proc.returncode == 0, proc.stderr
    need = estimate(scenario(*keys), "fast", ()).memory
    assert measured / 2 < need < measured * 2
