"""Real runs with a time budget: every rank stops after the same round (sync) or exchange (lsgd), the first that
rank 0 saw complete at or after the budget, or, on their own (async-ps, easgd, ad-psgd), each rank at its own first
exchange that completes at or after it; the run folder is finished with the rows it has."""

from __future__ import annotations

import pytest

from stragglerlab.analysis.runfolder import load_run
from tests.realrun.folders import check_folder

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


def budgeted_run(spawn, scenario_file, tmp_path, algorithm, *sets, ranks=2, backend="native", budget=BUDGET):
    """The run of ``algorithm`` on ``ranks`` ranks with the time budget (and the further ``--set`` keys ``sets``),
    checked to be finished, valid and cut short by the budget."""
    out = tmp_path / "run"
    argv = ["run", str(scenario_file(SCENARIO)), "--backend", backend, "-o", str(out)]
    keys = [f"algorithm.name={algorithm}", f"duration={budget}", f"cluster.workers={ranks}", *sets]
    proc = spawn(ranks, [*argv, *(x for key in keys for x in ("--set", key))])
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    check_folder(run, ranks, ITERATIONS, budgeted=True)
    return run


def budget_run(spawn, scenario_file, tmp_path, algorithm, backend="native", budget=BUDGET):
    run = budgeted_run(spawn, scenario_file, tmp_path, algorithm, backend=backend, budget=budget)
    it, rounds = run.iterations, run.rounds
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


# rank 2 computes 2 s per iteration, the others 10 ms: the budget ends rank 2 at its first exchange and the others
# some 50 iterations in, long before it; they have stopped when rank 2 exchanges, and still answer it
SLOW = ("imbalance.kind=persistent", "imbalance.factors={2 = 200.0}")


@pytest.mark.parametrize("algorithm,period", [("async-ps", 1), ("easgd", 2), ("ad-psgd", 1)])
def test_ranks_on_their_own_stop_at_their_first_exchange_completing_after_the_budget(
    spawn, scenario_file, tmp_path, algorithm, period
):
    run = budgeted_run(spawn, scenario_file, tmp_path, algorithm, *SLOW, ranks=3)
    it, rounds = run.iterations, run.rounds
    exchanges = it[(it["iteration"] + 1) % period == 0]
    assert (it["round"] >= 0).all()  # every step reached the server (easgd): the last iteration is an exchange
    for worker in range(3):
        own = exchanges[exchanges["worker"] == worker]
        assert own["iteration"].iloc[-1] == it[it["worker"] == worker]["iteration"].iloc[-1]
        assert own["t_done"].iloc[-1] >= BUDGET and (own["t_done"].iloc[:-1] < BUDGET).all()
    assert len(it[it["worker"] == 2]) == period  # its first exchange completes 2·period s in
    assert len(rounds) == len(exchanges)  # one push (ad-psgd: exchange) each
    last = it.groupby("worker")["t_done"].max()
    slow = rounds[rounds["initiator"] == 2]
    if algorithm == "ad-psgd":  # its peer had stopped, and its thread served the exchange
        assert len(slow) == 1 and slow["t_trigger"].iloc[0] >= last[slow["group"].iloc[0]]
    else:  # the server kept serving after the others had stopped
        assert len(slow) == 1 and slow["t_done"].iloc[0] > last[[0, 1]].max()


def test_a_budget_an_exchange_cannot_stop_yet_is_a_one_line_error(spawn, scenario_file, tmp_path):
    out = tmp_path / "run"
    proc = spawn(2, ["run", str(scenario_file(SCENARIO)), "--set", "algorithm.name=eager-solo", "-o", str(out)])
    assert proc.returncode == 2
    assert "duration = 0.5: eager-solo has no time budget in real runs yet" in proc.stderr
    assert "Traceback" not in proc.stderr
