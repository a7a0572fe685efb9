"""The time budget (``duration``): which round is the last (the first triggered at or after it), which rows exist, in
closed form on traces and as a rule on random runs; LSGD's workers stop together at the budget's last exchange."""

import numpy as np
import pytest

from stragglerlab.analysis.metrics import summarize
from stragglerlab.analysis.runfolder import load_run
from stragglerlab.simulator import algorithms
from stragglerlab.simulator.catalog import example_path
from stragglerlab.simulator.costs import cost_model
from stragglerlab.simulator.run import simulate
from stragglerlab.simulator.scenario import ScenarioError, load
from tests.helpers import run_tables, scenario
from tests.simulator.test_fast_engine import assert_same_tables


def traced(tmp_path, compute, **keys):
    """A scenario on a trace of one row (each worker's compute time, every iteration), free links but a round
    overhead of 0.05 s."""
    np.save(tmp_path / "trace.npy", np.array([compute]))
    return scenario(
        **{
            "cluster.workers": len(compute),
            "network.alpha": 0.0,
            "network.beta": 0.0,
            "network.overhead": 0.05,
            "imbalance.kind": "trace",
            "imbalance.file": str(tmp_path / "trace.npy"),
            **keys,
        }
    )


def rules_of(s):
    return algorithms.get(s.algorithm.name).rules(s, cost_model(s))


def rows_per_worker(it):
    return it.groupby("worker").size().to_dict()


def test_sync_stops_after_the_first_round_triggered_at_or_after_the_budget(tmp_path):
    s = traced(tmp_path, [0.1, 0.1, 0.3], **{"algorithm.name": "sync", "duration": 1.0})
    step = 0.3 + rules_of(s).exchange_time(0)  # worker 2 triggers round m at m·step + 0.3; it completes at (m + 1)·step
    trigger = 0.3 + step * np.arange(20)
    last = int(np.argmax(trigger >= 1.0))
    it, r = run_tables(s)
    assert list(r["round"]) == list(range(last + 1))
    np.testing.assert_allclose(r["t_trigger"], trigger[: last + 1])
    np.testing.assert_allclose(r["t_done"], step * np.arange(1, last + 2))
    assert rows_per_worker(it) == {i: last + 1 for i in range(3)}
    # at or after: a budget equal to a round's trigger makes that round the last
    free = run_tables(s.replace(duration=0.0))[1]
    it, r = run_tables(s.replace(duration=float(free["t_trigger"][1])))
    assert list(r["round"]) == [0, 1] and len(it) == 6
    # a round triggered before the budget and completing after it is not the last: the next one is
    it, r = run_tables(s.replace(duration=float(free["t_done"][1])))
    assert free["t_trigger"][1] < free["t_done"][1]
    assert list(r["round"]) == [0, 1, 2] and len(it) == 9


def test_eager_solo_stops_a_lagging_worker_at_its_first_release_after_the_last_round(tmp_path):
    # workers 0 and 1 post every 0.1 s and run rounds alone; worker 2 takes 1 s for its first iteration
    s = traced(
        tmp_path,
        [0.1, 0.1, 1.0],
        **{"algorithm.name": "eager-solo", "algorithm.sync_period": 0, "duration": 0.5},
    )
    step = 0.1 + rules_of(s).exchange_time(0)  # no activation token with alpha = 0
    trigger = 0.1 + step * np.arange(20)  # worker 0's post (first in worker order) triggers round m
    last = int(np.argmax(trigger >= 0.5))
    it, r = run_tables(s)
    assert list(r["round"]) == list(range(last + 1))
    np.testing.assert_allclose(r["t_trigger"], trigger[: last + 1])
    assert rows_per_worker(it) == {0: last + 1, 1: last + 1, 2: 1}
    lagging = it[it.worker == 2].iloc[0]
    # posted after the last round's exchange started: late, carried by no round, released at its post
    assert lagging.t_post == pytest.approx(1.0) and lagging.t_done == lagging.t_post and lagging["round"] == -1


