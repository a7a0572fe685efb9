"""The network and collective cost formulas (Hockney point to point, four allreduce algorithms): the first
implementation of the cost seam (:class:`~.costs.CostModel`).

Every round's data exchange is an allreduce of the message over the ranks that take part, whatever its kind. With
``workers_per_node`` > 1 a collective over a set of ranks is hierarchical: a binomial-tree reduce inside each
node over the intra-node links, the chosen algorithm across the nodes the set spans, a binomial-tree broadcast inside
each node. Contention between concurrent collectives is not modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stragglerlab.simulator.scenario import Scenario

BYTES_PER_ELEMENT = 4  # float32


def log2ceil(p: int) -> int:
    """⌈log2 p⌉ for p >= 1."""
    return (p - 1).bit_length()


def flat_allreduce(algorithm: str, p: int, n: float, alpha: float, beta: float, gamma: float) -> float:
    """Time of one allreduce of ``n`` bytes over ``p`` ranks on uniform links."""
    if p <= 1:
        return 0.0
    lg = log2ceil(p)
    if algorithm == "ring":
        return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma
    if algorithm == "recursive-doubling":
        return lg * (alpha + n * beta + n * gamma)
    if algorithm == "rabenseifner":
        return 2 * lg * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma
    if algorithm == "tree":
        return 2 * lg * (alpha + n * beta) + lg * n * gamma
    raise ValueError(f"unknown allreduce algorithm {algorithm!r}")


@dataclass(frozen=True)
class NetworkModel:
    """Costs in seconds of the operations the algorithms use, for one scenario."""

    alpha: float
    beta: float
    gamma: float
    allreduce_algorithm: str
    intra_alpha: float
    intra_beta: float
    workers_per_node: int

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
        )

    def collective(self, kind: str, nbytes: float, ranks: Sequence[int] | int) -> float:
        """A round's data exchange: an allreduce of ``nbytes`` over ``ranks``, of every ``kind``."""
        return self.allreduce(ranks, nbytes)

    def p2p(self, n: float, intra: bool = False) -> float:
        """One message of ``n`` bytes: alpha + n·beta (intra-node links when ``intra``)."""
        return (self.intra_alpha + n * self.intra_beta) if intra else (self.alpha + n * self.beta)

    def activation(self, p: int) -> float:
        """The activation token's binomial-tree broadcast over ``p`` ranks: ⌈log2 p⌉·alpha."""
        return log2ceil(p) * self.alpha

    def _layout(self, ranks: Sequence[int]) -> tuple[int, int]:
        """(nodes spanned, most ranks on one node) of a set of ranks."""
        per_node: dict[int, int] = {}
        for r in ranks:
            per_node[r // self.workers_per_node] = per_node.get(r // self.workers_per_node, 0) + 1
        return len(per_node), max(per_node.values())

    def allreduce(self, ranks: Sequence[int] | int, n: float) -> float:
        """Allreduce of ``n`` bytes over ``ranks`` (a list, or a count meaning ranks 0..count-1), hierarchical
        when they share nodes."""
        ranks = range(ranks) if isinstance(ranks, int) else ranks
        nodes, local = self._layout(ranks)
        if nodes == 1:
            return flat_allreduce(self.allreduce_algorithm, local, n, self.intra_alpha, self.intra_beta, self.gamma)
        inside = log2ceil(local)
        reduce = inside * (self.intra_alpha + n * self.intra_beta + n * self.gamma)
        broadcast = inside * (self.intra_alpha + n * self.intra_beta)
        return (
            reduce + flat_allreduce(self.allreduce_algorithm, nodes, n, self.alpha, self.beta, self.gamma) + broadcast
        )

    def lower_bound(self, p: int, n: float) -> float:
        """⌈log2 p⌉·alpha + 2(p−1)/p·n·beta: no allreduce of ``n`` bytes over ``p`` ranks is faster."""
        return log2ceil(p) * self.alpha + 2 * (p - 1) / p * n * self.beta

    def describe(self, p: int, n: float) -> dict[str, float]:
        """The figures a run records beside its rounds: message bytes, activation, allreduce and its lower bound."""
        return {
            "message_bytes": n,
            "activation": self.activation(p),
            "allreduce": self.allreduce(p, n),
            "lower_bound": self.lower_bound(p, n),
        }


def message_bytes(scenario: Scenario) -> int:
    """Bytes of one gradient or model: ``workload.params`` float32 elements."""
    return scenario.workload.params * BYTES_PER_ELEMENT
