"""calibrate on 2 ranks writes a fragment that simulate loads; slurm prints a script bash accepts."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.runfolder import load_run
from stragglerlab.cli import main
from stragglerlab.realrun.commands import run as run_command
from stragglerlab.realrun.launched import Launched
from stragglerlab.realrun.mpiexec import launch
from stragglerlab.simulator.run import simulate
from stragglerlab.simulator.scenario import load
from tests.helpers import scenario
from tests.processes import run_bounded
from tests.realrun.conftest import environment, stragglerlab


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
    assert "ping-pong over 2 ranks: " in text and "network model fitted to every figure over 2 ranks" in text
    assert "allreduce: RMS relative residual" in text and "burst: RMS relative residual" in text
    assert "ping-pong over 2 ranks" in proc.stdout and f"fragment: {fragment}" in proc.stdout  # a summary, not a path
    again = ["calibrate", "--np", "2", "--compute-iterations", "2", "-o", str(fragment)]
    proc = stragglerlab(*again)
    assert proc.returncode == 2 and "exists; give --force" in proc.stderr and fragment.read_text() == text
    proc = stragglerlab(*again, "--force", "--json", timeout=110)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["output"] == str(fragment) and record["network"]["alpha"] > 0 and record["notes"]
    assert fragment.read_text() != text
    scenario = load(fragment)
    assert scenario.network.alpha > 0 and scenario.network.beta > 0 and scenario.network.gamma >= 0
    assert scenario.network.message_overhead >= 0 and scenario.network.allreduce == "ring"
    assert scenario.workload.compute.mean > 0
    proc = stragglerlab(
        "simulate", str(fragment), "--set", "iterations=5", "--set", "cluster.workers=4", "-o", str(tmp_path / "sim")
    )
    assert proc.returncode == 0, proc.stderr


def test_calibrate_needs_two_ranks():
    proc = stragglerlab("calibrate", "--np", "1")
    assert proc.returncode == 2 and "at least 2 ranks" in proc.stderr
    proc = stragglerlab("calibrate", "--np", "2,1")
    assert proc.returncode == 2 and "at least 2 ranks" in proc.stderr
    proc = stragglerlab("calibrate", "--np", "2,x")
    assert proc.returncode == 2 and "not a rank count or a list of them" in proc.stderr


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
    job = ["slurm", "--example", "eager-injected", "--nodes", "1", "--tasks-per-node", "4"]
    for limit in ("forever", "1:2:3:4", "-5", "1-"):
        one_line_error(stragglerlab(*job, "--time", limit), f"--time {limit}: not a Slurm time limit")
    for limit in ("90", "30:00", "01:00:00", "2-12", "2-12:30", "2-12:30:00", "UNLIMITED"):
        assert f"#SBATCH --time={limit}\n" in stragglerlab(*job, "--time", limit).stdout


def test_run_refuses_a_heartbeat_timeout_that_is_no_time(capsys):
    for timeout in ("-5", "0", "nan", "inf"):
        assert main(["run", "--example", "eager-injected", "--heartbeat-timeout", timeout]) == 2
        assert "must be a number of seconds > 0" in capsys.readouterr().err


def one_line_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


def test_calibrate_refuses_outputs_it_cannot_or_may_not_write_before_measuring(tmp_path):
    (tmp_path / "mine.toml").write_text("# mine\n")
    (tmp_path / "file").write_text("not a folder")
    for output, words in (
        (tmp_path / "mine.toml", ("exists; give --force",)),
        (tmp_path / "file" / "c.toml", ("exists and is not a folder",)),
        (tmp_path, ("is a folder",)),
        ("/proc/stragglerlab-c.toml", ("cannot write into /proc",)),
    ):
        one_line_error(stragglerlab("calibrate", "--np", "2", "-o", str(output)), *words)
    assert (tmp_path / "mine.toml").read_text() == "# mine\n"
    one_line_error(stragglerlab("calibrate", "--np", "2", "--compute-iterations", "0"), "at least 2")


def test_validate_reads_a_bad_calibration_or_a_damaged_run_as_one_line_errors(tmp_path):
    run = simulate(scenario(**{"cluster.workers": 2, "iterations": 5}), tmp_path / "run")
    (tmp_path / "binary.toml").write_bytes(bytes(range(256)))
    (tmp_path / "values.toml").write_text('[network]\nalpha = "fast"\n')
    (tmp_path / "none.toml").write_text("x = 1\n")
    for name, words in (
        ("binary.toml", ("not a text file",)),
        ("values.toml", ("network.alpha", "must be a number")),
        ("none.toml", ("no [network] table",)),
        ("absent.toml", ("cannot read the calibration",)),
    ):
        proc = stragglerlab("validate", str(run), "--calibration", str(tmp_path / name), "-o", str(tmp_path / "v"))
        one_line_error(proc, name, *words)
    table = run / "iterations.parquet"
    table.write_bytes(table.read_bytes()[:100])
    one_line_error(stragglerlab("validate", str(run), "-o", str(tmp_path / "v")), "cannot read the iterations table")


def test_run_refuses_outputs_before_starting_any_rank(tmp_path):
    real = simulate(scenario(**{"cluster.workers": 2, "iterations": 5}), tmp_path / "real")
    meta = json.loads((real / "meta.json").read_text())
    (real / "meta.json").write_text(json.dumps({**meta, "source": "real"}))
    argv = ["run", "--example", "eager-injected", "--set", "cluster.workers=2", "--np", "2"]
    for force in ([], ["--force"]):
        one_line_error(stragglerlab(*argv, "-o", str(real), *force), "real run, which is never replaced")
    assert json.loads((real / "meta.json").read_text())["source"] == "real"
    out = ["-o", str(tmp_path / "new")]
    one_line_error(stragglerlab(*argv, *out, "--save-model", "/proc/stragglerlab.npy"), "cannot write into /proc")
    (tmp_path / "file").write_text("not a folder")
    one_line_error(stragglerlab(*argv, *out, "--save-model", str(tmp_path / "file" / "m.npy")), "not a folder")
    assert not (tmp_path / "new").exists()


def test_run_without_np_starts_cluster_workers_ranks_and_warns_beyond_the_cores(tmp_path, monkeypatch, capsys):
    launched = []
    monkeypatch.setattr(
        run_command, "_launch_and_watch", lambda ranks, argv, folder, per_node: launched.append((ranks, argv))
    )
    for variable in run_command.LAUNCHER_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "eager-injected-real").mkdir(parents=True)
    small = ["--set", "workload.params=1000"]  # a model small enough that no memory estimate is printed
    assert main(["run", "--example", "eager-injected", "--set", "cluster.workers=3", *small, "--json"]) == 0
    ranks, argv = launched[-1]
    assert ranks == 3 and argv[argv.index("-o") + 1] == "runs/eager-injected-real-2" and "--json" in argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning: 3 ranks on 2 cores" in err
    assert (
        main(["run", "--example", "eager-injected", "--set", "cluster.workers=3", *small, "--np", "2", "-o", "x"]) == 0
    )
    assert launched[-1][0] == 2 and capsys.readouterr().err == ""


def test_slurm_quotes_every_value_and_takes_gpus_per_node(tmp_path):
    allocation = shlex.split("slurm --example eager-injected --nodes 2 --tasks-per-node 4 --gpus-per-node 2")
    proc = stragglerlab(
        *allocation,
        "--partition",
        "gpu; touch hacked",
        "--set",
        "name=x$(touch hacked) y",
        "--srun-args=--mpi=pmi2 --comment='a b'",
        "-o",
        "runs/`touch hacked`",
    )
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    assert "#SBATCH --partition='gpu; touch hacked'" in script and "#SBATCH --gpus-per-node=2" in script
    assert "--job-name='x$(touch hacked) y'" in script and "-o 'runs/`touch hacked`'" in script
    assert "srun --kill-on-bad-exit=1 --mpi=pmi2 '--comment=a b' stragglerlab run" in script
    # run the script's commands with stand-ins that print their arguments: nothing but them runs
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("srun", "stragglerlab"):
        (bin_dir / tool).write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7"}
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "hacked").exists()
    assert "name=x$(touch hacked) y" in done.stdout.splitlines()
    default = stragglerlab("slurm", "--example", "eager-injected", "--nodes", "1", "--tasks-per-node", "2")
    assert '-o runs/eager-injected-"${SLURM_JOB_ID}"' in default.stdout
    assert "--gpus-per-node" not in default.stdout
    one_line_error(
        stragglerlab(
            "slurm", "--example", "eager-injected", "--nodes", "1", "--tasks-per-node", "2", "--account", "a\nb"
        ),
        "line break",
    )


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_run_outside_a_launcher_starts_its_ranks_and_prints_json(native_ready, tmp_path):
    argv = [sys.executable, "-m", "stragglerlab.cli", "run", "--example", "eager-injected", "--json"]
    argv += shlex.split(
        "--set cluster.workers=2 --set iterations=5 --set workload.compute.mean=0.005 --set imbalance.delay=0.005 "
        "--set workload.params=100"
    )
    for expected in ("runs/eager-injected-real", "runs/eager-injected-real-2"):
        proc = run_bounded(argv, 120, environment(), tmp_path)
        assert proc.returncode == 0, proc.stderr
        record = json.loads(proc.stdout)
        assert record["workers"] == 2 and record["runs"][0]["folder"] == expected
        assert record["runs"][0]["iterations"] == 2 * 5 and record["runs"][0]["samples_per_s"] > 0
        folder = tmp_path / expected
        assert load_run(folder).meta["source"] == "real" and not (folder / ".live").exists()


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_calibrate_collectives_writes_a_cost_table_that_simulate_loads(native_ready, tmp_path):
    fragment = tmp_path / "cal.toml"
    argv = [
        "calibrate",
        "--np",
        "2",
        "--collectives",
        "--balanced",
        "--algorithms",
        "sync,eager-solo,wagma,d-psgd,async-ps",
        "--sizes",
        "4096,65536",
        "--max-blocks",
        "3",
        "-o",
        str(fragment),
    ]
    proc = stragglerlab(*argv, timeout=140)
    assert proc.returncode == 0, proc.stderr
    table = tmp_path / "cal.csv"
    rows = table.read_text().splitlines()
    assert rows[0] == "kind,ranks,bytes,seconds,cv,stalls,stall,world"
    kinds = {tuple(r.split(",")[:3]) for r in rows[1:]}
    for kind in ("sync", "async", "group", "allreduce", "gossip", "push"):  # gossip: a rounds row per peer
        assert {(kind, "2", "4096"), (kind, "2", "65536")} <= kinds, kind
    for row in rows[1:]:
        seconds, cv, stalls, stall, world = map(float, row.split(",")[3:])
        assert seconds > 0 and cv >= 0 and 0 <= stalls < 1 and 0 <= stalls * stall < seconds and world == 2
    assert "update gap" in proc.stdout and "] (" in proc.stdout and "standard error over the blocks" in proc.stdout
    scenario = load(fragment)
    assert scenario.network.table == table and scenario.network.allreduce == "native" and scenario.workload.update >= 0
    assert "s per pushed byte" in proc.stdout and "server_gamma = " in fragment.read_text()  # from the push rounds
    assert "gossip: RMS relative residual" in proc.stdout and "sync: RMS relative residual" in proc.stdout
    for algorithm in ("sync", "eager-solo", "wagma"):
        sim = tmp_path / f"sim-{algorithm}"
        proc = stragglerlab(
            "simulate",
            str(fragment),
            "--set",
            f"algorithm.name={algorithm}",
            "--set",
            "algorithm.group_size=2",
            "--set",
            "cluster.workers=2",
            "--set",
            "workload.params=4096",
            "--set",
            "iterations=5",
            "-o",
            str(sim),
        )
        assert proc.returncode == 0, proc.stderr
        assert load_run(sim).meta["network"]["table"] == "cal.csv"
    fragment.unlink()  # the table alone is not replaced without --force either
    proc = stragglerlab(*argv)
    assert proc.returncode == 2 and "exists; give --force" in proc.stderr and not fragment.exists()


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_calibrate_at_two_rank_counts_fits_one_model_that_prices_a_third(native_ready, tmp_path):
    fragment = tmp_path / "cal.toml"
    argv = ["--collectives", "--balanced", "--algorithms", "sync,wagma", "--sizes", "4096", "--max-blocks", "3"]
    groups = ["--set", "algorithm.group_size=2"]  # WAGMA in groups of 2: alone at 2 ranks, beside a rank at 3
    proc = stragglerlab("calibrate", "--np", "2,3", *argv, *groups, "-o", str(fragment), timeout=140)
    assert proc.returncode == 0, proc.stderr
    assert "network model fitted to every figure over 2, 3 ranks at once" in proc.stdout
    rows = (tmp_path / "cal.csv").read_text().splitlines()[1:]
    kinds = {(*r.split(",")[:2], r.split(",")[-1]) for r in rows}  # kind, ranks, the job's ranks
    assert {("sync", "2", "2"), ("sync", "3", "3"), ("allreduce", "2", "2"), ("allreduce", "3", "3")} <= kinds
    assert {("group", "2", "2"), ("group", "2", "3")} <= kinds  # a row of its own for each job size
    # a rank count the table has no rows of is priced by the fitted model, with a warning, not refused
    sets = ["--set", "cluster.workers=4", "--set", "workload.params=1024", "--set", "iterations=3"]
    proc = stragglerlab("simulate", str(fragment), *sets, "-o", str(tmp_path / "sim"))
    assert proc.returncode == 0, proc.stderr
    assert "warning: network.table = cal.csv: no sync rounds over 4 ranks (measured over 2, 3 ranks)" in proc.stderr


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_calibrate_collectives_times_torch_distributed_rounds(tmp_path):
    pytest.importorskip("torch")
    fragment = tmp_path / "gloo.toml"
    argv = ["--collectives", "--backend", "torch", "--balanced", "--sizes", "4096,16384", "--max-blocks", "3"]
    proc = stragglerlab("calibrate", "--np", "2", *argv, "-o", str(fragment), timeout=140)
    assert proc.returncode == 0, proc.stderr
    assert "(--backend torch)" in proc.stdout and "sync sync over 2 ranks, 4096 B" in proc.stdout
    rows = (tmp_path / "gloo.csv").read_text().splitlines()[1:]
    kinds = {tuple(r.split(",")[:3]) for r in rows}  # sync only: the one algorithm with a torch exchange
    assert kinds == {(k, "2", b) for k in ("sync", "allreduce") for b in ("4096", "16384")}
    assert all(float(r.split(",")[3]) > 0 for r in rows) and load(fragment).network.table == tmp_path / "gloo.csv"


@pytest.mark.mpi
@pytest.mark.timeout(450)
def test_calibrate_collectives_times_ddps_buckets_of_a_torch_workload(tmp_path):
    pytest.importorskip("torch")
    fragment = tmp_path / "ddp.toml"
    model = ["--set", "workload.model=torch:mlp", "--set", "workload.batch=8", "--set", "workload.buckets=4"]
    argv = ["--collectives", "--backend", "torch", "--max-blocks", "3", *model, "-o", str(fragment)]
    proc = stragglerlab("calibrate", "--np", "2", *argv, timeout=420)  # a loaded machine took 22 s a block
    assert proc.returncode == 0, proc.stderr
    assert "blocks (each a launch of its own)" in proc.stdout  # as the runs it prices meet DDP's buckets
    assert "each block an mpiexec -n 2 launch of its own (3 to 3 blocks a size)" in proc.stderr
    # DDP makes 2 buckets of the perceptron's 27,688 bytes: the table holds the simulator's bucket, half of it, and
    # the whole gradient as one bucket, so that a simulation prices both
    rows = (tmp_path / "ddp.csv").read_text().splitlines()[1:]
    kinds = {tuple(r.split(",")[:3]) for r in rows}
    assert kinds == {(k, "2", b) for k in ("sync", "allreduce") for b in ("13844", "27688")}
    simulated = tmp_path / "sim"
    sets = ["--set", "cluster.workers=2", "--set", "workload.params=6922", "--set", "workload.buckets=2"]
    proc = stragglerlab("simulate", str(fragment), *sets, "--set", "iterations=4", "-o", str(simulated))
    assert proc.returncode == 0, proc.stderr
    one_line_error(stragglerlab("calibrate", "--np", "2", *argv, "--sizes", "4096"), "DDP's buckets of its own size")


def test_calibrate_collectives_errors_are_one_line(tmp_path):
    one_line_error(stragglerlab("calibrate", "--np", "2", "--collectives"), "give -o FILE")
    out = ["-o", str(tmp_path / "c.toml")]
    one_line_error(stragglerlab("calibrate", "--np", "2", "--collectives", "--sizes", "x", *out), "byte counts")
    one_line_error(stragglerlab("calibrate", "--np", "2", "--collectives", "--algorithms", "nope", *out), "nope")
    torch = ["--collectives", "--backend", "torch", "--algorithms", "sync,wagma", *out]
    one_line_error(stragglerlab("calibrate", "--np", "2", *torch), "wagma has no torch exchange to time")


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_calibrate_on_one_rank_is_a_one_line_error(native_ready, tmp_path):
    command = [*launch(1, ["calibrate", "--collectives", "-o", str(tmp_path / "c.toml")])]
    proc = run_bounded(command, 50, environment(), tmp_path)
    assert proc.returncode == 2 and "at least 2 ranks" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "c.csv").exists()


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_launched_calibration_block_that_fails_says_why_in_one_line(native_ready, tmp_path):
    base = scenario(**{"algorithm.name": "wagma", "algorithm.group_size": 2, "cluster.workers": 2, "iterations": 4})
    said = "a calibration block failed: --backend torch: wagma runs with --backend native"
    with pytest.raises(UserError, match=said) as failed:
        Launched(2).run(base, tmp_path / "block", "torch")
    assert "\n" not in str(failed.value)
