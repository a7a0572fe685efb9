"""Every exchange as the messages it sends: a schedule is a sequence of steps, each a set of messages sent at once
(sender, receiver, bytes, and whether the receiver adds what it received into its own vector), repeated some number
of times. The ranks of a step wait for all its messages before the next step: the schedules below are those of the
native core and of MPICH, which proceed so.

- **ring**: m − 1 reduce-scatter steps, then m − 1 allgather steps, each rank sending n/m bytes to the next;
- **recursive doubling**: log2 m' steps of the whole vector with partners differing in one bit (m' = 2^⌊log2 m⌋);
  when m is not a power of two, the first 2(m − m') members fold in pairs first (the even one hands its vector to
  the odd one, which takes part for both) and get the result back at the end (MPICH's way, and the native core's);
- **Rabenseifner**: recursive halving (a reduce-scatter, n/2, n/4, … bytes) then recursive doubling of the halves
  back (an allgather) among m', with the same fold around them;
- **tree**: a binomial reduce to the first member, then a binomial broadcast from it: ⌈log2 m⌉ levels each;
- **native**: what the native core does: under 128 KiB recursive doubling of the whole vector and its metadata
  (4 floats per rank of the world), else recursive doubling of the metadata and then a ring over the vector;
- **two levels** (ranks sharing nodes, as NCCL and MPICH reduce): a ring reduce-scatter inside each node, the chosen
  algorithm across the nodes on n/k bytes per rank (the k ranks of a node each in one such exchange, all at once), a
  ring allgather inside each node;
- **activation**: the token's binomial-tree broadcast: ⌈log2 m⌉ steps of an empty message.

Schedules are built for a member list (ranks of the cluster) and depend on nothing else, so they are cached; the
time of a step is the cost model's business (:mod:`.links`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

#: the native core's switch from recursive doubling to the ring (bytes of the contribution)
NATIVE_RING_MIN = 128 * 1024
#: bytes of the native core's metadata per rank of the world (4 floats)
NATIVE_META = 16
ALLREDUCES = ("ring", "recursive-doubling", "rabenseifner", "tree", "native")


@dataclass(frozen=True)
class Step:
    """Messages sent at once: ``src[i]`` sends ``nbytes[i]`` to ``dst[i]``, who adds them into its vector when
    ``reduce[i]``, for the exchange ``owner[i]`` (of several merged into one schedule); done ``repeat`` times in a
    row."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    reduce: np.ndarray
    owner: np.ndarray
    repeat: int = 1


Schedule = tuple[Step, ...]
FIELDS = ("src", "dst", "nbytes", "reduce")  # what merging concatenates


def step(pairs: Sequence[tuple[int, int]], nbytes: float, reduce: bool, repeat: int = 1) -> Step:
    """One step of messages of ``nbytes`` between the (sender, receiver) ``pairs``."""
    src, dst = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
    return Step(
        src, dst, np.full(len(src), float(nbytes)), np.full(len(src), reduce), np.zeros(len(src), np.int64), repeat
    )


def ring(members: Sequence[int], n: float) -> Schedule:
    m = len(members)
    if m < 2:
        return ()
    pairs = [(members[i], members[(i + 1) % m]) for i in range(m)]
    return (step(pairs, n / m, True, m - 1), step(pairs, n / m, False, m - 1))


def _fold(members: Sequence[int]) -> tuple[list[tuple[int, int]], list[int]]:
    """The pairs (even, odd) of the first 2(m − m') members that fold, and the m' members that remain."""
    m = len(members)
    low = 1 << (m.bit_length() - 1)
    folded = [(members[i], members[i + 1]) for i in range(0, 2 * (m - low), 2)]
    return folded, [members[i] for i in range(m) if i >= 2 * (m - low) or i % 2 == 1]


def _around_fold(members: Sequence[int], n: float, inner: Schedule) -> Schedule:
    folded, _ = _fold(members)
    if not folded:
        return inner
    back = [(odd, even) for even, odd in folded]
    return (step(folded, n, True), *inner, step(back, n, False))


def _exchange(members: Sequence[int], bit: int, nbytes: float, reduce: bool) -> Step:
    """Members whose positions differ in ``bit`` exchange ``nbytes`` both ways."""
    return step([(members[i], members[i ^ bit]) for i in range(len(members))], nbytes, reduce)


