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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
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

    def __post_init__(self) -> None:
        for name in FIELDS:  # schedules are cached and shared: nobody may change one in place
            getattr(self, name).flags.writeable = False


Schedule = tuple[Step, ...]
FIELDS = ("src", "dst", "nbytes", "reduce", "owner")  # what merging concatenates


def step(
    members: np.ndarray, senders: np.ndarray, receivers: np.ndarray, nbytes: float, reduce: bool, repeat: int = 1
) -> Step:
    """One step: the members at positions ``senders`` send ``nbytes`` each to those at ``receivers``."""
    k = len(senders)
    return Step(
        members[senders],
        members[receivers],
        np.full(k, float(nbytes)),
        np.full(k, reduce),
        np.zeros(k, np.int64),
        repeat,
    )


def ring(members: Sequence[int], n: float) -> Schedule:
    m = len(members)
    if m < 2:
        return ()
    ranks, i = np.asarray(members, dtype=np.int64), np.arange(m)
    return (step(ranks, i, (i + 1) % m, n / m, True, m - 1), step(ranks, i, (i + 1) % m, n / m, False, m - 1))


def _low(m: int) -> np.ndarray:
    """Positions of the m' = 2^⌊log2 m⌋ members that remain after the fold: the odd ones of the first 2(m − m'), then
    the rest."""
    extra = m - (1 << (m.bit_length() - 1))
    return np.r_[np.arange(1, 2 * extra, 2), np.arange(2 * extra, m)].astype(np.int64)


def _around_fold(ranks: np.ndarray, n: float, inner: Schedule) -> Schedule:
    """``inner`` among the m' members, with the first 2(m − m') folding in pairs before (the even one hands its vector
    to the odd one) and getting the result back after."""
    extra = len(ranks) - (1 << (len(ranks).bit_length() - 1))
    if not extra:
        return inner
    even = np.arange(0, 2 * extra, 2)
    return (step(ranks, even, even + 1, n, True), *inner, step(ranks, even + 1, even, n, False))


def _exchange(ranks: np.ndarray, low: np.ndarray, bit: int, nbytes: float, reduce: bool) -> Step:
    """The members at positions ``low`` whose indices among them differ in ``bit`` exchange ``nbytes`` both ways."""
    i = np.arange(len(low))
    return step(ranks, low[i], low[i ^ bit], nbytes, reduce)


def recursive_doubling(members: Sequence[int], n: float) -> Schedule:
    if len(members) < 2:
        return ()
    ranks, low = np.asarray(members, dtype=np.int64), _low(len(members))
    inner = tuple(_exchange(ranks, low, 1 << k, n, True) for k in range(len(low).bit_length() - 1))
    return _around_fold(ranks, n, inner)


def rabenseifner(members: Sequence[int], n: float) -> Schedule:
    if len(members) < 2:
        return ()
    ranks, low = np.asarray(members, dtype=np.int64), _low(len(members))
    rounds = len(low).bit_length() - 1
    halving = tuple(_exchange(ranks, low, 1 << (rounds - k), n / 2**k, True) for k in range(1, rounds + 1))
    doubling = tuple(_exchange(ranks, low, 1 << (rounds - k), n / 2**k, False) for k in range(rounds, 0, -1))
    return _around_fold(ranks, n, halving + doubling)


