"""Torch workloads shipped by name (``workload.model = "torch:mlp"`` or ``"torch:cnn"``), for real runs and the
simulator's convergence alike: the same model, initial weights and data from the seed, nothing downloaded.

- ``torch:mlp``: 32 features → 64 → 64 → 10 classes (ReLU), on a Gaussian mixture of 10 classes (4,096 samples).
- ``torch:cnn``: two 3×3 convolutions (8 and 16 channels, ReLU, 2×2 max-pool each) and a linear layer, on 1×16×16
  images of 4 classes: each class a fixed random pattern, each sample its pattern shifted by up to 2 pixels plus
  noise (4,096 samples).

Each function takes the seed and returns a :class:`~.torch_bridge.TorchTask`; torch is imported only when one is
called. The last 20 % of the samples are the test set.
"""

from __future__ import annotations

from stragglerlab.simulator.workloads.torch_bridge import TorchTask

SAMPLES = 4096
TEST = SAMPLES // 5


def _task(x, y, model):
    from torch.utils.data import TensorDataset

    cut = len(x) - TEST
    return TorchTask(model, TensorDataset(x[:cut], y[:cut]), TensorDataset(x[cut:], y[cut:]))


def mlp(seed: int):
    """A two-hidden-layer perceptron on a 10-class Gaussian mixture in 32 features."""
    import torch

    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(10, 32, generator=g) / 32**0.5 * 3.0
    y = torch.randint(0, 10, (SAMPLES,), generator=g)
    x = centres[y] + 0.5 * torch.randn(SAMPLES, 32, generator=g)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
    )
    return _task(x, y, model)


def cnn(seed: int):
    """A small convolutional network on shifted noisy patterns, 1×16×16 images of 4 classes."""
    import torch

    g = torch.Generator().manual_seed(seed)
    patterns = torch.randn(4, 1, 16, 16, generator=g)
    y = torch.randint(0, 4, (SAMPLES,), generator=g)
    shifts = torch.randint(-2, 3, (SAMPLES, 2), generator=g)
    pairs = zip(y.tolist(), shifts.tolist(), strict=True)
    x = torch.stack([torch.roll(patterns[c], (a, b), dims=(1, 2)) for c, (a, b) in pairs])
    x = x + 0.8 * torch.randn(x.shape, generator=g)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 4 * 4, 4),
    )
    return _task(x, y, model)
