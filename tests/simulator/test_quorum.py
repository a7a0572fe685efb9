"""quorum (k-of-P partial allreduce): the rule re-derived in closed form from trace compute times, the two ends of k
(k = 1 is eager-solo; k = P is sync plus one activation per round), and the key's errors.

Rounds are sequential: a worker posts call n only after its call n − 1 returned, which is no earlier than round
n − 1's completion, and round n − 1 completes only once k posts of call n − 1 arrived. So the posts of call n all
come after round n − 1 completed, the posts counted for round n are exactly the posts of call n, and round n's
trigger is the k-th smallest of them (ties in worker order).
"""

import math

import numpy as np
import pytest

from stragglerlab.simulator.fast.rounds import kth_post
from stragglerlab.simulator.keys import ScenarioError
from tests.helpers import run_tables, scenario

P, N, PARAMS = 6, 40, 250_000
ALPHA, BETA = 1e-3, 1e-9
T_ACT = math.ceil(math.log2(P)) * ALPHA  # binomial-tree broadcast of the activation token
T_AR = 2 * (P - 1) * ALPHA + 2 * (P - 1) / P * (4 * PARAMS) * BETA  # ring allreduce of float32 gradients, gamma = 0
NETWORK = {
    "network.alpha": ALPHA,
    "network.beta": BETA,
    "network.gamma": 0.0,
    "network.allreduce": "ring",
    "network.overhead": 0.0,
    "workload.params": PARAMS,
}


def trace(path, rows=13):
    """Compute times on a grid of 0.05 s, so that posts often tie (same start, same compute time)."""
    times = np.random.default_rng(5).integers(1, 12, size=(rows, P)) * 0.05
    times[0, :] = 0.25  # every worker posts call 0 at once: the tie order decides round 0's initiator
    np.save(path, times)
    return np.resize(times, (N, P)) if rows < N else times


def closed_form(c, k, late):
    """Round n: trigger = the k-th post of call n (time, then worker order), exchange start x = trigger + T_act,
    done = x + T_ar; a post after x is late, released at once (or at done if earlier); a worker starts call n + 1
    when released. Returns posts, triggers, initiators, dones and each post's round."""
    start = np.zeros(P)
    posts, trig, init, done = np.zeros((N, P)), np.zeros(N), np.zeros(N, dtype=int), np.zeros(N)
    for n in range(N):
        posts[n] = start + c[n]
        order = sorted(range(P), key=lambda i: (posts[n, i], i))
        init[n] = order[k - 1]
        trig[n] = posts[n, init[n]]
        done[n] = trig[n] + T_ACT + T_AR
        start = np.maximum(posts[n], done[n])
    x = trig + T_ACT
    rounds = np.full((N, P), -1)
    for n in range(N):
        for i in range(P):
            if posts[n, i] <= x[n]:
                rounds[n, i] = n
            elif late == "accumulate":  # into the first later round whose exchange had not started
                later = np.flatnonzero(x[n + 1 :] >= posts[n, i])
                rounds[n, i] = n + 1 + later[0] if len(later) else -1
    return posts, trig, init, done, rounds


def quorum(k, **keys):
    return scenario(iterations=N, **{"cluster.workers": P, "algorithm.name": "quorum", "algorithm.quorum": k, **keys})


@pytest.mark.parametrize("engine", ["reference", "fast"])
@pytest.mark.parametrize("late", ["accumulate", "drop"])
@pytest.mark.parametrize("k", [1, 2, 3, 5, 6])
def test_round_n_is_triggered_by_the_kth_post_of_call_n(tmp_path, engine, late, k):
    c = trace(tmp_path / "c.npy")
    s = quorum(
        k,
        **NETWORK,
        **{"algorithm.late": late, "algorithm.sync_period": 0, "imbalance.kind": "trace"},
        **{"imbalance.file": str(tmp_path / "c.npy")},
    )
    it, rounds = run_tables(s, engine)
    posts, trig, init, done, expected = closed_form(c, k, late)
    assert np.array_equal(rounds["round"], np.arange(N))
    assert (rounds.kind == "async").all()
    np.testing.assert_allclose(rounds.t_trigger, trig, rtol=0, atol=1e-9)
    np.testing.assert_allclose(rounds.t_done, done, rtol=0, atol=1e-9)
    assert np.array_equal(rounds.initiator, init)
    # iterations are sorted by worker, then iteration
    np.testing.assert_allclose(it.t_post, posts.T.ravel(), rtol=0, atol=1e-9)
    assert np.array_equal(it["round"], expected.T.ravel())
    assert np.array_equal(it.fresh, (posts <= (trig + T_ACT)[:, None]).T.ravel())
    assert (rounds.fresh >= k).all()
    if k < P:
        assert (~it.fresh).any(), "the trace must make late posts, or late posts are not tested"