@pytest.mark.parametrize("window", [1, 3, 64])
def test_quorum_closed_form_on_a_trace(tmp_path, window):
    # P = 3, k = 2, compute 0.1, 0.2 and 0.65 s, exchanges of 0.05 s: worker 1's post is the 2nd of each call, so
    # round m is triggered at 0.2 + 0.25·m and completes 0.05 s later (0.25, 0.5, 0.75); worker 2 lags
    s = traced(
        tmp_path,
        [0.1, 0.2, 0.65],
        **{"algorithm.name": "quorum", "algorithm.sync_period": 0, "duration": 0.48},
    )
    assert rules_of(s).quorum(0) == 2
    it, r = run_tables(s)
    # round 1 completes at 0.5 ≥ 0.48 but was triggered at 0.45 < 0.48: round 2 (triggered at 0.7) is the last
    assert list(r["round"]) == [0, 1, 2] and list(r["initiator"]) == [1, 1, 1]
    np.testing.assert_allclose(r["t_trigger"], [0.2, 0.45, 0.7])
    np.testing.assert_allclose(r["t_done"], [0.25, 0.5, 0.75])
    assert rows_per_worker(it) == {0: 3, 1: 3, 2: 2}
    # workers 0 and 1 stop at their release by round 2
    for w in (0, 1):
        last = it[it.worker == w].iloc[-1]
        assert last.iteration == 2 and last["round"] == 2 and last.fresh and last.t_done == pytest.approx(0.75)
    # worker 2: call 0, posted at 0.65 after round 0 completed, is released at once and goes into round 2 (not yet
    # triggered); its call 1, posted at 1.3 after round 2 completed, is released at once: its first release after
    # the last round, carried by no round
    first, second = it[it.worker == 2].iloc[0], it[it.worker == 2].iloc[1]
    assert first["round"] == 2 and not first.fresh and first.t_done == pytest.approx(0.65)
    assert second["round"] == -1 and second.t_post == pytest.approx(1.3) and second.t_done == second.t_post
    assert r["contributors"].iloc[-1] == 3 and r["fresh"].iloc[-1] == 2
    assert_same_tables(s, window)


def test_lsgd_closed_form_on_a_trace(tmp_path):
    # two workers at 0.1 s, an exchange every 2 posts: worker 1's first post triggers exchange 0, which worker 0
    # joins after its second iteration; then both post together and worker 0's post triggers each next one
    s = traced(
        tmp_path,
        [0.1, 0.1],
        **{"algorithm.name": "lsgd", "algorithm.period": 1, "algorithm.global_period": 1, "duration": 0.93},
    )
    x = rules_of(s).t_exchange
    done = 0.2 + x + np.arange(20) * (0.1 + x)  # exchange e completes at 0.2 + x + e·(0.1 + x)
    last = int(np.argmax(done >= 0.93))
    it, r = run_tables(s)
    assert list(r["round"]) == list(range(last + 1))
    np.testing.assert_allclose(r["t_done"], done[: last + 1])
    assert rows_per_worker(it) == {0: last + 2, 1: last + 1}
    assert (it.groupby("worker")["t_done"].max() == r["t_done"].iloc[-1]).all()


def test_wagma_stops_at_the_first_global_average_triggered_at_or_after_the_budget(tmp_path):
    # P = 3 in groups of 2 (phases {0, 1}, {2} and {0, 2}, {1}), every 3rd round a global average, compute 0.1, 0.1
    # and 0.3 s, exchanges of 0.05 s: workers 0 and 1 trigger the group rounds 0.15 s apart, worker 2 lags and its
    # post triggers each global average; round 3k + 2 is triggered at 0.9 + 0.95k
    s = traced(
        tmp_path,
        [0.1, 0.1, 0.3],
        **{
            "algorithm.name": "wagma",
            "algorithm.group_size": 2,
            "algorithm.sync_period": 3,
            "iterations": 30,
            "duration": 1.0,
        },
    )
    assert {rules_of(s).exchange_time(m) for m in range(3)} == {0.05}
    it, r = run_tables(s)
    # group rounds 3 and 4 are triggered after the budget, but only the global average 5 ends it
    assert list(r["round"]) == list(range(6))
    assert list(r["kind"]) == ["group", "group", "average"] * 2 and list(r["initiator"]) == [0, 0, 2] * 2
    np.testing.assert_allclose(r["t_trigger"], [0.1, 0.25, 0.9, 1.05, 1.2, 1.85])
    np.testing.assert_allclose(r["t_done"], [0.15, 0.3, 0.95, 1.1, 1.25, 1.9])
    # every worker is in the global average, fresh, and stops at its release by it
    assert rows_per_worker(it) == {i: 6 for i in range(3)}
    last = it.sort_values("iteration").groupby("worker").tail(1)
    assert (last["round"] == 5).all() and last["fresh"].all() and np.allclose(last["t_done"], 1.9)
    # at or after: a global average triggered at the budget is the last
    it, r = run_tables(s.replace(duration=float(r["t_trigger"][2])))
    assert list(r["round"]) == [0, 1, 2] and rows_per_worker(it) == {i: 3 for i in range(3)}
    for window in (1, 3, 64):
        assert_same_tables(s, window)


