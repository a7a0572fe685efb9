"""Workloads: gradients against finite differences, the sharding of the train set, evaluations, and the torch
bridge's one-line errors."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from stragglerlab.simulator.scenario import ScenarioError
from stragglerlab.simulator.workloads import load
from stragglerlab.simulator.workloads.sharding import Shards
from tests.helpers import scenario

SMALL = {
    "workload.dimension": 5,
    "workload.samples": 400,
    "workload.batch": 3,
    "workload.classes": 3,
    "workload.hidden": [4, 3],
    "cluster.workers": 4,
}


@pytest.mark.parametrize("model", ["hyperplane", "logistic", "mlp"])
def test_gradient_matches_finite_differences(model):
    wl = load(scenario(**SMALL, **{"workload.model": model}))
    rng = np.random.default_rng(0)
    W = wl.initial() + 0.3 * rng.standard_normal((2, wl.dimension))
    batches = wl.batches(np.array([0, 3]), np.array([0, 7]))
    G, loss = wl.gradient(W, batches)
    assert G.shape == W.shape and loss.shape == (2,)
    eps = 1e-6
    for k in range(2):
        for i in rng.choice(wl.dimension, min(6, wl.dimension), replace=False):
            up, down = W[k : k + 1].copy(), W[k : k + 1].copy()
            up[0, i] += eps
            down[0, i] -= eps
            numeric = (wl.gradient(up, batches[k : k + 1])[1][0] - wl.gradient(down, batches[k : k + 1])[1][0]) / (
                2 * eps
            )
            assert G[k, i] == pytest.approx(numeric, rel=1e-4, abs=1e-7)


@pytest.mark.parametrize("model", ["hyperplane", "logistic", "mlp"])
def test_every_call_of_initial_gives_the_same_parameters(model):
    # a model trained again along another schedule (a predicted time to a target loss) starts where the first did
    wl = load(scenario(**SMALL, **{"workload.model": model}))
    first = wl.initial()
    np.testing.assert_array_equal(wl.initial(), first)


def test_mlp_dimension_and_evaluation():
    wl = load(scenario(**SMALL, **{"workload.model": "mlp"}))
    assert wl.dimension == (5 + 1) * 4 + (4 + 1) * 3 + (3 + 1) * 3
    loss, accuracy = wl.evaluate(wl.initial())
    assert loss > 0 and 0 <= accuracy <= 1


def test_each_epoch_gives_every_worker_disjoint_strided_batches():
    shards = Shards(samples=100, workers=4, batch=5, seed=1)
    assert shards.steps == 5
    for epoch in range(2):
        steps = np.arange(epoch * 5, epoch * 5 + 5)
        idx = np.concatenate([shards.indices(np.full(5, j), steps).ravel() for j in range(4)])
        assert sorted(idx) == list(range(100))
        assert (shards.indices([2], [5 * epoch])[0] == shards.epoch(epoch)[2::4][:5]).all()
    assert not (shards.indices([0], [0]) == shards.indices([0], [5])).all()  # reshuffled each epoch


def test_too_few_samples_is_a_one_line_error():
    with pytest.raises(ScenarioError, match="workload.samples = 100: .*8 workers"):
        scenario(**{"workload.model": "hyperplane", "workload.samples": 100})


def test_torch_workload_errors_are_one_line():
    with pytest.raises(ScenarioError, match='workload.model = "nowhere_module:make"') as err:
        load(scenario(**{"workload.model": "nowhere_module:make"}))
    assert "\n" not in str(err.value)
    with pytest.raises(ScenarioError, match="must be none, hyperplane"):
        scenario(**{"workload.model": "resnet"})


def test_torch_workload_trains_through_the_bridge(tmp_path):
    pytest.importorskip("torch")
    from stragglerlab.analysis.runfolder import load_run
    from stragglerlab.simulator.run import simulate

    s = scenario(
        **{
            "workload.model": "tests.simulator.torch_task:tiny",
            "workload.batch": 8,
            "cluster.workers": 4,
            "iterations": 30,
            "algorithm.name": "eager-solo",
            "algorithm.lr": 0.2,
        }
    )
    run = load_run(simulate(s, tmp_path / "run"))
    assert run.meta["scenario"]["workload"]["params"] == 4 * 2 + 2
    ev = run.evals[run.evals["worker"] == -1]
    assert ev["loss"].iloc[-1] < 0.5 * ev["loss"].iloc[0] and ev["accuracy"].iloc[-1] > 0.9


def test_without_torch_a_torch_workload_is_a_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(ScenarioError, match="needs torch, which is not installed"):
        load(scenario(**{"workload.model": "tests.simulator.torch_task:tiny"}))


def test_each_replica_keeps_its_own_buffers_and_the_averaged_model_takes_their_mean():
    torch = pytest.importorskip("torch")
    wl = load(
        scenario(
            **{"workload.model": "tests.simulator.torch_task:batchnorm", "workload.batch": 8, "cluster.workers": 3}
        )
    )
    w0 = wl.initial()
    start = wl.replica_buffers.copy()
    assert start.shape == (3, 8 + 8 + 1)  # running mean and variance of 8 channels, and the batch count
    wl.gradient(np.stack([w0, w0]), wl.batches(np.array([2, 2]), np.array([0, 1])))  # two of replica 2's batches
    moved = wl.replica_buffers
    np.testing.assert_array_equal(moved[:2], start[:2])  # the others' buffers are where they were
    assert np.abs(moved[2, :16] - start[2, :16]).min() > 0 and moved[2, 16] == 2  # replica 2's moved, 2 batches
    bn = wl.task.model[1]
    wl.evaluate(w0, 2)
    np.testing.assert_allclose(bn.running_mean.numpy(), moved[2, :8], rtol=1e-6)
    wl.evaluate(w0)  # the averaged model: the replicas' mean, the batch count rounded (2/3 -> 1)
    np.testing.assert_allclose(bn.running_var.numpy(), moved[:, 8:16].mean(axis=0), rtol=1e-6)
    assert int(bn.num_batches_tracked) == 1 and bn.num_batches_tracked.dtype == torch.int64
    wl.initial()
    np.testing.assert_array_equal(wl.replica_buffers, start)  # a new replay starts from the model's buffers