def test_the_default_quorum_is_half_the_workers_rounded_up():
    for workers, half in ((5, 3), (6, 3), (1, 1)):
        keys = {"cluster.workers": workers, "imbalance.kind": "random-delay", "imbalance.slow": [1, 1]}
        default = run_tables(scenario(**{"algorithm.name": "quorum", **keys}))
        explicit = run_tables(scenario(**{"algorithm.name": "quorum", "algorithm.quorum": half, **keys}))
        for a, b in zip(default, explicit, strict=True):
            assert a.equals(b)


@pytest.mark.parametrize("engine", ["reference", "fast"])
@pytest.mark.parametrize("late", ["accumulate", "drop"])
@pytest.mark.parametrize("sync_period", [0, 4])
def test_quorum_of_one_is_eager_solo(engine, late, sync_period):
    keys = {
        "cluster.workers": 7,
        "algorithm.late": late,
        "algorithm.sync_period": sync_period,
        "imbalance.kind": "random-delay",
        "imbalance.slow": [1, 3],
        "imbalance.delay": 0.5,
        "workload.compute": {"dist": "lognormal", "mean": 0.3, "cv": 0.4},
    }
    solo = run_tables(scenario(iterations=60, **{"algorithm.name": "eager-solo", **keys}), engine)
    one = run_tables(scenario(iterations=60, **{"algorithm.name": "quorum", "algorithm.quorum": 1, **keys}), engine)
    for a, b in zip(solo, one, strict=True):
        assert a.equals(b)


@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_quorum_of_all_is_sync_plus_one_activation_per_round(engine):
    keys = {
        **NETWORK,
        "cluster.workers": P,
        "algorithm.sync_period": 0,
        "imbalance.kind": "random-delay",
        "imbalance.slow": [1, 2],
        "imbalance.delay": 0.3,
        "workload.compute": {"dist": "gamma", "mean": 0.2, "cv": 0.5},
    }
    sync_it, sync_rounds = run_tables(scenario(iterations=N, **{"algorithm.name": "sync", **keys}), engine)
    it, rounds = run_tables(quorum(P, **keys), engine)
    # the same compute times (common random numbers), each round T_act later than sync's, so round n ends
    # (n + 1)·T_act after sync's round n
    np.testing.assert_allclose(rounds.t_done, sync_rounds.t_done + (np.arange(N) + 1) * T_ACT, rtol=0, atol=1e-9)
    np.testing.assert_allclose(rounds.t_trigger, sync_rounds.t_trigger + np.arange(N) * T_ACT, rtol=0, atol=1e-9)
    np.testing.assert_allclose(it.compute, sync_it.compute, rtol=0, atol=1e-12)
    assert it.fresh.all() and (rounds.fresh == P).all() and (it["round"] == it.iteration).all()


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (7, "algorithm.quorum = 7: must be from 1 to cluster.workers = 6, or 0 for 3 (half)"),
        (-1, "algorithm.quorum = -1: must be an integer from 1 to cluster.workers, or 0 for half"),
        ("two", 'algorithm.quorum = "two": must be an integer from 1 to cluster.workers'),
    ],
)
def test_bad_quorums_are_one_line_errors(value, words):
    with pytest.raises(ScenarioError) as err:
        quorum(value)
    message = str(err.value)
    assert words in message and "\n" not in message


def test_the_fast_engines_selection_finds_the_kth_post_among_ties():
    rng = np.random.default_rng(0)
    for size in (1, 2, 3, 7, 64, 513):
        for spread in (2, 5, 1000):  # few distinct times: long runs of ties
            posts = rng.integers(0, spread, size).astype(float)
            order = np.lexsort((np.arange(size), posts))  # by time, then worker
            for q in {q for q in (1, 2, size // 2, size - 1, size) if 1 <= q <= size}:
                waves = np.full(size, -np.inf), np.zeros(size, dtype=np.int64)  # no post ties with a release
                assert kth_post(posts, q, np.zeros(size), *waves) == order[q - 1], (size, spread, q)