def tree(members: Sequence[int], n: float) -> Schedule:
    m = len(members)
    if m < 2:
        return ()
    ranks, levels = np.asarray(members, dtype=np.int64), (m - 1).bit_length()
    up = tuple(step(ranks, (i := np.arange(1 << k, m, 2 << k)), i - (1 << k), n, True) for k in range(levels))
    down = tuple(
        step(ranks, (i := np.arange(0, m - (1 << k), 2 << k)), i + (1 << k), n, False) for k in reversed(range(levels))
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
    ranks = np.asarray(members, dtype=np.int64)
    return tuple(
        step(ranks, (i := np.arange(min(1 << k, m - (1 << k)))), i + (1 << k), 0.0, False)
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
    if algorithm == "native" or per_node == 1:
        return flat(algorithm, members, n, world)
    nodes: dict[int, list[int]] = {}
    for r in members:
        nodes.setdefault(r // per_node, []).append(r)
    counts = {len(v) for v in nodes.values()}
    k = counts.pop() if len(counts) == 1 else 0
    if len(nodes) == 1 or k < 2:
        return flat(algorithm, members, n, world)
    scatter, gather = merge([ring(v, n) for v in nodes.values()])
    rails = merge([flat(algorithm, [v[j] for v in nodes.values()], n / k, world) for j in range(k)])
    return (scatter, *rails, gather)


def concurrent(
    groups: Sequence[Sequence[int]],
    n: float,
    per_node: int,
    world: int,
    algorithm_of: Callable[[tuple[int, ...]], str],
    per_rack: int = 0,
) -> Schedule:
    """The allreduces of ``groups`` run at the same time, as one schedule whose messages each belong to the index of
    their group. Groups laid over nodes alike (the same number of members on each node, in the same order, the nodes
    as far apart, and, with racks of ``per_rack`` nodes, in the same places of their racks) have the same schedule up
    to their ranks, so it is built once for a canonical group of that layout and its algorithm
    (``algorithm_of(canonical)``) and mapped onto all of them at once: 8,192 groups of 8 cost one schedule. The
    canonical group starts at node 0 (at rack 0 with racks), whatever order its members are listed in."""
    parts = []
    sizes: dict[int, list[int]] = {}
    for g, group in enumerate(groups):
        sizes.setdefault(len(group), []).append(g)
    for size, indices in sizes.items():
        ranks = np.array([groups[g] for g in indices], dtype=np.int64).reshape(len(indices), size)
        nodes = ranks // per_node
        first = nodes.min(axis=1, keepdims=True)
        if per_rack:
            first -= first % per_rack  # whole racks, so that the canonical group crosses racks where this one does
        layouts, which = np.unique(nodes - first, axis=0, return_inverse=True)
        for k, layout in enumerate(layouts):
            alike = np.flatnonzero(which.ravel() == k)
            seen: dict[int, int] = {}
            canonical = []
            for node in layout.tolist():  # the same layout from rank 0: each member the next free slot of its node
                canonical.append(node * per_node + seen.get(node, 0))
                seen[node] = seen.get(node, 0) + 1
            assert min(canonical) >= 0, canonical
            template = allreduce(algorithm_of(tuple(canonical)), tuple(canonical), n, per_node, world)
            slot = {r: i for i, r in enumerate(canonical)}
            mapped = ranks[alike]  # these groups × members
            owners = np.array(indices, dtype=np.int64)[alike]
            parts.append(
                tuple(
                    Step(
                        mapped[:, [slot[int(r)] for r in t.src]].ravel(),
                        mapped[:, [slot[int(r)] for r in t.dst]].ravel(),
                        np.tile(t.nbytes, len(alike)),
                        np.tile(t.reduce, len(alike)),
                        np.repeat(owners, len(t.src)),
                        t.repeat,
                    )
                    for t in template
                )
            )
    return merge(parts)


def merge(schedules: Sequence[Schedule]) -> Schedule:
    """Schedules that run at the same time as one: their i-th steps (counting repeats) sent at once, each message
    keeping its owner. Steps of equal repeat counts stay repeated."""
    out: list[Step] = []
    queues = [[(s, s.repeat) for s in sched] for sched in schedules if sched]
    while queues:
        heads = [q[0] for q in queues]
        times = min(left for _, left in heads)
        parts = [s for s, _ in heads]
        src, dst, nbytes, reduce, owner = (np.concatenate([getattr(s, f) for s in parts]) for f in FIELDS)
        out.append(Step(src, dst, nbytes, reduce, owner, repeat=times))
        for q in queues:
            s, left = q[0]
            if left > times:
                q[0] = (s, left - times)
            else:
                q.pop(0)
        queues = [q for q in queues if q]
    return tuple(out)
