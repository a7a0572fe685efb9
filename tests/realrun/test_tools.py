"""calibrate on 2 ranks writes a fragment that simulate loads; slurm prints a script bash accepts."""

from __future__ import annotations

import subprocess

import pytest

from stragglerlab.simulator.scenario import load
from tests.realrun.conftest import stragglerlab


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_calibrate_writes_a_fragment_that_simulate_accepts(native_ready, tmp_path):
    fragment = tmp_path / "calibrated.toml"
    proc = stragglerlab(
        "calibrate",
        "--np",
        "2",
        "--set",
        "workload.model=torch:mlp",
        "--set",
        "workload.batch=16",
        "--compute-iterations",
        "10",
        "-o",
        str(fragment),
        timeout=110,
    )
    assert proc.returncode == 0, proc.stderr
    text = fragment.read_text()
    assert "ping-pong: alpha =" in text and "±" in text and "allreduce (ring, 2 ranks): gamma =" in text
    scenario = load(fragment)
    assert scenario.network.alpha > 0 and scenario.network.beta > 0 and scenario.network.gamma >= 0
    assert scenario.workload.compute.mean > 0
    proc = stragglerlab(
        "simulate", str(fragment), "--set", "iterations=5", "--set", "cluster.workers=4", "-o", str(tmp_path / "sim")
    )
    assert proc.returncode == 0, proc.stderr


def test_calibrate_needs_two_ranks():
    proc = stragglerlab("calibrate", "--np", "1")
    assert proc.returncode == 2 and "at least 2 ranks" in proc.stderr


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_slurm_script_passes_bash_syntax_check(tmp_path, device):
    proc = stragglerlab(
        "slurm",
        "--example",
        "eager-injected",
        "--nodes",
        "2",
        "--tasks-per-node",
        "4",
        "--partition",
        "gpu",
        "--time",
        "00:30:00",
        "--set",
        f"workload.device={device}",
        "--setup",
        "source ~/venv/bin/activate",
        "--srun-args=--mpi=pmi2",
    )
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    assert script.startswith("#!/bin/bash\n")
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=00:30:00",
        "--set cluster.workers=8",
        "--set cluster.workers_per_node=4",
    ):
        assert line in script
    assert ("#SBATCH --gpus-per-node=4" in script) == (device == "cuda")
    assert "srun --kill-on-bad-exit=1 --mpi=pmi2 stragglerlab run --example eager-injected" in script
    path = tmp_path / "job.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def test_slurm_rejects_a_bad_allocation():
    proc = stragglerlab("slurm", "--example", "eager-injected", "--nodes", "0", "--tasks-per-node", "4")
    assert proc.returncode == 2 and "at least 1" in proc.stderr
