"""Least-squares regression onto a noisy hyperplane, the synthetic workload of the eager-SGD paper.

Samples x ~ N(0, I) in ``workload.dimension`` dimensions, targets y = x·w* + ``noise``·N(0, 1) for a random unit-scale
w*; the model is linear (d = dimension parameters, no bias) with loss ½(x·w − y)², started at zero. A regression has
no accuracy: the ``accuracy`` reported is the coefficient of determination R² = 1 − MSE / Var(y) on the test set.
"""

from __future__ import annotations

import numpy as np

from simulator.scenario import Scenario
from simulator.workloads.base import ArrayWorkload


class Hyperplane(ArrayWorkload):
    def __init__(self, scenario: Scenario):
        w = scenario.workload
        rng = np.random.default_rng([scenario.seed, 0x4B9E])
        self.dimension = w.dimension
        self.w_star = rng.standard_normal(w.dimension) / np.sqrt(w.dimension)
        X = rng.standard_normal((w.samples, w.dimension))
        super().__init__(scenario, X, X @ self.w_star + w.noise * rng.standard_normal(w.samples))

    def initial(self) -> np.ndarray:
        return np.zeros(self.dimension)

    def loss_grad(self, W, X, y):
        r = np.matmul(X, W[:, :, None])[..., 0] - y
        return np.matmul(r[:, None, :], X)[:, 0] / y.shape[1], 0.5 * np.mean(r * r, axis=1)

    def metrics(self, w, X, y):
        mse = float(np.mean((X @ w - y) ** 2))
        return 0.5 * mse, 1.0 - mse / float(np.var(y))
