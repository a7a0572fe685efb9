"""``preempt`` and ``swarm-sgd`` against closed forms written here from hand-made traces."""

import math

import numpy as np
import pandas as pd
import pytest

from stragglerlab.analysis.runfolder import load_run
from stragglerlab.simulator.algorithms.swarm import shifts
from stragglerlab.simulator.network import NetworkModel, message_bytes
from stragglerlab.simulator.plan import plan
from stragglerlab.simulator.replicas import Optimizer
from tests.helpers import run_tables, scenario

#: five workers' compute times (seconds) of four iterations, repeated: a different straggler each iteration
TRACE = np.array(
    [
        [0.10, 0.30, 0.20, 0.50, 0.40],
        [0.60, 0.10, 0.15, 0.20, 0.25],
        [0.20, 0.20, 0.20, 0.90, 0.20],
        [0.35, 0.05, 0.45, 0.15, 0.25],
    ]
)


def traced(tmp_path, name, trace, **keys):
    np.save(tmp_path / "c.npy", trace)
    return scenario(
        **{
            "algorithm.name": name,
            "cluster.workers": trace.shape[1],
            "imbalance.kind": "trace",
            "imbalance.file": str(tmp_path / "c.npy"),
            "workload.batch": 32,
            "workload.params": 50_000,
            "iterations": 12,
            **keys,
        }
    )


@pytest.mark.parametrize("fraction,q", [(0.2, 1), (0.6, 3), (0.61, 4), (0.8, 4)])
def test_preempt_ends_each_step_at_the_qth_finisher_plus_the_exchange(tmp_path, fraction, q):
    """Every step ends ⌈f·P⌉-th finisher + T_ar after it began; a worker finishing later posts at that finisher's
    time with ⌊b·(T − t_start)/c⌋ of its b samples (at least one), the others with all b."""
    s = traced(tmp_path, "preempt", TRACE, **{"algorithm.fraction": fraction})
    it, rounds = run_tables(s)
    t_ar = NetworkModel.of(s).allreduce(5, message_bytes(s))
    t = 0.0
    for n in range(12):
        c = TRACE[n % 4]
        elapsed = np.sort(c)[q - 1]
        rows = it[it.iteration == n].sort_values("worker")
        assert np.allclose(rows.t_start, t, rtol=0, atol=1e-12)
        assert np.allclose(rows.t_post, t + np.minimum(c, elapsed), rtol=0, atol=1e-12)
        samples = np.where(c <= elapsed, 32, np.maximum(1, np.floor(32 * elapsed / c + 1e-9)))
        assert list(rows.samples) == samples.astype(int).tolist()
        t += elapsed + t_ar
        assert np.allclose(rows.t_done, t, rtol=0, atol=1e-12)
        assert rounds.t_done[n] == pytest.approx(t, abs=1e-12)
    assert (rounds.kind == "sync").all() and (rounds.contributors == 5).all() and (it.staleness == 0).all()


def test_preempt_samples_by_hand():
    """The third iteration's straggler (0.9 s) is cut at the 0.2 s finishers with ⌊32·0.2/0.9⌋ = 7 samples; a worker
    that did less than one sample's work still contributes one."""
    s = scenario(**{"algorithm.name": "preempt", "cluster.workers": 2, "workload.batch": 32, "iterations": 2})
    rules = plan(s).rules
    from stragglerlab.simulator.algorithms.preempt import cut

    assert cut(1.0, 0.9, 1.2, 32) == (pytest.approx(1.2), 7)
    assert cut(1.0, 100.0, 1.001, 32) == (pytest.approx(1.001), 1)
    assert rules.finishers == 2 and plan(s.replace(**{"algorithm.fraction": 0.5})).rules.finishers == 1


def test_preempt_with_every_worker_is_sync(tmp_path):
    """f = 1 waits for every worker: the very tables of ``sync``."""
    for trace, extra in ((TRACE, {}), (TRACE[:, :4], {"workload.update": 0.01, "duration": 1.5})):
        a = run_tables(traced(tmp_path, "preempt", trace, **{"algorithm.fraction": 1.0, **extra}))
        b = run_tables(traced(tmp_path, "sync", trace, **extra))
        for x, y in zip(a, b, strict=True):
            pd.testing.assert_frame_equal(x, y)


def test_preempt_weighs_each_gradient_by_its_samples(tmp_path):
    """The convergence replay applies the mean gradient over every sample processed: here, by hand, on the
    hyperplane, each worker's gradient over the first k of its samples."""
    from stragglerlab.simulator.algorithms.preempt import apply
    from stragglerlab.simulator.workloads import load

    s = traced(
        tmp_path,
        "preempt",
        TRACE,
        **{"workload.model": "hyperplane", "workload.dimension": 6, "workload.samples": 2048, "iterations": 3},
    )
    it, rounds = run_tables(s)
    workload = load(s)
    W = np.tile(workload.initial(), (5, 1))
    expected = W[0].copy()
    replay = apply(plan(s).rules, workload, it, rounds, W, Optimizer(s, W.shape), lambda *a: None)
    for m in replay:
        rows = it[it.iteration == m].sort_values("worker")
        total = np.zeros_like(expected)
        for i, k in zip(rows.worker, rows.samples, strict=True):
            batch = workload.batches(np.array([i]), np.array([m]))[:, :k]
            G, _ = workload.gradient(expected[None, :], batch)
            total += k * G[0]
        expected = expected - s.algorithm.lr * total / rows.samples.sum()
        np.testing.assert_allclose(W, np.tile(expected, (5, 1)), rtol=1e-12, atol=1e-12)
    assert (it.samples < 32).any()


