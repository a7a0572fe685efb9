"""Small torch workloads for the tests: ``tiny``, a linear classifier on a seeded two-class mixture, for the bridge's
tests; ``batchnorm``, a small BatchNorm network on ``torch:cnn``'s data, for the buffers' semantics in both planes."""

from __future__ import annotations


def tiny(seed: int):
    import torch
    from torch.utils.data import TensorDataset

    from stragglerlab.simulator.workloads.torch_bridge import TorchTask

    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (600,), generator=g)
    x = torch.randn(600, 4, generator=g) + 2.0 * y[:, None] - 1.0
    torch.manual_seed(seed)
    return TorchTask(torch.nn.Linear(4, 2), TensorDataset(x[:500], y[:500]), TensorDataset(x[500:], y[500:]))


def batchnorm(seed: int):
    """``torch:cnn``'s data (1×16×16 shifted patterns of 4 classes) through a convolution, BatchNorm (running mean,
    variance and batch count: three buffers; momentum 0.5, so that they follow each replica's own recent batches
    closely), ReLU, max-pooling and a linear layer."""
    import torch

    from stragglerlab.simulator.workloads import torch_models
    from stragglerlab.simulator.workloads.torch_bridge import TorchTask

    data = torch_models.cnn(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8, momentum=0.5),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(4),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 4 * 4, 4),
    )
    return TorchTask(model, data.train, data.test)
