"""A rank that dies mid-run (``stragglerlab run --np``): the job stops within a bounded time with a message naming
the lost rank, and the run folder reads back, marked unfinished, with the error in ``meta.json``. A ``run`` process
killed mid-run takes its whole job (mpiexec, its proxy, every rank) with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from stragglerlab.analysis.runfolder import load_run
from tests.processes import ctrl_c_default, descendants, end_all, still_running
from tests.realrun.conftest import ROOT, environment

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]

SCENARIO = """
seed = 1
iterations = 400
[cluster]
workers = 3
[workload]
params = 128
compute = { dist = "constant", mean = 0.02 }
[algorithm]
name = "eager-solo"
sync_period = 8
"""


def _pid_of(folder, rank: int, deadline: float) -> int:
    """The pid in a rank's heartbeat, once the rank has written rows (so the kill lands mid-run)."""
    beat = folder / ".live" / f"rank-{rank:05d}.json"
    while time.monotonic() < deadline:
        parts = (
            list((folder / "iterations.parquet").glob(f"part-r{rank:05d}-*.parquet"))
            if (folder / "iterations.parquet").is_dir()
            else []
        )
        if beat.exists() and parts:
            return json.loads(beat.read_text())["pid"]
        time.sleep(0.2)
    pytest.fail("the run never started writing")


# every algorithm with its own exchange: rounds through the native core, a server thread on rank 0 (killed with rank
# 0 too), point-to-point gossip with fixed peers and with a peer thread (ad-psgd); the kill takes a different rank
# in turn, rank 0 where it holds more than a worker
KILLS = [
    ("eager-solo", 1),
    ("eager-solo", 0),
    ("quorum", 2),
    ("async-ps", 1),
    ("async-ps", 0),
    ("easgd", 0),
    ("d-psgd", 1),
    ("sgp", 2),
    ("ad-psgd", 1),
]


@pytest.mark.parametrize(("algorithm", "victim"), KILLS)
def test_killing_a_rank_stops_the_others_with_its_name(native_ready, scenario_file, tmp_path, victim, algorithm):
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "stragglerlab.cli",
        "run",
        str(scenario_file(SCENARIO)),
        "--np",
        "3",
        "--set",
        f"algorithm.name={algorithm}",
        "-o",
        str(out),
    ]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(), cwd=ROOT
    )
    try:
        os.kill(_pid_of(out, victim, time.monotonic() + 60), signal.SIGKILL)
        killed = time.monotonic()
        _, stderr = proc.communicate(timeout=30)
        stopped = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    assert stopped < 30
    assert f"rank {victim} (pid" in stderr, stderr
    run = load_run(out)
    assert not run.finished
    assert len(run.iterations) > 0
    assert f"rank {victim} (pid" in run.meta["error"]


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_killing_the_run_process_leaves_no_rank_running(native_ready, scenario_file, tmp_path, how):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "stragglerlab.cli", "run", str(scenario_file(SCENARIO)), "--np", "2"]
    command += ["--set", "cluster.workers=2", "--set", "iterations=100000", "-o", str(out)]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment(), cwd=ROOT, preexec_fn=ctrl_c_default
    )
    job: set[int] = set()
    try:
        ranks = {_pid_of(out, rank, time.monotonic() + 60) for rank in (0, 1)}
        job = descendants(proc.pid)  # mpiexec, its proxy and the ranks
        assert ranks <= job and len(job) >= 4, job
        proc.send_signal(how)
        # it ends: within the command's own bounds (5 s for the job to stop, 5 s for its output) on an idle machine;
        # the limit here is liveness, with room for a loaded one
        stdout, stderr = proc.communicate(timeout=60)
        assert still_running(job, within=5.0) == set()
        assert b"BAD TERMINATION" not in stdout and b"YOUR APPLICATION" not in stdout, stdout
        if how != signal.SIGKILL:  # the command ends the job itself: one line, and no heartbeats left behind
            err = stderr.decode()
            assert "Traceback" not in err and err.strip().splitlines()[-1] == "stragglerlab run: interrupted", err
            assert not (out / ".live").exists()
    finally:
        end_all(proc, job)