def recursive_doubling(members: Sequence[int], n: float) -> Schedule:
    if len(members) < 2:
        return ()
    _, low = _fold(members)
    inner = tuple(_exchange(low, 1 << k, n, True) for k in range(len(low).bit_length() - 1))
    return _around_fold(members, n, inner)


def rabenseifner(members: Sequence[int], n: float) -> Schedule:
    if len(members) < 2:
        return ()
    _, low = _fold(members)
    rounds = len(low).bit_length() - 1
    halving = tuple(_exchange(low, 1 << (rounds - k), n / 2**k, True) for k in range(1, rounds + 1))
    doubling = tuple(_exchange(low, 1 << (rounds - k), n / 2**k, False) for k in range(rounds, 0, -1))
    return _around_fold(members, n, halving + doubling)


def tree(members: Sequence[int], n: float) -> Schedule:
    m = len(members)
    if m < 2:
        return ()
    levels = (m - 1).bit_length()
    up = tuple(
        step([(members[i], members[i - (1 << k)]) for i in range(m) if i % (2 << k) == 1 << k], n, True)
        for k in range(levels)
    )
    down = tuple(
        step([(members[i], members[i + (1 << k)]) for i in range(0, m, 2 << k) if i + (1 << k) < m], n, False)
        for k in reversed(range(levels))
    )
    return up + down


def native(members: Sequence[int], n: float, world: int) -> Schedule:
    meta = NATIVE_META * world
    if n >= NATIVE_RING_MIN:
        return recursive_doubling(members, meta) + ring(members, n)
    return recursive_doubling(members, n + meta)


def activation(members: Sequence[int]) -> Schedule:
    """The activation token's binomial-tree broadcast from the first member."""
    m = len(members)
    return tuple(
        step([(members[i], members[i + (1 << k)]) for i in range(1 << k) if i + (1 << k) < m], 0.0, False)
        for k in range((m - 1).bit_length())
    )


def flat(algorithm: str, members: Sequence[int], n: float, world: int) -> Schedule:
    """An allreduce of ``n`` bytes over ``members`` by ``algorithm``, regardless of nodes."""
    if algorithm == "native":
        return native(members, n, world)
    return {"ring": ring, "recursive-doubling": recursive_doubling, "rabenseifner": rabenseifner, "tree": tree}[
        algorithm
    ](members, n)


@lru_cache(maxsize=4096)
def allreduce(algorithm: str, members: tuple[int, ...], n: float, per_node: int, world: int) -> Schedule:
    """An allreduce of ``n`` bytes over ``members``: in two levels where they are ``k`` > 1 to a node on several
    nodes, every node holding as many (as NCCL and MPICH reduce; the native core never does), else flat."""
    nodes: dict[int, list[int]] = {}
    for r in members:
        nodes.setdefault(r // per_node, []).append(r)
    counts = {len(v) for v in nodes.values()}
    k = counts.pop() if len(counts) == 1 else 0
    if algorithm == "native" or len(nodes) == 1 or k < 2:
        return flat(algorithm, members, n, world)
    scatter, gather = merge([ring(v, n) for v in nodes.values()])
    rails = merge([flat(algorithm, [v[j] for v in nodes.values()], n / k, world) for j in range(k)])
    return tuple(replace(s, owner=np.zeros_like(s.owner)) for s in (scatter, *rails, gather))  # one exchange


def merge(schedules: Sequence[Schedule]) -> Schedule:
    """Schedules that run at the same time as one: their i-th steps (counting repeats) sent at once, each message
    owned by the index of its schedule. Steps of equal repeat counts stay repeated."""
    out: list[Step] = []
    queues = [[(s, s.repeat, i) for s in sched] for i, sched in enumerate(schedules) if sched]
    while queues:
        heads = [q[0] for q in queues]
        times = min(left for _, left, _ in heads)
        parts = [s for s, _, _ in heads]
        src, dst, nbytes, reduce = (np.concatenate([getattr(s, f) for s in parts]) for f in FIELDS)
        owner = np.concatenate([np.full(len(s.src), i, dtype=np.int64) for s, _, i in heads])
        out.append(Step(src, dst, nbytes, reduce, owner, repeat=times))
        for q in queues:
            s, left, i = q[0]
            if left > times:
                q[0] = (s, left - times, i)
            else:
                q.pop(0)
        queues = [q for q in queues if q]
    return tuple(out)
