"""How PyTorch's DistributedDataParallel splits a gradient into buckets, so that a profile and a real run state the
bucket count DDP really uses, not the count the cap alone suggests.

DDP fills buckets with whole parameters, in the order the first backward pass produced their gradients (about the
reverse of their registration), and closes a bucket as soon as its bytes reach the cap (``bucket_cap_mb``). A bucket
can therefore be larger than the cap, and the count is often below ⌈gradient / cap⌉: a 27.7 kB perceptron capped at
6.9 kB all-reduces two buckets, of 19.2 and 8.4 kB, not four. This is the assignment DDP builds again after its first
iteration, which all-reduces the whole gradient as one bucket. The simulator's buckets are equal, of gradient / count
bytes: the count is what the overlap depends on most.
"""

from __future__ import annotations

from collections.abc import Sequence

from stragglerlab.simulator.network import BYTES_PER_ELEMENT


def cap_bytes(cap_mb: float) -> int:
    """DDP's cap in bytes for ``bucket_cap_mb``, as DDP rounds it."""
    return int(cap_mb * 2**20)


def ddp_buckets(ready: Sequence[int], cap_mb: float) -> list[int]:
    """Elements of each bucket, in the order DDP all-reduces them, for float32 parameters of ``ready`` elements (in
    the order backward produces their gradients) under a cap of ``cap_mb`` MiB."""
    cap, buckets, filled = cap_bytes(cap_mb), [], 0
    for n in ready:
        filled += n
        if filled * BYTES_PER_ELEMENT >= cap:
            buckets.append(filled)
            filled = 0
    if filled:
        buckets.append(filled)
    return buckets


def describe(buckets: Sequence[int]) -> str:
    """The buckets' sizes for a message: "18.8, 8.25 KiB"."""
    unit, scale = ("MiB", 2**20) if max(buckets) * BYTES_PER_ELEMENT >= 2**20 else ("KiB", 2**10)
    return f"{', '.join(f'{n * BYTES_PER_ELEMENT / scale:.3g}' for n in buckets)} {unit}"
