"""Sweeps: grids, cell names, resuming after an interruption, the summary, and MPI ranks."""

import json
import shutil
import subprocess
import sys
import time

import pandas as pd
import pytest

from stragglerlab.cli import main
from stragglerlab.simulator.scenario import ScenarioError
from stragglerlab.simulator.sweep import cells, parse_grid, short_names, split_values
from tests.helpers import scenario
from tests.processes import mpiexec_or_skip


def test_grid_values_split_outside_brackets_and_parse_as_toml():
    assert split_values("[1,2],[3,4], 'a,b'") == ["[1,2]", "[3,4]", "'a,b'"]
    assert parse_grid(["imbalance.slow=[1,1],[1,3]", "cluster.workers=4,8"]) == {
        "imbalance.slow": [[1, 1], [1, 3]],
        "cluster.workers": [4, 8],
    }
    with pytest.raises(ScenarioError, match="expected key=v1,v2"):
        parse_grid(["cluster.workers"])
    with pytest.raises(ScenarioError, match="--seeds"):
        parse_grid(["seed=1,2"])


def test_cells_are_the_cross_product_with_readable_deterministic_names():
    base = scenario(seed=5)
    grid = {"algorithm.name": ["sync", "eager-solo"], "imbalance.slow": [[1, 1], [1, 3]]}
    made = cells(base, grid, seeds=2)
    assert len(made) == 8 and made[0].name == "algorithm-sync_slow-1-1_seed-5"
    assert made[-1].name == "algorithm-eager-solo_slow-1-3_seed-6"
    assert made[-1].scenario.algorithm.name == "eager-solo" and made[-1].scenario.seed == 6
    assert [c.name for c in cells(base, grid, seeds=2)] == [c.name for c in made]
    assert short_names(["algorithm.period", "network.period", "cluster.workers"]) == {
        "algorithm.period": "algorithm.period",
        "network.period": "network.period",
        "cluster.workers": "workers",
    }
    with pytest.raises(ScenarioError, match="cluster.workers"):
        cells(base, {"cluster.workers": [0]})


ARGS = [
    "--set",
    "iterations=15",
    "--set",
    "cluster.workers=4",
    "--grid",
    "algorithm.name=sync,eager-solo",
    "--seeds",
    "2",
]


def meta(folder):
    return json.loads((folder / "meta.json").read_text())


def finished_cells(out):
    """Cell name -> modification time of its meta.json, for the finished cells in ``out``."""
    return {
        p.name: (p / "meta.json").stat().st_mtime_ns
        for p in out.glob("*/")
        if (p / "meta.json").exists() and meta(p)["finished"]
    }


def test_interrupted_sweep_resumes_without_redoing_finished_cells(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "--example", "eager-injected", *ARGS, "-j", "2", "-o", str(out)]) == 0
    assert "4 cells (4 run, 0 already finished)" in capsys.readouterr().out
    names = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert names == [
        "algorithm-eager-solo_seed-1",
        "algorithm-eager-solo_seed-2",
        "algorithm-sync_seed-1",
        "algorithm-sync_seed-2",
    ]
    stamps = {n: (out / n / "meta.json").stat().st_mtime_ns for n in names}
    # interrupt: one cell killed mid-run (meta says unfinished), one never started
    killed = meta(out / names[0])
    (out / names[0] / "meta.json").write_text(json.dumps({**killed, "finished": False}))
    shutil.rmtree(out / names[3])
    assert main(["sweep", "--example", "eager-injected", *ARGS, "-j", "1", "-o", str(out)]) == 0
    assert "4 cells (2 run, 2 already finished)" in capsys.readouterr().out
    for name in names[1:3]:
        assert (out / name / "meta.json").stat().st_mtime_ns == stamps[name]  # not redone
    for name in (names[0], names[3]):
        assert meta(out / name)["finished"]
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(summary["cell"]) == names
    assert set(summary["seed"]) == {1, 2} and summary["finished"].all()


def test_a_finished_run_of_another_scenario_is_not_overwritten(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "--example", "eager-injected", *ARGS, "-j", "1", "-o", str(out)]) == 0
    assert (
        main(["sweep", "--example", "eager-injected", *ARGS, "--set", "workload.batch=7", "-j", "1", "-o", str(out)])
        == 2
    )
    assert "another scenario" in capsys.readouterr().err


def test_killed_sweep_process_resumes(tmp_path):
    """A real interruption: the sweep process is killed after its first cell finished."""
    out = tmp_path / "sweep"
    command = [
        sys.executable,
        "-m",
        "stragglerlab.cli",
        "sweep",
        "--example",
        "eager-injected",
        "--set",
        "iterations=500",
        "--set",
        "cluster.workers=32",
        "--grid",
        "algorithm.name=sync,eager-solo,wagma",
        "--seeds",
        "2",
        "-j",
        "1",
        "-o",
        str(out),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    try:
        while proc.poll() is None and time.monotonic() < deadline and not finished_cells(out):
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    finished = finished_cells(out)
    if len(finished) == 6:
        pytest.skip("the sweep finished before it could be killed")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"({6 - len(finished)} run, {len(finished)} already finished)" in done.stdout
    for name, stamp in finished.items():
        assert (out / name / "meta.json").stat().st_mtime_ns == stamp


@pytest.mark.mpi
def test_sweep_on_mpi_ranks(tmp_path):
    mpiexec = mpiexec_or_skip()
    out = tmp_path / "sweep"
    done = subprocess.run(
        [
            mpiexec,
            "-n",
            "3",
            sys.executable,
            "-m",
            "stragglerlab.cli",
            "sweep",
            "--example",
            "eager-injected",
            *ARGS,
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("4 cells (4 run, 0 already finished)") == 1  # rank 0 reports, alone
    assert all(meta(p)["finished"] for p in out.glob("*/"))
