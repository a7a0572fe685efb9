"""Real runs of every algorithm on 2 and 4 ranks: valid run folders, and the injected delays exactly where the
simulator's common random numbers put them."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.analysis.runfolder import load_run
from stragglerlab.simulator import algorithms
from stragglerlab.simulator.costs import cost_model
from stragglerlab.simulator.imbalance import ComputeTimes
from stragglerlab.simulator.scenario import from_dict, load
from tests.processes import run_bounded
from tests.realrun.conftest import ROOT, environment
from tests.realrun.folders import check_folder

#: every algorithm with a real-run exchange
REAL = [record.name for record in algorithms.RECORDS if record.exchanges]
pytestmark = [pytest.mark.mpi, pytest.mark.timeout(180)]

BASE, DELAY, ITERATIONS = 0.004, 0.06, 12

SCENARIO = f"""
seed = 5
iterations = {ITERATIONS}
[cluster]
workers = 2
[workload]
params = 256
compute = {{ dist = "constant", mean = {BASE} }}
[imbalance]
kind = "random-delay"
slow = [0, 1]
delay = {DELAY}
[algorithm]
sync_period = 4
group_size = 2
period = 3
global_period = 6
fraction = 1.0  # preempt waits for every rank: every injected delay is served whole
"""


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("algorithm", REAL)
def test_every_algorithm_writes_a_valid_folder_with_the_injected_delays(
    spawn, scenario_file, tmp_path, ranks, algorithm
):
    path = scenario_file(SCENARIO)
    out = tmp_path / "run"
    sets = ["--set", f"cluster.workers={ranks}", "--set", f"algorithm.name={algorithm}"]
    proc = spawn(ranks, ["run", str(path), *sets, "-o", str(out)])
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    check_folder(run, ranks, ITERATIONS)
    assert not (out / ".live").exists()  # the heartbeats go when the run finishes
    lines = proc.stdout.splitlines()  # rank 0's summary, as simulate prints it
    assert lines[1].split()[:2] == ["algorithm", "samples/s"] and lines[2].startswith(algorithm)
    assert lines[-1] == f"run folder: {out}"
    times = ComputeTimes(load(path, [f"cluster.workers={ranks}"]))
    it = run.iterations
    slow = np.zeros((ranks, ITERATIONS), dtype=bool)
    for n in range(ITERATIONS):
        slow[times.slow_workers(n), n] = True
    compute = it["compute"].to_numpy().reshape(ranks, ITERATIONS)
    assert slow.any() and not slow.all()
    delayed = compute >= BASE + DELAY - 1e-3
    assert delayed[slow].all()  # a sleep is never shorter than asked, whatever the load
    # a delay where the scenario selects none would show in most of those iterations; a loaded machine can stretch a
    # few 4 ms computations past the delay, so a few are allowed
    assert delayed[~slow].mean() <= 0.25, "delays where the scenario selects none"


def test_torch_workload_trains_and_evaluates(spawn, scenario_file, tmp_path):
    path = scenario_file(SCENARIO)
    out = tmp_path / "run"
    proc = spawn(
        2,
        [
            "run",
            str(path),
            "--set",
            "workload.model=torch:cnn",
            "--set",
            "workload.batch=16",
            "--set",
            "algorithm.name=eager-solo",
            "--set",
            "evals.every_iterations=4",
            "-o",
            str(out),
        ],
    )
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    check_folder(run, 2, ITERATIONS)
    evals = run.evals
    assert list(evals["iteration"]) == [0, 4, 8, 12] and (evals["worker"] == -1).all()
    assert np.isfinite(evals["loss"]).all() and evals["loss"].iloc[-1] < evals["loss"].iloc[0]
    assert run.meta["scenario"]["workload"]["params"] > 1000  # the model's size, not the scenario's


def test_wrong_number_of_ranks_is_a_one_line_error(spawn, scenario_file, tmp_path):
    proc = spawn(2, ["run", str(scenario_file(SCENARIO)), "--set", "cluster.workers=3", "-o", str(tmp_path / "r")])
    assert proc.returncode != 0
    assert "cluster.workers = 3 but the job has 2 ranks" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_torch_backend_overlaps_buckets_with_backward_under_ddp(spawn, scenario_file, tmp_path):
    sets = [
        "--set",
        "workload.model=torch:mlp",
        "--set",
        "workload.batch=16",
        "--set",
        "workload.buckets=3",
        "--set",
        "algorithm.name=sync",
        "--backend",
        "torch",
    ]
    out = tmp_path / "run"
    proc = spawn(2, ["run", str(scenario_file(SCENARIO)), *sets, "-o", str(out)])
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    check_folder(run, 2, ITERATIONS)
    # 3 buckets' cap (9.2 kB) fits the perceptron's whole parameters in 2: the folder records what DDP made
    assert run.meta["scenario"]["workload"]["buckets"] == 2 and "makes 2 of this model" in proc.stderr
    it, rounds = run.iterations, run.rounds
    assert (it["round"] == it["iteration"]).all() and it["fresh"].all()
    # a round's trigger is its last post, by the rank that posted last; the delayed ranks post late
    last = it.loc[it.groupby("iteration")["t_post"].idxmax()]
    assert list(rounds["initiator"]) == list(last["worker"])
    assert np.allclose(rounds["t_trigger"], last["t_post"])
    # DDP cannot measure a computation before its delay: a persistent straggler is refused, in one line
    refused = spawn(
        2,
        [
            "run",
            str(scenario_file(SCENARIO)),
            *sets,
            "--set",
            "imbalance.kind=persistent",
            "--set",
            "imbalance.factors={1 = 2.0}",
            "-o",
            str(tmp_path / "refused"),
        ],
    )
    assert refused.returncode == 2 and "needs a computation measured before its delay" in refused.stderr
    assert len([line for line in refused.stderr.splitlines() if "error" in line]) == 1


def test_ad_psgd_peers_serve_exchanges_while_they_compute(spawn, scenario_file, tmp_path):
    # rank 1 computes 20 times longer than rank 0: its communication thread answers rank 0's exchanges meanwhile, so
    # rank 0 runs ahead instead of waiting for rank 1's iterations
    out = tmp_path / "run"
    sets = [
        "--set",
        "algorithm.name=ad-psgd",
        "--set",
        "imbalance.kind=persistent",
        "--set",
        "imbalance.factors={1 = 20.0}",
    ]
    proc = spawn(2, ["run", str(scenario_file(SCENARIO)), *sets, "--set", "workload.compute.mean=0.01", "-o", str(out)])
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    check_folder(run, 2, ITERATIONS)
    it, rounds = run.iterations, run.rounds
    fast, slow = it[it["worker"] == 0], it[it["worker"] == 1]
    assert fast["t_done"].max() < 0.5 * slow["t_done"].max()
    assert (rounds["group"] == 1 - rounds["initiator"]).all() and (rounds["contributors"] == 2).all()


def test_sgp_does_not_wait_for_the_worker_it_sends_to(spawn, scenario_file, tmp_path):
    # rank 2 computes 20 times longer; push-sum waits only for the model it receives, so a rank that sends to rank 2
    # but receives from the other fast rank is released long before rank 2 posts (a 400 kB send goes by MPI's
    # rendezvous: waiting for it would hold the rank until rank 2 had posted its receive)
    out = tmp_path / "run"
    sets = ["algorithm.name=sgp", "cluster.workers=3", "imbalance.kind=persistent", "imbalance.factors={2 = 20.0}"]
    sets += ["workload.params=100000"]
    argv = ["run", str(scenario_file(SCENARIO)), *(x for s in sets for x in ("--set", s)), "-o", str(out)]
    proc = spawn(3, [*argv, "--set", "workload.compute.mean=0.005"])
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    check_folder(run, 3, ITERATIONS)
    scenario = from_dict(run.meta["scenario"], "run")
    rules = algorithms.get("sgp").rules(scenario, cost_model(scenario))
    it = run.iterations.set_index(["iteration", "worker"])
    ahead = [
        it.loc[(n, 2), "t_post"] - it.loc[(n, i), "t_done"]
        for n in range(ITERATIONS)
        for i in (0, 1)
        if 2 in rules.receivers(n, i) and 2 not in rules.peers(n, i)
    ]
    assert ahead and max(ahead) > 0.05, ahead


@pytest.mark.parametrize("algorithm", ["d-psgd", "sgp", "ad-psgd"])
def test_gossip_trains_a_torch_model(spawn, scenario_file, tmp_path, algorithm):
    out = tmp_path / "run"
    sets = ["workload.model=torch:mlp", "workload.batch=16", f"algorithm.name={algorithm}", "evals.every_iterations=6"]
    argv = ["run", str(scenario_file(SCENARIO)), *(x for s in sets for x in ("--set", s)), "-o", str(out)]
    proc = spawn(2, argv)
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    check_folder(run, 2, ITERATIONS)
    evals = run.evals
    assert list(evals["iteration"]) == [0, 6, 12] and (evals["worker"] == -1).all()  # the replicas' mean
    assert np.isfinite(evals["loss"]).all() and evals["loss"].iloc[-1] < evals["loss"].iloc[0]


def test_what_the_ranks_set_up_before_the_first_iteration_is_not_the_run_s_time(native_ready, scenario_file, tmp_path):
    # 3 s of setup in every rank's exchange (the native core compiled on first use took 1-4 s): none of it is measured
    from stragglerlab.realrun.mpiexec import launch

    script = ROOT / "tests" / "realrun" / "slow_setup_run.py"
    path = scenario_file(SCENARIO.replace("[algorithm]\n", '[algorithm]\nname = "eager-solo"\n'))
    command = [*launch(2, [])[:-2], str(script), str(path), str(tmp_path / "run"), "3"]
    proc = run_bounded(command, 120, environment(), ROOT)
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "run")
    first = run.iterations.query("iteration == 0")["t_start"]
    assert len(first) == 2 and first.min() >= 0 and first.max() < 1.5, first
    assert run.rounds["t_trigger"].min() > 0  # the core's records on the same clock, counted from the run's start
    assert run.meta["wall_seconds"] < run.iterations["t_done"].max() + 1.5
