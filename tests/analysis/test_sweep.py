"""Sweeps: grids, cell names, resuming after an interruption, the summary, and MPI ranks."""

import fcntl
import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from stragglerlab.cli import main
from stragglerlab.simulator.scenario import ScenarioError
from stragglerlab.simulator.sweep import LOCK, cells, parse_grid, short_names, split_values
from tests.helpers import scenario
from tests.processes import ctrl_c_default, mpiexec_or_skip


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
    with pytest.raises(ScenarioError, match="^--grid cluster.workers=0: cluster.workers = 0"):
        cells(base, {"cluster.workers": [0]})
    with pytest.raises(ScenarioError, match="^--grid algorithm.nme=sync: unknown key algorithm.nme"):
        cells(base, parse_grid(["algorithm.nme=sync"]))


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


# cells of a few seconds each on the reference engine: a sweep that is still busy when it is stopped
SLOW = [sys.executable, "-m", "stragglerlab.cli"] + shlex.split(
    "sweep --example eager-injected --set iterations=3000 --set cluster.workers=64 --set engine=reference "
    "--grid algorithm.name=sync,eager-solo --seeds 4 -j 2"
)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def started_sweep(out: Path) -> tuple[subprocess.Popen, list[int]]:
    """A slow sweep into ``out``, once its first cell has started; and its worker processes. It starts with Ctrl-C's
    default action, as in a terminal (:func:`~tests.processes.ctrl_c_default`)."""
    proc = subprocess.Popen(
        [*SLOW, "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_default
    )
    deadline = time.monotonic() + 60
    while not list(out.glob("*/meta.json")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the sweep did not start a cell: {proc.communicate()[1]}")
        time.sleep(0.05)
    return proc, children(proc.pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_cancels_queued_cells_and_returns_at_once(tmp_path):
    out = tmp_path / "sweep"
    proc, workers = started_sweep(out)
    assert workers
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    try:
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert time.monotonic() - sent < 10
    assert proc.returncode == 130 and "stragglerlab sweep: interrupted" in stderr and "Traceback" not in stderr
    started = [p for p in out.iterdir() if p.is_dir()]
    assert len(started) <= 2  # the two running when interrupted; the six queued never ran
    # a cell killed as its folder was made may have no meta.json yet (an empty folder, which a re-run takes)
    assert not any(meta(p)["finished"] for p in started if (p / "meta.json").exists())
    time.sleep(1)
    assert not [pid for pid in workers if alive(pid)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_killed_sweep_takes_its_workers_with_it(tmp_path):
    proc, workers = started_sweep(tmp_path / "sweep")
    assert workers
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 5
    while [pid for pid in workers if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if alive(pid)]


def test_one_sweep_at_a_time_runs_into_a_folder_and_a_damaged_cell_says_to_delete_it(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["sweep", "--example", "eager-injected", *ARGS, "-j", "1", "-o", str(out)]
    out.mkdir()
    with open(out / LOCK, "w") as running:  # as a sweep running into the folder holds it
        fcntl.flock(running, fcntl.LOCK_EX)
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "another sweep is running into this folder" in err and len(err.strip().splitlines()) == 1
    assert list(out.iterdir()) == [out / LOCK]  # nothing ran
    assert main(argv) == 0  # once it ended
    (out / "algorithm-sync_seed-1" / "meta.json").write_text("{damaged")
    assert main([*argv, "--force"]) == 2
    err = capsys.readouterr().err
    assert "meta.json: cannot be read" in err and f"delete {out / 'algorithm-sync_seed-1'}" in err
    shutil.rmtree(out / "algorithm-sync_seed-1")
    assert main(argv) == 0


def test_jobs_must_be_at_least_one(tmp_path, capsys):
    for jobs in ("0", "-1"):
        assert main(["sweep", "--example", "eager-injected", *ARGS, "-j", jobs, "-o", str(tmp_path / "s")]) == 2
        assert f"-j {jobs}: must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_sweep_into_a_file_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert main(["sweep", "--example", "eager-injected", *ARGS, "-o", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err
    assert "exists and is not a folder" in err and len(err.strip().splitlines()) == 1


def test_baseline_speedups_with_intervals_and_json(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["sweep", "--example", "eager-injected", *ARGS, "--grid", "imbalance.delay=0,0.32", "-j", "1"]
    assert main([*argv, "-o", str(out), "--baseline", "sync"]) == 0
    text = capsys.readouterr().out
    assert "speedup in samples/s over sync" in text and "95% interval" in text
    assert main([*argv, "-o", str(out), "--baseline", "sync", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["cells"] == 8 and record["skipped"] == 8 and record["baseline"] == "sync"
    assert len(record["points"]) == 4
    rows = {(r["imbalance.delay"], r["algorithm.name"]): r for r in record["speedups"]}
    assert set(rows) == {(d, a) for d in (0.0, 0.32) for a in ("sync", "eager-solo")}
    assert rows[(0.0, "sync")]["speedup"] == pytest.approx(1.0)
    solo = rows[(0.32, "eager-solo")]
    assert solo["seeds"] == 2 and solo["low"] < solo["speedup"] < solo["high"] and solo["speedup"] > 1.2
    cells = pd.read_csv(out / "summary.csv").set_index("cell")
    ratio = [
        cells.loc[f"algorithm-eager-solo_delay-0.32_seed-{s}", "samples_per_s"]
        / cells.loc[f"algorithm-sync_delay-0.32_seed-{s}", "samples_per_s"]
        for s in (1, 2)
    ]
    assert solo["speedup"] == pytest.approx((ratio[0] * ratio[1]) ** 0.5)
    assert main([*argv, "-o", str(out), "--baseline", "wagma"]) == 2
    assert "--baseline wagma" in capsys.readouterr().err


def test_force_replaces_cells_of_another_scenario_but_never_a_real_run(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["sweep", "--example", "eager-injected", *ARGS, "-j", "1", "-o", str(out)]
    assert main(argv) == 0
    assert main([*argv, "--set", "workload.batch=7", "--force"]) == 0
    assert "4 cells (4 run, 0 already finished)" in capsys.readouterr().out
    assert all(meta(p)["scenario"]["workload"]["batch"] == 7 for p in out.glob("*/"))
    real = out / "algorithm-sync_seed-1"
    (real / "meta.json").write_text(json.dumps({**meta(real), "source": "real"}))
    assert main([*argv, "--force"]) == 2
    assert "real run, which is never replaced" in capsys.readouterr().err
    assert meta(real)["source"] == "real"


def test_printed_tables_keep_grid_values_apart(tmp_path, capsys):
    """The speedup table rounds its figures to three decimals, and its grid values with them would print 1e-10 and
    8e-11 both as 0.000: grid values are printed as given, in both tables."""
    argv = ["sweep", "--example", "eager-injected", *ARGS, "--grid", "network.beta=1e-10,8e-11", "-j", "1"]
    assert main([*argv, "-o", str(tmp_path / "sweep"), "--baseline", "sync"]) == 0
    summary, speedups = capsys.readouterr().out.split("speedup in samples/s over sync")
    for table in (summary, speedups):
        assert len(table.split("1e-10")) == 3 and len(table.split("8e-11")) == 3  # each beta on two rows
