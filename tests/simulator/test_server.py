"""The parameter-server baselines (``async-ps``, ``easgd``) against their rule, re-derived here on trace compute times:
a push arrives at t_post + alpha, is served in arrival order (ties: worker order) for its bytes through the server's
link and (n/s)·server_gamma, and the reply reaches the worker p2p(n/s) after its service ends; easgd exchanges every
period-th iteration only. Then the convergence replay: async-ps applies every gradient exactly once, easgd's elastic
exchange on a hand case."""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np
import pandas as pd
import pytest

from stragglerlab.simulator import algorithms
from stragglerlab.simulator.keys import ScenarioError
from stragglerlab.simulator.plan import plan
from stragglerlab.simulator.run import engine_for, train
from stragglerlab.simulator.workloads import load as load_workload
from tests.helpers import run_tables, scenario
from tests.simulator.test_convergence import Probe

ALPHA, PARAMS, SERVERS = 0.01, 1000, 2
SHARD = PARAMS * 4 / SERVERS  # bytes per push (float32 elements over the shards)
GAMMA = 0.1 / SHARD  # the server's own work on a push takes 0.1 s
# beta = 1e-6 s/byte: a push's latency, its bytes through the server's link with that work, the reply
LATENCY, SERVICE, P2P = ALPHA, SHARD * 1e-6 + 0.1, ALPHA + SHARD * 1e-6


def server_scenario(tmp_path, compute: np.ndarray, name: str, **keys):
    """A scenario whose compute times are ``compute`` (iterations x workers), on the server's network."""
    np.save(tmp_path / "compute.npy", compute)
    return scenario(
        iterations=compute.shape[0],
        **{
            "cluster.workers": compute.shape[1],
            "workload.params": PARAMS,
            "network.alpha": ALPHA,
            "network.beta": 1e-6,
            "imbalance.kind": "trace",
            "imbalance.file": str(tmp_path / "compute.npy"),
            "algorithm.name": name,
            "algorithm.servers": SERVERS,
            "algorithm.server_gamma": GAMMA,
            **keys,
        },
    )


def expected(compute: np.ndarray, period: int = 1, update: float = 0.0):
    """The rule, step by step: every worker's t_start, t_post, t_done, round, model version per iteration, and the
    pushes (worker, t_post, t_done) in service order."""
    N, P = compute.shape
    start, post, done = np.zeros((N, P)), np.zeros((N, P)), np.zeros((N, P))
    round_, version = np.full((N, P), -1), np.zeros((N, P), dtype=int)
    arrivals: list[tuple[float, int, int]] = []  # (arrival, worker, iteration)
    pushes, free = [], 0.0
    current = [0] * P  # each worker's model version
    local: list[list[int]] = [[] for _ in range(P)]

    def run(i: int, n: int, t: float) -> None:
        """Worker i from iteration n at time t, through its local steps to its next push."""
        while n < N:
            start[n, i], version[n, i] = t, current[i]
            post[n, i] = t + compute[n, i]
            if (n + 1) % period == 0:
                heapq.heappush(arrivals, (post[n, i] + LATENCY, i, n))
                return
            done[n, i] = post[n, i]
            local[i].append(n)
            t, n = post[n, i] + update, n + 1

    for i in range(P):
        run(i, 0, 0.0)
    while arrivals:
        arrival, i, n = heapq.heappop(arrivals)
        free = max(arrival, free) + SERVICE
        k = len(pushes)
        done[n, i] = free + P2P
        for m in (*local[i], n):
            round_[m, i] = k
        local[i].clear()
        current[i] = k + 1
        pushes.append((i, post[n, i], done[n, i]))
        run(i, n + 1, done[n, i] + update)
    return start, post, done, round_, version, pushes


def check(it, rounds, compute, period=1, update=0.0):
    start, post, done, round_, version, pushes = expected(compute, period, update)
    N, P = compute.shape

    def m(column):
        return it[column].to_numpy().reshape(P, N).T

    for column, want in (("t_start", start), ("t_post", post), ("t_done", done)):
        np.testing.assert_allclose(m(column), want, rtol=0, atol=1e-9, err_msg=column)
    assert np.array_equal(m("round"), round_) and np.array_equal(m("model_version"), version)
    assert np.array_equal(m("staleness"), np.where(round_ >= 0, round_ - version, m("staleness")))
    assert np.array_equal(m("fresh"), round_ >= 0)
    assert list(rounds["round"]) == list(range(len(pushes))) and (rounds["kind"] == "push").all()
    assert list(rounds["initiator"]) == [p[0] for p in pushes]
    np.testing.assert_allclose(rounds["t_trigger"], [p[1] for p in pushes], rtol=0, atol=1e-9)
    np.testing.assert_allclose(rounds["t_done"], [p[2] for p in pushes], rtol=0, atol=1e-9)
    assert (rounds["contributors"] == 1).all() and (rounds["fresh"] == 1).all() and (rounds["group"] == -1).all()


