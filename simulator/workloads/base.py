"""The workload interface the convergence replay drives, and its base for workloads held in numpy arrays.

A workload owns a model of ``dimension`` parameters (flattened into one vector), its data split into train and test
sets made from the seed, and the sharding of the train set across workers (:mod:`.sharding`). The replay only asks:

- ``initial()``: the starting parameters, (d,), the same for every replica;
- ``batches(workers, iterations)``: what ``gradient`` needs of those worker-iterations: the (k, batch) train indices
  they read (a torch workload also keeps which replicas they are, whose buffers the forward passes move);
- ``gradient(W, batches)``: for k replicas W (k, d) and their batches, the mean minibatch gradients (k, d) and
  training losses (k,), in one vectorised call;
- ``evaluate(w, replica=None)``: (test loss, test accuracy) of one parameter vector, as replica ``replica`` or as the
  averaged model (None); only a workload with buffers tells them apart.
"""

from __future__ import annotations

import numpy as np

from stragglerlab.simulator.scenario import Scenario
from stragglerlab.simulator.workloads.sharding import Shards


def split(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) indices of ``n`` samples: a seeded shuffle, the last ``test_fraction`` of it for testing."""
    perm = np.random.default_rng([seed, 0x7E57]).permutation(n)
    n_test = int(round(n * test_fraction))
    return perm[: n - n_test], perm[n - n_test :]


class ArrayWorkload:
    """A workload on in-memory arrays ``X`` (n, features) and ``y`` (n,); subclasses give the model: ``initial``,
    ``metrics`` and either ``loss_grad`` (on gathered batches) or their own ``gradient``."""

    dimension: int

    def __init__(self, scenario: Scenario, X: np.ndarray, y: np.ndarray):
        w = scenario.workload
        train, test = split(len(X), w.test_fraction, scenario.seed)
        self.X, self.y = X[train], y[train]
        self.X_test, self.y_test = X[test], y[test]
        self.shards = Shards(len(train), scenario.workers, w.batch, scenario.seed)
        self.seed = scenario.seed

    def batches(self, workers: np.ndarray, iterations: np.ndarray) -> np.ndarray:
        return self.shards.indices(workers, iterations)

    def gradient(self, W: np.ndarray, batches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.loss_grad(W, self.X[batches], self.y[batches])

    def evaluate(self, w: np.ndarray, replica: int | None = None) -> tuple[float, float]:
        return self.metrics(w, self.X_test, self.y_test)

    def initial(self) -> np.ndarray:
        raise NotImplementedError

    def loss_grad(self, W: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean loss and its gradient for each replica k on its batch: W (k, d), X (k, b, f), y (k, b)."""
        raise NotImplementedError

    def metrics(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """(mean loss, accuracy) of parameters ``w`` on the samples ``X``, ``y``."""
        raise NotImplementedError
