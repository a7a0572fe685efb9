"""Multi-class classification of a synthetic Gaussian mixture: ``logistic`` (no hidden layer) and ``mlp``.

Data: ``workload.classes`` centres drawn from N(0, I/f) in f = ``workload.dimension`` features, each sample a
uniformly chosen class's centre plus ``noise``·N(0, I), so classes overlap and accuracy stays below 1. The model is a
dense network, features → hidden layers (ReLU) → class logits, with softmax cross-entropy loss. Parameters are
flattened layer by layer, each layer its weight matrix (inputs × outputs, row-major) then its bias. Logistic
regression starts at zero; hidden layers start from He-normal weights drawn from the seed, biases zero.
"""

from __future__ import annotations

import numpy as np

from stragglerlab.simulator.modelsize import layer_sizes, parameters
from stragglerlab.simulator.scenario import Scenario
from stragglerlab.simulator.workloads.base import ArrayWorkload


def gaussian_mixture(seed: int, samples: int, features: int, classes: int, noise: float):
    """(X, y): ``samples`` points of a ``classes``-component Gaussian mixture."""
    rng = np.random.default_rng([seed, 0x6A55])
    centres = rng.standard_normal((classes, features)) / np.sqrt(features)
    y = rng.integers(0, classes, samples)
    return centres[y] + noise * rng.standard_normal((samples, features)), y


class Classifier(ArrayWorkload):
    def __init__(self, scenario: Scenario, hidden: tuple[int, ...]):
        w = scenario.workload
        super().__init__(scenario, *gaussian_mixture(scenario.seed, w.samples, w.dimension, w.classes, w.noise))
        self.sizes = layer_sizes(scenario, hidden)
        self.classes = w.classes
        self.dimension = parameters(self.sizes)

    def initial(self) -> np.ndarray:
        """He-initialised weights (zero for a linear model) and zero biases, drawn under the scenario's seed: the
        same parameters at every call, as a model trained again along another schedule must start from."""
        rng = np.random.default_rng([self.seed, 0x1417])
        parts = []
        for a, b in zip(self.sizes, self.sizes[1:], strict=False):
            scale = np.sqrt(2.0 / a) if len(self.sizes) > 2 else 0.0
            parts += [(scale * rng.standard_normal((a, b))).ravel(), np.zeros(b)]
        return np.concatenate(parts)

    def layers(self, W: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Views (weights (k, a, b), biases (k, 1, b)) of each layer of the flat parameters W (k, d)."""
        out, at = [], 0
        for a, b in zip(self.sizes, self.sizes[1:], strict=False):
            out.append((W[:, at : at + a * b].reshape(-1, a, b), W[:, at + a * b : at + (a + 1) * b][:, None, :]))
            at += (a + 1) * b
        return out

    def forward(self, W: np.ndarray, X: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """Inputs of every layer and the log-probabilities, for replicas W (k, d) on X (k, b, f)."""
        inputs, h = [], X
        layers = self.layers(W)
        for j, (A, c) in enumerate(layers):
            inputs.append(h)
            h = np.matmul(h, A) + c
            if j < len(layers) - 1:
                h = np.maximum(h, 0.0)
        h = h - h.max(axis=-1, keepdims=True)
        return inputs, h - np.log(np.exp(h).sum(axis=-1, keepdims=True))

    def loss_grad(self, W, X, y):
        inputs, logp = self.forward(W, X)
        k, b = y.shape
        rows, cols = np.arange(k)[:, None], np.arange(b)[None, :]
        loss = -logp[rows, cols, y].mean(axis=1)
        delta = np.exp(logp)
        delta[rows, cols, y] -= 1.0
        delta /= b
        grads = []
        for j in range(len(inputs) - 1, -1, -1):
            A, _ = self.layers(W)[j]
            grads = [np.matmul(inputs[j].transpose(0, 2, 1), delta).reshape(k, -1), delta.sum(axis=1)] + grads
            if j:
                delta = np.matmul(delta, A.transpose(0, 2, 1)) * (inputs[j] > 0)
        return np.concatenate(grads, axis=1), loss

    def metrics(self, w, X, y):
        _, logp = self.forward(w[None], X[None])
        logp = logp[0]
        return float(-logp[np.arange(len(y)), y].mean()), float(np.mean(logp.argmax(axis=1) == y))
