"""Gossip graphs: who a worker exchanges models with in the decentralized algorithms (d-psgd, ad-psgd, sgp).

``neighbours(topology, P)`` gives every worker's neighbours, sorted by rank, without itself and without repeats
(small P make ``i − 1`` and ``i + 1``, or ``i ± 2^k``, the same rank):

- ``ring``: i ± 1 (mod P);
- ``torus``: a grid of r × c workers, r the largest divisor of P not above √P (so a prime P is a 1 × P grid: the
  ring), worker i at row ⌊i/c⌋ and column i mod c; its neighbours are one row and one column away, wrapping round;
- ``exponential``: i ± 2^k (mod P) for every 2^k < P.

Every graph here is symmetric (j is a neighbour of i iff i is one of j) and every worker has as many neighbours as
any other, so averaging over {i} ∪ N(i) with equal weights is doubly stochastic: it keeps the mean of the models.

SGP's time-varying exponential graph is :func:`exponential_shift`: at iteration n every worker sends to
i + 2^(n mod ⌈log2 P⌉), a permutation of the workers.
"""

from __future__ import annotations

import math

from stragglerlab.simulator.network import log2ceil

TOPOLOGIES = ("ring", "torus", "exponential")


def torus_shape(workers: int) -> tuple[int, int]:
    """(rows, columns) of the torus: rows the largest divisor of ``workers`` not above its square root."""
    rows = max(d for d in range(1, math.isqrt(workers) + 1) if workers % d == 0)
    return rows, workers // rows


def _offsets(topology: str, i: int, workers: int) -> list[int]:
    """The ranks ``i`` is linked to, possibly with repeats and itself."""
    if topology == "ring":
        return [i - 1, i + 1]
    if topology == "exponential":
        return [i + s * (1 << k) for k in range(log2ceil(workers)) for s in (-1, 1)]
    rows, cols = torus_shape(workers)
    r, c = divmod(i, cols)
    return [((r + dr) % rows) * cols + (c + dc) % cols for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1))]


def neighbours(topology: str, workers: int) -> list[list[int]]:
    """Each worker's neighbours in ``topology`` (module docstring), sorted, without itself or repeats."""
    return [sorted({j % workers for j in _offsets(topology, i, workers)} - {i}) for i in range(workers)]


def exponential_phases(workers: int) -> int:
    """Phases of SGP's time-varying exponential graph: ⌈log2 P⌉ (at least 1)."""
    return max(1, log2ceil(workers))


def exponential_shift(n: int, workers: int) -> int:
    """How far every worker sends at iteration ``n`` of SGP: 2^(n mod ⌈log2 P⌉) (0 for one worker: no message)."""
    return 0 if workers < 2 else 1 << (n % exponential_phases(workers))
