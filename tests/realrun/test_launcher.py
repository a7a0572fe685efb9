"""What ``run`` and ``calibrate`` check before they start ranks, how they place them, and what they leave: ranks whose
estimated memory exceeds the machine's are refused before any starts, ranks beyond the cores are warned about and
bound to them round-robin, and a calibration's temporary folder is removed however it ends."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.realrun import footprint, mpiexec, scratch
from stragglerlab.realrun.algorithms.base import exchange_class
from stragglerlab.realrun.algorithms.native import GradientExchange
from stragglerlab.realrun.commands import calibrate as calibrate_command
from stragglerlab.realrun.commands import run as run_command
from stragglerlab.simulator import algorithms, estimate
from stragglerlab.simulator.catalog import example_path
from stragglerlab.simulator.scenario import load
from tests.processes import descendants, end_all, run_bounded, still_running
from tests.realrun.conftest import ROOT, environment

GIB = 2**30
STOPPED = 3  # what the stand-in for calibrate's job returns: calibrate stops there and returns it, fitting nothing


def test_a_rank_holds_its_interpreter_and_its_exchange_s_vectors():
    injected = load(example_path("eager-injected"))  # eager-solo, 25,557,032 parameters, timing only
    per_parameter = GradientExchange.bytes_per_parameter
    assert footprint.rank_memory(injected, "native") == footprint.BASE + per_parameter * 25_557_032
    assert footprint.run_memory(injected, "native", 64).memory == 64 * footprint.rank_memory(injected, "native")
    sync = injected.replace(**{"algorithm.name": "sync"})
    assert footprint.rank_memory(sync, "torch") > footprint.TORCH_BASE  # torch imported, DDP's own copies
    torch_model = injected.replace(**{"workload.model": "torch:mlp"})  # its size is known once built: not counted
    assert footprint.rank_memory(torch_model, "native") == footprint.TORCH_BASE
    mlp = injected.replace(**{"workload.model": "mlp"})  # a numpy model: its data set and its own parameter count
    assert footprint.BASE + 32_768 * 100 * 8 < footprint.rank_memory(mlp, "native") < footprint.BASE + 40 * 2**20
    # a calibration: the workload, or the largest timed round of any algorithm
    assert footprint.calibration_memory(injected, 4, "native", [], 0).memory == 4 * footprint.BASE
    timed = footprint.calibration_memory(injected, 4, "native", ["sync", "wagma"], 2**22).memory
    assert timed == 4 * (footprint.BASE + max(GradientExchange.bytes_per_parameter, 68) * 2**20)


def test_every_exchange_says_what_it_holds_per_parameter():
    for record in algorithms.RECORDS:
        for backend in record.exchanges:
            assert 0 < exchange_class(record, backend).bytes_per_parameter <= 100, (record.name, backend)


@pytest.fixture
def launches(monkeypatch, tmp_path):
    """The ranks ``run`` and ``calibrate`` would start (nothing starts), outside any launcher, in ``tmp_path``."""
    started: list[tuple[int, dict]] = []

    class Job:
        def __init__(self, command, **options):
            started.append((int(command[command.index("-n") + 1]), options))
            env = options.get("env") or {}
            self.scratch = Path(env["TMPDIR"]) if "TMPDIR" in env else None

        def wait(self):
            # the ranks' temporary folder while they run, and the launching process's own
            assert self.scratch is None or (self.scratch.is_dir() and tempfile.gettempdir() == str(self.scratch))
            return STOPPED

    monkeypatch.setattr(
        run_command, "_launch_and_watch", lambda ranks, argv, folder, per_node: started.append((ranks, {}))
    )
    monkeypatch.setattr(calibrate_command, "start", Job)
    monkeypatch.setattr(calibrate_command, "launch", lambda ranks, argv, per_node=1: ["mpiexec", "-n", str(ranks)])
    for variable in run_command.LAUNCHER_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)
    return started


def one_line(capsys, *words: str) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


def test_run_refuses_ranks_that_need_more_memory_than_the_machine_has_before_starting_any(
    launches, monkeypatch, tmp_path, capsys
):
    monkeypatch.setattr(estimate, "available_memory", lambda: 8 * GIB)
    # 64 ranks (cluster.workers) of a 25.6 M-parameter model: about 80 GiB
    assert main(["run", "--example", "eager-injected"]) == 2
    one_line(capsys, "run eager-injected on 64 ranks needs about 8", "more than the 8 GiB", "--force")
    assert main(["run", "--example", "eager-injected", "--np", "2", "--set", "workload.params=10_000_000_000"]) == 2
    one_line(capsys, "on 2 ranks needs about 8", "fewer ranks or a smaller model")
    assert launches == [] and not (tmp_path / "runs").exists()
    assert main(["run", "--example", "eager-injected", "--force"]) == 0
    assert launches == [(64, {})]
    assert "estimated about 8" in capsys.readouterr().err  # what it will need, said before it starts


def test_calibrate_refuses_ranks_beyond_the_memory_and_warns_beyond_the_cores(launches, monkeypatch, capsys):
    monkeypatch.setattr(estimate, "available_memory", lambda: 2**29)  # 512 MiB: two ranks' interpreters fit
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    for counts in ("3", "2,3"):  # a list's jobs run one after the other: its largest must fit
        assert main(["calibrate", "--np", counts]) == 2
        one_line(capsys, "calibrate on 3 ranks needs about", "calibrate on fewer ranks (--np)", "--force")
    assert main(["calibrate", "--np", "2"]) == STOPPED and capsys.readouterr().err == ""
    assert main(["calibrate", "--np", "3", "--force"]) == STOPPED
    one_line(capsys, "warning: 3 ranks on 2 cores", "UNSTABLE", "fits flagged")
    assert [ranks for ranks, _ in launches] == [2, 3]
    scratches = [Path(options["env"]["TMPDIR"]) for _, options in launches]
    assert all(s.name.startswith(f"stragglerlab-calibrate-{socket.gethostname()}-{os.getpid()}-") for s in scratches)
    assert not any(s.exists() for s in scratches)  # removed once the calibration ended


def test_the_folders_of_their_outputs_are_made_before_any_rank_starts(launches, tmp_path):
    # as every output's folders are (run folders, sweeps, figures)
    assert main(["calibrate", "--np", "2", "-o", str(tmp_path / "new" / "c.toml")]) == STOPPED
    small = ["--example", "eager-injected", "--set", "workload.params=100", "--np", "2", "--set", "cluster.workers=2"]
    assert main(["run", *small, "--save-model", str(tmp_path / "models" / "m.npy"), "-o", str(tmp_path / "r")]) == 0
    assert (tmp_path / "new").is_dir() and (tmp_path / "models").is_dir() and len(launches) == 2


def test_ranks_beyond_the_cores_are_bound_to_them_round_robin_and_others_left_to_the_system(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5, 3}, raising=False)
    assert mpiexec.binding(2) == []
    assert mpiexec.binding(5) == ["-bind-to", "user:3,5,3,5,3"]


AFFINITY = """
import os, sys
from pathlib import Path
Path(sys.argv[1], os.environ["PMI_RANK"]).write_text(" ".join(map(str, sorted(os.sched_getaffinity(0)))))
"""


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="binds only where cores can be listed (Linux)")
def test_the_launched_ranks_run_on_the_cores_they_are_bound_to(monkeypatch, tmp_path):
    core = max(os.sched_getaffinity(0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {core})  # as if this process had one core: 2 ranks
    script = tmp_path / "affinity.py"
    script.write_text(AFFINITY)
    proc = run_bounded([*mpiexec.launch(2, [])[:-2], str(script), str(tmp_path)], 90, environment(), ROOT)
    assert proc.returncode == 0, proc.stderr
    assert [(tmp_path / str(rank)).read_text() for rank in (0, 1)] == [str(core), str(core)]


def test_a_scratch_folder_left_by_a_killed_process_goes_with_the_next_calibration(tmp_path):
    host = socket.gethostname()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    left = tmp_path / f"stragglerlab-calibrate-{host}-{gone.pid}-abc_1"
    running = tmp_path / f"stragglerlab-calibrate-{host}-{os.getpid()}-abc_2"
    elsewhere = tmp_path / f"stragglerlab-calibrate-other-host-{gone.pid}-abc_3"
    for folder in (left, running, elsewhere):
        (folder / "block").mkdir(parents=True)
    scratch.remove_stale(tmp_path)
    assert not left.exists() and running.exists() and elsewhere.exists()


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_terminated_calibration_leaves_no_rank_and_no_temporary_folder(native_ready, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    command = [sys.executable, "-m", "stragglerlab.cli", "calibrate", "--np", "2", "-o", str(tmp_path / "c.toml")]
    command += ["--set", "workload.model=torch:mlp", "--compute-iterations", "1000000"]  # runs until stopped
    env = {**environment(), "TMPDIR": str(tmp)}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT, text=True)
    job: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while len(job) < 4 and time.monotonic() < deadline:  # mpiexec, its proxy and both ranks
            time.sleep(0.2)
            job = descendants(proc.pid)
        assert len(job) >= 4 and list(tmp.glob("stragglerlab-calibrate-*")), job
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)  # liveness: room for a loaded machine
        assert proc.returncode == 130 and "interrupted" in err, err
        assert still_running(job, within=5.0) == set()
        assert list(tmp.iterdir()) == []
    finally:
        end_all(proc, job)
