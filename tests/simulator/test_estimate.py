"""The memory and time estimate: refuses what cannot fit before allocating, and is of the right size."""

from __future__ import annotations

import os
import subprocess
import sys
import time

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
    assert wide.memory - base.memory == pytest.approx(64 * 10_000 * 8 * 3)
    mlp = estimate(scenario("workload.model=mlp", "iterations=60", "workload.hidden=[64]"), "fast")
    assert mlp.memory < GIB
    assert estimate(scenario("cluster.workers=4096"), "reference").seconds > estimate(scenario(), "reference").seconds
    both = combined([Estimate(1.0, 10.0), Estimate(3.0, 20.0), Estimate(2.0, 30.0)], jobs=2)
    assert both == Estimate(5.0, 30.0)
    assert combined([Estimate(1.0, 10.0), Estimate(3.0, 20.0)]) == Estimate(3.0, 30.0)


def test_check_prints_large_runs_and_refuses_beyond_the_memory_available():
    free = available_memory()
    assert free is not None and free > 0
    assert check("small", Estimate(2**20, 1.0), False) is None
    assert "estimated about" in check("long", Estimate(2**20, 3600.0), False)
    with pytest.raises(UserError, match="more than the .* of memory available"):
        check("huge", Estimate(free * 2, 1.0), False)
    assert "huge" in check("huge", Estimate(free * 2, 1.0), True)


@pytest.mark.skipif(not hasattr(os, "wait4"), reason="needs os.wait4 for the child's peak memory")
def test_a_billion_workers_are_refused_at_once_without_allocating(tmp_path):
    command = [sys.executable, "-m", "stragglerlab.cli", "simulate", EXAMPLE, "--set", "cluster.workers=1000000000"]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # not proc.poll(): it would reap the child first
    while not pid:
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("simulate of 10^9 workers was not refused within 120 s")
        time.sleep(0.05)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read()
    assert proc.returncode == 2, stderr
    assert "estimated" in stderr and "TiB" in stderr and len(stderr.strip().splitlines()) == 1
    assert usage.ru_maxrss * 1024 < GIB  # ru_maxrss is in KiB on Linux
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(not hasattr(os, "wait4"), reason="needs os.wait4 for the child's peak memory")
@pytest.mark.timeout(120)
def test_the_estimate_is_within_a_factor_two_of_a_measured_run(tmp_path):
    keys = ["cluster.workers=65536", "iterations=64"]
    command = [sys.executable, "-m", "stragglerlab.cli", "simulate", EXAMPLE, "--summary-only", "-o", "run"]
    proc = subprocess.Popen([*command, *(x for k in keys for x in ("--set", k))], cwd=tmp_path)
    _, status, usage = os.wait4(proc.pid, 0)  # the pytest timeout bounds it
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    measured = usage.ru_maxrss * 1024
    need = estimate(scenario(*keys), "fast", ()).memory
    assert measured / 2 < need < measured * 2
