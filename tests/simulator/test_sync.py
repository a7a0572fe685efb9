"""Synchronous SGD against its closed form t_{n+1} = t_n + max_i c_{n,i} + T_ar."""

import numpy as np
import pytest

from stragglerlab.simulator.network import NetworkModel, message_bytes
from tests.helpers import run_tables, scenario


@pytest.mark.parametrize(
    "workers,wpn,algo",
    [(1, 1, "ring"), (5, 1, "ring"), (8, 2, "tree"), (13, 4, "rabenseifner"), (32, 1, "recursive-doubling")],
)
def test_sync_equals_closed_form_on_trace(tmp_path, workers, wpn, algo):
    rng = np.random.default_rng(workers)
    trace = rng.gamma(2.0, 0.05, size=(17, workers))
    trace[3, 0] = 0.0  # a zero compute time is allowed
    np.save(tmp_path / "c.npy", trace)
    s = scenario(
        iterations=30,
        **{
            "cluster.workers": workers,
            "cluster.workers_per_node": wpn,
            "network.allreduce": algo,
            "network.intra_alpha": 1e-7,
            "imbalance.kind": "trace",
            "imbalance.file": str(tmp_path / "c.npy"),
            "workload.params": 123_456,
        },
    )
    it, rounds = run_tables(s)
    t_ar = NetworkModel.of(s).allreduce(workers, message_bytes(s))
    t = np.zeros(31)
    for n in range(30):
        t[n + 1] = t[n] + trace[n % 17].max() + t_ar
    for n in range(30):
        rows = it[it.iteration == n]
        assert np.allclose(rows.t_start, t[n], rtol=0, atol=1e-9)
        assert np.allclose(rows.t_done, t[n + 1], rtol=0, atol=1e-9)
        assert np.allclose(rows.compute, trace[n % 17], rtol=0, atol=1e-9)
    assert np.allclose(rounds.t_done, t[1:], atol=1e-9)
    assert (rounds.kind == "sync").all() and (rounds.contributors == workers).all()
    assert (rounds.fresh == workers).all() and (it.staleness == 0).all() and it.fresh.all()
    assert list(it["round"]) == list(it.iteration) and list(it.model_version) == list(it.iteration)
    # the initiator is the last to post (the highest-ranked among simultaneous ones)
    last = it.loc[it.groupby("iteration").t_post.transform("max") == it.t_post].groupby("iteration").worker.max()
    assert list(rounds.initiator) == list(last)
