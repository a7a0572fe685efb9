"""A tiny torch workload for the bridge's tests: a linear classifier on a seeded two-class mixture."""

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
