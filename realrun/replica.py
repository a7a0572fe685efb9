"""One rank's model replica in a real run: its parameters as one flat vector, its gradient on its own shard, the
optimizer step, and evaluation, for every kind of ``workload.model``.

- torch workloads (``torch:mlp``, ``torch:cnn``, ``module:function``): the user's ``torch.nn.Module`` on the
  scenario's device (``cpu``, ``cuda``, ``cuda:N``; ``cuda`` means ``cuda:<local rank>``). Gradients and models
  leave the device through one pinned host buffer (the native core and mpi4py take host memory), so the GPU path is
  the CPU path plus two copies.
- the simulator's numpy workloads (``hyperplane``, ``logistic``, ``mlp``): their own gradient, one replica at a time.
- ``none`` (timing only): a zero vector of ``workload.params`` elements, never updated.

A torch model's buffers (BatchNorm's running statistics and batch count) stay this rank's own: its training forward
passes move them and no exchange sends them (:mod:`~stragglerlab.simulator.workloads.torch_bridge`); evaluations of
the averaged model take every rank's (:mod:`.evaluation`).

Every replica reads the samples the simulator's sharding gives (worker, iteration)
(:class:`~stragglerlab.simulator.workloads.sharding.Shards`, torch's ``DistributedSampler`` order) and steps as the
simulator's optimizer does (SGD with momentum and weight decay, as ``torch.optim.SGD`` with dampening 0), so a real run
trains what its simulation trains.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from stragglerlab.simulator.replicas import sgd
from stragglerlab.simulator.scenario import Scenario, ScenarioError
from stragglerlab.simulator.workloads import BUILTIN_MODELS, load
from stragglerlab.simulator.workloads.sharding import Shards
from stragglerlab.simulator.workloads.torch_bridge import batch_of, buffer_vector, evaluate, load_buffers, load_task


class Replica:
    """Flat parameters and the operations a training loop needs; subclasses hold them on their own device."""

    dimension: int

    def __init__(self, scenario: Scenario):
        a = scenario.algorithm
        self.lr, self.momentum, self.weight_decay = a.lr, a.momentum, a.weight_decay
        self._buf = None

    def gradient(self, n: int, part: slice = slice(None)) -> tuple[Any, float]:
        """Gradient (on the replica's device) and training loss of this rank's batch of iteration ``n``, or of the
        samples ``part`` of it (a micro-batch), as means over those samples."""
        raise NotImplementedError

    def host(self, x: Any) -> np.ndarray:
        """A vector of this replica (gradient or model) as host float32, ready for MPI."""
        return np.asarray(x, dtype=np.float32)

    def step(self, g: Any) -> None:
        """One optimizer step with the gradient ``g`` (host numpy, or a tensor on the replica's device)."""
        raise NotImplementedError

    def params(self) -> Any:
        """The model as a vector on the replica's device (copy it with :meth:`host` before changing the model)."""
        raise NotImplementedError

    def load(self, w: np.ndarray) -> None:
        """Replace the model by the host vector ``w``."""
        raise NotImplementedError

    def buffers(self) -> np.ndarray:
        """The model's buffers as a host float64 vector (empty: the model has none)."""
        return np.zeros(0)

    def load_buffers(self, values: np.ndarray) -> None:
        """Replace the model's buffers by ``values`` (laid out as :meth:`buffers`)."""

    def evaluate(self) -> tuple[float, float]:
        """(test loss, test accuracy) of the current model."""
        raise NotImplementedError


class TimingReplica(Replica):
    """``model = "none"``: a message of ``workload.params`` zeros, nothing to learn."""

    def __init__(self, scenario: Scenario):
        super().__init__(scenario)
        self.dimension = scenario.workload.params
        self._zeros = np.zeros(self.dimension, dtype=np.float32)

    def gradient(self, n, part=slice(None)):
        return self._zeros, 0.0

    def step(self, g):
        pass

    def params(self):
        return self._zeros

    def load(self, w):
        pass

    def evaluate(self):
        return float("nan"), float("nan")


class ArrayReplica(Replica):
    """The simulator's numpy workloads, in float64 as the simulator computes them."""

    def __init__(self, scenario: Scenario, workload: Any, rank: int):
        super().__init__(scenario)
        self.workload, self.rank = workload, np.array([rank])
        self.w = workload.initial().astype(np.float64)
        self.dimension = len(self.w)

    def gradient(self, n, part=slice(None)):
        G, loss = self.workload.gradient(self.w[None], self.workload.batches(self.rank, np.array([n]))[:, part])
        return G[0], float(loss[0])

    def step(self, g):
        self._buf = sgd(self.w, np.asarray(g, dtype=np.float64), self._buf, self.lr, self.momentum, self.weight_decay)

    def params(self):
        return self.w

    def load(self, w):
        self.w[:] = w

    def evaluate(self):
        return self.workload.evaluate(self.w)


class TorchReplica(Replica):
    """A torch task's model on ``device``; the flat vector ``self.w`` lives there, the parameters are views of it."""

    def __init__(self, scenario: Scenario, task: Any, rank: int, device: str, ranks_here: int = 1):
        import os

        import torch
        from torch.nn.utils import parameters_to_vector

        super().__init__(scenario)
        self.torch, self.task, self.rank = torch, task, rank
        self.device = torch.device(device)
        if self.device.type == "cpu":  # share this host's cores among its ranks instead of oversubscribing them
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks_here))
        self.model = task.model.to(self.device)
        self.loss_fn = task.loss or torch.nn.functional.cross_entropy
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.w = parameters_to_vector(params).detach().clone()
        self.dimension = self.w.numel()
        at = 0
        for p in params:  # every parameter becomes a view of the flat vector: one copy per exchange, not per layer
            p.data = self.w[at : at + p.numel()].view_as(p)
            at += p.numel()
        self.params_list = params
        self.buffer_list = list(self.model.buffers())
        self._pinned = torch.empty(self.dimension, dtype=torch.float32, pin_memory=self.device.type == "cuda")
        try:
            self.shards = Shards(len(task.train), scenario.workers, scenario.workload.batch, scenario.seed)
        except ValueError as err:
            raise ScenarioError(f'workload.model = "{scenario.workload.model}": {err}') from None

    def host(self, x: Any) -> np.ndarray:
        if isinstance(x, np.ndarray):
            return x
        self._pinned.copy_(x)
        return self._pinned.numpy()

    def gradient(self, n, part=slice(None)):
        loss = self._forward(n, part)
        loss.backward()
        return self.torch.cat([p.grad.reshape(-1) for p in self.params_list]), float(loss.detach())

    def _forward(self, n: int, part: slice = slice(None)) -> Any:
        """The training loss of this rank's batch of iteration ``n`` (its samples ``part``), its gradients cleared
        for a backward pass."""
        self.model.train()
        for p in self.params_list:
            p.grad = None
        x, t = batch_of(
            self.task.train, self.shards.indices(np.array([self.rank]), np.array([n]))[0][part], self.device
        )
        return self.loss_fn(self.model(x), t)

    def gradient_order(self) -> list[int]:
        """Elements of each trained parameter, in the order a backward pass produces their gradients (the order
        DistributedDataParallel fills its buckets in): one pass of a copy of the model on batch 0, the random state
        kept as it was."""
        import copy

        model, ready = copy.deepcopy(self.model), []
        params = [p for p in model.parameters() if p.requires_grad]
        for p in params:
            p.register_post_accumulate_grad_hook(lambda p: ready.append(p.numel()))
        x, t = batch_of(self.task.train, self.shards.indices(np.array([self.rank]), np.array([0]))[0], self.device)
        with self.torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            self.loss_fn(model.train()(x), t).backward()
        return ready

    def pass_times(self, n: int) -> tuple[float, float]:
        """Seconds of the forward pass (with reading the batch) and of the backward pass of iteration ``n``, each
        finished on the device before the clock is read."""
        started = time.perf_counter()
        loss = self._forward(n)
        self._synchronize()
        middle = time.perf_counter()
        loss.backward()
        self._synchronize()
        return middle - started, time.perf_counter() - middle

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def step(self, g):
        grad = g if isinstance(g, self.torch.Tensor) else self.torch.from_numpy(g).to(self.device, non_blocking=True)
        with self.torch.no_grad():
            self._buf = sgd(self.w, grad, self._buf, self.lr, self.momentum, self.weight_decay)

    def params(self):
        return self.w

    def load(self, w):
        with self.torch.no_grad():
            self.w.copy_(self.torch.from_numpy(w).to(self.device))

    def buffers(self):
        return buffer_vector(self.buffer_list)

    def load_buffers(self, values):
        load_buffers(self.buffer_list, values)

    def evaluate(self):
        return evaluate(self.model, self.task.test, self.loss_fn, self.device)


def device_of(scenario: Scenario, local_rank: int) -> str:
    """The torch device of this rank: ``cuda`` means one GPU per rank, by local rank."""
    device = scenario.workload.device
    return f"cuda:{local_rank}" if device == "cuda" else device


def is_torch(model: str) -> bool:
    """Whether ``workload.model`` names a torch workload (``torch:mlp``, ``module:function``)."""
    return model != "none" and model not in BUILTIN_MODELS


def make_replica(scenario: Scenario, rank: int, local_rank: int, ranks_here: int = 1) -> Replica:
    """The replica of ``workload.model`` for rank ``rank`` (data and initial model from the seed), one of
    ``ranks_here`` ranks on its host."""
    name = scenario.workload.model
    if name == "none":
        return TimingReplica(scenario)
    if not is_torch(name):
        return ArrayReplica(scenario, load(scenario), rank)
    return TorchReplica(scenario, load_task(name, scenario.seed), rank, device_of(scenario, local_rank), ranks_here)