def test_async_ps_serves_pushes_in_arrival_order_ties_by_worker_and_queues_on_a_busy_server(tmp_path):
    compute = np.array([[1.0, 1.0, 0.5], [0.3, 0.2, 0.45], [0.05, 0.05, 0.05]])
    s = server_scenario(tmp_path, compute, "async-ps")
    it, rounds = run_tables(s)
    check(it, rounds, compute)
    # by hand: worker 2 first; workers 0 and 1 arrive together (0 first); worker 2's second push (arriving at
    # 1.07... + alpha) waits for the server, busy with worker 1's until 1.22... + alpha
    assert list(rounds["initiator"][:4]) == [2, 0, 1, 2]
    w2 = it[it.worker == 2]
    assert w2.t_done.iloc[0] == pytest.approx(0.5 + LATENCY + SERVICE + P2P, abs=1e-12)
    assert w2.t_done.iloc[1] == pytest.approx(1.0 + LATENCY + 3 * SERVICE + P2P, abs=1e-12)
    assert list(w2.model_version[:2]) == [0, 1] and list(w2["round"][:2]) == [0, 3]
    assert list(w2.staleness[:2]) == [0, 2]  # updates 1 and 2 (workers 0 and 1) came between


@pytest.mark.parametrize("update", [0.0, 0.02])
def test_async_ps_matches_the_rule_on_random_compute_times(tmp_path, update):
    compute = np.random.default_rng(4).gamma(2.0, 0.1, size=(12, 5))
    compute[3] = 0.2  # a balanced iteration: every push of it arrives with others in a tie
    check(
        *run_tables(server_scenario(tmp_path, compute, "async-ps", **{"workload.update": update})), compute, 1, update
    )


def test_easgd_exchanges_every_period_and_its_local_steps_return_at_once(tmp_path):
    compute = np.random.default_rng(7).gamma(2.0, 0.1, size=(11, 4))
    s = server_scenario(tmp_path, compute, "easgd", **{"algorithm.period": 3})
    it, rounds = run_tables(s)
    check(it, rounds, compute, period=3)
    local = (it.iteration + 1) % 3 != 0
    assert (it.t_done[local] == it.t_post[local]).all() and (it.t_done[~local] > it.t_post[~local]).all()
    assert len(rounds) == 4 * 3 and (it["round"][it.iteration >= 9] == -1).all()


def test_server_keys_and_engine_choice(monkeypatch):
    s = scenario(**{"algorithm.name": "async-ps"})
    assert engine_for(s) == "fast"
    # an algorithm without a fast path runs on the reference engine only
    monkeypatch.setitem(algorithms.REGISTRY, "easgd", dataclasses.replace(algorithms.get("easgd"), kernel=None))
    assert engine_for(scenario(**{"algorithm.name": "easgd"})) == "reference"
    with pytest.raises(ScenarioError, match="has no fast kernel"):
        scenario(**{"algorithm.name": "easgd", "engine": "fast"})
    with pytest.raises(ScenarioError, match="servers.*a positive integer"):
        scenario(**{"algorithm.name": "async-ps", "algorithm.servers": 0})
    with pytest.raises(ScenarioError, match="server_gamma.*a number >= 0"):
        scenario(**{"algorithm.name": "async-ps", "algorithm.server_gamma": -1.0})


def replayed(s, workload, events=("round",)):
    it, rounds = run_tables(s)
    seen = {e: [] for e in events}

    def observe(event, m, value):
        if event in seen:
            seen[event].append((m, value.copy()))

    list(train(plan(s), workload, it, rounds, observe))
    return seen, it, rounds


SKEWED = {"imbalance.kind": "random-delay", "imbalance.slow": [1, 3], "imbalance.delay": 0.5}


def test_async_ps_applies_every_gradient_once_to_the_server_model():
    s = scenario(**{**SKEWED, "algorithm.name": "async-ps", "cluster.workers": 5, "iterations": 20, "algorithm.lr": 1})
    seen, it, rounds = replayed(s, Probe(s))
    W = seen["round"][-1][1]
    np.testing.assert_array_equal(W[-1], -np.ones(s.workers * s.iterations))  # w0 − lr·Σ every gradient
    assert (it.staleness > 0).any()
    # each worker's copy is the server's model as the worker's last update left it
    for j in range(s.workers):
        last = rounds[rounds.initiator == j]["round"].max()
        np.testing.assert_array_equal(W[j], seen["round"][last][1][-1])


