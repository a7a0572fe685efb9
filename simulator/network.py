"""The network and collective cost formulas: the first implementation of the cost seam (:class:`~.costs.CostModel`).

Point to point: ``alpha + n·beta`` (intra-node links: ``intra_alpha``, ``intra_beta``). Every round's data exchange is
an allreduce of the message over the ranks that take part, whatever its kind, plus the per-round software cost
``network.overhead``. The allreduce algorithms at any rank count p, with p' = 2^⌊log2 p⌋:

- ring: 2(p−1)·alpha + 2(p−1)/p·n·beta + (p−1)/p·n·gamma;
- recursive doubling: ⌈log2 p⌉·(alpha + n·beta + n·gamma) when p is a power of two; otherwise the ranks beyond p'
  fold into partners first and get the result back at the end (MPICH's way, and the native core's):
  (⌊log2 p⌋ + 2)·(alpha + n·beta) + (⌊log2 p⌋ + 1)·n·gamma;
- Rabenseifner: 2⌈log2 p⌉·alpha + 2(p−1)/p·n·beta + (p−1)/p·n·gamma for a power of two; otherwise the fold around a
  reduce-scatter and allgather among p': (2⌊log2 p⌋ + 2)·alpha + (2(p'−1)/p' + 2)·n·beta + ((p'−1)/p' + 1)·n·gamma;
- tree (binomial reduce, then broadcast): 2⌈log2 p⌉·(alpha + n·beta) + ⌈log2 p⌉·n·gamma;
- ``auto``: whichever of the four is fastest for the exchange's bytes and ranks (a perfectly tuned MPI).

Ranks that share nodes (``workers_per_node`` > 1) reduce in two levels, as NCCL and MPICH do: a ring reduce-scatter
inside each node over the intra links, the chosen algorithm across the nodes on n/k bytes per rank, a ring
allgather inside each node; k is the most ranks the set has on one node. A set inside one node uses the chosen
algorithm over the intra links. Collectives that run at the same time and cross node boundaries (WAGMA's groups of
one phase) share each node's inter-node link: with c of them on a node, each gets 1/c of its bandwidth, so a
collective's inter-node beta is c·beta, c the largest count over the nodes it touches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stragglerlab.simulator.imbalance import Spread

if TYPE_CHECKING:
    from stragglerlab.simulator.scenario import Scenario

BYTES_PER_ELEMENT = 4  # float32
ALGORITHMS = ("ring", "recursive-doubling", "rabenseifner", "tree")
Ranks = Sequence[int] | int


def log2ceil(p: int) -> int:
    """⌈log2 p⌉ for p >= 1."""
    return (p - 1).bit_length()


def log2floor(p: int) -> int:
    """⌊log2 p⌋ for p >= 1."""
    return p.bit_length() - 1


def flat_allreduce(algorithm: str, p: int, n: float, alpha: float, beta: float, gamma: float) -> float:
    """Time of one allreduce of ``n`` bytes over ``p`` ranks on uniform links (module docstring)."""
    if p <= 1:
        return 0.0
    lg, power = log2floor(p), p & (p - 1) == 0
    if algorithm == "ring":
        return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma
    if algorithm == "recursive-doubling":
        if power:
            return lg * (alpha + n * beta + n * gamma)
        return (lg + 2) * (alpha + n * beta) + (lg + 1) * n * gamma
    if algorithm == "rabenseifner":
        if power:
            return 2 * lg * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma
        q = 1 << lg
        return (2 * lg + 2) * alpha + (2 * (q - 1) / q + 2) * n * beta + ((q - 1) / q + 1) * n * gamma
    if algorithm == "tree":
        return 2 * log2ceil(p) * (alpha + n * beta) + log2ceil(p) * n * gamma
    raise ValueError(f"unknown allreduce algorithm {algorithm!r}")


@dataclass(frozen=True)
class NetworkModel:
    """Costs in seconds of the operations the algorithms use, for one scenario."""

    alpha: float
    beta: float
    gamma: float
    allreduce_algorithm: str  # one of ALGORITHMS, or "auto"
    intra_alpha: float
    intra_beta: float
    workers_per_node: int
    overhead: float = 0.0  # seconds of software cost per round

    @classmethod
    def of(cls, scenario: Scenario) -> NetworkModel:
        net = scenario.network
        return cls(
            net.alpha,
            net.beta,
            net.gamma,
            net.allreduce,
            net.alpha if net.intra_alpha is None else net.intra_alpha,
            net.beta if net.intra_beta is None else net.intra_beta,
            scenario.cluster.workers_per_node,
            net.overhead,
        )

    def collective(self, kind: str, nbytes: float, ranks: Ranks) -> float:
        """A round's data exchange: an allreduce of ``nbytes`` over ``ranks``, of every ``kind``, plus the overhead."""
        return self.allreduce(ranks, nbytes) + self.overhead

    def spread(self, kind: str, nbytes: float, ranks: Ranks) -> Spread:
        """The formulas give every exchange exactly its time: no spread."""
        return Spread()

    def concurrent(self, kind: str, nbytes: float, groups: Sequence[Sequence[int]]) -> list[float]:
        """The data exchanges of collectives that run at the same time, one per group, sharing the inter-node links
        of the nodes they have members on."""
        sharing: dict[int, int] = {}
        crossing = [len(self._nodes(g)) > 1 for g in groups]
        for group, crosses in zip(groups, crossing, strict=True):
            for node in self._nodes(group) if crosses else ():
                sharing[node] = sharing.get(node, 0) + 1
        return [
            self.allreduce(group, nbytes, max(sharing[node] for node in self._nodes(group)) if crosses else 1)
            + self.overhead
            for group, crosses in zip(groups, crossing, strict=True)
        ]

    def p2p(self, n: float, intra: bool = False) -> float:
        """One message of ``n`` bytes: alpha + n·beta (intra-node links when ``intra``)."""
        return (self.intra_alpha + n * self.intra_beta) if intra else (self.alpha + n * self.beta)

    def gossip(self, n: float, ranks: int, messages: int, intra: bool = False) -> float:
        """A gossip exchange: ``messages`` point-to-point messages of ``n`` bytes."""
        return messages * self.p2p(n, intra)

    def activation(self, p: int) -> float:
        """The activation token's binomial-tree broadcast over ``p`` ranks: ⌈log2 p⌉·alpha."""
        return log2ceil(p) * self.alpha

    def _nodes(self, ranks: Sequence[int]) -> dict[int, int]:
        """Ranks of the set on each node it touches."""
        per_node: dict[int, int] = {}
        for r in ranks:
            per_node[r // self.workers_per_node] = per_node.get(r // self.workers_per_node, 0) + 1
        return per_node

    def allreduce(self, ranks: Ranks, n: float, sharing: int = 1, algorithm: str | None = None) -> float:
        """Allreduce of ``n`` bytes over ``ranks`` (a list, or a count meaning ranks 0..count-1), in two levels when
        they share nodes; ``sharing`` collectives share its inter-node links; ``algorithm``: this one rather than the
        scenario's."""
        algorithm = algorithm or self.allreduce_algorithm
        if algorithm == "auto":
            return min(self.allreduce(ranks, n, sharing, a) for a in ALGORITHMS)
        per_node = self._nodes(range(ranks) if isinstance(ranks, int) else ranks)
        nodes, k = len(per_node), max(per_node.values())
        if nodes == 1:
            return flat_allreduce(algorithm, k, n, self.intra_alpha, self.intra_beta, self.gamma)
        across = flat_allreduce(algorithm, nodes, n / k, self.alpha, sharing * self.beta, self.gamma)
        inside = 2 * (k - 1) * self.intra_alpha + (k - 1) / k * n * (2 * self.intra_beta + self.gamma)
        return across + inside

    def chosen(self, ranks: Ranks, n: float) -> str:
        """The allreduce algorithm an exchange of ``n`` bytes over ``ranks`` uses (``auto``: the fastest)."""
        if self.allreduce_algorithm != "auto":
            return self.allreduce_algorithm
        return min(ALGORITHMS, key=lambda a: self.allreduce(ranks, n, algorithm=a))

    def lower_bound(self, ranks: Ranks, n: float) -> float:
        """⌈log2 p⌉·alpha + 2(p−1)/p·n·beta over the links the set uses (intra-node for a set inside one node): no
        allreduce of ``n`` bytes over ``ranks`` is faster."""
        per_node = self._nodes(range(ranks) if isinstance(ranks, int) else ranks)
        p = sum(per_node.values())
        alpha, beta = (self.intra_alpha, self.intra_beta) if len(per_node) == 1 else (self.alpha, self.beta)
        return log2ceil(p) * alpha + 2 * (p - 1) / p * n * beta

    def describe(self, p: int, n: float) -> dict[str, float | str]:
        """The figures a run records beside its rounds: message bytes, activation, allreduce over all ``p`` ranks,
        its algorithm and lower bound, and the per-round overhead."""
        return {
            "message_bytes": n,
            "activation": self.activation(p),
            "allreduce": self.allreduce(p, n),
            "algorithm": self.chosen(p, n),
            "lower_bound": self.lower_bound(p, n),
            "overhead": self.overhead,
        }


def message_bytes(scenario: Scenario) -> int:
    """Bytes of one gradient or model: ``workload.params`` float32 elements."""
    return scenario.workload.params * BYTES_PER_ELEMENT
