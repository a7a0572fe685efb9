"""Torch workloads by name: ``workload.model = "module:function"``, shared by the simulator and real runs.

``function(seed)`` is the user's; it returns a :class:`TorchTask` (or any object with the same attributes): the
``model`` (a ``torch.nn.Module``), the ``train`` and ``test`` datasets (indexable, each item ``(input, target)``)
and optionally ``loss`` (default cross-entropy). Real runs train that model on that data; the simulator wraps it in
:class:`TorchWorkload`, which has the interface of :mod:`.base`: parameters are flattened with
``parameters_to_vector`` (float64 in the replay), the train set is sharded by :class:`~.sharding.Shards`, and
gradients are computed one replica at a time (torch is not vectorised over replicas here). Torch is imported only
when such a workload is loaded; without it, loading is a one-line error.

A model's buffers (BatchNorm's running statistics and batch count) are no parameters: no exchange sends them, as in
the released codes of eager-SGD, WAGMA-SGD and LSGD. Each replica keeps its own, which only its own training forward
passes change, so :meth:`TorchWorkload.batches` says which replicas the batches are for. The averaged model (and a
parameter server's, which runs no forward pass) is evaluated with the mean of the replicas' buffers, integer ones
rounded to the nearest (:func:`load_buffers`), as real runs evaluate it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

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


class ReplicaBatches(NamedTuple):
    """The batches of k worker-iterations: their train sample indices (k, batch) and the replica of each (k,)."""

    indices: np.ndarray
    workers: np.ndarray

    def __getitem__(self, key):
        """``batches[rows, samples]``: those rows' batches cut to those samples (as an index array's), so a replay
        takes the first k samples of some worker-iterations alike from either workload."""
        rows, samples = key
        return ReplicaBatches(self.indices[rows, samples], self.workers[rows])


class TorchWorkload:
    """A torch model and datasets behind the replay's workload interface, with each replica's buffers."""

    def __init__(self, scenario: Scenario, task: TorchTask):
        import torch
        from torch.nn.utils import parameters_to_vector

        self.torch, self.task = torch, task
        self.loss = task.loss or torch.nn.functional.cross_entropy
        self.params = [p for p in task.model.parameters() if p.requires_grad]
        self.dimension = sum(p.numel() for p in self.params)
        self.w0 = parameters_to_vector(self.params).detach().double().numpy()
        self.buffers = list(task.model.buffers())
        self.b0 = buffer_vector(self.buffers)
        self.replica_buffers = np.tile(self.b0, (scenario.workers, 1))  # one float64 row each: exact for float32
        try:
            self.shards = Shards(len(task.train), scenario.workers, scenario.workload.batch, scenario.seed)
        except ValueError as err:
            raise ScenarioError(f'workload.model = "{scenario.workload.model}": {err}') from None

    def initial(self) -> np.ndarray:
        """The starting parameters; every replica's buffers start again from the model's own."""
        self.replica_buffers[:] = self.b0
        return self.w0.copy()

    def batches(self, workers: np.ndarray, iterations: np.ndarray) -> ReplicaBatches:
        return ReplicaBatches(self.shards.indices(workers, iterations), np.asarray(workers))

    def _load(self, w: np.ndarray, buffers: np.ndarray | None) -> None:
        from torch.nn.utils import vector_to_parameters

        vector_to_parameters(self.torch.from_numpy(w).to(self.params[0].dtype), self.params)
        if buffers is not None:
            load_buffers(self.buffers, buffers)

    def gradient(self, W: np.ndarray, batches: ReplicaBatches) -> tuple[np.ndarray, np.ndarray]:
        grads, losses = np.empty_like(W), np.empty(len(W))
        model = self.task.model
        model.train()
        for k, worker in enumerate(batches.workers):
            self._load(W[k], self.replica_buffers[worker] if self.buffers else None)
            model.zero_grad()
            x, t = batch_of(self.task.train, batches.indices[k])
            loss = self.loss(model(x), t)
            loss.backward()
            if self.buffers:  # the forward pass has moved this replica's running statistics
                self.replica_buffers[worker] = buffer_vector(self.buffers)
            grads[k] = np.concatenate([p.grad.detach().double().numpy().ravel() for p in self.params])
            losses[k] = loss.item()
        return grads, losses

    def evaluate(self, w: np.ndarray, replica: int | None = None) -> tuple[float, float]:
        """(test loss, accuracy) of ``w`` with the buffers of ``replica``, or of the averaged model (None)."""
        if not self.buffers:
            buffers = None
        elif replica is None:
            buffers = self.replica_buffers.mean(axis=0)
        else:
            buffers = self.replica_buffers[replica]
        self._load(w, buffers)
        return evaluate(self.task.model, self.task.test, self.loss)


def buffer_vector(buffers: list[Any]) -> np.ndarray:
    """A module's buffers as one float64 vector."""
    if not buffers:
        return np.zeros(0)
    return np.concatenate([b.detach().cpu().double().numpy().ravel() for b in buffers])


def load_buffers(buffers: list[Any], values: np.ndarray) -> None:
    """Set a module's buffers from a vector laid out as :func:`buffer_vector`'s, cast to each buffer's type and device:
    an integer buffer (BatchNorm's batch count) takes the nearest integer, so a mean of counts loads as a count."""
    import torch

    at = 0
    with torch.no_grad():
        for b in buffers:
            part = values[at : at + b.numel()]
            b.copy_(torch.from_numpy(part if b.is_floating_point() else np.rint(part)).view_as(b))
            at += b.numel()


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