def test_easgd_elastic_exchange_by_hand():
    s = scenario(
        **{
            "algorithm.name": "easgd",
            "cluster.workers": 2,
            "iterations": 4,
            "algorithm.period": 2,
            "algorithm.pull": 0.25,
            "algorithm.lr": 1.0,
            "imbalance.kind": "persistent",
            "imbalance.factors": {1: 1.5},
        }
    )
    seen, it, rounds = replayed(s, Probe(s))
    assert list(rounds.initiator) == [0, 1, 0, 1]
    # slots: worker j's iteration n is slot 4j + n; each local step adds −1 at its slot
    e = np.eye(8)
    x0, x1 = -(e[0] + e[1]), -(e[4] + e[5])  # the workers' first two steps
    c = np.zeros(8)
    d = 0.25 * (x0 - c)
    x0, c = x0 - d, c + d  # update 0: worker 0
    d = 0.25 * (x1 - c)
    x1, c = x1 - d, c + d  # update 1: worker 1
    x0 = x0 - e[2] - e[3]
    d = 0.25 * (x0 - c)
    x0, c = x0 - d, c + d  # update 2: worker 0
    np.testing.assert_allclose(seen["round"][2][1], np.stack([x0, x1, c]), atol=1e-15)
    x1 = x1 - e[6] - e[7]
    d = 0.25 * (x1 - c)
    np.testing.assert_allclose(seen["round"][3][1], np.stack([x0, x1 - d, c + d]), atol=1e-15)


@pytest.mark.parametrize("name", ["async-ps", "easgd"])
def test_the_averaged_model_of_a_server_method_is_the_servers(name):
    keys = {
        "workload.model": "hyperplane",
        "workload.dimension": 8,
        "workload.samples": 800,
        "workload.batch": 4,
        "cluster.workers": 4,
        "iterations": 20,
        "evals.replicas": True,
        "evals.every_iterations": 5,
        "algorithm.period": 2,
    }
    s = scenario(**keys, **{"algorithm.name": name})
    workload = load_workload(s)
    it, rounds = run_tables(s)
    last = {}
    evals = pd.DataFrame(
        train(plan(s), workload, it, rounds, lambda event, m, W: last.update(W=W.copy()) if event == "round" else None),
        columns=["t", "iteration", "worker", "loss", "accuracy"],
    )
    assert list(evals.worker) == [-1, 0, 1, 2, 3] * (len(evals) // 5)
    final = evals[evals.worker == -1].iloc[-1]  # after the last update (and easgd's trailing local steps)
    assert (final.loss, final.accuracy) == workload.evaluate(last["W"][-1])  # the server's row, not the mean
    assert final.loss != workload.evaluate(last["W"][:-1].mean(axis=0))[0]
    assert final.loss < evals[evals.worker == -1].loss.iloc[0]


def test_the_fast_engines_queue_takes_posts_in_the_order_of_posts():
    """Batches cut by a hold or by the taken posts' bounds, each taken post queued again no earlier than its bound
    (some into the bucket being taken, some past the calendar): every post comes out once, in (time, wave, worker)
    order."""
    from stragglerlab.simulator.fast.calendar import add, queue, take

    rng = np.random.default_rng(0)
    for trial in range(100):
        P = int(rng.integers(1, 300))
        if trial % 3 == 0:  # most posts at one instant (constant compute times)
            key = np.where(rng.random(P) < 0.8, 1.0, rng.random(P))
        elif trial % 3 == 1:  # few distinct instants: long runs of ties
            key = rng.choice(rng.random(4), P)
        else:  # one early outlier, the rest within a hair of each other
            key = np.concatenate([[0.0], 1 + rng.random(P - 1) * 1e-12])
        wave = rng.integers(0, 3, P) if trial % 5 == 0 else np.zeros(P, dtype=np.int64)
        q = queue(P)
        add(*q, key, np.arange(P, dtype=np.int64), P)
        taken, batch = [], np.zeros(P, dtype=np.int64)
        while len(taken) < 4 * P:
            bound = key + rng.choice([0.0, 1e-12, 0.1, 1.0], P)  # the earliest each worker can post again
            hold = np.inf if rng.random() < 0.7 else min(key) + rng.random() * 0.1
            count = take(*q, key, wave, bound, -np.inf, hold, batch)
            assert count > 0 or hold <= min(key)
            taken += [(key[w], wave[w], w) for w in batch[:count]]
            later = batch[:count].copy()
            before = key[later].copy()
            key[later] = bound[later] + rng.choice([0.0, 1e-3, 1.0], count)
            # a post at its worker's last instant comes in a later wave (as the steps' waves have it)
            wave[later] = np.where(key[later] == before, wave[later] + 1, rng.integers(0, 3, count) * (trial % 5 == 0))
            add(*q, key, later, count)
        assert taken == sorted(taken), trial
