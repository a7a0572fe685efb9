"""The fast engine gives the reference engine's tables: times to 1e-9 relative, everything else exactly; the
parameter server's algorithms byte for byte."""

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stragglerlab.simulator.algorithms import RECORDS, server
from tests.helpers import run_tables, scenario
from tests.simulator.test_engine import workers_in_step

#: the algorithms whose fast path adds the reference engine's terms in its order: their times are equal too
EXACT = {record.name for record in RECORDS if record.kernel == server.KERNEL}


def assert_same_tables(s, window=16):
    a, ra = run_tables(s)
    b, rb = run_tables(s, "fast", window)
    for ref, fast in ((a, b), (ra, rb)):
        assert len(ref) == len(fast)
        for column in ref.columns:
            x, y = ref[column].to_numpy(), fast[column].to_numpy()
            if s.algorithm.name in EXACT:
                np.testing.assert_array_equal(y, x, err_msg=column)
            elif x.dtype.kind == "f":
                np.testing.assert_allclose(y, x, rtol=1e-9, atol=1e-12, err_msg=column)
            else:
                assert (x == y).all(), column


#: every algorithm with a fast kernel, from the registry
ALGORITHMS = [record.name for record in RECORDS if record.kernel is not None]

compute_models = st.one_of(
    st.fixed_dictionaries({"dist": st.just("constant"), "mean": st.floats(0.01, 1.0)}),
    st.fixed_dictionaries(
        {"dist": st.sampled_from(["lognormal", "gamma"]), "mean": st.floats(0.01, 1.0), "cv": st.floats(0.05, 2.0)}
    ),
    st.fixed_dictionaries({"dist": st.just("pareto"), "mean": st.floats(0.01, 1.0), "shape": st.floats(1.1, 4.0)}),
)


@st.composite
def scenarios(draw):
    workers = draw(st.integers(1, 12))
    keys = {
        "seed": draw(st.integers(0, 2**32)),
        "iterations": draw(st.integers(1, 60)),
        "cluster.workers": workers,
        "cluster.workers_per_node": draw(st.integers(1, workers)),
        "network.alpha": draw(st.sampled_from([0.0, 1e-6, 1e-3])),
        "network.beta": draw(st.sampled_from([0.0, 1e-10, 1e-8])),
        "network.allreduce": draw(st.sampled_from(["ring", "recursive-doubling", "rabenseifner", "tree", "auto"])),
        "network.overhead": draw(st.sampled_from([0.0, 1e-5, 0.01])),
        # the network model's other prices: the reduction's, each message's overhead, a shared fabric, a node's links
        "network.gamma": draw(st.sampled_from([0.0, 1e-10])),
        "network.message_overhead": draw(st.sampled_from([0.0, 1e-6])),
        "network.fabric_beta": draw(st.sampled_from([0.0, 1e-11])),
        "network.intra_beta": draw(st.sampled_from([1e-11, 1e-10, 1e-9])),
        "workload.params": draw(st.integers(1, 10**7)),
        "workload.update": draw(st.sampled_from([0.0, 1e-3, 0.05])),
        "workload.buckets": draw(st.integers(1, 6)),
        "workload.backward": draw(st.floats(0.1, 1.0)),
        "workload.compute": draw(compute_models),
        "algorithm.name": draw(st.sampled_from(ALGORITHMS)),
        "algorithm.sync_period": draw(st.integers(0, 9)),
        "algorithm.late": draw(st.sampled_from(["accumulate", "drop"])),
        "algorithm.group_size": draw(st.integers(1, workers)),
        "algorithm.period": draw(st.integers(1, 8)),
        "algorithm.global_period": draw(st.integers(1, 16)),
        "algorithm.quorum": draw(st.integers(0, workers)),
        "algorithm.topology": draw(st.sampled_from(["ring", "torus", "exponential"])),
        "algorithm.servers": draw(st.integers(1, 4)),
        "algorithm.server_gamma": draw(st.sampled_from([0.0, 1e-9, 1e-6])),
        "algorithm.fraction": draw(st.floats(0.05, 1.0)),
        # a time budget: none, or anywhere from before the first round to past the last
        "duration": draw(st.one_of(st.just(0.0), st.floats(0.001, 20.0))),
    }
    call = draw(st.one_of(st.none(), compute_models))  # a call's software cost, where it waits for no exchange
    if call is not None:
        keys["workload.call"] = {**call, "mean": call["mean"] / 100}
    if keys["algorithm.name"] == "wagma" and keys["duration"] > 0:  # its budget ends at a global average
        keys["algorithm.sync_period"] = max(1, keys["algorithm.sync_period"])
    imbalance = draw(st.sampled_from(["none", "random-delay", "persistent"]))
    keys["imbalance.kind"] = imbalance
    if imbalance == "random-delay":
        lo = draw(st.integers(0, workers))
        keys["imbalance.slow"] = [lo, draw(st.integers(lo, workers))]
        keys["imbalance.delay"] = draw(st.floats(0.0, 3.0))
        keys["imbalance.draw"] = draw(st.sampled_from(["count", "independent"]))
    elif imbalance == "persistent":
        keys["imbalance.factors"] = {str(draw(st.integers(0, workers - 1))): draw(st.floats(0.2, 10.0))}
    return scenario(**keys)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([4, 16, 64]))