def test_wagma_without_a_global_average_cannot_have_a_budget():
    with pytest.raises(ScenarioError, match="algorithm.sync_period = 0: must be at least 1 with a time budget"):
        scenario(duration=1.0, **{"algorithm.name": "wagma", "algorithm.sync_period": 0})


def stop_rule_holds(it, r, duration, decides, ends=None):
    """Round-per-call algorithms and LSGD: the last round is the first whose ``decides`` column (round algorithms:
    its trigger; LSGD: its completion) is at or after the budget, of the rounds that may end it (``ends``, a bool per
    round; all by default), and every worker's rows end at its first release at or after that round's completion."""
    ends = np.ones(len(r), dtype=bool) if ends is None else ends
    t = r[decides].to_numpy()[ends]
    assert ends[-1] and t[-1] >= duration and (t[:-1] < duration).all()
    done = r["t_done"].iloc[-1]
    for _, rows in it.groupby("worker"):
        released = rows.sort_values("iteration")["t_done"].to_numpy()
        assert released[-1] >= done and (released[:-1] <= done).all()


#: every algorithm's keys for a budgeted run with a straggler: worker 2 four times slower
SLOW_WORKER = {
    "algorithm.period": 3,
    "algorithm.group_size": 2,
    "algorithm.sync_period": 0,
    "imbalance.kind": "persistent",
    "imbalance.factors": {"2": 4.0},
    "workload.compute": {"dist": "lognormal", "mean": 0.02, "cv": 0.5},
}
#: the keys an algorithm further needs for a time budget: wagma's ends only at a global average
BUDGET_KEYS = {"wagma": {"algorithm.sync_period": 4}}


def slow_worker(name, duration):
    """200 iterations of 8 workers, worker 2 four times slower, with the time budget ``duration``."""
    return scenario(
        iterations=200, duration=duration, **{"algorithm.name": name, **SLOW_WORKER, **BUDGET_KEYS.get(name, {})}
    )


def random_run(name, duration):
    """The run of :func:`slow_worker`, stopped by the budget."""
    s = slow_worker(name, duration)
    it, r = run_tables(s)
    assert len(it) < 8 * 200
    if algorithms.get(name).kernel is not None:
        assert_same_tables(s, window=8)
    return it, r


ROUND_ALGORITHMS = ["sync", "eager-solo", "eager-majority", "wagma", "lsgd", "local-sgd", "quorum", "preempt"]


@pytest.mark.parametrize("name", ROUND_ALGORITHMS)
@pytest.mark.parametrize("duration", [0.3, 2.0])
def test_every_worker_stops_at_the_budgets_last_round(name, duration):
    it, r = random_run(name, duration)
    if name == "lsgd":
        stop_rule_holds(it, r, duration, "t_done")
    else:  # wagma: only a global average ends the budget
        rules = rules_of(slow_worker(name, duration))
        stop_rule_holds(it, r, duration, "t_trigger", np.array([rules.ends_budget(m) for m in r["round"]]))


