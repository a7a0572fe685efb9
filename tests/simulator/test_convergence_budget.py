"""The convergence replay of a run stopped by the time budget (``duration``): the budget only truncates the schedule,
so the model after a round is the unbudgeted run's; each worker's gradient steps are exactly its rows; the final
evaluation is at the last row's ``t_done``; both engines give the same evals."""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

import numpy as np
import pytest

from stragglerlab.analysis.runfolder import load_run
from stragglerlab.simulator import algorithms
from stragglerlab.simulator.algorithms.rounds import gradient_rounds
from stragglerlab.simulator.plan import plan
from stragglerlab.simulator.run import simulate, train
from stragglerlab.simulator.workloads import load as load_workload
from tests.helpers import run_tables, scenario
from tests.simulator.test_duration import BUDGET_KEYS, SLOW_WORKER

SMALL = {
    "workload.model": "hyperplane",
    "workload.dimension": 12,
    "workload.samples": 1200,
    "workload.batch": 4,
    "cluster.workers": 6,
    "iterations": 40,
    **SLOW_WORKER,
}


def budgeted(name: str, fraction: float = 0.5, **keys):
    """The scenario of ``name`` without a budget, and with one at ``fraction`` of the time its unbudgeted run's
    first worker to end ends (so that every worker is stopped)."""
    free = scenario(**{**SMALL, "algorithm.name": name, **BUDGET_KEYS.get(name, {}), **keys})
    end = float(run_tables(free)[0].groupby("worker")["t_done"].max().min())
    return free, free.replace(duration=fraction * end)


def replayed(s, workload=None):
    """The replay of one run of ``s``: (evals rows, replicas after each round by round, final replicas, tables)."""
    it, rounds = run_tables(s)
    after: dict[int, np.ndarray] = {}
    final = []

    def observe(event, m, value):
        if event == "round":
            after[m] = value.copy()
            final[:] = [value]  # the replay's own matrix: its state once the replay ends

    evals = list(train(plan(s), workload or load_workload(s), it, rounds, observe))
    return evals, after, final[0], it


@pytest.mark.parametrize(
    ("name", "keys"),
    [
        ("sync", {}),
        ("eager-solo", {}),
        ("eager-solo", {"algorithm.late": "drop"}),
        ("local-sgd", {}),
        ("d-psgd", {}),
        ("wagma", {}),
    ],
)
def test_a_budgeted_runs_final_model_is_the_unbudgeted_model_after_the_same_round(name, keys):
    free, budget = budgeted(name, **keys)
    _, free_after, _, free_it = replayed(free)
    evals, after, final, it = replayed(budget)
    counts = it.groupby("worker").size()
    assert len(it) < len(free_it)
    if name == "eager-solo":
        assert counts[2] < counts.max()  # the slow worker lags: fewer rows than the others
    last = max(after)  # the budget's last round (d-psgd: the row of its last iteration's latest exchange)
    np.testing.assert_allclose(final, free_after[last], rtol=0, atol=1e-12)
    assert evals[-1][1] == counts.max()


def test_wagmas_replicas_are_one_model_after_the_budgets_last_round():
    _, budget = budgeted("wagma")
    it, rounds = run_tables(budget)
    averaged = {}

    def observe(event, m, value):
        if event == "averaged":
            averaged[m] = value.copy()

    list(train(plan(budget), load_workload(budget), it, rounds, observe))
    last = int(rounds["round"].iloc[-1])
    assert rounds["kind"].iloc[-1] == "average" and max(averaged) == last
    assert (rounds["kind"] == "group").any()  # a run of group rounds, which leave the replicas apart
    W = averaged[last]
    assert not np.allclose(averaged[last - 1], averaged[last - 1][0])
    np.testing.assert_array_equal(W, np.broadcast_to(W[0], W.shape))  # every worker was averaged: one model


class Counted(NamedTuple):
    """The batches of a :class:`Counting` workload: the inner workload's, and whose they are."""

    inner: Any
    workers: np.ndarray
    iterations: np.ndarray

    def __getitem__(self, key):  # type: ignore[override]
        """``batches[rows, samples]``, as a workload's batches are cut (preempt's replay takes the first samples)."""
        rows, samples = key
        return Counted(self.inner[rows, samples], self.workers[rows], self.iterations[rows])


class Counting:
    """A workload that records which (worker, iteration) each gradient is taken for."""

    def __init__(self, inner):
        self.inner, self.taken = inner, Counter()

    def batches(self, workers, iterations):
        return Counted(self.inner.batches(workers, iterations), np.asarray(workers), np.asarray(iterations))

    def gradient(self, W, batches):
        inner, workers, iterations = batches
        self.taken.update(zip(workers.tolist(), iterations.tolist(), strict=True))
        return self.inner.gradient(W, inner)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize("name", algorithms.names())
def test_every_worker_takes_exactly_its_rows_as_gradient_steps_and_the_last_evaluation_is_at_the_end(name, tmp_path):
    _, budget = budgeted(name)
    workload = Counting(load_workload(budget))
    evals, _, _, it = replayed(budget, workload)
    counts = it.groupby("worker").size()
    assert len(it) < budget.workers * budget.iterations
    rows = set(zip(it["worker"], it["iteration"], strict=True))
    assert set(workload.taken) <= rows and max(workload.taken.values()) == 1  # each row's gradient at most once
    # the gradient-averaging updates skip a row carried by no round (its gradient would never be applied)
    applied = it[it["round"] >= 0] if algorithms.get(name).apply is gradient_rounds else it
    assert set(zip(applied["worker"], applied["iteration"], strict=True)) <= set(workload.taken)
    t, iteration, worker = evals[-1][:3]
    assert t == it["t_done"].max() and iteration == counts.max() and worker == -1
    # the run folder's evals end there too
    run = load_run(simulate(budget, tmp_path / "run"))
    assert run.evals["t"].iloc[-1] == run.iterations["t_done"].max()


@pytest.mark.parametrize("name", [n for n in algorithms.names() if algorithms.get(n).kernel is not None])
def test_both_engines_give_the_same_evals_with_a_budget(name):
    _, budget = budgeted(name)
    workload = load_workload(budget)
    reference = list(train(plan(budget), workload, *run_tables(budget, "reference")))
    fast = list(train(plan(budget), workload, *run_tables(budget, "fast", window=8)))
    assert fast == reference
