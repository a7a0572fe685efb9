"""Real runs with a time budget: round algorithms stop after the first round whose trigger (``t_trigger``, a post
time every rank reads alike) is at or after the budget (wagma: the first global average), every rank at its release
by that round or, lagging, at its first release after it; LSGD's ranks stop after the first exchange rank 0 saw
complete at or after the budget; ranks on their own (async-ps, easgd, ad-psgd) each at its own first exchange that
completes at or after it. The run folder is finished with the rows it has.
"""

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


def budget_run(spawn, scenario_file, tmp_path, algorithm, backend="native", budget=BUDGET, decides="t_trigger"):
    run = budgeted_run(spawn, scenario_file, tmp_path, algorithm, backend=backend, budget=budget)
    it, rounds = run.iterations, run.rounds
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


#: rank 2 computes 8 times longer than the others, every round partial
PARTIAL = ("imbalance.kind=persistent", "imbalance.factors={2 = 8.0}", "algorithm.sync_period=0")


# eager-majority may draw the slow rank as the last round's initiator (which round is last depends on timing):
# every rank then waits for it
@pytest.mark.parametrize("algorithm,lags", [("eager-solo", True), ("eager-majority", False), ("quorum", True)])
def test_partial_rounds_stop_every_rank_at_the_first_round_triggered_at_or_after_the_budget(
    spawn, scenario_file, tmp_path, algorithm, lags
):
    # rank 2 lags behind the rounds the others trigger
    run = budgeted_run(spawn, scenario_file, tmp_path, algorithm, *PARTIAL, ranks=3, budget=1.0)
    it, rounds = run.iterations, run.rounds
    # the last round is the first whose trigger is at or after the budget (every rank read the same t_trigger), and
    # no round follows it
    trigger = rounds["t_trigger"].to_numpy()
    assert list(rounds["round"]) == list(range(len(rounds)))
    assert trigger[-1] >= 1.0 and (trigger[:-1] < 1.0).all()
    last = len(rounds) - 1
    assert (it["round"] <= last).all()
    for worker, rows in it.groupby("worker"):
        final = rows.sort_values("iteration").iloc[-1]
        # its release by the last round, or a release after that round completed on this rank (which was after its
        # trigger; a millisecond for the alignment of the ranks' clocks)
        assert final.iteration == last or (final.iteration < last and final.t_done >= trigger[-1] - 1e-3), worker
    sizes = it.groupby("worker").size()
    # the slow rank lagged: it stopped at a release after the last round, before its own call of that round
    assert (sizes[2] <= last and sizes[2] < sizes[0]) or not lags


#: P = 4 in groups of 2 (two butterfly phases), a global average every 16th round: the budget most likely falls
#: among the group rounds, so that some are triggered at or after it before the global average that ends it
WAGMA = ("algorithm.group_size=2", "algorithm.sync_period=16")


def test_wagma_ranks_stop_after_the_first_global_average_triggered_at_or_after_the_budget(
    spawn, scenario_file, tmp_path
):
    run = budgeted_run(spawn, scenario_file, tmp_path, "wagma", *WAGMA, ranks=4, budget=1.0)
    it, rounds = run.iterations, run.rounds
    assert list(rounds["round"]) == list(range(len(rounds)))
    last = len(rounds) - 1
    average = rounds[rounds["kind"] == "average"]
    assert list(average["round"]) == list(range(15, last + 1, 16)) and (average["group"] == -1).all()
    assert (rounds[rounds["kind"] != "average"]["group"] >= 0).all()
    # the last round is the first global average whose trigger (read by every rank alike) is at or after the budget;
    # group rounds before it may have been triggered after the budget
    trigger = average["t_trigger"].to_numpy()
    assert average["round"].iloc[-1] == last and trigger[-1] >= 1.0 and (trigger[:-1] < 1.0).all()
    # every rank was in it, fresh, and stopped at its release by it: no laggard, no round after it
    assert rounds["fresh"].iloc[-1] == 4 and rounds["contributors"].iloc[-1] == 4
    assert it.groupby("worker").size().to_dict() == {w: last + 1 for w in range(4)}
    final = it.sort_values("iteration").groupby("worker").tail(1)
    assert (final["round"] == last).all() and final["fresh"].all() and (it["round"] <= last).all()
    assert (it["t_start"] < rounds["t_done"].iloc[-1]).all()


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


#: every worker sleeps 2 ms each iteration: with a model the compute is the model's own (microseconds), and without
#: the sleep a quiet machine could run all the iterations before the budget
EVERY = ("imbalance.kind=random-delay", "imbalance.slow=[3,3]", "imbalance.delay=0.002")


@pytest.mark.parametrize(
    "algorithm,sets", [("eager-solo", EVERY), ("async-ps", SLOW), ("lsgd", EVERY), ("wagma", (*WAGMA, *EVERY))]
)
def test_a_budgeted_run_with_a_model_ends_its_evaluations_at_the_last_release_with_the_most_iterations(
    spawn, scenario_file, tmp_path, algorithm, sets
):
    run = budgeted_run(spawn, scenario_file, tmp_path, algorithm, *sets, "workload.model=logistic", ranks=3, budget=1.0)
    it, evals = run.iterations, run.evals
    sizes = it.groupby("worker").size()
    if algorithm == "async-ps":  # the slow rank (200 times its measured compute) stopped fewer iterations in
        assert sizes[2] < sizes[0]
    final = evals[evals["worker"] == -1].iloc[-1]
    assert final["iteration"] == sizes.max()
    # the latest release over the ranks: the last row's t_done where its rank's exchange returned it, else the time
    # the rank read once released
    assert final["t"] >= it["t_done"].max()
    if algorithm == "async-ps":  # every last row is a reply from the server
        assert final["t"] == it["t_done"].max()


def test_a_budget_an_exchange_cannot_stop_yet_is_a_one_line_error(spawn, scenario_file, tmp_path):
    out = tmp_path / "run"
    proc = spawn(2, ["run", str(scenario_file(SCENARIO)), "--set", "algorithm.name=sgp", "-o", str(out)])
    assert proc.returncode == 2
    assert "duration = 0.5: sgp has no time budget in real runs yet" in proc.stderr
    assert "Traceback" not in proc.stderr
