"""The convergence replay against the semantics: serial SGD, identical replicas, accumulate/drop, LSGD's pulls and
eager-SGD's headline result on the shipped injection example."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.analysis.metrics import summarize, to_target
from stragglerlab.analysis.runfolder import load_run
from stragglerlab.simulator.catalog import example_path
from stragglerlab.simulator.plan import plan
from stragglerlab.simulator.run import simulate, train
from stragglerlab.simulator.scenario import load
from stragglerlab.simulator.workloads import load as load_workload
from tests.helpers import run_tables, scenario

HYPERPLANE = {
    "workload.model": "hyperplane",
    "workload.dimension": 12,
    "workload.samples": 1200,
    "workload.batch": 4,
    "cluster.workers": 6,
    "iterations": 30,
}
SKEWED = {
    "imbalance.kind": "random-delay",
    "imbalance.slow": [1, 3],
    "imbalance.delay": 0.5,
    "algorithm.sync_period": 7,
}


def identical(W: np.ndarray) -> bool:
    return bool(np.ptp(W, axis=0).max() == 0)


def trace(s, workload=None, events=("round",)):
    """Run the engine and the replay; returns {event: [(round, copy of value)]} and the iterations table."""
    workload = workload or load_workload(s)
    it, rounds = run_tables(s)
    seen = {e: [] for e in events}

    def observe(event, m, value):
        if event in seen:
            seen[event].append((m, value.copy() if isinstance(value, np.ndarray) else value))

    list(train(plan(s), workload, it, rounds, observe))
    return seen, it


def test_sync_equals_serial_minibatch_sgd_on_the_same_samples():
    s = scenario(**{**HYPERPLANE, "algorithm.momentum": 0.9, "algorithm.weight_decay": 0.01, "algorithm.lr": 0.02})
    wl = load_workload(s)
    seen, _ = trace(s, wl)
    P, b = s.workers, s.workload.batch
    w, buf = wl.initial(), np.zeros(wl.dimension)
    for n, (m, W) in enumerate(seen["round"]):
        idx = wl.batches(np.arange(P), np.full(P, n)).reshape(1, P * b)  # one batch of P·b samples
        g = wl.gradient(w[None], idx)[0][0] + 0.01 * w
        buf = 0.9 * buf + g
        w = w - 0.02 * buf
        assert m == n
        np.testing.assert_allclose(W, np.tile(w, (P, 1)), rtol=0, atol=1e-6)
    assert np.abs(w).max() > 0.1  # it trained


@pytest.mark.parametrize("name", ["eager-solo", "eager-majority"])
def test_eager_without_imbalance_follows_the_sync_trajectory(name):
    sync, _ = trace(scenario(**HYPERPLANE))
    eager, _ = trace(scenario(**{**HYPERPLANE, "algorithm.name": name}))
    assert len(eager["round"]) == len(sync["round"]) == 30
    for (m, a), (k, b) in zip(eager["round"], sync["round"], strict=True):
        assert m == k
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "name,late",
    [("eager-solo", "accumulate"), ("eager-solo", "drop"), ("eager-majority", "accumulate"), ("sync", "accumulate")],
)
def test_gradient_methods_keep_replicas_identical(name, late):
    seen, it = trace(scenario(**{**HYPERPLANE, **SKEWED, "algorithm.name": name, "algorithm.late": late}))
    for _, W in seen["round"]:
        assert identical(W)
    if name != "sync":
        assert not it["fresh"].all()  # there were late contributions


def test_wagma_replicas_identical_after_each_global_average_only():
    s = scenario(**{**HYPERPLANE, **SKEWED, "algorithm.name": "wagma", "algorithm.group_size": 2, "cluster.workers": 8})
    seen, _ = trace(s, events=("averaged",))
    periodic = [W for m, W in seen["averaged"] if m % 7 == 6]
    assert len(periodic) == 4
    assert all(identical(W) for W in periodic)
    assert not all(identical(W) for m, W in seen["averaged"] if m % 7 != 6)


def test_local_sgd_replicas_identical_after_each_average():
    s = scenario(**{**HYPERPLANE, **SKEWED, "algorithm.name": "local-sgd", "algorithm.period": 4})
    seen, _ = trace(s, events=("averaged", "round"))
    assert len(seen["averaged"]) == 30 // 4
    assert all(identical(W) for _, W in seen["averaged"])


class Probe:
    """A linear model whose gradient at (worker j, iteration n) is the unit vector of slot j·N + n: the final
    parameters count how often each worker-iteration's gradient was applied."""

    def __init__(self, s, losses=None, dimension=None):
        self.N, self.losses = s.iterations, losses
        self.dimension = dimension or s.workers * s.iterations

    def initial(self):
        return np.zeros(self.dimension)

    def batches(self, workers, iterations):
        return (np.asarray(workers) * self.N + np.asarray(iterations))[:, None]

    def gradient(self, W, batches):
        slot = batches[:, 0]
        G = np.zeros_like(W)
        G[np.arange(len(W)), slot % self.dimension] = 1.0
        loss = self.losses.ravel()[slot] if self.losses is not None else np.zeros(len(W))
        return G, loss

    def evaluate(self, w):
        return 0.0, 0.0


