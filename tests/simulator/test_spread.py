"""The spread of exchange times: a measured table's ``cv``, ``stalls`` and ``stall`` columns make every exchange take
its time times a factor of mean 1 (a lognormal bulk and rare stalls), drawn per exchange from the seed (a round's and an
LSGD exchange's by index, a worker's own exchange by worker and iteration); without them, or at 0, the tables are
exactly those of no spread."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stragglerlab.simulator import algorithms
from stragglerlab.simulator.costs import cost_model
from stragglerlab.simulator.imbalance import ExchangeSpread, Spread, lognormal_factor
from stragglerlab.simulator.plan import plan
from tests.helpers import run_tables, scenario
from tests.simulator.test_fast_engine import assert_same_tables

T, CV = 2e-3, 0.5  # every exchange's measured time, and its cv without stalls
#: with stalls: 10 % of the exchanges take 2 T more than the others, whose mean is 0.8 T
STALLED = Spread(cv=0.3, stalls=0.1, stall=2.0)
GAMMA = 1e-6  # the server's seconds per byte: a push is its service alone (alpha = beta = 0)
NAMES = [r.name for r in algorithms.RECORDS]


def engines(name: str) -> list[str]:
    return ["reference", "fast"] if algorithms.get(name).kernel is not None else ["reference"]


def spread_scenario(tmp_path, name: str, spread: Spread | None = STALLED, **keys):
    """``name`` on a table that prices every kind at T (the server by GAMMA) with ``spread`` (None: no spread
    columns)."""
    P = keys.pop("cluster.workers", 4)
    rows = [(kind, p, size, T, p) for kind in ("allreduce", "gossip", "push") for p in (1, 2, P) for size in (1, 1e9)]
    rows += [("group", 2, size, T, P) for size in (1, 1e9) if P > 2]  # WAGMA's concurrent groups of 2
    table = pd.DataFrame(rows, columns=["kind", "ranks", "bytes", "seconds", "world"])
    if spread is not None:
        table["cv"], table["stalls"], table["stall"] = spread.cv, spread.stalls, spread.stall * T
    path = tmp_path / f"costs-{spread}.csv"
    table.to_csv(path, index=False)
    return scenario(
        **{
            "algorithm.name": name,
            "cluster.workers": P,
            "network.table": str(path),
            "network.alpha": 0.0,
            "network.beta": 0.0,
            "algorithm.server_gamma": GAMMA,
            "algorithm.period": 3,
            "algorithm.global_period": 6,
            "algorithm.group_size": 2,
            "algorithm.sync_period": 4,
            "imbalance.kind": "random-delay",
            "workload.compute": {"dist": "lognormal", "mean": 0.2, "cv": 0.5},
            **keys,
        }
    )


def test_the_factors_have_mean_one_and_the_cv_and_none_is_drawn_at_zero():
    spread = ExchangeSpread(scenario(**{"cluster.workers": 50}))
    lognormal = Spread(CV)
    rounds = spread.rounds([lognormal] * 20_000)
    block = spread.block(lognormal, 0, 400)
    for f in (rounds, block.ravel()):
        assert f.mean() == pytest.approx(1.0, abs=0.02) and f.std() / f.mean() == pytest.approx(CV, rel=0.05)
    assert spread.at(lognormal, 7, 3) == block[7, 3]
    assert np.array_equal(spread.rounds([Spread(), lognormal, Spread()])[[0, 2]], [1.0, 1.0])
    assert np.array_equal(spread.block(Spread(), 0, 3), np.ones((3, 50))) and spread.at(Spread(), 7, 3) == 1.0
    assert lognormal_factor(np.array([-3.0, 0.0, 2.5]), 0.0).tolist() == [1.0, 1.0, 1.0]
    # common random numbers: the same seed gives the same factors, another seed others
    assert np.array_equal(ExchangeSpread(scenario(**{"cluster.workers": 50})).block(lognormal, 0, 400), block)
    assert not np.array_equal(
        ExchangeSpread(scenario(seed=1, **{"cluster.workers": 50})).block(lognormal, 0, 400), block
    )


def test_stalls_are_the_given_fraction_and_keep_the_mean():
    spread = ExchangeSpread(scenario(**{"cluster.workers": 50}))
    for f in (spread.rounds([STALLED] * 20_000), spread.block(STALLED, 0, 400).ravel()):
        stalled = f > STALLED.stall  # a stall adds 2, the others' factor 0.8 x lognormal(0.3) is almost never 2
        assert f.mean() == pytest.approx(1.0, abs=0.02)
        assert stalled.mean() == pytest.approx(STALLED.stalls, abs=0.01)
        others = f[~stalled]
        assert others.mean() == pytest.approx(0.8, rel=0.02) and others.std() / others.mean() == pytest.approx(
            STALLED.cv, rel=0.05
        )
    # the bulk's draws are those of the same cv without stalls, scaled to their mean; a stall adds to them
    extra = spread.block(STALLED, 0, 50) - 0.8 * spread.block(Spread(STALLED.cv), 0, 50)
    added = np.isclose(extra, STALLED.stall, rtol=1e-12)
    assert np.all(added | np.isclose(extra, 0.0, atol=1e-12)) and 0 < added.mean() < 0.5


@pytest.mark.parametrize("name", NAMES)
def test_no_spread_is_exactly_no_spread(tmp_path, name):
    for engine in engines(name):
        bare = run_tables(spread_scenario(tmp_path, name, spread=None), engine)
        zero = run_tables(spread_scenario(tmp_path, name, spread=Spread()), engine)
        for a, b in zip(bare, zero, strict=True):
            pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("name", NAMES)
def test_every_exchange_takes_its_time_times_its_factor(tmp_path, name):
    P = 1 if name in ("async-ps", "easgd") else 4  # one worker: a push never queues behind another
    s = spread_scenario(tmp_path, name, **{"cluster.workers": P})
    spread = ExchangeSpread(s)
    for engine in engines(name):
        it, rounds = run_tables(s, engine)
        m = rounds["round"].to_numpy()
        took = (rounds["t_done"] - rounds["t_trigger"]).to_numpy()
        if name in ("async-ps", "easgd"):  # the service of the push worker 0 made at the carried iteration
            pushes = it[it["fresh"] & (it["t_done"] > it["t_post"])].sort_values("round")
            factor = [spread.at(STALLED, n, 0) for n in pushes["iteration"]]
            expected = GAMMA * 4 * s.workload.params * np.array(factor)
        elif name in ("d-psgd", "sgp", "ad-psgd"):  # each worker's own exchange: its factor of the iteration
            factor = [spread.at(STALLED, n, i) for n, i in zip(m, rounds["initiator"], strict=True)]
            expected = T * np.array(factor)
        elif name == "swarm-sgd":  # an exchange from the latest post it waits for (sources and receivers); a local step
            rules = plan(s).rules
            posts = it.pivot(index="iteration", columns="worker", values="t_post").to_numpy()
            pairs = list(zip(m, rounds["initiator"], strict=True))
            latest = [max(posts[n, j] for j in [i, *rules.waits_on(n, i)]) for n, i in pairs]
            took = rounds["t_done"].to_numpy() - np.array(latest)
            expected = np.array([T * spread.at(STALLED, n, i) if n % 2 == 0 else 0.0 for n, i in pairs])
        elif name == "lsgd":  # exchange m starts at the last join: the latest post among the calls it releases
            joined = it[it["t_done"] > it["t_post"]].groupby("round")["t_post"].max()
            took = (rounds["t_done"] - joined.reindex(m).to_numpy()).to_numpy()
            expected = T * spread.rounds([STALLED] * len(m))
        else:  # a round: its exchange starts at its trigger (no activation token with alpha = 0)
            expected = T * spread.rounds([STALLED] * (m.max() + 1))[m]
        if name == "sgp":  # a worker whose own post came last waits less than the exchange
            assert np.all(took <= expected * (1 + 1e-9)) and np.isclose(took, expected, rtol=1e-9).mean() > 0.3
        else:
            np.testing.assert_allclose(took, expected, rtol=1e-9)
        assert np.std(np.asarray(expected)) > 0.2 * np.mean(expected)  # they do vary


@pytest.mark.parametrize("name", [name for name in NAMES if algorithms.get(name).kernel is not None])
@pytest.mark.parametrize("duration", [0.0, 3.0])
def test_fast_equals_reference_with_a_spread(tmp_path, name, duration):
    s = spread_scenario(
        tmp_path, name, iterations=60, duration=duration, **{"workload.call": {"dist": "constant", "mean": 1e-3}}
    )
    assert_same_tables(s, window=8)


def test_between_sizes_the_share_of_the_mean_in_stalls_is_interpolated_and_stays_below_one(tmp_path):
    # rare long stalls at one size, frequent short ones at the other: interpolating the stall itself would give a
    # share of 0.455 x 45 = 20 times the mean between them, and the others a negative time
    path = tmp_path / "costs.csv"
    path.write_text("kind,ranks,bytes,seconds,cv,stalls,stall\nsync,2,1,1,0.2,0.9,0.01\nsync,2,100,1,0.4,0.01,90\n")
    model = cost_model(scenario(**{"cluster.workers": 2, "network.table": str(path)}))
    middle = model.spread("sync", 10, 2)
    assert middle.cv == pytest.approx(0.3) and middle.stalls == pytest.approx(0.455)
    assert middle.stalls * middle.stall == pytest.approx((0.009 + 0.9) / 2)
    assert model.spread("sync", 1, 2) == Spread(0.2, 0.9, 0.01) and model.spread("sync", 100, 2).stall == 90
    assert model.spread("async", 10, 2).exact  # no rows of its kind (nor allreduce rows): exact
    assert model.spread("sync", 10, 3) == middle  # a rank count without rows: the nearest one's spread
