"""Training agrees across planes: a real run's evaluations are the simulator's replay of the run's own tables, for
every algorithm with a real model path (a straggler, late gradients accumulated and dropped); a replay of tables that
say otherwise disagrees; sync is large-batch SGD in both planes; BatchNorm's buffers stay each replica's own in
both; and a run on a GPU is the same run on the CPU (skipped without CUDA)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stragglerlab.analysis.runfolder import Run, load_run
from stragglerlab.realrun.convergence import TOLERANCE, compare
from stragglerlab.simulator.plan import plan
from stragglerlab.simulator.run import simulate, train
from stragglerlab.simulator.scenario import from_dict
from stragglerlab.simulator.workloads import load as load_workload
from tests.processes import run_bounded
from tests.realrun.conftest import ROOT, environment, stragglerlab

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.mpi, pytest.mark.timeout(300)]

P = 3
#: rank 2 computes 20 times as long as the others (a persistent straggler): eager's rounds go on without it
SCENARIO = """
seed = 3
iterations = 24
[cluster]
workers = 3
[workload]
model = "torch:mlp"
batch = 32
[imbalance]
kind = "persistent"
factors = { 2 = 20.0 }
[algorithm]
lr = 0.05
momentum = 0.9
sync_period = 6
group_size = 2
period = 4
global_period = 8
[evals]
every_iterations = 6
"""
#: every algorithm with a real model path, and its options
CASES: dict[str, dict[str, str]] = {
    "sync": {},
    "eager-solo": {"late": '"accumulate"'},
    "eager-majority": {"late": '"drop"'},
    "quorum": {},
    "wagma": {},
    "local-sgd": {},
    "lsgd": {},
    "d-psgd": {},
    "sgp": {},
    "ad-psgd": {},
    "async-ps": {},
    "easgd": {},
    "swarm-sgd": {},
    "preempt": {},
}


def real_run(tmp, text: str, sets: list[str], extra: tuple[str, ...] | list[str] = ()) -> Run:
    """The real run of the scenario ``text`` with ``--set`` overrides, on P ranks, in ``tmp / "run"``."""
    from stragglerlab.realrun.mpiexec import launch

    path = tmp / "scenario.toml"
    path.write_text(text)
    argv = ["run", str(path), *(a for s in sets for a in ("--set", s)), "-o", str(tmp / "run"), *extra]
    proc = run_bounded(launch(P, argv), 200, environment(), ROOT)
    assert proc.returncode == 0, proc.stderr
    return load_run(tmp / "run")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, native_ready) -> dict[str, Run]:
    """A real run of every case, all in one job (each rank starts Python, MPI and torch once)."""
    from stragglerlab.realrun.mpiexec import launch

    tmp = tmp_path_factory.mktemp("runs")
    scenarios = []
    for algorithm, sets in CASES.items():
        keys = "".join(f"{key} = {value}\n" for key, value in sets.items())
        path = tmp / f"{algorithm}.toml"
        path.write_text(SCENARIO.replace("[algorithm]\n", f'[algorithm]\nname = "{algorithm}"\n{keys}'))
        scenarios.append(str(path))
    script = str(ROOT / "tests" / "realrun" / "runs_in_one_job.py")
    proc = run_bounded([*launch(P, [])[:-2], script, str(tmp / "out"), *scenarios], 240, environment(), ROOT)
    assert proc.returncode == 0, proc.stderr
    return {algorithm: load_run(tmp / "out" / algorithm) for algorithm in CASES}


@pytest.mark.timeout(400)  # the first test waits for every run
@pytest.mark.parametrize("algorithm", CASES)
def test_every_evaluation_of_a_real_run_is_its_replay(runs, algorithm):
    table = compare(runs[algorithm])
    assert len(table) >= 4 and table["iteration"].iloc[0] == 0 and table["iteration"].iloc[-1] == 24
    assert table["t"].iloc[0] == 0.0  # the initial model, evaluated before the run's clock started, as simulated
    assert table["loss_error"].max() <= TOLERANCE, table.to_string()
    assert (table["accuracy_real"] - table["accuracy_sim"]).abs().max() <= 1 / 819  # one test sample at most
    assert table["loss_real"].iloc[-1] < 0.9 * table["loss_real"].iloc[0]  # it trained


def test_validate_convergence_says_every_real_run_agrees(runs, tmp_path):
    folders = [str(run.path) for run in runs.values()]
    proc = stragglerlab("validate", *folders, "--convergence", "-o", str(tmp_path / "val"), timeout=240)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()[1 : 1 + len(runs)]
    assert [line.split()[1] for line in lines] == list(runs)
    assert all(line.split()[-1] == "yes" for line in lines), proc.stdout


def test_the_straggler_s_late_gradients_went_into_later_rounds_or_were_dropped(runs):
    accumulated, dropped = runs["eager-solo"].iterations, runs["eager-majority"].iterations
    assert (accumulated["staleness"] > 0).any() and (accumulated["round"] >= 0).all()
    assert (dropped["round"] < 0).any()


def test_moving_one_contribution_to_another_round_makes_the_replay_disagree(runs):
    real = runs["eager-solo"]
    it = real.iterations.copy()
    carried = it.index[(it["worker"] == 0) & (it["round"] >= 2)][0]  # an early gradient of rank 0 that a round carried
    it.loc[carried, "round"] += 3  # the same gradient, applied three rounds later
    table = compare(Run(real.path, real.meta, it, real.rounds, real.evals))
    assert table["loss_error"].iloc[0] <= TOLERANCE  # before the move
    assert table["loss_error"].max() > 10 * TOLERANCE, table.to_string()


def final_replicas(scenario, run: Run) -> np.ndarray:
    """The replicas at the end of the replay of ``run``'s tables."""
    seen = []
    list(
        train(
            plan(scenario), load_workload(scenario), run.iterations, run.rounds, lambda e, m, W: seen.append(W.copy())
        )
    )
    return seen[-1]


