"""DDP's bucketing as :mod:`stragglerlab.realrun.buckets` states it, checked against DistributedDataParallel itself: the
buckets its communication hook receives from the second iteration on."""

from __future__ import annotations

import pytest

from stragglerlab.realrun.buckets import cap_bytes, ddp_buckets
from stragglerlab.realrun.replica import make_replica
from stragglerlab.simulator.network import BYTES_PER_ELEMENT
from stragglerlab.simulator.scenario import load

torch = pytest.importorskip("torch")


def test_buckets_close_at_the_cap():
    # 40 + 2560 + 256 + 16384 bytes reach a 6.9 kB cap only with the fourth parameter; the last two make the second
    assert ddp_buckets([10, 640, 64, 4096, 64, 2048], 6922 / 2**20) == [4810, 2112]
    assert ddp_buckets([10, 20], 1.0) == [30]  # under the cap: one bucket
    assert ddp_buckets([300_000, 1, 300_000], 1.0) == [300_000, 300_001]  # 1.2 MB: over the cap by itself
    assert cap_bytes(25.0) == 25 * 2**20


def _hooked_buckets(model, cap_mb: float, inputs) -> list[int]:
    """Elements of each bucket DDP all-reduces in its third backward pass."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(model, bucket_cap_mb=cap_mb)
    seen: list[int] = []

    def hook(state, bucket):
        seen.append(bucket.buffer().numel())
        return allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, hook)
    for _ in range(3):
        seen.clear()
        ddp(inputs).sum().backward()
    return seen


def test_the_rule_is_what_distributed_data_parallel_does(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'group'}", rank=0, world_size=1)
    try:
        for model, batch in (("torch:mlp", (4, 32)), ("torch:cnn", (4, 1, 16, 16))):
            replica = make_replica(load(text=f'[workload]\nmodel = "{model}"\n', name="s"), 0, 0)
            ready = replica.gradient_order()
            assert sorted(ready) == sorted(p.numel() for p in replica.model.parameters())
            for buckets in (1, 2, 3, 4, 8):
                cap_mb = replica.dimension * BYTES_PER_ELEMENT / buckets / 2**20
                hooked = _hooked_buckets(replica.model, cap_mb, torch.randn(*batch))
                assert hooked == ddp_buckets(ready, cap_mb), (model, buckets)
    finally:
        dist.destroy_process_group()
