"""The gossip baselines (d-psgd, sgp, ad-psgd) against their rules, re-derived in the test from trace compute
times: release times to 1e-9 s, rounds exactly, on both engines where there are two; and the convergence replay's
averages on a linear model."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.simulator.algorithms.adpsgd import peer
from stragglerlab.simulator.scenario import ScenarioError
from stragglerlab.simulator.topology import neighbours, torus_shape
from stragglerlab.simulator.workloads import load as load_workload
from tests.helpers import run_tables, scenario
from tests.simulator.test_convergence import trace

ALPHA, BETA, PARAMS, UPDATE = 1e-3, 1e-9, 50_000, 0.002
P2P = ALPHA + 4 * PARAMS * BETA  # one float32 model


def on_trace(tmp_path, name, times, **keys):
    np.save(tmp_path / "c.npy", times)
    return scenario(
        **{
            "iterations": times.shape[0],
            "cluster.workers": times.shape[1],
            "network.alpha": ALPHA,
            "network.beta": BETA,
            "workload.params": PARAMS,
            "workload.update": UPDATE,
            "imbalance.kind": "trace",
            "imbalance.file": str(tmp_path / "c.npy"),
            "algorithm.name": name,
            **keys,
        }
    )


def times(P, N=25, seed=0):
    c = np.random.default_rng(seed).exponential(0.05, size=(N, P))
    c[::3, seed % P] += 0.2  # a straggler now and then
    return c


def check(it, rounds, t_done, group, contributors):
    """The tables against the rule: every iteration carried by its own round, fresh, version n; one round row per
    worker-iteration."""
    P, N = t_done.shape[1], t_done.shape[0]
    got = it.pivot(index="iteration", columns="worker", values="t_done").to_numpy()
    np.testing.assert_allclose(got, t_done, rtol=0, atol=1e-9)
    assert (it["round"] == it["iteration"]).all() and it["fresh"].all()
    assert (it["model_version"] == it["iteration"]).all() and (it["staleness"] == 0).all()
    assert len(rounds) == P * N and (rounds["kind"] == "gossip").all()
    assert list(rounds["round"]) == list(np.repeat(np.arange(N), P))
    assert list(rounds["initiator"]) == list(np.tile(np.arange(P), N))
    np.testing.assert_allclose(rounds["t_done"], t_done.ravel(), rtol=0, atol=1e-9)
    assert list(rounds["group"]) == list(group.ravel())
    assert list(rounds["contributors"]) == list(contributors.ravel())


def dpsgd_expected(c, peers):
    """t_done(n, i) = max(t_post(n, i), max_{j ∈ N(i)} t_post(n, j)) + alpha + k·n·beta, the k models a rank sends
    and receives sharing its links; t_start(n + 1) = t_done(n) + update."""
    N, P = c.shape
    t_start, t_done = np.zeros(P), np.zeros((N, P))
    group = np.zeros((N, P), dtype=np.int64)
    for n in range(N):
        post = t_start + c[n]
        for i in range(P):
            shared = ALPHA + len(peers[i]) * 4 * PARAMS * BETA
            t_done[n, i] = max(post[i], max(post[j] for j in peers[i])) + shared
            group[n, i] = max(peers[i], key=lambda j: (post[j], -j))  # the last to post, ties: the lowest rank
        t_start = t_done[n] + UPDATE
    return t_done, group


def ring(P):
    return [sorted({(i - 1) % P, (i + 1) % P}) for i in range(P)]


def torus_3x4(P=12):
    # 3 rows of 4: up, down, left, right with wrap-around
    return [
        sorted({((r - 1) % 3) * 4 + col, ((r + 1) % 3) * 4 + col, r * 4 + (col - 1) % 4, r * 4 + (col + 1) % 4})
        for r, col in (divmod(i, 4) for i in range(P))
    ]


def exponential(P):
    # i ± 1, 2, 4, ... (2^k < P), without repeats
    return [
        sorted({(i + s * 2**k) % P for k in range(P.bit_length()) if 2**k < P for s in (-1, 1)} - {i}) for i in range(P)
    ]


@pytest.mark.parametrize("engine", ["reference", "fast"])
@pytest.mark.parametrize(
    "topology,P,peers",
    [("ring", 7, ring(7)), ("ring", 2, ring(2)), ("torus", 12, torus_3x4()), ("exponential", 11, exponential(11))],
)
def test_dpsgd_waits_for_the_last_of_its_neighbours(tmp_path, engine, topology, P, peers):
    c = times(P)
    s = on_trace(tmp_path, "d-psgd", c, **{"algorithm.topology": topology})
    it, rounds = run_tables(s, engine)
    t_done, group = dpsgd_expected(c, peers)
    check(it, rounds, t_done, group, np.tile([1 + len(p) for p in peers], (len(c), 1)))


def test_topologies():
    assert neighbours("ring", 2) == [[1], [0]] and neighbours("ring", 1) == [[]]
    assert neighbours("exponential", 8)[0] == [1, 2, 4, 6, 7]
    assert neighbours("exponential", 11) == exponential(11)
    assert torus_shape(12) == (3, 4) and torus_shape(7) == (1, 7) and torus_shape(16) == (4, 4)
    assert neighbours("torus", 7) == ring(7)  # a prime number of workers: a 1 x P torus is the ring
    for topology in ("ring", "torus", "exponential"):
        for P in range(1, 20):
            graph = neighbours(topology, P)
            assert all(i in graph[j] for i in range(P) for j in graph[i])  # symmetric
            assert len({len(g) for g in graph}) == 1  # as many neighbours everywhere


def test_dpsgd_with_nodes_uses_the_intra_node_link(tmp_path):
    c = times(4)
    s = on_trace(tmp_path, "d-psgd", c, **{"cluster.workers_per_node": 2, "network.intra_alpha": 0.0})
    intra, across = 4 * PARAMS * BETA, ALPHA + 2 * 4 * PARAMS * BETA
    peers = ring(4)
    N, P = c.shape
    t_start, t_done = np.zeros(P), np.zeros((N, P))
    for n in range(N):
        post = t_start + c[n]
        for i in range(P):
            # inside a node each rank's own copy bandwidth; across, the two ranks of a node share its link
            t_done[n, i] = max(max(post[i], post[j]) + (intra if i // 2 == j // 2 else across) for j in peers[i])
        t_start = t_done[n] + UPDATE
    for engine in ("reference", "fast"):
        it, _ = run_tables(s, engine)
        got = it.pivot(index="iteration", columns="worker", values="t_done").to_numpy()
        np.testing.assert_allclose(got, t_done, rtol=0, atol=1e-9)


@pytest.mark.parametrize("engine", ["reference", "fast"])
@pytest.mark.parametrize("P", [2, 5, 8])
def test_sgp_waits_for_its_source_only(tmp_path, engine, P):
    c = times(P, seed=1)
    it, rounds = run_tables(on_trace(tmp_path, "sgp", c), engine)
    N = len(c)
    L = (P - 1).bit_length()  # ⌈log2 P⌉
    t_start, t_done = np.zeros(P), np.zeros((N, P))
    src = np.zeros((N, P), dtype=np.int64)
    for n in range(N):
        post = t_start + c[n]
        for i in range(P):
            src[n, i] = (i - 2 ** (n % L)) % P  # i receives from the worker that sends to i + 2^(n mod L)
            t_done[n, i] = max(post[i], post[src[n, i]] + P2P)
        t_start = t_done[n] + UPDATE
    check(it, rounds, t_done, src, np.full((N, P), 2))


@pytest.mark.parametrize("engine", ["reference", "fast"])
@pytest.mark.parametrize("P", [2, 3, 5, 8])
def test_sgp_pushing_to_two_waits_for_both_sources_and_its_sends(tmp_path, engine, P):
    c = times(P, seed=3)
    it, rounds = run_tables(on_trace(tmp_path, "sgp", c, **{"algorithm.push_peers": 2}), engine)
    N = len(c)
    L = (P - 1).bit_length()  # ⌈log2 P⌉
    t_start, t_done = np.zeros(P), np.zeros((N, P))
    group = np.zeros((N, P), dtype=np.int64)
    contributors = np.zeros((N, P), dtype=np.int64)
    for n in range(N):
        post = t_start + c[n]
        for i in range(P):
            # the release: i pushes to i + 2^s and i + 2^(s+1 mod L), so receives from i - 2^s and i - 2^(s+1 mod L)
            sources = sorted({(i - 2 ** (n % L)) % P, (i - 2 ** ((n + 1) % L)) % P})
            # every worker sends and receives as many models: each link carries them one after the other, and i
            # waits for its own sends, which leave when it posts
            shared = ALPHA + len(sources) * 4 * PARAMS * BETA
            t_done[n, i] = max(post[i], *(post[j] for j in sources)) + shared
            group[n, i] = max(sources, key=lambda j: (post[j], -j))
            contributors[n, i] = 1 + len(sources)
        t_start = t_done[n] + UPDATE
    check(it, rounds, t_done, group, contributors)


def test_one_worker_gossips_with_nobody(tmp_path):
    c = times(1)
    for name in ("d-psgd", "sgp", "ad-psgd"):
        it, rounds = run_tables(on_trace(tmp_path, name, c))
        assert np.allclose(it["t_done"], it["t_post"]) and (rounds["group"] == -1).all()


@pytest.mark.parametrize("engine,window", [("reference", None), ("fast", 4), ("fast", None)])
@pytest.mark.parametrize("topology", ["ring", "exponential"])
def test_adpsgd_peers_serve_one_exchange_at_a_time_first_come_first_served(tmp_path, topology, engine, window):
    P, seed = 6, 4
    c = times(P, N=40, seed=2)
    c[:, :3] *= 0.1  # half the workers fast: their requests queue at the same peers, and they run ahead
    s = on_trace(tmp_path, "ad-psgd", c, seed=seed, **{"algorithm.topology": topology})
    it, rounds = run_tables(s, engine, window)
    peers = ring(P) if topology == "ring" else exponential(P)
    N = len(c)
    # event by event: the next request is the earliest post (ties: the lowest worker)
    t_next, n_next = np.zeros(P) + c[0], np.zeros(P, dtype=np.int64)
    free = np.zeros(P)
    t_done, start, group = np.zeros((N, P)), np.zeros((N, P)), np.zeros((N, P), dtype=np.int64)
    while (n_next < N).any():
        i = min((w for w in range(P) if n_next[w] < N), key=lambda w: (t_next[w], w))
        n = n_next[i]
        j = peer(seed, i, n, peers[i])
        assert j in peers[i]
        start[n, i] = max(t_next[i], free[j])
        t_done[n, i] = free[j] = start[n, i] + 2 * P2P
        group[n, i] = j
        n_next[i] += 1
        if n + 1 < N:
            t_next[i] = t_done[n, i] + UPDATE + c[n + 1, i]
    check(it, rounds, t_done, group, np.full((N, P), 2))
    np.testing.assert_allclose(rounds["t_trigger"], start.ravel(), rtol=0, atol=1e-9)
    post = it.pivot(index="iteration", columns="worker", values="t_post").to_numpy()
    assert (start > post + 1e-6).any(), "the scenario must make some request wait for a busy peer"
    drawn = np.bincount([peer(seed, 0, n, [1, 2, 3]) for n in range(3000)])
    assert drawn[1:].min() > 900  # uniform over the neighbours


def test_adpsgd_peers_are_drawn_in_the_fast_kernel_as_the_rules_draw_them():
    from stragglerlab.simulator.algorithms.adpsgd import AdPsgdRules
    from stragglerlab.simulator.costs import cost_model
    from stragglerlab.simulator.fast.adpsgd import drawn_peer, kernel

    for P, topology in [(6, "ring"), (11, "exponential"), (12, "torus"), (1, "ring")]:
        s = scenario(
            seed=2**32 - 1, **{"algorithm.name": "ad-psgd", "cluster.workers": P, "algorithm.topology": topology}
        )
        rules = AdPsgdRules(s, cost_model(s))
        state = kernel(rules).state
        for n in [*range(60), 2**31 + 7, 2**40 + 3]:
            draws = state.hashes, state.flat, state.offset, state.degree
            assert [drawn_peer(*draws, i, n) for i in range(P)] == [rules.peer(i, n) for i in range(P)]


def test_topology_is_checked():
    with pytest.raises(ScenarioError, match="one of ring, torus, exponential") as err:
        scenario(**{"algorithm.topology": "star"})
    assert "\n" not in str(err.value)


LINEAR = {
    "workload.model": "hyperplane",
    "workload.dimension": 6,
    "workload.samples": 600,
    "workload.batch": 4,
    "cluster.workers": 6,
    "iterations": 20,
    "imbalance.kind": "random-delay",
}


def test_dpsgd_averages_with_its_neighbours_then_steps():
    s = scenario(**{**LINEAR, "algorithm.name": "d-psgd", "algorithm.topology": "exponential"})
    wl = load_workload(s)
    seen, _ = trace(s, wl, events=("round",))
    P, lr = s.workers, s.algorithm.lr
    peers = exponential(P)
    W = np.tile(wl.initial().astype(np.float64), (P, 1))
    for n, (_, got) in enumerate(seen["round"]):
        G, _ = wl.gradient(W, wl.batches(np.arange(P), np.full(P, n)))
        expected = np.array([W[[i, *peers[i]]].mean(axis=0) for i in range(P)]) - lr * G
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
        # the mean of the replicas moves by the mean gradient only
        np.testing.assert_allclose(got.mean(axis=0), W.mean(axis=0) - lr * G.mean(axis=0), rtol=0, atol=1e-12)
        W = got
    assert len(seen["round"]) == s.iterations and np.ptp(W, axis=0).max() > 0


@pytest.mark.parametrize("P,push_peers", [(5, 1), (8, 2), (5, 2)])
def test_sgp_push_sum_keeps_the_average_and_de_biases(P, push_peers):
    s = scenario(**{**LINEAR, "algorithm.name": "sgp", "cluster.workers": P, "algorithm.push_peers": push_peers})
    wl = load_workload(s)
    seen, _ = trace(s, wl, events=("round",))
    lr, L = s.algorithm.lr, (P - 1).bit_length()  # ⌈log2 P⌉ phases
    X, weight = np.tile(wl.initial().astype(np.float64), (P, 1)), np.ones(P)
    for n, (_, got) in enumerate(seen["round"]):
        G, _ = wl.gradient(X / weight[:, None], wl.batches(np.arange(P), np.full(P, n)))
        X = X - lr * G
        # i keeps 1/(k + 1) of its numerator and weight and receives as much from each of its k sources: the workers
        # 2^(n mod L) below it, and, pushing to two, 2^((n + 1) mod L) below it
        sources = [[(i - 2 ** ((n + k) % L)) % P for i in range(P)] for k in range(push_peers)]
        X = (X + sum(X[src] for src in sources)) / (1 + push_peers)
        weight = (weight + sum(weight[src] for src in sources)) / (1 + push_peers)
        np.testing.assert_allclose(got, X / weight[:, None], rtol=0, atol=1e-12)
        assert np.isclose(got.mean(axis=0), X.mean(axis=0)).all() and np.allclose(weight, 1.0)
    assert len(seen["round"]) == s.iterations


def test_sgp_pushes_to_one_or_two_peers_only(tmp_path):
    with pytest.raises(ScenarioError, match="algorithm.push_peers = 3: must be 1 or 2"):
        scenario(**{"algorithm.name": "sgp", "algorithm.push_peers": 3})


def test_adpsgd_pairs_average_and_the_sum_moves_by_the_steps_only():
    s = scenario(**{**LINEAR, "algorithm.name": "ad-psgd"})
    wl = load_workload(s)
    seen, it = trace(s, wl, events=("averaged",))
    assert len(seen["averaged"]) == s.workers * s.iterations
    # an exchange keeps the sum of the models; only the initiator's step moves it, so after everything the mean is
    # the initial model minus lr/P times the sum of all steps, each of a gradient taken on some model: bounded
    final = seen["averaged"][-1][1]
    assert np.isfinite(final).all() and np.ptp(final, axis=0).max() > 0


def test_gossip_trains_and_evaluates(tmp_path):
    from stragglerlab.analysis.runfolder import load_run
    from stragglerlab.simulator.run import simulate

    for name in ("d-psgd", "sgp", "ad-psgd"):
        s = scenario(**{**LINEAR, "algorithm.name": name, "evals.every_iterations": 5, "algorithm.lr": 0.05})
        evals = load_run(simulate(s, tmp_path / name)).evals
        assert list(evals["iteration"])[:2] == [0, 5] and evals["iteration"].iloc[-1] == 20
        assert evals["loss"].iloc[-1] < evals["loss"].iloc[0]