def test_fast_equals_reference_on_random_scenarios(s, window):
    assert_same_tables(s, window)


@pytest.mark.parametrize("name", ALGORITHMS)
@pytest.mark.parametrize("late", ["accumulate", "drop"])
@pytest.mark.parametrize("sync_period", [0, 1, 5])
def test_fast_equals_reference_for_every_option(name, late, sync_period):
    s = scenario(
        iterations=80,
        **{
            "algorithm.name": name,
            "algorithm.late": late,
            "algorithm.sync_period": sync_period,
            "algorithm.group_size": 3,
            "algorithm.period": 4,
            "algorithm.global_period": 12,
            "algorithm.topology": "torus",
            "cluster.workers": 9,
            "cluster.workers_per_node": 3,
            "imbalance.kind": "random-delay",
            "imbalance.slow": [1, 4],
            "imbalance.delay": 0.7,
            "workload.compute": {"dist": "lognormal", "mean": 0.2, "cv": 0.5},
        },
    )
    assert_same_tables(s, window=8)


@pytest.mark.parametrize("name", ALGORITHMS)
@pytest.mark.parametrize("duration", [0.0, 3.0])
def test_fast_equals_reference_with_call_costs(name, duration):
    s = scenario(
        iterations=60,
        duration=duration,
        **{
            "algorithm.name": name,
            "algorithm.sync_period": 5,
            "algorithm.group_size": 3,
            "algorithm.period": 3,
            "algorithm.global_period": 6,
            "cluster.workers": 6,
            "imbalance.kind": "random-delay",
            "imbalance.slow": [1, 3],
            "imbalance.delay": 0.3,
            "workload.update": 1e-3,
            "workload.compute": {"dist": "lognormal", "mean": 0.1, "cv": 0.5},
            "workload.call": {"dist": "lognormal", "mean": 0.01, "cv": 1.0},
        },
    )
    assert_same_tables(s, window=8)


def persistent_straggler():
    """Worker 0 40 times slower and nothing forcing it to catch up: its late gradients pile up."""
    return scenario(
        iterations=300,
        **{
            "algorithm.name": "eager-solo",
            "algorithm.sync_period": 0,
            "imbalance.kind": "persistent",
            "imbalance.factors": {"0": 40.0},
        },
    )


def test_a_persistent_straggler_without_sync_rounds_grows_the_window_and_queues():
    assert_same_tables(persistent_straggler(), window=4)


def test_a_window_that_spans_the_drift_never_grows_past_the_runs_last_iteration(monkeypatch):
    # doubling a window already holding nearly every remaining iteration copied the whole of it into fresh memory
    from stragglerlab.simulator.fast.engine import _Window

    grown = []
    grow = _Window._grow

    def recorded(window, size):
        grown.append((window.base, size))
        grow(window, size)

    monkeypatch.setattr(_Window, "_grow", recorded)
    assert_same_tables(persistent_straggler(), window=4)
    assert len(grown) > 3 and all(base + size <= 300 for base, size in grown[1:]), grown


