import numpy as np
import pytest

from stragglerlab.simulator.imbalance import ComputeTimes
from tests.helpers import scenario


def test_same_seed_same_times_whatever_the_algorithm():
    a = ComputeTimes(
        scenario(
            **{
                "algorithm.name": "sync",
                "imbalance.kind": "random-delay",
                "workload.compute": {"dist": "lognormal", "mean": 0.2, "cv": 0.5},
            }
        )
    )
    b = ComputeTimes(
        scenario(
            **{
                "algorithm.name": "wagma",
                "algorithm.group_size": 2,
                "imbalance.kind": "random-delay",
                "workload.compute": {"dist": "lognormal", "mean": 0.2, "cv": 0.5},
            }
        )
    )
    assert np.array_equal(a.block(0, 40), b.block(0, 40))
    # any block on its own equals the same rows of a larger block
    assert np.array_equal(a.block(13, 17), a.block(0, 40)[13:17])


def test_seed_changes_times():
    def times(seed):
        return ComputeTimes(scenario(seed=seed, **{"workload.compute": {"dist": "gamma", "mean": 1.0, "cv": 0.3}}))

    assert not np.array_equal(times(1).block(0, 5), times(2).block(0, 5))


def test_base_time_of_a_worker_does_not_depend_on_the_worker_count():
    c = {"dist": "normal", "mean": 1.0, "cv": 0.1}
    small = ComputeTimes(scenario(**{"cluster.workers": 4, "workload.compute": c})).block(0, 10)
    large = ComputeTimes(scenario(**{"cluster.workers": 64, "workload.compute": c})).block(0, 10)
    assert np.array_equal(small, large[:, :4])


def test_random_delay_selects_between_min_and_max_workers():
    s = scenario(
        **{
            "cluster.workers": 16,
            "iterations": 500,
            "imbalance.kind": "random-delay",
            "imbalance.slow": [1, 3],
            "imbalance.delay": 0.5,
        }
    )
    ct = ComputeTimes(s)
    times = ct.block(0, 500)
    slow_counts = (times > 0.3 + 1e-12).sum(axis=1)
    assert slow_counts.min() == 1 and slow_counts.max() == 3
    assert set(np.unique(slow_counts)) == {1, 2, 3}
    for n in (0, 7, 499):
        assert np.array_equal(np.flatnonzero(times[n] > 0.31), ct.slow_workers(n))
    assert np.allclose(times[times > 0.31], 0.8)
    # every worker is picked sometimes: the selection is uniform
    assert len(np.unique(np.concatenate([ct.slow_workers(n) for n in range(500)]))) == 16


def test_persistent_factors():
    s = scenario(**{"imbalance.kind": "persistent", "imbalance.factors": {"3": 1.5, "7": 2.0}})
    row = ComputeTimes(s).row(0)
    assert row[3] == pytest.approx(0.45) and row[7] == pytest.approx(0.6) and row[0] == pytest.approx(0.3)


@pytest.mark.parametrize(
    "dist,extra",
    [
        ("normal", {"cv": 0.2}),
        ("lognormal", {"cv": 0.5}),
        ("gamma", {"cv": 0.5}),
        ("gamma", {"shape": 4.0}),
        ("pareto", {"shape": 3.0}),
    ],
)
def test_distributions_have_the_requested_mean(dist, extra):
    s = scenario(
        **{"cluster.workers": 1000, "iterations": 20, "workload.compute": {"dist": dist, "mean": 0.5, **extra}}
    )
    times = ComputeTimes(s).block(0, 20)
    assert times.min() >= 0
    assert times.mean() == pytest.approx(0.5, rel=0.05)
    if "cv" in extra:
        assert times.std() / times.mean() == pytest.approx(extra["cv"], rel=0.1)


@pytest.mark.parametrize("suffix", [".npy", ".csv"])
def test_trace_repeats_when_shorter(tmp_path, suffix):
    data = np.arange(12, dtype=float).reshape(3, 4) / 10
    path = tmp_path / f"trace{suffix}"
    np.save(path, data) if suffix == ".npy" else np.savetxt(path, data, delimiter=",")
    s = scenario(**{"cluster.workers": 4, "imbalance.kind": "trace", "imbalance.file": str(path)})
    block = ComputeTimes(s).block(0, 7)
    assert np.allclose(block, data[[0, 1, 2, 0, 1, 2, 0]])
