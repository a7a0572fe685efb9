"""Torch workloads by name: ``workload.model = "module:function"``, shared by the simulator and real runs.

``function(seed)`` is the user's; it returns a :class:`TorchTask` (or any object with the same attributes): the
``model`` (a ``torch.nn.Module``), the ``train`` and ``test`` datasets (indexable, each item ``(input, target)``)
and optionally ``loss`` (default cross-entropy). Real runs train that model on that data; the simulator wraps it in
:class:`TorchWorkload`, which has the interface of :mod:`.base`: parameters are flattened with
``parameters_to_vector`` (float64 in the replay), the train set is sharded by :class:`~.sharding.Shards`, and
gradients are computed one replica at a time (torch is not vectorised over replicas here). Torch is imported only
when such a workload is loaded; without it, loading is a one-line error.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from stragglerlab.simulator.keys import ScenarioError
from stragglerlab.simulator.scenario import Scenario
from stragglerlab.simulator.workloads.sharding import Shards

EVAL_BATCH = 1024
#: workloads shipped by name (``workload.model = "torch:cnn"``), see :mod:`.torch_models`
REGISTERED = {
    "torch:mlp": "stragglerlab.simulator.workloads.torch_models:mlp",
    "torch:cnn": "stragglerlab.simulator.workloads.torch_models:cnn",
}


@dataclass
class TorchTask:
    """What a user's ``module:function`` returns."""

    model: Any  # torch.nn.Module
    train: Any  # dataset of (input, target)
    test: Any
    loss: Callable | None = None  # (outputs, targets) -> mean loss; None: cross-entropy


def load_task(name: str, seed: int) -> TorchTask:
    """Import ``module:function`` (or a :data:`REGISTERED` name) and call it with the seed; every failure is a
    one-line :class:`ScenarioError`."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ScenarioError(
            f'workload.model = "{name}": a torch workload needs torch, which is not installed'
        ) from None
    module_name, _, function = REGISTERED.get(name, name).partition(":")
    try:
        make = getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError, ValueError) as err:
        raise ScenarioError(f'workload.model = "{name}": cannot import it ({err})') from None
    if not callable(make):
        raise ScenarioError(f'workload.model = "{name}": {function} is a {type(make).__name__}, not a function')
    try:
        task = make(seed)
    except Exception as err:  # the user's code: one line, as every scenario error
        raise ScenarioError(
            f'workload.model = "{name}": {function}(seed) failed ({type(err).__name__}: {err})'
        ) from None
    if not all(hasattr(task, part) for part in ("model", "train", "test")):
        raise ScenarioError(
            f'workload.model = "{name}": {function}(seed) returned a {type(task).__name__}, not a task with a model, '
            "a train and a test set"
        )
    return task


class TorchWorkload:
    """A torch model and datasets behind the replay's workload interface."""

    def __init__(self, scenario: Scenario, task: TorchTask):
        import torch
        from torch.nn.utils import parameters_to_vector

        self.torch, self.task = torch, task
        self.loss = task.loss or torch.nn.functional.cross_entropy
        self.params = [p for p in task.model.parameters() if p.requires_grad]
        self.dimension = sum(p.numel() for p in self.params)
        self.w0 = parameters_to_vector(self.params).detach().double().numpy()
        try:
            self.shards = Shards(len(task.train), scenario.workers, scenario.workload.batch, scenario.seed)
        except ValueError as err:
            raise ScenarioError(f'workload.model = "{scenario.workload.model}": {err}') from None

    def initial(self) -> np.ndarray:
        return self.w0.copy()

    def batches(self, workers: np.ndarray, iterations: np.ndarray) -> np.ndarray:
        return self.shards.indices(workers, iterations)

    def _load(self, w: np.ndarray) -> None:
        from torch.nn.utils import vector_to_parameters

        vector_to_parameters(self.torch.from_numpy(w).to(self.params[0].dtype), self.params)

    def gradient(self, W: np.ndarray, batches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        grads, losses = np.empty_like(W), np.empty(len(W))
        model = self.task.model
        model.train()
        for k in range(len(W)):
            self._load(W[k])
            model.zero_grad()
            x, t = batch_of(self.task.train, batches[k])
            loss = self.loss(model(x), t)
            loss.backward()
            grads[k] = np.concatenate([p.grad.detach().double().numpy().ravel() for p in self.params])
            losses[k] = loss.item()
        return grads, losses

    def evaluate(self, w: np.ndarray) -> tuple[float, float]:
        self._load(w)
        return evaluate(self.task.model, self.task.test, self.loss)


def batch_of(dataset: Any, indices, device: Any = None) -> tuple[Any, Any]:
    """(inputs, targets) of the samples ``indices`` of a dataset of ``(input, target)`` items, on ``device``."""
    import torch

    items = [dataset[int(i)] for i in indices]
    x = torch.stack([torch.as_tensor(x) for x, _ in items])
    t = torch.as_tensor(np.array([t for _, t in items]))
    return (x, t) if device is None else (x.to(device, non_blocking=True), t.to(device, non_blocking=True))


def evaluate(model: Any, test: Any, loss: Callable, device: Any = None) -> tuple[float, float]:
    """(mean test loss, accuracy) of ``model`` on ``test``; accuracy is NaN when the outputs are not class scores."""
    import torch

    model.eval()
    total, correct, classified, n = 0.0, 0, True, len(test)
    with torch.no_grad():
        for start in range(0, n, EVAL_BATCH):
            x, t = batch_of(test, range(start, min(start + EVAL_BATCH, n)), device)
            out = model(x)
            total += float(loss(out, t)) * len(t)
            classified = classified and out.ndim == 2 and out.shape[1] > 1
            if classified:
                correct += int((out.argmax(dim=1) == t).sum())
    return total / n, correct / n if classified else float("nan")
