"""Speedup over a baseline, paired by seed, with its t-interval; means with intervals; sim against real."""

import math

import numpy as np
import pytest

from stragglerlab.analysis.collection import load_runs, summary_table
from stragglerlab.analysis.compare import aggregate, mean_interval, sim_vs_real, speedup, t_quantile
from stragglerlab.analysis.errors import UserError
from tests.analysis.handmade import one_iteration

T_975_DF2 = 4.302652729749464  # Student's t, 97.5 % quantile, 2 degrees of freedom (tables)


def test_t_quantile_matches_tables():
    for df, expected in ((1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423)):
        assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)
    assert t_quantile(0.025, 4) == pytest.approx(-2.7764, abs=1e-4)


def test_mean_interval():
    mean, lo, hi = mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and hi - mean == pytest.approx(T_975_DF2 * 1.0 / math.sqrt(3), rel=1e-6)
    assert math.isnan(mean_interval([5.0])[1])


@pytest.fixture
def table(tmp_path):
    """sync takes 6 s on every seed; eager-solo 5, 4 and 3 s: per-seed speedups 1.2, 1.5 and 2."""
    for seed, solo in enumerate((5.0, 4.0, 3.0)):
        one_iteration(tmp_path / f"sync-{seed}", 6.0, algorithm="sync", seed=seed)
        one_iteration(tmp_path / f"solo-{seed}", solo, algorithm="eager-solo", seed=seed)
    return summary_table(load_runs([tmp_path]))


def test_speedup_is_the_geometric_mean_of_per_seed_ratios_with_a_t_interval(table):
    out = speedup(table, "sync").set_index("algorithm.name")
    logs = np.log([1.2, 1.5, 2.0])
    half = T_975_DF2 * logs.std(ddof=1) / math.sqrt(3)
    solo = out.loc["eager-solo"]
    assert solo["speedup"] == pytest.approx(math.exp(logs.mean()))
    assert (solo["low"], solo["high"]) == pytest.approx((math.exp(logs.mean() - half), math.exp(logs.mean() + half)))
    assert solo["seeds"] == 3
    assert out.loc["sync", "speedup"] == 1.0
    # a time metric is inverted so that above 1 is still better
    assert speedup(table, "sync", "makespan").set_index("algorithm.name").loc["eager-solo", "speedup"] == pytest.approx(
        solo["speedup"]
    )


def test_speedup_pairs_by_seed_not_by_order(table):
    shuffled = table.sample(frac=1.0, random_state=3)
    assert speedup(shuffled, "sync").equals(speedup(table, "sync"))


def test_speedup_errors(table):
    with pytest.raises(UserError, match="no run of it"):
        speedup(table, "wagma")


def test_aggregate_across_seeds(table):
    agg = aggregate(table, ["algorithm.name"], ["makespan"]).set_index("algorithm.name")
    assert agg.loc["eager-solo", "makespan"] == 4.0 and agg.loc["eager-solo", "runs"] == 3
    assert agg.loc["eager-solo", "makespan_hi"] == pytest.approx(4.0 + T_975_DF2 / math.sqrt(3))


def test_sim_vs_real(tmp_path):
    one_iteration(tmp_path / "real", 2.0, source="real")
    one_iteration(tmp_path / "sim", 2.1)
    out = sim_vs_real(summary_table(load_runs([tmp_path])), ["mean_iteration"])
    assert out.loc[0, "mean_iteration_error"] == pytest.approx(0.05)
    with pytest.raises(UserError, match="both sources"):
        sim_vs_real(summary_table(load_runs([tmp_path / "sim"])))