def test_trace_driven(tmp_path):
    np.save(tmp_path / "c.npy", np.random.default_rng(0).exponential(0.1, size=(13, 6)))
    for name in ALGORITHMS:
        assert_same_tables(
            scenario(
                iterations=50,
                **{
                    "algorithm.name": name,
                    "cluster.workers": 6,
                    "algorithm.group_size": 2,
                    "algorithm.period": 3,
                    "algorithm.global_period": 6,
                    "imbalance.kind": "trace",
                    "imbalance.file": str(tmp_path / "c.npy"),
                },
            )
        )


@pytest.mark.parametrize("window", [4, 16])
@pytest.mark.parametrize("alpha", [0.0, 0.05])
def test_adpsgd_batches_keep_the_order_of_ties_and_zero_computes(tmp_path, alpha, window):
    # computes of 0, 0.1 and 0.2 s: whole rows of posts share an instant and queue at the same peers, and a worker
    # can post again at the very instant its exchange completes (after that instant's other posts)
    c = np.random.default_rng(5).integers(0, 3, size=(40, 16)) * 0.1
    c[:, :4] = 0.0
    np.save(tmp_path / "c.npy", c)
    for topology in ("ring", "exponential"):
        keys = {"network.alpha": alpha, "network.beta": 0.0, "algorithm.topology": topology}
        assert_same_tables(
            scenario(
                iterations=40,
                **{
                    "algorithm.name": "ad-psgd",
                    "cluster.workers": 16,
                    "imbalance.kind": "trace",
                    "imbalance.file": str(tmp_path / "c.npy"),
                    **keys,
                },
            ),
            window=window,
        )


@pytest.mark.parametrize("name", ["async-ps", "easgd"])
@pytest.mark.parametrize("alpha, gamma", [(0.0, 0.0), (0.05, 0.0), (0.0, 1e-3)])
def test_server_batches_keep_the_order_of_ties_and_zero_computes(tmp_path, name, alpha, gamma):
    # computes of 0, 0.1 and 0.2 s: pushes arrive in whole rows at one instant, and with pushes and services of no
    # time a worker pushes again at the very instant of its reply (after that instant's other pushes)
    c = np.random.default_rng(7).integers(0, 3, size=(40, 12)) * 0.1
    c[:, :3] = 0.0
    np.save(tmp_path / "c.npy", c)
    for window in (4, 16):
        assert_same_tables(
            scenario(
                iterations=40,
                **{
                    "algorithm.name": name,
                    "algorithm.period": 3,
                    "algorithm.server_gamma": gamma,
                    "network.alpha": alpha,
                    "network.beta": 0.0,
                    "workload.params": 1000,
                    "cluster.workers": 12,
                    "imbalance.kind": "trace",
                    "imbalance.file": str(tmp_path / "c.npy"),
                },
            ),
            window=window,
        )


def test_fast_equals_reference_where_an_ulp_would_reorder_ties():
    # two requests reach one peer at one instant, one computed from a release far from its post: the reference
    # engine's clock once landed an ulp past such a release, which sent the two the other way round (4 us apart by
    # iteration 9 at 350 workers)
    assert_same_tables(workers_in_step(), window=64)


