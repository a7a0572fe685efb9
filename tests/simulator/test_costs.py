"""The cost model against closed forms written here, step by step as each algorithm sends its messages (not calls
into the formulas' module): every allreduce at P = 2 … 9 and with nodes, auto, the measured table, contention,
overhead; and what the engines do with it: bucketed sync on a trace, the update gaps, the independent draw."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from stragglerlab.simulator import algorithms
from stragglerlab.simulator.costs import cost_model
from stragglerlab.simulator.imbalance import CallCosts, ComputeTimes, released_eager_sgd_delays
from stragglerlab.simulator.keys import ScenarioError
from stragglerlab.simulator.measured import Extrapolated
from stragglerlab.simulator.scenario import load
from tests.helpers import run_tables, scenario

A, B, G = 3e-6, 2e-9, 5e-10  # alpha, beta, gamma
IA, IB = 4e-7, 1e-10  # intra-node
N = 1e6  # bytes


def steps(algorithm: str, p: int, n: float, a: float, b: float, g: float) -> float:
    """One allreduce of n bytes over p ranks on uniform links, counted the way each algorithm proceeds."""
    if p == 1:
        return 0.0
    low = 1 << (p.bit_length() - 1)  # the largest power of two <= p
    folded = p != low  # ranks beyond it fold into partners first and get the result back last
    if algorithm == "ring":  # p - 1 reduce-scatter steps of n/p, p - 1 allgather steps of n/p
        return (p - 1) * (a + n / p * b + n / p * g) + (p - 1) * (a + n / p * b)
    if algorithm == "recursive-doubling":  # log2 steps of the whole vector (+ fold in, fold out)
        rounds = int(math.log2(low))
        exchange = rounds * (a + n * b + n * g)
        return exchange + ((a + n * b + n * g) + (a + n * b) if folded else 0.0)
    if algorithm == "rabenseifner":  # recursive halving then doubling among the power of two (+ fold in, out)
        rounds = int(math.log2(low))
        halving = sum(a + n / 2**k * b + n / 2**k * g for k in range(1, rounds + 1))
        doubling = sum(a + n / 2**k * b for k in range(1, rounds + 1))
        return halving + doubling + ((a + n * b + n * g) + (a + n * b) if folded else 0.0)
    if algorithm == "tree":  # a binomial reduce up, a binomial broadcast down: ⌈log2 p⌉ levels each
        levels = math.ceil(math.log2(p))
        return levels * (a + n * b + n * g) + levels * (a + n * b)
    raise AssertionError(algorithm)


def two_level(algorithm: str, nodes: int, k: int, n: float, beta: float = B) -> float:
    """Ring reduce-scatter in each node of k ranks, the algorithm across nodes on n/k bytes, ring allgather."""
    scatter = (k - 1) * (IA + n / k * IB + n / k * G)
    gather = (k - 1) * (IA + n / k * IB)
    return scatter + steps(algorithm, nodes, n / k, A, beta, G) + gather


def costs(**keys):
    base = {
        "network.alpha": A,
        "network.beta": B,
        "network.gamma": G,
        "network.intra_alpha": IA,
        "network.intra_beta": IB,
    }
    return cost_model(scenario(**{**base, **keys}))


@pytest.mark.parametrize("algorithm", ["ring", "recursive-doubling", "rabenseifner", "tree"])
@pytest.mark.parametrize("p", range(2, 10))
def test_every_allreduce_at_any_rank_count(algorithm, p):
    model = costs(**{"cluster.workers": p, "network.allreduce": algorithm})
    assert model.collective("sync", N, p) == pytest.approx(steps(algorithm, p, N, A, B, G), rel=1e-12)


@pytest.mark.parametrize("algorithm", ["ring", "recursive-doubling", "rabenseifner", "tree"])
@pytest.mark.parametrize(("p", "k"), [(8, 2), (12, 4), (9, 3), (16, 8)])
def test_nodes_reduce_in_two_levels(algorithm, p, k):
    model = costs(**{"cluster.workers": p, "cluster.workers_per_node": k, "network.allreduce": algorithm})
    # the k ranks of a node each reduce across the nodes at once, sharing its links: k times beta each
    assert model.collective("sync", N, p) == pytest.approx(two_level(algorithm, p // k, k, N, k * B), rel=1e-12)
    # a set inside one node: the algorithm over the intra links
    inside = model.collective("group", N, list(range(k)))
    assert inside == pytest.approx(steps(algorithm, k, N, IA, IB, G), rel=1e-12)
    # one rank on each node: the algorithm over the inter-node links on the whole vector
    across = list(range(0, p, k))
    assert model.collective("group", N, across) == pytest.approx(steps(algorithm, len(across), N, A, B, G), rel=1e-12)


@pytest.mark.parametrize("p", [2, 3, 5, 8, 24])
@pytest.mark.parametrize("n", [8.0, 4096.0, 1e8])
def test_auto_takes_the_fastest_of_the_four(p, n):
    model = costs(**{"cluster.workers": p, "network.allreduce": "auto"})
    best = min(steps(a, p, n, A, B, G) for a in ("ring", "recursive-doubling", "rabenseifner", "tree"))
    assert model.collective("sync", n, p) == pytest.approx(best, rel=1e-12)
    picked = model.describe(p, n)["algorithm"]
    assert steps(picked, p, n, A, B, G) == pytest.approx(best, rel=1e-12)


def test_overhead_is_added_to_every_exchange_and_not_to_the_token():
    plain, slow = costs(**{"cluster.workers": 6}), costs(**{"cluster.workers": 6, "network.overhead": 0.002})
    assert slow.collective("async", N, 6) == pytest.approx(plain.collective("async", N, 6) + 0.002, rel=1e-12)
    assert slow.activation(6) == plain.activation(6) == pytest.approx(3 * A)


def test_the_activation_delay_is_added_at_every_step_of_the_token_and_to_no_exchange():
    plain = costs(**{"cluster.workers": 6})
    slow = costs(**{"cluster.workers": 6, "network.activation_delay": 0.001})
    assert slow.activation(6) == pytest.approx(3 * (A + 0.001), rel=1e-12)
    assert slow.activation(4) == pytest.approx(2 * (A + 0.001), rel=1e-12)
    assert slow.collective("async", N, 6) == plain.collective("async", N, 6)


def test_the_lower_bound_uses_the_links_of_the_set():
    model = costs(**{"cluster.workers": 8, "cluster.workers_per_node": 4})
    assert model.lower_bound([0, 1, 2, 3], N) == pytest.approx(2 * IA + 2 * 3 / 4 * N * IB)
    assert model.lower_bound(8, N) == pytest.approx(3 * A + 2 * 7 / 8 * N * B)


def test_wagma_groups_that_cross_nodes_share_their_links(tmp_path):
    # 8 workers in 2 nodes of 4, groups of 2: phase 0 pairs (0,1) (2,3) ... inside nodes; phase 1 pairs (0,2) (1,3)
    # ... inside nodes; phase 2 pairs (0,4) (1,5) (2,6) (3,7) cross: 4 of them on each node, each gets 1/4 of it
    s = scenario(
        **{
            "cluster.workers": 8,
            "cluster.workers_per_node": 4,
            "algorithm.name": "wagma",
            "algorithm.group_size": 2,
            "algorithm.sync_period": 0,
            "network.alpha": A,
            "network.beta": B,
            "network.gamma": G,
            "network.intra_alpha": IA,
            "network.intra_beta": IB,
            "workload.params": int(N / 4),
        }
    )
    _, rounds = run_tables(s)
    # minus the token's binomial tree over 8 ranks: two hops inside a node of 4, one across
    exchange = (rounds["t_done"] - rounds["t_trigger"] - (2 * IA + A)).to_numpy()
    by_hand = {
        0: steps("ring", 2, N, IA, IB, G),
        1: steps("ring", 2, N, IA, IB, G),
        2: steps("ring", 2, N, A, 4 * B, G),
    }
    assert np.allclose(exchange, [by_hand[g] for g in rounds["group"]], rtol=1e-9)


def write_table(path, rows):
    pd.DataFrame(rows, columns=["kind", "ranks", "bytes", "seconds"]).to_csv(path, index=False)
    return path


def test_a_measured_table_at_and_between_its_points(tmp_path):
    table = write_table(
        tmp_path / "costs.csv",
        [("sync", 4, 1000, 1e-4), ("sync", 4, 100_000, 1e-2), ("allreduce", 4, 10, 5e-5), ("allreduce", 4, 1e6, 0.5)],
    )
    keys = {"cluster.workers": 4, "network.overhead": 1e-3}
    model, formulas = costs(**keys, **{"network.table": str(table)}), costs(**keys)
    # a measured round holds its whole software cost: the overhead is not added to it
    assert model.collective("sync", 1000, 4) == pytest.approx(1e-4)
    # halfway in log(bytes) between 1e3 and 1e5 is 1e4: halfway in log(seconds) is 1e-3
    assert model.collective("sync", 1e4, 4) == pytest.approx(1e-3)
    # kinds without rows of their own take the allreduce rows
    assert model.collective("group", 1000, [0, 1, 2, 3]) == pytest.approx(5e-5 * 1e4 ** (2 / 5))
    # what the table does not cover, the network model prices, with a warning
    for nbytes, ranks, says in (
        (10, 4, "outside the sync rounds measured over 4 ranks"),
        (1e6, 4, "outside"),
        (1000, 3, "no sync rounds over 3 ranks \\(measured over 4 ranks\\): priced by the network model"),
    ):
        with pytest.warns(Extrapolated, match=says):
            assert model.collective("sync", nbytes, ranks) == formulas.collective("sync", nbytes, ranks)


def test_concurrent_groups_take_only_rows_measured_in_a_job_of_their_size(tmp_path):
    table = tmp_path / "costs.csv"
    table.write_text(
        "kind,ranks,bytes,seconds,world\n"
        "group,2,1000,1e-3,2\n"  # a group of 2 alone (a 2-rank job)
        "group,2,1000,2e-3,3\n"  # the same group beside a lone rank (a 3-rank job)
        "allreduce,4,1000,5e-3,4\n"
    )
    keys = {"cluster.workers": 4, "network.table": str(table)}
    model, formulas = costs(**keys), costs(**{"cluster.workers": 4})
    assert model.collective("group", 1000, [0, 1]) == pytest.approx(1e-3)
    assert model.concurrent("group", 1000, [[0, 1], [2]]) == pytest.approx([2e-3, 0.0])
    # two groups of 2 in a 4-rank job were never measured: the model's groups, sharing its links, with a warning
    with pytest.warns(
        Extrapolated, match=r"no group rounds over 2 of 4 ranks \(measured over 2, 4 ranks, over 2 of 3 ranks\)"
    ):
        assert model.concurrent("group", 1000, [[0, 1], [2, 3]]) == formulas.concurrent("group", 1000, [[0, 1], [2, 3]])
    # the allreduce rows of 4 ranks price a group of the whole job, never a group beside others
    assert model.concurrent("group", 1000, [[0, 1, 2, 3]]) == pytest.approx([5e-3])
    # a row that does not say its job's size (an empty cell; a table without the column) prices a job of any size
    some = tmp_path / "some.csv"
    some.write_text("kind,ranks,bytes,seconds,world\ngroup,2,1000,3e-3,\nallreduce,4,1000,5e-3,\n")
    old = costs(**{**keys, "network.table": str(some)})
    assert old.concurrent("group", 1000, [[0, 1], [2, 3]]) == pytest.approx([3e-3, 3e-3])
    assert old.concurrent("group", 1000, [[0, 1, 2, 3]]) == pytest.approx([5e-3])
    bad = tmp_path / "bad.csv"
    bad.write_text("kind,ranks,bytes,seconds,world\ngroup,4,1000,1e-3,2\n")
    with pytest.raises(ScenarioError, match="line 2: world"):
        costs(**{"network.table": str(bad)})


@pytest.mark.parametrize("name", ["d-psgd", "sgp", "ad-psgd"])
def test_a_measured_gossip_exchange_replaces_the_messages_the_model_sends(tmp_path, name):
    P, n, T = 4, 4e5, 7e-4  # a measured exchange of 400 kB among 4 ranks
    keys = {
        "algorithm.name": name,
        "cluster.workers": P,
        "workload.params": int(n / 4),
        "network.alpha": A,
        "network.beta": B,
        "imbalance.kind": "random-delay",
        "workload.compute": {"dist": "lognormal", "mean": 0.02, "cv": 0.3},
    }
    src, dst = np.arange(P), (np.arange(P) + 1) % P  # each rank sends to the next: no two messages meet
    messages = 2 if name == "ad-psgd" else 1  # a request and its reply; one model
    formulas = costs(**keys)
    assert formulas.gossip(n, src, dst, messages) == pytest.approx(messages * (A + n * B), rel=1e-12)
    table = write_table(
        tmp_path / "costs.csv", [("gossip", P, 1e5, T / 2), ("gossip", P, 1e6, 2 * T), ("sync", P, 1e5, 1)]
    )
    measured = {**keys, "network.table": str(table)}
    T_measured = T / 2 * 4 ** math.log10(4)
    assert costs(**measured).gossip(n, src, dst, messages) == pytest.approx(T_measured, rel=1e-9)
    # without gossip rows at this rank count, the model's messages
    other = write_table(tmp_path / "other.csv", [("gossip", 3, 1e5, T), ("sync", P, 1e5, 1)])
    with_other = costs(**{**keys, "network.table": str(other)})
    assert np.array_equal(with_other.gossip(n, src, dst, messages), formulas.gossip(n, src, dst, messages))
    # the rules take the whole exchange from the table: each worker's exchange ends that long after the last of the
    # posts it waits for (d-psgd: its own and its neighbours'; sgp: its source's, or its own; ad-psgd: the exchange
    # start), in both engines
    for engine in engines(name):
        it, rounds = run_tables(scenario(**measured), engine)
        ends = rounds["t_done"] - rounds["t_trigger"]
        if name == "sgp":  # released at its own post when its source's model came before
            assert np.all(np.isclose(ends, T_measured, rtol=1e-9) | (ends < T_measured))
        else:
            assert np.allclose(ends, T_measured, rtol=1e-9)
        assert len(it) == P * scenario(**measured).iterations


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("kind,ranks,bytes\nsync,2,10\n", "needs the columns"),
        ("kind,ranks,bytes,seconds\nsync,two,10,1\n", "line 2 is not"),
        ("kind,ranks,bytes,seconds\nsync,2,10,-1\n", "line 2: ranks must"),
        ("kind,ranks,bytes,seconds\n", "has no measurements"),
        ("kind,ranks,bytes,seconds,cv\nsync,2,10,1,-0.5\n", "line 2: cv and stall must"),
        ("kind,ranks,bytes,seconds,cv\nsync,2,10,1,nan\n", "line 2: cv and stall must"),
        ("kind,ranks,bytes,seconds,cv\nsync,2,10,1,wide\n", "line 2 is not"),
        ("kind,ranks,bytes,seconds,cv,stalls,stall\nsync,2,10,1,0.1,1.0,0\n", "stalls in"),
        ("kind,ranks,bytes,seconds,cv,stalls,stall\nsync,2,10,1,0.1,0.2,nan\n", "line 2: cv and stall must"),
        ("kind,ranks,bytes,seconds,cv,stalls,stall\nsync,2,10,1,0.1,0.5,2\n", "must be below seconds"),
    ],
)
def test_a_bad_table_is_a_one_line_error_when_the_scenario_loads(tmp_path, monkeypatch, text, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "costs.csv").write_text(text)
    with pytest.raises(ScenarioError, match=says) as err:
        load(text='network.table = "costs.csv"\n[cluster]\nworkers = 2\n', name="s", overrides=[])
    assert "\n" not in str(err.value)


def test_bucketed_sync_on_a_trace(tmp_path):
    # 2 workers, 2 iterations; compute 1.0 and 3.0 s, then 2.0 and 1.0; 4 buckets, backward 0.5 of the compute
    np.save(tmp_path / "c.npy", np.array([[1.0, 3.0], [2.0, 1.0]]))
    s = scenario(
        **{
            "iterations": 2,
            "cluster.workers": 2,
            "algorithm.name": "sync",
            "network.alpha": 0.1,
            "network.beta": 0.0,
            "workload.buckets": 4,
            "workload.backward": 0.5,
            "imbalance.kind": "trace",
            "imbalance.file": str(tmp_path / "c.npy"),
        }
    )
    t = 2 * 0.1  # a ring over 2 ranks: 2 steps of alpha, whatever the bucket's bytes
    it, rounds = run_tables(s)
    # iteration 0: bucket b of the worker computing 3.0 is ready at 1.5 + 0.375 (b + 1): 1.875, 2.25, 2.625, 3.0;
    # the other's are earlier, so each bucket starts when the slow one has it or the previous is done
    end = 0.0
    for ready in (1.875, 2.25, 2.625, 3.0):
        end = max(ready, end) + t
    assert rounds["t_done"].iloc[0] == pytest.approx(end) and rounds["t_trigger"].iloc[0] == pytest.approx(3.0)
    # iteration 1 starts for both at that end; worker 0 computes 2.0: its buckets at 1.25, 1.5, 1.75, 2.0 after it
    start, end1 = end, 0.0
    for ready in (1.25, 1.5, 1.75, 2.0):
        end1 = max(start + ready, end1) + t
    assert rounds["t_done"].iloc[1] == pytest.approx(end1)
    assert np.allclose(it["t_done"], [end, end1, end, end1])
    # one bucket is sync without overlap: the exchange starts at the last post
    _, plain = run_tables(s.replace(**{"workload.buckets": 1}))
    assert plain["t_done"].iloc[0] == pytest.approx(3.0 + t)


@pytest.mark.parametrize("name", ["sync", "eager-solo", "wagma", "lsgd", "local-sgd"])
def test_each_iteration_starts_one_update_after_the_last_one_returned(name):
    s = scenario(
        **{
            "algorithm.name": name,
            "workload.update": 0.01,
            "imbalance.kind": "random-delay",
            "algorithm.period": 3,
            "algorithm.group_size": 2,
        }
    )
    for engine in ("reference", "fast"):
        it, _ = run_tables(s, engine)
        gaps = (
            it["t_start"].to_numpy().reshape(s.workers, -1)[:, 1:]
            - it["t_done"].to_numpy().reshape(s.workers, -1)[:, :-1]
        )
        assert np.allclose(gaps, 0.01, rtol=0, atol=1e-12) and (it.groupby("worker")["t_start"].first() == 0).all()


C = 0.004  # a call's software cost


def engines(name: str) -> list[str]:
    """The engines that run ``name``: the fast one only where it has a kernel."""
    return ["reference", "fast"] if algorithms.get(name).kernel is not None else ["reference"]


@pytest.mark.parametrize("name", [r.name for r in algorithms.RECORDS])
def test_a_call_that_waits_for_no_exchange_returns_after_its_software_cost(name):
    s = scenario(
        **{
            "algorithm.name": name,
            "cluster.workers": 4,
            "algorithm.period": 3,
            "algorithm.group_size": 2,
            "algorithm.sync_period": 4,
            "workload.update": 0.01,
            "workload.compute": {"dist": "lognormal", "mean": 0.2, "cv": 0.5},
            "workload.call": {"dist": "constant", "mean": C},
        }
    )
    for engine in engines(name):
        it, _ = run_tables(s, engine)
        bare, _ = run_tables(s.replace(**{"workload.call": None}), engine)
        wait = it["wait"].to_numpy()
        # a call released at its post in the run without costs returns C after it here; one that waited, at its
        # release: every wait is C or at least a round's time (alpha > 0), and the costly ones are exactly where the
        # calls were released at their posts (compared on a run with the same posts up to then: the first iteration)
        assert np.all(np.isclose(wait, C, rtol=0, atol=1e-12) | (wait > 1e-6))
        first = (it["iteration"] == 0).to_numpy()
        assert np.array_equal(np.isclose(wait[first], C, rtol=0, atol=1e-12), (bare["wait"].to_numpy() == 0)[first])
        gaps = it.groupby("worker").apply(lambda w: w["t_start"].to_numpy()[1:] - w["t_done"].to_numpy()[:-1])
        assert all(np.allclose(g, 0.01, rtol=0, atol=1e-12) for g in gaps)


def test_local_steps_and_a_solo_late_post_return_after_their_call_cost():
    # local SGD, period 3: iterations 0, 1 are local steps (released at their posts), 2 calls the average
    s = scenario(**{"algorithm.name": "local-sgd", "algorithm.period": 3, "cluster.workers": 2, "iterations": 3})
    for engine in engines("local-sgd"):
        it, rounds = run_tables(s.replace(**{"workload.call": {"dist": "constant", "mean": C}}), engine)
        local = it[it["iteration"] < 2]
        assert np.allclose(local["t_done"] - local["t_post"], C, rtol=0, atol=1e-12)
        assert np.allclose(it.loc[it["iteration"] == 2, "t_done"], rounds["t_done"].iloc[0], rtol=0, atol=1e-12)
    # eager-solo, worker 1 three times slower: its call 0 comes after round 0 completed and returns C later
    s = scenario(
        **{
            "algorithm.name": "eager-solo",
            "cluster.workers": 2,
            "iterations": 1,
            "imbalance.kind": "persistent",
            "imbalance.factors": {"1": 3.0},
            "workload.call": {"dist": "constant", "mean": C},
        }
    )
    for engine in engines("eager-solo"):
        it, rounds = run_tables(s, engine)
        slow = it[it["worker"] == 1].iloc[0]
        assert slow["t_post"] > rounds["t_done"].iloc[0] and slow["t_done"] == pytest.approx(slow["t_post"] + C)
        assert it[it["worker"] == 0]["t_done"].iloc[0] == rounds["t_done"].iloc[0]


def test_call_costs_are_common_random_numbers_and_change_nothing_where_every_call_waits():
    s = scenario(
        **{
            "cluster.workers": 4,
            "imbalance.kind": "random-delay",
            "workload.compute": {"dist": "lognormal", "mean": 0.2, "cv": 0.5},
            "workload.call": {"dist": "lognormal", "mean": 1e-3, "cv": 0.8},
        }
    )
    # every sync call waits for its round (alpha > 0): the tables are those without call costs
    for engine in ("reference", "fast"):
        a, ra = run_tables(s, engine)
        b, rb = run_tables(s.replace(**{"workload.call": None}), engine)
        pd.testing.assert_frame_equal(a, b)
        pd.testing.assert_frame_equal(ra, rb)
    # drawn per (seed, worker, iteration): a block is the same drawn alone, the compute times do not move, and the
    # mean is the one asked for
    costs = CallCosts(s)
    whole = costs.block(0, 2000)
    assert np.array_equal(whole[700:900], costs.block(700, 900))
    assert np.array_equal(ComputeTimes(s).block(0, 50), ComputeTimes(s.replace(**{"workload.call": None})).block(0, 50))
    assert whole.mean() == pytest.approx(1e-3, rel=0.05) and whole.std() / whole.mean() == pytest.approx(0.8, rel=0.1)
    assert not np.array_equal(whole, CallCosts(s.replace(seed=s.seed + 1)).block(0, 2000))
    assert not CallCosts(s.replace(**{"workload.call": None})).block(0, 10).any()


def test_the_independent_draw_picks_each_worker_with_the_right_chance():
    # max = 2 independent uniform draws of 8 workers: a worker is slow with chance 1 - (7/8)^2 = 15/64, and the
    # slow set has 2 workers unless both draws agree (chance 1/8)
    s = scenario(
        **{
            "cluster.workers": 8,
            "imbalance.kind": "random-delay",
            "imbalance.slow": [1, 2],
            "imbalance.draw": "independent",
        }
    )
    times = ComputeTimes(s)
    sets = [times.slow_workers(n) for n in range(4000)]
    counts = np.bincount(np.concatenate(sets), minlength=8) / len(sets)
    assert np.allclose(counts, 15 / 64, atol=0.03)
    assert np.mean([len(x) == 1 for x in sets]) == pytest.approx(1 / 8, abs=0.02)
    assert all(len(x) in (1, 2) and (np.diff(x) > 0).all() for x in sets)
    # the count draw never repeats a worker: 1 or 2 distinct, uniformly
    counted = [ComputeTimes(s.replace(**{"imbalance.draw": "count"})).slow_workers(n) for n in range(2000)]
    assert np.mean([len(x) == 1 for x in counted]) == pytest.approx(1 / 2, abs=0.04)


def test_the_released_eager_sgd_injection_desynchronises():
    delays = released_eager_sgd_delays(64, 2000, seed=7, delay=0.32)
    first = np.random.RandomState(7)
    x, y = first.randint(64), first.randint(64)  # every rank's first draw is x; all but rank x draw y too
    assert set(np.flatnonzero(delays[0])) == {x, y} and set(np.unique(delays)) <= {0.0, 0.32}
    slow = (delays > 0).sum(axis=1)
    assert 1.8 < slow.mean() < 2.2 and (slow == 0).mean() > 0.05 and slow.max() > 2  # not always 1 or 2