@pytest.mark.parametrize("late", ["accumulate", "drop"])
def test_accumulate_applies_every_gradient_once_and_drop_only_the_fresh(late):
    s = scenario(
        **{
            **HYPERPLANE,
            **SKEWED,
            "algorithm.name": "eager-solo",
            "algorithm.late": late,
            "iterations": 28,
            "algorithm.lr": 1.0,
        }
    )
    seen, it = trace(s, Probe(s))
    applied = -s.workers * seen["round"][-1][1][0]  # divide_by = workers, lr 1: each application adds -1/P
    expected = np.ones(len(it)) if late == "accumulate" else it["fresh"].to_numpy(dtype=float)
    np.testing.assert_allclose(applied, expected, atol=1e-12)
    assert 0 < it["fresh"].mean() < 1
    assert (it["round"] >= 0).all() == (late == "accumulate")


def test_lsgd_pulls_each_worker_toward_its_leaders_chosen_by_running_mean_loss():
    s = scenario(
        **{
            **HYPERPLANE,
            **SKEWED,
            "algorithm.name": "lsgd",
            "cluster.workers": 6,
            "cluster.workers_per_node": 3,
            "algorithm.period": 3,
            "algorithm.global_period": 6,
            "algorithm.pull": 0.3,
            "algorithm.global_pull": 0.2,
            "iterations": 40,
        }
    )
    losses = np.random.default_rng(3).random((s.workers, s.iterations))
    seen, it = trace(s, Probe(s, losses, dimension=5 * s.workers), events=("exchange", "round"))
    _, rounds = run_tables(s)
    assert (rounds["group"] == -1).any() and (rounds["group"] == 0).any()
    for (m, (X, mean)), (_, W) in zip(seen["exchange"], seen["round"], strict=True):
        for j in range(s.workers):
            mine = it[(it["worker"] == j) & (it["round"] >= 0) & (it["round"] <= m)]["iteration"]
            assert mean[j] == pytest.approx(losses[j, mine.to_numpy()[-10:]].mean())
        node = np.arange(s.workers) // 3
        local = np.array([3 * k + np.argmin(mean[3 * k : 3 * k + 3]) for k in node])
        expected = X - 0.3 * (X - X[local])
        if rounds["group"].iat[m] == -1:
            expected -= 0.2 * (X - X[np.argmin(mean)])
        np.testing.assert_allclose(W, expected, atol=1e-12)
        assert not np.allclose(W, X)


def test_solo_reaches_the_sync_final_loss_sooner_on_the_injection_example(tmp_path):
    overrides = ["workload.model=hyperplane", "iterations=60", "evals.every_iterations=2"]
    runs = {}
    for name in ("sync", "eager-solo"):
        s = load(example_path("eager-injected"), overrides + [f"algorithm.name={name}"])
        runs[name] = load_run(simulate(s, tmp_path / name))
    sync = summarize(runs["sync"])
    target = 1.05 * sync.final_loss
    solo = summarize(runs["eager-solo"], target)
    t_sync, _ = to_target(runs["sync"], sync.final_loss)
    assert solo.final_loss <= target
    assert solo.time_to_loss < t_sync
    assert runs["sync"].meta["scenario"]["workload"]["params"] == 100  # messages follow the model


def test_timing_only_runs_write_no_evals(tmp_path):
    run = load_run(simulate(scenario(), tmp_path / "run"))
    assert run.evals.empty and np.isnan(summarize(run).final_loss)


def test_evals_at_intervals_of_simulated_time_and_of_iterations_and_per_replica():
    s = scenario(
        **{
            **HYPERPLANE,
            **SKEWED,
            "algorithm.name": "wagma",
            "algorithm.group_size": 2,
            "evals.every_iterations": 0,
            "evals.every_seconds": 1.0,
            "evals.replicas": True,
        }
    )
    it, rounds = run_tables(s)
    rows = list(train(plan(s), load_workload(s), it, rounds))
    averaged = [r for r in rows if r[2] == -1]
    assert sorted({r[2] for r in rows}) == list(range(-1, s.workers))
    assert len(rows) == len(averaged) * (s.workers + 1)
    times = [t for t, *_ in averaged]
    assert times[0] == 0 and times[-1] == it["t_done"].max() and averaged[-1][1] == s.iterations
    done = rounds["t_done"].tolist()
    crossing = [t for before, t in zip([0.0] + done, done, strict=False) if int(t) > int(before)]
    assert times[1:-1] == crossing  # the first round completing past each whole second
    by_iterations = s.replace(**{"evals.every_seconds": 0, "evals.every_iterations": 7, "evals.replicas": False})
    assert [r[1] for r in train(plan(by_iterations), load_workload(s), it, rounds)] == [0, 7, 14, 21, 28, 30]
