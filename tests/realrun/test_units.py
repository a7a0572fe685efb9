"""The real-run harness's pieces without MPI: imbalance injection, the calibration fits, per-rank parts read back
by load_run, the watchdog's verdicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from stragglerlab.analysis.runfolder import RunWriter, load_run
from stragglerlab.realrun import watchdog
from stragglerlab.realrun.calibration import compute_model, fit_linear, partners
from stragglerlab.realrun.injection import Injection
from stragglerlab.realrun.parts import RankParts
from stragglerlab.realrun.watchdog import Watchdog, alive
from stragglerlab.simulator.imbalance import ComputeTimes
from stragglerlab.simulator.scenario import load


def scenario(*sets: str):
    return load(text="", name="t", overrides=["cluster.workers=4", *sets])


def test_random_delay_is_added_exactly_where_the_simulator_adds_it():
    s = scenario("imbalance.kind=random-delay", "imbalance.slow=[1,2]", "imbalance.delay=0.25")
    times = ComputeTimes(s)
    for rank in range(4):
        injection = Injection(s, rank, timing_only=False)
        for n in range(50):
            expected = 0.25 if rank in times.slow_workers(n) else 0.0
            assert injection.extra(n, measured=0.1) == expected
        timing = Injection(s, rank, timing_only=True)
        assert timing.extra(7, measured=0.0) == pytest.approx(times.row(7)[rank])


def test_persistent_factors_slow_a_rank_down_in_proportion_and_never_speed_it_up():
    s = scenario("imbalance.kind=persistent", "imbalance.factors={1 = 2.5, 2 = 0.5}")
    assert Injection(s, 1, timing_only=False).extra(0, measured=0.2) == pytest.approx(0.3)
    assert Injection(s, 2, timing_only=False).extra(0, measured=0.2) == 0.0
    assert Injection(s, 0, timing_only=False).extra(0, measured=0.2) == 0.0


def test_trace_pads_the_measured_time_up_to_the_trace(tmp_path):
    trace = tmp_path / "trace.npy"
    np.save(trace, np.array([[0.1, 0.2, 0.3, 0.4]]))
    s = scenario("imbalance.kind=trace", f'imbalance.file="{trace}"')
    assert Injection(s, 2, timing_only=False).extra(5, measured=0.1) == pytest.approx(0.2)
    assert Injection(s, 0, timing_only=False).extra(5, measured=0.5) == 0.0


@pytest.mark.parametrize("mode", ["work", "sleep"])
def test_work_mode_burns_the_delay_in_computation(mode):
    # what is spent is counted in units of work, not in CPU seconds (which a loaded machine hands out sparingly)
    injection = Injection(scenario("imbalance.kind=random-delay", f"imbalance.mode={mode}"), 0, timing_only=False)
    burn, burnt = injection._burn, []
    injection._burn = lambda: burnt.append(burn())
    wall = time.perf_counter()
    injection.spend(0.05)
    assert time.perf_counter() - wall >= 0.05
    assert (len(burnt) > 0) == (mode == "work")


def test_ddps_backward_share_of_a_delay_follows_the_gradients_by_size():
    from stragglerlab.realrun.algorithms.torch_sync import Slowdown

    class Clock:  # each gradient comes 1 ms after the last
        t = 10.0

        def now(self):
            self.t += 0.001
            return self.t

    class Spent:
        seconds: list[float] = []

        def spend(self, s):
            self.seconds.append(s)

    class Grad:
        def __init__(self, n):
            self.n = n

        def numel(self):
            return self.n

    slowdown, spent = Slowdown(Clock(), 100), Spent()
    slowdown(Grad(50))  # nothing to spend before begin()
    slowdown.begin(spent, 0.2)  # 200 ms over 100 elements: deadlines 120, 180, 200 ms after the first gradient
    for n in (60, 30, 10):
        slowdown(Grad(n))
    assert np.allclose(spent.seconds, [0.12, 0.18 - 0.001, 0.2 - 0.002])
    slowdown.begin(spent, 0.0)
    slowdown(Grad(60))
    assert len(spent.seconds) == 3  # an iteration without a delay spends nothing


def test_a_ddp_rounds_bucket_time_is_what_the_bucketed_model_makes_its_wait():
    from stragglerlab.realrun.roundtimes import bucket_time

    # computed from 0 to 10 ms, half of it backward, 2 buckets: ready at 7.5 and 10 ms. A bucket of up to 2.5 ms
    # ends before the second is ready, so the wait is the last bucket's all-reduce alone ...
    assert bucket_time(0.0, 0.010, 0.001, 2, 0.5) == pytest.approx(0.001, rel=2e-3)
    # ... a longer one delays the second: the wait is 7.5 + 2T - 10 ms
    assert bucket_time(0.0, 0.010, 0.006, 2, 0.5) == pytest.approx(0.00425, rel=2e-3)
    assert bucket_time(0.0, 0.010, 0.003, 1, 0.5) == pytest.approx(0.003, rel=2e-3)  # one bucket: the wait itself


def test_linear_fit_recovers_known_coefficients_with_small_errors():
    sizes = np.array([2.0**k for k in range(0, 23, 2)])
    t = 2e-6 + sizes * 1e-10
    fit = fit_linear(np.column_stack([np.ones_like(sizes), sizes]), t)
    assert fit.coef == pytest.approx([2e-6, 1e-10], rel=1e-6) and fit.residual < 1e-9
    rng = np.random.default_rng(0)
    noisy = fit_linear(np.column_stack([np.ones_like(sizes), sizes]), t * (1 + 0.05 * rng.standard_normal(len(t))))
    assert noisy.coef[0] == pytest.approx(2e-6, rel=0.2) and (noisy.stderr > 0).all()


def test_compute_model_and_ping_pong_partners():
    assert compute_model(np.full(10, 0.2)) == {"dist": "constant", "mean": pytest.approx(0.2)}
    varied = compute_model(np.array([0.1, 0.2, 0.3]))
    assert varied["dist"] == "lognormal" and varied["cv"] > 0.3
    assert partners(["a", "a", "a"]) == {"": 1}
    assert partners(["a", "a", "b", "b"]) == {"": 2, "intra_": 1}


def test_parts_of_every_rank_read_back_while_running_and_merge_when_finished(tmp_path):
    folder = tmp_path / "run"
    writer = RunWriter(folder, {"source": "real"})
    for rank in (1, 0):
        parts = RankParts(folder, rank)
        for n in range(3):
            parts.add("iterations", (rank, n, 0.0, 0.1, 0.2, n, n, True, 32))
        parts.flush()
    running = load_run(folder)
    assert not running.finished and len(running.iterations) == 6
    writer.close(finished=True)
    done = load_run(folder)
    assert done.finished and list(done.iterations["worker"]) == [0, 0, 0, 1, 1, 1]


def test_watchdog_names_a_dead_peer_and_forgets_a_finished_one(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    me = os.getpid()
    dog = Watchdog(tmp_path, 0, {0: ("h", me), 1: ("h", child.pid), 2: ("h", me)}, "h", lambda m: None, timeout=60)
    dog.dir.mkdir()
    dog._started = time.time()
    assert not alive(child.pid)
    assert dog.lost() == f"rank 1 (pid {child.pid} on h) died"
    (dog.dir / "rank-00001.json").write_text(json.dumps({"state": "done", "t": time.time()}))
    assert dog.lost() is None


def test_watchdog_names_a_silent_peer_on_another_host(tmp_path):
    dog = Watchdog(tmp_path, 0, {0: ("h", os.getpid()), 1: ("other", 1)}, "h", lambda m: None, timeout=0.05)
    dog.dir.mkdir()
    dog._started = time.time() - 1
    assert dog.lost() == "rank 1 (pid 1 on other) sent no heartbeat for 0.05 s"


def test_heartbeats_removed_as_they_are_read_read_as_none(tmp_path, monkeypatch):
    # rank 0 removes .live/ at the end of a finished run while the launching process may be listing it: a listing
    # of a folder that went away mid-way raised, and `stragglerlab run` exited 2 after a run that had finished
    (tmp_path / ".live").mkdir()
    (tmp_path / ".live" / "rank-00001.json").write_text(json.dumps({"state": "done", "t": 1.0}))
    assert watchdog._records(tmp_path) == {1: {"state": "done", "t": 1.0}}

    def gone(self, pattern):
        raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(Path, "glob", gone)
    assert watchdog._records(tmp_path) == {}


@pytest.mark.parametrize("model", ["torch:mlp", "torch:cnn"])
def test_a_real_replica_trains_the_simulators_model_on_the_simulators_samples(model):
    """Same model, initial weights, data and shards: a rank's gradient equals the simulator's for that
    (worker, iteration), and the evaluations agree."""
    pytest.importorskip("torch")
    from stragglerlab.realrun.replica import make_replica
    from stragglerlab.simulator.workloads import load as load_workload

    s = scenario(f"workload.model={model}", "workload.batch=8")
    simulated = load_workload(s)
    w0 = simulated.initial()
    for rank, n in [(0, 0), (3, 5), (2, 200)]:
        replica = make_replica(s, rank, 0)
        assert np.array_equal(replica.host(replica.params()), w0.astype(np.float32))
        g, loss = replica.gradient(n)
        G, losses = simulated.gradient(w0[None], simulated.batches(np.array([rank]), np.array([n])))
        assert np.allclose(replica.host(g), G[0], atol=1e-6) and loss == pytest.approx(losses[0], rel=1e-6)
    assert np.allclose(replica.evaluate(), simulated.evaluate(w0), rtol=1e-6)


def test_simulate_trains_a_shipped_torch_workload(tmp_path):
    pytest.importorskip("torch")
    from tests.realrun.conftest import stragglerlab

    proc = stragglerlab(
        "simulate",
        "--example",
        "eager-injected",
        "--set",
        "workload.model=torch:mlp",
        "--set",
        "cluster.workers=4",
        "--set",
        "iterations=20",
        "--set",
        "workload.batch=16",
        "-o",
        str(tmp_path / "sim"),
    )
    assert proc.returncode == 0, proc.stderr
    assert len(load_run(tmp_path / "sim").evals) >= 2


class _Loaded:
    """A replica that copies the model loaded into it into its own vector, as the real ones do."""

    def __init__(self, d: int):
        self.w = np.empty(d)

    def load(self, w):
        self.w[:] = w


def _peak_while(f) -> int:
    """The bytes ``f()`` had allocated at most beyond what it left allocated (numpy reports to tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        f()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_wagma_weighs_a_group_round_as_the_formula_without_a_temporary_of_the_models_size():
    from types import SimpleNamespace

    from stragglerlab.realrun.algorithms.wagma import WagmaExchange
    from stragglerlab.realrun.collectives import RoundInfo

    d, size = 200_000, 4
    rng = np.random.default_rng(0)
    ex = object.__new__(WagmaExchange)  # the weighing alone: no core, no MPI
    ex.d, ex.size, ex.rank, ex.rules = d, size, 0, SimpleNamespace(group_size=2)
    ex.w0 = rng.standard_normal(d).astype(np.float32)
    ex.total = np.empty_like(ex.w0)
    ex.buffer = rng.standard_normal(d + size).astype(np.float32)
    ex.replica = _Loaded(d)
    out = rng.standard_normal(d + size).astype(np.float32)
    lone = RoundInfo(5, "group", 1, True, 1, (True, False, True, True), 0, 0)  # rank 1, its partner, never posted
    ex._average(out, lone)
    assert np.array_equal(ex.replica.w, (out[:d] + 1 * ex.w0 + ex.buffer[:d]) / 3)
    every = RoundInfo(7, "average", 4, True, 4, (True,) * 4, -1, 0)
    ex._average(out, every)
    assert np.array_equal(ex.replica.w, out[:d] / size)
    assert _peak_while(lambda: ex._average(out, lone)) < 4 * d / 2


def test_gossip_mixes_in_float64_as_the_formula_without_a_temporary_of_the_models_size():
    from stragglerlab.realrun.algorithms.gossip import GossipExchange

    d = 200_000
    rng = np.random.default_rng(1)
    ex = object.__new__(GossipExchange)  # the mixing alone: no MPI
    ex.x, ex.summed = np.empty(d), np.empty(d, dtype=np.float32)
    posted = rng.standard_normal(d).astype(np.float32)
    models = [rng.standard_normal(d).astype(np.float32) for _ in range(2)]
    expected = (np.asarray(posted, dtype=np.float64) + sum(models)) / 3
    assert np.array_equal(ex._mix(posted, models, 3), expected)
    assert np.array_equal(ex._mix(posted, [], 1), posted.astype(np.float64))
    assert _peak_while(lambda: ex._mix(posted, models, 3)) < 4 * d / 2