@pytest.mark.parametrize("name", ["d-psgd", "sgp", "swarm-sgd"])
@pytest.mark.parametrize("duration", [0.3, 2.0])
def test_synchronous_gossip_stops_every_worker_at_the_first_iteration_completing_after_the_budget(name, duration):
    it, r = random_run(name, duration)
    last = int(r["round"].max())
    assert rows_per_worker(it) == {i: last + 1 for i in range(8)}
    earliest = r.groupby("round")["t_done"].min()
    assert earliest[last] >= duration > earliest[last - 1]


@pytest.mark.parametrize("name", ["async-ps", "easgd", "ad-psgd"])
def test_a_worker_on_its_own_stops_at_its_first_exchange_completing_at_or_after_the_budget(name):
    it, _ = random_run(name, 0.5)
    for _, rows in it.groupby("worker"):
        rows = rows.sort_values("iteration")
        exchange = rows["t_done"] > rows["t_post"]
        assert exchange.iloc[-1] and rows["t_done"].iloc[-1] >= 0.5
        assert (rows["t_done"][exchange].iloc[:-1] < 0.5).all()


def test_every_algorithm_has_a_stop_rule_tested():
    assert set(ROUND_ALGORITHMS) | {"d-psgd", "sgp", "swarm-sgd", "async-ps", "easgd", "ad-psgd"} == set(
        algorithms.names()
    )


def test_lsgd_4x4_with_a_slow_worker_computes_nothing_after_the_budgets_last_exchange():
    s = load(example_path("lsgd-4x4")).replace(
        **{"imbalance.kind": "persistent", "imbalance.factors": {"3": 1.5}, "engine": "fast"}
    )
    it, r = run_tables(s, "fast")
    # without a budget the slow worker runs on alone after the last exchange
    assert it["t_start"].max() > r["t_done"].max() + 1.0
    budget = s.replace(duration=30.0)
    it, r = run_tables(budget, "fast")
    last = r["t_done"].iloc[-1]
    assert last >= 30.0 > r["t_done"].iloc[-2]
    assert not (it["t_start"] >= last).any()
    assert (it.groupby("worker")["t_done"].max() == last).all()
    assert (it["round"] == it["round"].max()).sum() > 0 and (it["round"] >= 0).all()
    assert_same_tables(budget, window=64)


def test_a_run_folder_the_budget_stopped_is_finished_and_summarised(tmp_path):
    s = scenario(
        iterations=200,
        duration=1.0,
        **{
            "algorithm.name": "eager-solo",
            "algorithm.sync_period": 0,
            "imbalance.kind": "persistent",
            "imbalance.factors": {"2": 4.0},
            "workload.compute": {"dist": "lognormal", "mean": 0.02, "cv": 0.5},
        },
    )
    run = load_run(simulate(s, tmp_path / "run"))
    assert run.finished and run.meta["scenario"]["duration"] == 1.0
    it = run.iterations
    assert len(it) < 8 * 200 and run.meta["tally"]["rows"] == len(it)
    assert it.groupby("worker").size()[2] < it.groupby("worker").size()[0]  # the slow worker has fewer rows
    summary = summarize(run)
    assert summary.iterations == len(it) and summary.samples_per_s > 0 and np.isfinite(summary.mean_iteration)


@pytest.mark.parametrize("window", [1, 2, 4])
def test_the_fast_engine_keeps_a_lagging_workers_rows_until_the_budget_decides_them(window):
    # worker 1 posts call 0 at 0.5, when round 3 (the last, at 0.5) completes: released before the completion, it runs
    # call 1 and stops there; the fast engine must not hand over rows it computed beyond that in earlier windows
    s = scenario(
        iterations=4,
        duration=0.5,
        **{
            "cluster.workers": 2,
            "network.alpha": 0.0,
            "network.beta": 0.0,
            "network.gamma": 0.0,
            "workload.params": 1,
            "workload.compute": {"dist": "constant", "mean": 0.5},
            "imbalance.kind": "persistent",
            "imbalance.factors": {"0": 0.25},
            "algorithm.name": "eager-solo",
            "algorithm.sync_period": 0,
            "algorithm.late": "drop",
        },
    )
    it, r = run_tables(s)
    assert rows_per_worker(it) == {0: 4, 1: 2} and list(r["t_done"]) == [0.125, 0.25, 0.375, 0.5]
    assert_same_tables(s, window)
