"""The reference engine's clock: an algorithm's computed instants are the times its workers are released at."""

import numpy as np

from stragglerlab.simulator.engine import delay_short_of
from tests.helpers import run_tables, scenario


def test_a_delay_short_of_an_instant_leaves_an_exact_rest():
    # a post and the release computed for it: t > 2 now, so t - now is inexact, and one step from now misses t
    post, release = 3.802e-06, 2.2801000000000004e-05
    assert post + (release - post) != release
    rng = np.random.default_rng(3)
    nows = rng.uniform(0, 1, 2000) * 10.0 ** rng.integers(-9, 4, 2000)
    for now, t in [(post, release), (0.25, 0.25), *zip(nows, nows * rng.uniform(1, 50, 2000), strict=True)]:
        m = now + delay_short_of(now, t)
        assert m <= t and m + (t - m) == t  # the second step lands on t


def workers_in_step(P: int = 350):
    """ad-psgd workers in step (1 ns of compute) queueing at the exponential graph's threads: some wait far longer
    than the time run so far, where one step of the clock from the post could miss the release by an ulp."""
    return scenario(
        iterations=20,
        **{
            "algorithm.name": "ad-psgd",
            "algorithm.topology": "exponential",
            "cluster.workers": P,
            "imbalance.kind": "random-delay",
            "imbalance.slow": [1, 30],
            "imbalance.delay": 0.2,
            "workload.compute": {"dist": "constant", "mean": 1e-9},
        },
    )


def test_a_worker_is_released_at_the_instant_its_exchange_completes():
    it, rounds = run_tables(workers_in_step())  # 4 releases an ulp off their exchange's end, before
    exchanges = rounds.set_index(["initiator", "round"])["t_done"]
    released = it.set_index(["worker", "iteration"])["t_done"]
    assert (released.to_numpy() == exchanges.loc[released.index].to_numpy()).all()