LSGD_CASES = {
    # local and global exchanges interleave (counts 4, 6, 8, 12, ...), two posts apart
    "global-period-not-a-multiple": ({"cluster.workers": 2, "algorithm.period": 2, "algorithm.global_period": 3}, 4),
    # constant compute: whole rows of posts share an instant, and the trigger falls inside one
    "ties": ({"cluster.workers": 16, "workload.compute": {"dist": "constant", "mean": 0.25}}, 16),
    "ties-free-exchanges": (
        {"cluster.workers": 5, "network.alpha": 0.0, "network.beta": 0.0, "algorithm.period": 3},
        8,
    ),
    # a worker 5x faster than the rest posts most of a segment, one 5x slower joins last
    "fast-and-slow-workers": (
        {
            "cluster.workers": 8,
            "imbalance.kind": "persistent",
            "imbalance.factors": {"2": 0.2, "5": 5.0},
            "workload.compute": {"dist": "lognormal", "mean": 0.2, "cv": 0.3},
        },
        64,
    ),
    # the same with a window far shorter than the fast worker's horizon: retries run out of rows
    "horizon-retries-in-a-small-window": (
        {
            "cluster.workers": 6,
            "algorithm.period": 8,
            "imbalance.kind": "persistent",
            "imbalance.factors": {"0": 0.2},
        },
        1,
    ),
    # the run ends inside a segment: a worker posts its last iteration before the next trigger
    "ends-mid-segment": (
        {"iterations": 11, "cluster.workers": 7, "algorithm.period": 3, "imbalance.kind": "random-delay"},
        4,
    ),
    "fewer-posts-than-a-period": ({"iterations": 3, "cluster.workers": 4, "algorithm.period": 4}, 4),
    "one-iteration": ({"iterations": 1, "cluster.workers": 3, "algorithm.period": 1}, 4),
    "one-worker": ({"cluster.workers": 1, "algorithm.period": 3, "algorithm.global_period": 2}, 2),
    # more exchanges in a window than the kernel hands over at once
    "many-exchanges-per-window": (
        {"iterations": 400, "cluster.workers": 2, "algorithm.period": 1, "algorithm.global_period": 1},
        512,
    ),
    # a heavy tail: most posts fall in few buckets of the trigger's histogram
    "heavy-tail": ({"cluster.workers": 64, "workload.compute": {"dist": "pareto", "mean": 0.2, "shape": 1.1}}, 16),
}


def lsgd_scenario(**keys):
    """An LSGD scenario: 60 iterations, exchanges every 4 (local) and 6 (global) iterations per worker on average,
    gamma compute times; ``keys`` override."""
    return scenario(
        **{
            "iterations": 60,
            "algorithm.name": "lsgd",
            "algorithm.period": 4,
            "algorithm.global_period": 6,
            "workload.compute": {"dist": "gamma", "mean": 0.2, "cv": 0.4},
            **keys,
        }
    )


def lsgd_on_trace(path, trace, **keys):
    """An LSGD scenario whose compute times are ``trace`` (saved at ``path``), exchanges taking no time."""
    np.save(path, trace)
    return lsgd_scenario(
        **{
            "cluster.workers": trace.shape[1],
            "network.alpha": 0.0,
            "network.beta": 0.0,
            "imbalance.kind": "trace",
            "imbalance.file": str(path),
            **keys,
        }
    )


@pytest.mark.parametrize("case", LSGD_CASES)
def test_lsgd_fast_equals_reference(case):
    keys, window = LSGD_CASES[case]
    assert_same_tables(lsgd_scenario(**keys), window)


def test_lsgd_a_last_iteration_that_triggers_still_exchanges():
    # worker 1 is faster: it triggers every exchange (the first with its second post, then with its first post after
    # each), so it is one iteration ahead and triggers the last exchange with its last iteration
    s = lsgd_scenario(
        **{
            "iterations": 7,
            "cluster.workers": 2,
            "algorithm.period": 1,
            "algorithm.global_period": 1,
            "workload.compute": {"dist": "constant", "mean": 0.2},
            "imbalance.kind": "persistent",
            "imbalance.factors": {"1": 0.4},
        }
    )
    assert_same_tables(s)
    iterations, rounds = run_tables(s, "fast")
    last = iterations[(iterations["worker"] == 1) & (iterations["iteration"] == 6)]
    assert len(rounds) == 6 and (rounds["initiator"] == 1).all()
    assert rounds["t_trigger"].iloc[-1] == last["t_post"].iloc[0] and last["round"].iloc[0] == 5


