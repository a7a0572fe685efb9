"""Real runs with a time budget: round algorithms stop after the first round whose trigger (``t_trigger``, a post
time every rank reads alike) is at or after the budget, every rank at its release by that round or, lagging, at its
first release after it; LSGD's ranks stop after the first exchange rank 0 saw complete at or after the budget. The
run folder is finished with the rows it has.
"""

from __future__ import annotations

import pytest

from stragglerlab.analysis.runfolder import SCHEMAS, load_run

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


def budget_run(spawn, scenario_file, tmp_path, algorithm, backend="native", budget=BUDGET, decides="t_trigger"):
    out = tmp_path / "run"
    argv = ["run", str(scenario_file(SCENARIO)), "--set", f"algorithm.name={algorithm}", "--backend", backend]
    proc = spawn(2, [*argv, "--set", f"duration={budget}", "-o", str(out)])
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    assert run.finished
    it, rounds = run.iterations, run.rounds
    assert 0 < len(it) < 2 * ITERATIONS
    # the last round is the first whose ``decides`` (round algorithms: the trigger every rank reads alike; LSGD:
    # rank 0's completion, as it decided, just after the core's record of it) is at or after the budget
    assert (rounds[decides].iloc[:-1] < budget).all() and rounds[decides].iloc[-1] >= budget - 0.05
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
    assert rounds["t_trigger"].iloc[-1] >= budget  # read by every rank alike: exact
    last = int(rounds["round"].iloc[-1])
    assert it.groupby("worker").size().to_dict() == {0: (last + 1) * calls, 1: (last + 1) * calls}


def test_lsgd_ranks_stop_at_the_budgets_last_exchange(spawn, scenario_file, tmp_path):
    it, rounds = budget_run(spawn, scenario_file, tmp_path, "lsgd", decides="t_done")
    assert rounds["t_done"].iloc[-1] >= BUDGET  # rank 0's completion times, as it decided
    last_rows = it.sort_values("iteration").groupby("worker").tail(1)
    assert (last_rows["round"] == rounds["round"].iloc[-1]).all() and len(last_rows) == 2


#: 3 ranks, rank 2 computing 8 times longer than the others, every round partial, a budget of 1 s
PARTIAL = {
    "cluster.workers": 3,
    "imbalance.kind": "persistent",
    "imbalance.factors": "{2 = 8.0}",
    "algorithm.sync_period": 0,
    "duration": 1.0,
}


# eager-majority may draw the slow rank as the last round's initiator (which round is last depends on timing):
# every rank then waits for it
@pytest.mark.parametrize("algorithm,lags", [("eager-solo", True), ("eager-majority", False), ("quorum", True)])
def test_partial_rounds_stop_every_rank_at_the_first_round_triggered_at_or_after_the_budget(
    spawn, scenario_file, tmp_path, algorithm, lags
):
    # rank 2 lags behind the rounds the others trigger
    out = tmp_path / "run"
    sets = [x for key, value in {**PARTIAL, "algorithm.name": algorithm}.items() for x in ("--set", f"{key}={value}")]
    argv = ["run", str(scenario_file(SCENARIO)), *sets, "-o", str(out)]
    proc = spawn(3, argv, timeout=150)
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    assert run.finished
    for table in ("iterations", "rounds"):
        assert list(getattr(run, table).columns) == SCHEMAS[table].names
    it, rounds = run.iterations, run.rounds
    assert 0 < len(it) < 3 * ITERATIONS
    # the last round is the first whose trigger is at or after the budget (every rank read the same t_trigger), and
    # no round follows it
    trigger = rounds["t_trigger"].to_numpy()
    assert list(rounds["round"]) == list(range(len(rounds)))
    assert trigger[-1] >= 1.0 and (trigger[:-1] < 1.0).all()
    last = len(rounds) - 1
    assert (it["round"] <= last).all()
    for worker, rows in it.groupby("worker"):
        rows = rows.sort_values("iteration")
        assert list(rows["iteration"]) == list(range(len(rows)))
        final = rows.iloc[-1]
        # its release by the last round, or a release after that round completed on this rank (which was after its
        # trigger; a millisecond for the alignment of the ranks' clocks)
        assert final.iteration == last or (final.iteration < last and final.t_done >= trigger[-1] - 1e-3), worker
    sizes = it.groupby("worker").size()
    # the slow rank lagged: it stopped at a release after the last round, before its own call of that round
    assert (sizes[2] <= last and sizes[2] < sizes[0]) or not lags


WAGMA = ["--set", "algorithm.name=wagma", "--set", "algorithm.group_size=2"]


def test_a_budget_an_exchange_cannot_stop_yet_is_a_one_line_error(spawn, scenario_file, tmp_path):
    out = tmp_path / "run"
    proc = spawn(2, ["run", str(scenario_file(SCENARIO)), *WAGMA, "-o", str(out)])
    assert proc.returncode == 2
    assert "duration = 0.5: wagma has no time budget in real runs yet" in proc.stderr
    assert "Traceback" not in proc.stderr
