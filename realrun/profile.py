"""Profile a torch workload: what one of its iterations costs, split into forward and backward, and how its gradient
would be bucketed, written as the scenario keys the simulator takes (``workload.compute``, ``workload.backward``,
``workload.buckets``, ``workload.params``).

The model runs on the scenario's device with the scenario's batch, on rank 0's samples; after a warm-up, each of K
iterations is timed as a forward pass (with reading its batch) and a backward pass, each finished on the device
before the clock is read. The compute model is fitted to the K totals as ``stragglerlab calibrate`` fits it; the
backward share is the median backward over the median total. ``buckets`` is the count PyTorch's
DistributedDataParallel makes of this model's parameters under a cap of ``bucket_cap_mb`` MiB (DDP's default is 25;
:mod:`.buckets`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from stragglerlab.analysis.errors import UserError
from stragglerlab.realrun.buckets import ddp_buckets, describe
from stragglerlab.realrun.calibration import compute_model
from stragglerlab.realrun.replica import TorchReplica, make_replica
from stragglerlab.simulator.network import BYTES_PER_ELEMENT
from stragglerlab.simulator.scenario import Scenario

DDP_BUCKET_MB = 25.0


@dataclass
class Profile:
    """Seconds of the timed forward and backward passes, and the elements of each parameter in the order backward
    produces their gradients."""

    forward: np.ndarray
    backward: np.ndarray
    sizes: list[int]

    @property
    def total(self) -> np.ndarray:
        return self.forward + self.backward

    @property
    def parameters(self) -> int:
        return sum(self.sizes)

    def buckets(self, cap_mb: float) -> list[int]:
        """Elements of each of DDP's buckets."""
        return ddp_buckets(self.sizes, cap_mb)

    def keys(self, cap_mb: float) -> dict[str, Any]:
        """The ``[workload]`` keys of this profile."""
        share = float(np.median(self.backward) / np.median(self.total))
        return {
            "params": self.parameters,
            "compute": compute_model(self.total),
            "backward": round(share, 4),
            "buckets": len(self.buckets(cap_mb)),
        }


def profile(scenario: Scenario, iterations: int, warmup: int = 3) -> Profile:
    """Time ``iterations`` forward and backward passes of the scenario's torch workload (after ``warmup``)."""
    replica = make_replica(scenario, 0, 0)
    if not isinstance(replica, TorchReplica):
        raise UserError(
            f'workload.model = "{scenario.workload.model}": profile times torch workloads (module:function, '
            "torch:mlp, torch:cnn); set workload.compute for the others"
        )
    for n in range(warmup):
        replica.pass_times(n)
    times = np.array([replica.pass_times(n) for n in range(warmup, warmup + iterations)])
    return Profile(times[:, 0], times[:, 1], replica.gradient_order())


def fragment(scenario: Scenario, measured: Profile, cap_mb: float) -> str:
    """The scenario fragment: comments with what was measured, then ``[workload]``."""
    keys = measured.keys(cap_mb)
    w = scenario.workload
    forward, backward = np.median(measured.forward), np.median(measured.backward)
    spread = np.percentile(measured.total, [10, 90])
    compute = ", ".join(f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v:.6g}" for k, v in keys["compute"].items())
    lines = [
        f"# stragglerlab profile: {w.model}, batch {w.batch}, device {w.device} "
        f"({datetime.now(UTC).isoformat(timespec='seconds')})",
        f"# {len(measured.total)} iterations: forward {forward * 1e3:.3g} ms, backward {backward * 1e3:.3g} ms "
        f"(medians); an iteration {np.median(measured.total) * 1e3:.3g} ms, 10-90 % {spread[0] * 1e3:.3g} to "
        f"{spread[1] * 1e3:.3g} ms",
        f"# gradient: {keys['params']:,} parameters, {keys['params'] * BYTES_PER_ELEMENT / 2**20:.3g} MiB, "
        f"DDP's {keys['buckets']} bucket(s) at a cap of {cap_mb:g} MiB: {describe(measured.buckets(cap_mb))}",
        "",
        "[workload]",
        f"params = {keys['params']}",
        f"compute = {{ {compute} }}",
        f"backward = {keys['backward']}",
        f"buckets = {keys['buckets']}",
        "",
    ]
    return "\n".join(lines)