def test_swarm_shifts_are_the_released_optimizers():
    """R = ⌊log2 P⌋ phases of shifts (2^r, 2^((r+1) mod R)); both coincide below four workers."""
    assert shifts(2) == shifts(3) == [(1, 1)]
    assert shifts(4) == shifts(7) == [(1, 2), (2, 1)]
    assert shifts(8) == [(1, 2), (2, 4), (4, 1)]


def test_swarm_on_two_workers_pairs_every_other_iteration_and_weighs_the_peer_twice(tmp_path):
    """Two workers without compute jitter: even iterations exchange (two messages each way, t_done = the later post
    + their time), odd ones are local steps released at their post; averaging gives w_i ← (w_i + 2·w_j)/3 before
    the step."""
    trace = np.array([[0.1, 0.3]])
    s = traced(tmp_path, "swarm-sgd", trace, iterations=6)
    it, rounds = run_tables(s)
    rules = plan(s).rules
    assert rules.peers(0, 0) == [1, 1] and rules.peers(0, 1) == [0, 0] and rules.peers(1, 0) == []
    two = rules.exchange(0, 0, np.array([0.1, 0.3]))[1] - 0.3  # the two messages' time, at once
    assert two > 0
    t = np.zeros(2)
    for n in range(6):
        rows = it[it.iteration == n].sort_values("worker")
        posts = t + trace[0]
        np.testing.assert_allclose(rows.t_post, posts, rtol=0, atol=1e-12)
        if n % 2 == 0:
            done = np.full(2, posts.max() + two)
            assert list(rows["round"]) == [n, n]
        else:
            done = posts
        np.testing.assert_allclose(rows.t_done, done, rtol=0, atol=1e-12)
        r = rounds[rounds["round"] == n].sort_values("initiator")
        assert list(r.contributors) == ([3, 3] if n % 2 == 0 else [1, 1])
        assert list(r.group) == ([1, 0] if n % 2 == 0 else [-1, -1])
        t = done

    from stragglerlab.simulator.algorithms.swarm import apply

    W = np.array([[3.0, 0.0], [0.0, 6.0]])

    class Zero:  # no gradient: the replay's averaging alone
        def batches(self, workers, iterations):
            return np.zeros((len(workers), 1), dtype=np.int64)

        def gradient(self, W, batches):
            return np.zeros_like(W), np.zeros(len(W))

    class Still:  # no step either
        def step(self, W, G, rows=None):
            pass

    seen = []
    for _ in apply(rules, Zero(), it, rounds, W, Still(), lambda *a: None):  # type: ignore[arg-type]
        seen.append(W.copy())
    np.testing.assert_allclose(seen[0], [[1.0, 4.0], [2.0, 2.0]])  # (w0 + 2·w1)/3 and (w1 + 2·w0)/3
    np.testing.assert_allclose(seen[1], seen[0])  # a local step
    np.testing.assert_allclose(seen[2], [[5 / 3, 8 / 3], [4 / 3, 10 / 3]])


def test_swarm_sources_on_eight_workers():
    """At phase r a worker receives from i − 2^r and i − 2^((r+1) mod 3), and sends to i + both."""
    s = scenario(**{"algorithm.name": "swarm-sgd", "cluster.workers": 8})
    rules = plan(s).rules
    for n, (a, b) in zip((0, 2, 4, 6), (*shifts(8), shifts(8)[0]), strict=True):
        for i in range(8):
            assert rules.peers(n, i) == sorted([(i - a) % 8, (i - b) % 8])
            assert sorted(rules.receivers(n, i)) == sorted([(i + a) % 8, (i + b) % 8])
            assert rules.peers(n + 1, i) == [] and math.isfinite(rules.factor(n, i))


def test_paper_wagma_compares_both_beside_wagma_and_the_decentralized_baselines(tmp_path, capsys):
    """``paper-wagma``'s comparison takes swarm-sgd and preempt beside the released baselines (at a small scale)."""
    from stragglerlab.cli import main

    argv = ["simulate", "--example", "paper-wagma", "--set", "cluster.workers=16", "--set", "iterations=20"]
    assert main([*argv, "--compare", "d-psgd,sgp,swarm-sgd,preempt", "-o", str(tmp_path / "out")]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:] if line.strip()}
    assert {"wagma", "d-psgd", "sgp", "swarm-sgd", "preempt"} <= set(rows)
    preempted = load_run(tmp_path / "out" / "preempt").iterations
    assert (preempted.samples < 512).any() and (preempted.samples >= 1).all()


def test_swarm_sends_wait_for_their_receivers(tmp_path):
    """Three workers, worker 2 late at the first exchange: worker 1 receives only from worker 0 yet sends to worker 2,
    and a model-sized send is done only once its receiver has posted, so worker 1 waits for worker 2 as well."""
    trace = np.array([[0.1, 0.1, 0.5], [0.1, 0.1, 0.1]])
    s = traced(tmp_path, "swarm-sgd", trace, iterations=2)
    rules = plan(s).rules
    assert rules.peers(0, 1) == [0, 0] and rules.receivers(0, 1) == [2, 2]
    it, _ = run_tables(s)
    done = it[it.iteration == 0].sort_values("worker").t_done.to_numpy()
    assert (done > 0.5).all()  # every worker waits for worker 2: as a source (0, 2) or as a receiver (1)
    assert done[1] == pytest.approx(rules.exchange(0, 1, np.array([0.1, 0.1, 0.5]))[1])
