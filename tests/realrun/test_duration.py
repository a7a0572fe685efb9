"""Real runs with a time budget: every rank stops after the same round (sync) or exchange (lsgd), the first that
rank 0 saw complete at or after the budget, and the run folder is finished with the rows it has."""

from __future__ import annotations

import pytest

from stragglerlab.analysis.runfolder import load_run

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(180)]

ITERATIONS, BUDGET = 2000, 0.5  # 20 s of compute without the budget

SCENARIO = f"""
seed = 3
iterations = {ITERATIONS}
duration = {BUDGET}
[cluster]
workers = 2
[workload]
params = 256
compute = {{ dist = "constant", mean = 0.01 }}
[algorithm]
period = 2
global_period = 4
"""


def budget_run(spawn, scenario_file, tmp_path, algorithm, backend="native", budget=BUDGET):
    out = tmp_path / "run"
    argv = ["run", str(scenario_file(SCENARIO)), "--set", f"algorithm.name={algorithm}", "--backend", backend]
    proc = spawn(2, [*argv, "--set", f"duration={budget}", "-o", str(out)])
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    assert run.finished
    it, rounds = run.iterations, run.rounds
    assert 0 < len(it) < 2 * ITERATIONS
    # every round before the last completed before the budget; rank 0 decided on its own release from the last,
    # just after the core's record of its completion
    assert (rounds["t_done"].iloc[:-1] < budget).all() and rounds["t_done"].iloc[-1] >= budget - 0.05
    # no iteration starts once the last round has completed
    assert (it["t_start"] < rounds["t_done"].iloc[-1]).all()
    return it, rounds


# the torch backend sets up its process group on the run's clock first (most of a second)
@pytest.mark.parametrize(
    "algorithm,calls,backend,budget",
    [("sync", 1, "native", BUDGET), ("local-sgd", 2, "native", BUDGET), ("sync", 1, "torch", 3.0)],
)
def test_ranks_of_synchronous_rounds_stop_after_the_same_round(
    spawn, scenario_file, tmp_path, algorithm, calls, backend, budget
):
    it, rounds = budget_run(spawn, scenario_file, tmp_path, algorithm, backend, budget)
    last = int(rounds["round"].iloc[-1])
    assert it.groupby("worker").size().to_dict() == {0: (last + 1) * calls, 1: (last + 1) * calls}


def test_lsgd_ranks_stop_at_the_budgets_last_exchange(spawn, scenario_file, tmp_path):
    it, rounds = budget_run(spawn, scenario_file, tmp_path, "lsgd")
    assert rounds["t_done"].iloc[-1] >= BUDGET  # rank 0's completion times, as it decided
    last_rows = it.sort_values("iteration").groupby("worker").tail(1)
    assert (last_rows["round"] == rounds["round"].iloc[-1]).all() and len(last_rows) == 2


def test_a_budget_an_exchange_cannot_stop_yet_is_a_one_line_error(spawn, scenario_file, tmp_path):
    out = tmp_path / "run"
    proc = spawn(2, ["run", str(scenario_file(SCENARIO)), "--set", "algorithm.name=eager-solo", "-o", str(out)])
    assert proc.returncode == 2
    assert "duration = 0.5: eager-solo has no time budget in real runs yet" in proc.stderr
    assert "Traceback" not in proc.stderr
