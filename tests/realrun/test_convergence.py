"""``stragglerlab validate --convergence`` and ``--target-loss``: a simulated run relabelled as real is replayed to
its own evaluations exactly, for every algorithm; the command's table, files and one-line errors; the time to a target
loss, interpolated between evaluations. (Real runs: ``test_training.py``.)"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.runfolder import load_run
from stragglerlab.realrun import convergence
from stragglerlab.realrun.commands.validate import with_time_to_target
from stragglerlab.realrun.convergence import compare, crossing, median, replay_run
from stragglerlab.realrun.validate import validate
from stragglerlab.simulator.run import simulate
from stragglerlab.simulator.scenario import ALGORITHMS
from tests.helpers import scenario
from tests.realrun.conftest import stragglerlab
from tests.realrun.test_validate import as_real

TRAINED = {
    "cluster.workers": 4,
    "iterations": 24,
    "seed": 5,
    "workload.model": "mlp",
    "workload.dimension": 8,
    "workload.samples": 2048,
    "workload.batch": 8,
    "imbalance.kind": "random-delay",
    "imbalance.slow": [1, 2],
    "imbalance.delay": 0.02,
    "workload.compute": {"dist": "lognormal", "mean": 0.01, "cv": 0.3},
    "algorithm.group_size": 2,
    "algorithm.period": 3,
    "algorithm.global_period": 6,
    "algorithm.sync_period": 4,
    "evals.every_iterations": 5,
}


def trained_real(tmp_path, name: str, **keys):
    return as_real(simulate(scenario(**(TRAINED | keys)), tmp_path / f"{name}-sim"), tmp_path / name)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_simulated_run_relabelled_as_real_replays_to_its_own_evaluations(tmp_path, algorithm):
    run = trained_real(tmp_path, "run", **{"algorithm.name": algorithm})
    table = compare(run)
    assert len(table) == len(run.evals) >= 5
    np.testing.assert_allclose(table["loss_sim"], table["loss_real"], rtol=1e-12)
    np.testing.assert_allclose(table["accuracy_sim"], table["accuracy_real"], rtol=1e-12)


def test_validate_convergence_writes_the_table_and_the_figure_and_says_whether_every_loss_agrees(tmp_path):
    trained_real(tmp_path, "a", **{"algorithm.name": "eager-solo"})
    trained_real(tmp_path, "b", **{"algorithm.name": "wagma"})
    out = tmp_path / "val"
    proc = stragglerlab("validate", str(tmp_path / "a"), str(tmp_path / "b"), "--convergence", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["run", "algorithm", "evaluations"]
    assert lines[1].split()[:2] == ["a", "eager-solo"] and lines[1].split()[-1] == "yes"
    assert lines[2].split()[:2] == ["b", "wagma"] and lines[2].split()[-1] == "yes"
    table = pd.read_csv(out / "convergence.csv")
    assert list(table.columns[:7]) == [
        "run",
        "iteration",
        "t",
        "loss_real",
        "loss_sim",
        "accuracy_real",
        "accuracy_sim",
    ]
    assert set(table["run"]) == {"a", "b"} and (out / "convergence.pdf").stat().st_size > 0


def test_validate_convergence_errors_are_one_line(tmp_path):
    real = trained_real(tmp_path, "real")
    simulated = simulate(scenario(**TRAINED), tmp_path / "sim")
    timing = as_real(simulate(scenario(**(TRAINED | {"workload.model": "none"})), tmp_path / "t-sim"), tmp_path / "t")
    by_seconds = trained_real(tmp_path, "s", **{"algorithm.name": "wagma", "evals.every_seconds": 0.05})
    cases = [
        ([str(real.path), "--predict", str(real.path)], "it takes no --calibration, --predict"),
        ([str(simulated)], "not a real run (source = sim)"),
        ([str(timing.path)], "a timing-only run"),
        ([str(by_seconds.path)], "evals.every_seconds = 0.05: this run's replicas differ"),
    ]
    for argv, message in cases:
        proc = stragglerlab("validate", *argv, "--convergence", "-o", str(tmp_path / "out"))
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    proc = stragglerlab("validate", str(real.path), "--target-loss", "0.5", "-o", str(tmp_path / "out"))
    assert proc.returncode == 2 and "give --predict OTHER" in proc.stderr
    argv = [str(real.path), "--predict", str(real.path), "--target-loss", "nan", "-o", str(tmp_path / "out")]
    proc = stragglerlab("validate", *argv)
    assert proc.returncode == 2 and "--target-loss nan: must be a finite number" in proc.stderr
    with pytest.raises(UserError, match="every_seconds"):
        replay_run(by_seconds)
    # an exchange whose replicas are identical after every round evaluates by seconds exactly: no refusal
    assert len(replay_run(trained_real(tmp_path, "sync", **{"evals.every_seconds": 0.05}))) >= 3


def test_the_time_to_a_target_loss_is_interpolated_between_evaluations():
    evals = pd.DataFrame({"t": [0.0, 1.0, 2.0, 3.0], "loss": [2.0, 1.0, 0.5, 0.2]})
    assert crossing(evals, 0.75) == pytest.approx(1.5)
    assert crossing(evals, 2.5) == 0.0 and crossing(evals, 0.2) == 3.0
    assert np.isnan(crossing(evals, 0.1))


def test_a_schedule_that_never_reaches_the_target_counts_as_the_latest():
    assert median([3.0, float("nan"), 1.0]) == 3.0
    assert np.isnan(median([float("nan"), 2.0, float("nan")]))


def test_validate_predict_reports_the_real_and_predicted_time_to_the_target_loss(tmp_path):
    fit = trained_real(tmp_path, "fit", **{"algorithm.name": "eager-solo"})
    keys = {"algorithm.name": "eager-solo", "imbalance.kind": "persistent", "imbalance.factors": {"3": 2.0}}
    other = trained_real(tmp_path, "other", **keys)
    out = tmp_path / "val"
    loss, t = other.evals["loss"], other.evals["t"]
    target = float(loss.iloc[2] + loss.iloc[3]) / 2  # halfway from the third evaluation to the fourth
    argv = [str(fit.path), "--predict", str(other.path), "--target-loss", str(target), "-o", str(out)]
    proc = stragglerlab("validate", *argv)
    assert proc.returncode == 0, proc.stderr
    assert "time to test loss" in proc.stdout
    row = pd.read_csv(out / "validation.csv").set_index("mode").loc["out-of-sample"]
    real_time = (t.iloc[2] + t.iloc[3]) / 2 - other.iterations["t_start"].min()  # interpolated
    assert row["target_loss"] == target and row["time_to_target_real"] == pytest.approx(real_time)
    assert row["time_to_target_sim"] > 0 and abs(row["time_to_target_error"]) < 0.5
    # the prediction is the median of the schedules' times, each drawn under its own seed
    assert row["time_to_target_sim_low"] <= row["time_to_target_sim"] <= row["time_to_target_sim_high"]
    assert row["time_to_target_sim_low"] < row["time_to_target_sim_high"]
    assert load_run(out / "out-of-sample" / "other").meta["scenario"]["workload"]["model"] == "none"


def test_repeats_of_one_scenario_share_their_simulated_schedules(tmp_path, monkeypatch):
    fit = trained_real(tmp_path, "fit", **{"algorithm.name": "eager-solo"})
    keys = {"algorithm.name": "eager-solo", "imbalance.delay": 0.04}
    repeats = [trained_real(tmp_path, f"repeat-{k}", **keys) for k in range(2)]
    other = trained_real(tmp_path, "other", **keys, seed=6)
    table, pairs = validate([fit], tmp_path / "val", None, [*repeats, other])
    calls = []
    shared = convergence.schedules_to_target
    monkeypatch.setattr(convergence, "schedules_to_target", lambda *a: calls.append(a) or shared(*a))
    target = max(float(r.evals["loss"].iloc[2]) for r in [*repeats, other])  # each real run reaches it
    rows = with_time_to_target(table, pairs["out-of-sample"], target).query("mode == 'out-of-sample'")
    assert len(calls) == 2  # the two repeats' schedules once, the other seed's once
    sim = rows[["time_to_target_sim", "time_to_target_sim_low", "time_to_target_sim_high"]].to_numpy()
    np.testing.assert_array_equal(sim[0], sim[1])
    assert rows["time_to_target_real"].notna().all()