def test_lsgd_zero_compute_times(tmp_path):
    # only the highest-ranked worker computes in no time, so it alone posts several times in one instant: both
    # engines order those posts after everyone else's of the instant
    times = np.random.default_rng(1).exponential(0.1, size=(9, 5))
    times[::2, 4] = 0.0
    for alpha in (0.0, 1e-3):
        assert_same_tables(lsgd_on_trace(tmp_path / "c.npy", times, **{"network.alpha": alpha}), window=4)
    # the others' posts a few subnormals apart (free exchanges keep them so): the times span less than any bucket
    # width of the trigger's histogram
    tiny = np.array([[5e-324] * 4 + [0.0]])
    assert_same_tables(lsgd_on_trace(tmp_path / "c.npy", tiny, iterations=70, **{"algorithm.period": 2}), window=4)


def test_lsgd_zero_compute_times_of_a_lower_ranked_worker(tmp_path):
    # at t = 1 worker 0 posts iterations 0 and 1 (the second computes in no time), worker 1 posts iteration 0: the
    # second post of the run triggers exchange 0, and it is worker 1's (worker 0's iteration 1 comes in the next wave)
    trace = np.array([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0]])
    s = lsgd_on_trace(tmp_path / "c.npy", trace, iterations=3, **{"algorithm.period": 1, "algorithm.global_period": 1})
    assert_same_tables(s)
    _, rounds = run_tables(s, "fast")
    assert rounds["initiator"].iloc[0] == 1


def test_posts_of_one_instant_after_an_update_are_taken_together(tmp_path):
    # at t = 1.7 (sums of the trace and the 0.1 updates) worker 2 posts after its compute, workers 0 and 1 after their
    # update with nothing to compute: all three are the instant's first posts, taken in worker order, so worker 1's
    # is the 24th post of the run and triggers exchange 3 (the reference engine once took worker 2's alone first)
    trace = np.array(
        [
            [0.2, 0.2, 0.2], [0.0, 0.2, 0.0], [0.2, 0.0, 0.2], [0.2, 0.1, 0.1], [0.0, 0.0, 0.0], [0.1, 0.1, 0.0],
            [0.0, 0.2, 0.1], [0.0, 0.0, 0.1], [0.2, 0.0, 0.1], [0.2, 0.0, 0.0], [0.2, 0.1, 0.1],
        ]
    )  # fmt: skip
    s = lsgd_on_trace(
        tmp_path / "c.npy",
        trace,
        iterations=11,
        **{"algorithm.period": 2, "algorithm.global_period": 6, "workload.update": 0.1},
    )
    assert_same_tables(s)
    _, rounds = run_tables(s)
    assert rounds["initiator"].iloc[3] == 1


@pytest.mark.parametrize(
    "name, trace, initiators",
    [
        # eager-solo, exchanges of no time: at t = 0.1 workers 0 and 2 post call 0 (late, released at once) and then
        # call 1, one wave later than worker 1's call 1, which is the first post of round 1
        ("eager-solo", [[0.1, 0.0, 0.1], [0.0, 0.1, 0.0], [0.1, 0.0, 0.1]], [1, 1, 1]),
        # local SGD, period 2: at t = 1 worker 0's local step, then its call of the round a wave later, after worker
        # 1's: worker 0 is the last poster
        ("local-sgd", [[1.0, 0.5], [0.0, 0.5]], [0]),
    ],
)
def test_a_post_after_a_release_at_its_instant_comes_a_wave_later(tmp_path, name, trace, initiators):
    np.save(tmp_path / "c.npy", np.array(trace))
    s = scenario(
        iterations=len(trace),
        **{
            "algorithm.name": name,
            "algorithm.sync_period": 0,
            "algorithm.period": 2,
            "cluster.workers": len(trace[0]),
            "network.alpha": 0.0,
            "network.beta": 0.0,
            "imbalance.kind": "trace",
            "imbalance.file": str(tmp_path / "c.npy"),
        },
    )
    assert_same_tables(s, window=4)
    _, rounds = run_tables(s)
    assert rounds["initiator"].tolist() == initiators


