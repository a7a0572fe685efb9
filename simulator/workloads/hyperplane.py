"""Least-squares regression onto a noisy hyperplane, the synthetic workload of the eager-SGD paper.

Samples x ~ N(0, I) in ``workload.dimension`` dimensions, targets y = x·w* + ``noise``·N(0, 1) for a random unit-scale
w*; the model is linear (d = dimension parameters, no bias) with loss ½(x·w − y)², started at zero. A regression has
no accuracy: the ``accuracy`` reported is the coefficient of determination R² = 1 − MSE / Var(y) on the test set.

The replay at d = 1,000 is bound by reading the samples, so they are stored in float32 (the data set *is* those
rounded values; all arithmetic is float64) and the gradient is a compiled kernel that reads each sample's row once,
straight from the data, with no gathered copy of the batches.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from stragglerlab.simulator.scenario import Scenario
from stragglerlab.simulator.workloads.base import ArrayWorkload


class Hyperplane(ArrayWorkload):
    def __init__(self, scenario: Scenario):
        w = scenario.workload
        rng = np.random.default_rng([scenario.seed, 0x4B9E])
        self.dimension = w.dimension
        self.w_star = rng.standard_normal(w.dimension) / np.sqrt(w.dimension)
        X = rng.standard_normal((w.samples, w.dimension), dtype=np.float32)
        super().__init__(scenario, X, X @ self.w_star + w.noise * rng.standard_normal(w.samples))
        self.X_test = self.X_test.astype(np.float64)  # evaluated often: converted once

    def initial(self) -> np.ndarray:
        return np.zeros(self.dimension)

    def gradient(self, W, batches):
        return _least_squares(self.X, self.y, np.ascontiguousarray(W), np.ascontiguousarray(batches))

    def metrics(self, w, X, y):
        mse = float(np.mean((X @ w - y) ** 2))
        return 0.5 * mse, 1.0 - mse / float(np.var(y))


@njit(cache=True, fastmath=True)
def _least_squares(X, y, W, batches):
    """Mean gradient and loss of ½(x·w − y)² for each replica k over its batch of sample indices."""
    (k_count, b), d = batches.shape, W.shape[1]
    G = np.zeros(W.shape)
    losses = np.zeros(k_count)
    for k in range(k_count):
        w, g = W[k], G[k]
        for i in batches[k]:
            x = X[i]
            r = -y[i]
            for j in range(d):
                r += x[j] * w[j]
            for j in range(d):
                g[j] += r * x[j]
            losses[k] += 0.5 * r * r
    return G / b, losses / b