def large_batch_sgd(seed: int, batch: int, iterations: int, lr: float, momentum: float) -> np.ndarray:
    """One process training ``torch:mlp`` with ``torch.optim.SGD`` on batches of P × ``batch``: at iteration n the
    P shards' batches of iteration n together."""
    from torch.nn.utils import parameters_to_vector

    from stragglerlab.simulator.workloads.sharding import Shards
    from stragglerlab.simulator.workloads.torch_bridge import batch_of, load_task

    task = load_task("torch:mlp", seed)
    shards = Shards(len(task.train), P, batch, seed)
    optimizer = torch.optim.SGD(task.model.parameters(), lr=lr, momentum=momentum)
    for n in range(iterations):
        x, t = batch_of(task.train, shards.indices(np.arange(P), np.full(P, n)).ravel())
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(task.model(x), t).backward()
        optimizer.step()
    return parameters_to_vector(task.model.parameters()).detach().double().numpy()


def test_sync_is_large_batch_sgd_in_real_runs_and_in_the_replay(native_ready, tmp_path):
    saved = tmp_path / "w.npy"
    run = real_run(tmp_path, SCENARIO, ["algorithm.name=sync", "workload.batch=16"], ["--save-model", str(saved)])
    scenario = from_dict(run.meta["scenario"])
    big = large_batch_sgd(scenario.seed, 16, scenario.iterations, 0.05, 0.9)
    scale = np.abs(big).max()
    assert np.abs(np.load(saved) - big).max() <= 1e-5 * scale
    assert np.abs(final_replicas(scenario, run) - big).max() <= 1e-5 * scale  # the replay of the real run's tables
    simulated = load_run(simulate(scenario, tmp_path / "sim"))  # and of the simulator's own schedule
    assert np.abs(final_replicas(scenario, simulated) - big).max() <= 1e-5 * scale


BATCHNORM = SCENARIO.replace("torch:mlp", "tests.simulator.torch_task:batchnorm").replace("batch = 32", "batch = 16")


@pytest.mark.parametrize("algorithm", ["sync", "wagma"])
def test_batchnorm_buffers_stay_each_replicas_own_and_the_mean_is_evaluated_with_their_mean(
    native_ready, tmp_path, algorithm
):
    run = real_run(tmp_path, BATCHNORM, [f"algorithm.name={algorithm}"])
    table = compare(run)
    assert table["loss_error"].max() <= TOLERANCE, table.to_string()
    # the agreement tells the buffers' semantics apart: the replicas' buffers (each moved by its own batches only)
    # differ, and under sync (whose model values no timing changes) the final model evaluated with rank 0's buffers
    # instead of their mean is 1.1e-3 away, beyond the tolerance
    scenario = from_dict(run.meta["scenario"])
    workload = load_workload(scenario)
    seen = []
    list(train(plan(scenario), workload, run.iterations, run.rounds, lambda e, m, W: seen.append(W.copy())))
    buffers = workload.replica_buffers
    assert np.abs(buffers - buffers[0]).max() > 1e-3
    if algorithm == "sync":
        own, _ = workload.evaluate(seen[-1].mean(axis=0), 0)
        assert abs(own / table["loss_real"].iloc[-1] - 1) > 5 * TOLERANCE


def test_a_run_on_a_gpu_is_the_same_run_on_the_cpu(native_ready, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from tests.realrun.devices import compare_devices

    table = compare_devices(tmp_path)
    assert isinstance(table, pd.DataFrame) and len(table)
    assert table[["loss_difference", "replay_difference"]].max().max() <= TOLERANCE, table.to_string()