def test_compilation_is_cached_across_processes(tmp_path):
    script = (
        "from stragglerlab.simulator.fast import adpsgd, gossip, lsgd, rounds\n"
        "from stragglerlab.simulator.plan import plan\n"
        "from stragglerlab.simulator.run import run_engine\n"
        "from tests.helpers import scenario\n"
        "for name in ('eager-solo', 'lsgd', 'd-psgd', 'ad-psgd'):\n"
        "    run_engine(plan(scenario(**{'algorithm.name': name})), 'fast', lambda r: None, lambda r: None)\n"
        "k = (rounds.step, lsgd.step, gossip.step, adpsgd.step)\n"
        "print(sum(sum(f.stats.cache_misses.values()) for f in k),"
        " sum(sum(f.stats.cache_hits.values()) for f in k))\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    first = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    second = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    misses, hits = map(int, second.stdout.split())
    assert misses == 0 and hits == 4


@pytest.mark.parametrize("name", ALGORITHMS)
def test_both_engines_write_byte_identical_run_folders(tmp_path, name):
    from stragglerlab.simulator.run import simulate

    s = scenario(
        iterations=50,
        **{
            "algorithm.name": name,
            "algorithm.group_size": 2,
            "algorithm.period": 4,
            "algorithm.global_period": 8,
            "imbalance.kind": "random-delay",
            "imbalance.slow": [1, 3],
            "workload.compute": {"dist": "lognormal", "mean": 0.2, "cv": 0.5},
        },
    )
    ref, fast = (
        simulate(s.replace(engine="reference"), tmp_path / "r"),
        simulate(s.replace(engine="fast"), tmp_path / "f"),
    )
    from stragglerlab.analysis.runfolder import load_run

    assert load_run(ref).meta["engine"] == "reference" and load_run(fast).meta["engine"] == "fast"
    for table in ("iterations", "rounds"):
        assert (ref / f"{table}.parquet").read_bytes() == (fast / f"{table}.parquet").read_bytes()


def test_auto_picks_the_fast_engine_and_summary_only_keeps_no_table(tmp_path):
    from stragglerlab.analysis.metrics import summarize
    from stragglerlab.analysis.runfolder import load_run
    from stragglerlab.simulator.run import simulate

    s = scenario(iterations=30, **{"algorithm.name": "eager-solo", "imbalance.kind": "random-delay"})
    full = load_run(simulate(s, tmp_path / "full"))
    bare = load_run(simulate(s, tmp_path / "bare", tables=()))
    assert full.meta["engine"] == "fast" and bare.iterations.empty and bare.rounds.empty
    assert summarize(bare) == summarize(full)
    assert load_run(simulate(s, tmp_path / "rounds", tables=("rounds",))).rounds.equals(full.rounds)


def test_summary_only_memory_does_not_grow_with_iterations(tmp_path):
    import tracemalloc

    from stragglerlab.simulator.run import simulate

    def peak(iterations):
        s = scenario(
            iterations=iterations,
            **{"cluster.workers": 20_000, "algorithm.name": "eager-solo", "imbalance.kind": "random-delay"},
        )
        tracemalloc.start()
        simulate(s, tmp_path / str(iterations), tables=())
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    short, long = peak(400), peak(1600)  # both far longer than the engine's window (about 100 iterations here)
    assert long < 1.3 * short, (short, long)  # a table would take 4x more


def test_convergence_is_the_same_on_both_engines(tmp_path):
    from stragglerlab.analysis.runfolder import load_run
    from stragglerlab.simulator.run import simulate

    s = scenario(
        iterations=30,
        **{
            "algorithm.name": "eager-solo",
            "workload.model": "hyperplane",
            "imbalance.kind": "random-delay",
            "evals.every_iterations": 5,
        },
    )
    ref = load_run(simulate(s.replace(engine="reference"), tmp_path / "r")).evals
    fast = load_run(simulate(s.replace(engine="fast"), tmp_path / "f")).evals
    assert len(ref) > 3 and ref.equals(fast)
