"""The network model: the first implementation of the cost seam (:class:`~.costs.CostModel`). Every exchange is the
messages it sends (:mod:`.schedules`), and each step of them takes as long as its slowest message on links that
concurrent messages share (:mod:`.links`).

The physical parameters, all from ``[network]``: ``alpha``/``beta`` (latency and seconds per byte between nodes,
each node's injection and ejection link shared by its ranks), ``intra_alpha``/``intra_beta`` (inside a node, each
rank's own copy bandwidth), ``fabric_beta`` (the fabric's aggregate bandwidth, shared by every message between
nodes; 0: never the bottleneck), ``message_overhead`` (LogGP's o: a rank's messages of one step leave one o after
another), ``gamma`` (seconds per byte a rank adds into its vector), ``overhead`` (software cost of every round,
added to its exchange) and ``activation_delay`` (what each step of the activation token's tree adds to its message:
a rank passing the token on only once its progress engine gets a core, which on cores its ranks share can take far
longer than the message; 0 by default). A step's time is the latest arrival of its messages, each followed by its
receiver's addition where it reduces.

The allreduce algorithms (``network.allreduce``): ring, recursive doubling, Rabenseifner, tree, native (what the
native core does at each size), or ``auto``: whichever of the first four is fastest for the exchange's bytes and
ranks (a perfectly tuned MPI). Ranks that share nodes reduce in two levels (:func:`.schedules.allreduce`).

**Where no two messages meet on a link** (one rank per node, no fabric limit, no message overhead), each step of a
ring, recursive doubling, Rabenseifner or tree costs alpha + n·beta (+ n·gamma where it reduces), so that with p
ranks and p' = 2^⌊log2 p⌋:

- ring: 2(p−1)·alpha + 2(p−1)/p·n·beta + (p−1)/p·n·gamma;
- recursive doubling: ⌈log2 p⌉·(alpha + n·beta + n·gamma) for a power of two, else
  (⌊log2 p⌋ + 2)·(alpha + n·beta) + (⌊log2 p⌋ + 1)·n·gamma (the fold and unfold);
- Rabenseifner: 2⌈log2 p⌉·alpha + 2(p−1)/p·n·beta + (p−1)/p·n·gamma for a power of two, else
  (2⌊log2 p⌋ + 2)·alpha + (2(p'−1)/p' + 2)·n·beta + ((p'−1)/p' + 1)·n·gamma;
- tree: 2⌈log2 p⌉·(alpha + n·beta) + ⌈log2 p⌉·n·gamma;
- the activation token: ⌈log2 p⌉·(alpha + activation_delay).

Where messages meet (several ranks of a node sending off it at once, a rank sending to several neighbours, WAGMA's
groups on shared nodes, a fabric of limited bandwidth) they share the bandwidth, and the model departs from these
forms on purpose.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from stragglerlab.simulator import schedules
from stragglerlab.simulator.imbalance import Spread
from stragglerlab.simulator.links import Links

if TYPE_CHECKING:
    from stragglerlab.simulator.scenario import Scenario

BYTES_PER_ELEMENT = 4  # float32
#: the algorithms ``auto`` chooses from: those of a tuned MPI
TUNED = ("ring", "recursive-doubling", "rabenseifner", "tree")
Ranks = Sequence[int] | int


def log2ceil(p: int) -> int:
    """⌈log2 p⌉ for p >= 1."""
    return (p - 1).bit_length()


def log2floor(p: int) -> int:
    """⌊log2 p⌋ for p >= 1."""
    return p.bit_length() - 1


def members(ranks: Ranks) -> tuple[int, ...]:
    """The ranks of a set given as a list, or as a count meaning ranks 0 .. count − 1."""
    return tuple(range(ranks)) if isinstance(ranks, int) else tuple(map(int, ranks))


@dataclass(frozen=True)
class NetworkModel:
    """Seconds that the operations of the algorithms take, for one scenario's network (module doc)."""

    links: Links
    gamma: float
    allreduce_algorithm: str  # one of schedules.ALLREDUCES, or "auto"
    overhead: float = 0.0  # seconds of software cost per round
    activation_delay: float = 0.0  # seconds each step of the activation token's tree adds to its message

    @classmethod
    def of(cls, scenario: Scenario) -> NetworkModel:
        net = scenario.network
        links = Links(
            net.alpha,
            net.beta,
            net.alpha if net.intra_alpha is None else net.intra_alpha,
            net.beta if net.intra_beta is None else net.intra_beta,
            scenario.cluster.workers_per_node,
            net.message_overhead,
            net.fabric_beta,
            scenario.cluster.nodes_per_rack,
            net.uplink_beta,
        )
        return cls(links, net.gamma, net.allreduce, net.overhead, net.activation_delay)

    def collective(self, kind: str, nbytes: float, ranks: Ranks) -> float:
        """A round's data exchange: an allreduce of ``nbytes`` over ``ranks``, of every ``kind``, plus the overhead."""
        return self.allreduce(ranks, nbytes) + self.overhead

    def spread(self, kind: str, nbytes: float, ranks: Ranks) -> Spread:
        """The model gives every exchange exactly its time: no spread."""
        return Spread()

    def concurrent(self, kind: str, nbytes: float, groups: Sequence[Sequence[int]]) -> list[float]:
        """The data exchanges of collectives that run at the same time, one per group: their messages sent together,
        step by step, sharing the links they meet on."""
        world = 1 + max(max(g) for g in groups)
        merged = schedules.concurrent(
            groups, float(nbytes), self.links.per_node, world, lambda g: self.chosen(g, nbytes), self.links.per_rack
        )
        return [float(t) + self.overhead for t in self.time(merged, len(groups))]

    def p2p(self, n: float, intra: bool = False) -> float:
        """One message of ``n`` bytes alone on its links: o + alpha + n·beta (intra-node links when ``intra``)."""
        links = self.links
        return links.o + ((links.intra_alpha + n * links.intra_beta) if intra else (links.alpha + n * links.beta))

    def serve(self, n: float) -> float:
        """A receiver taking in ``n`` bytes through its node's link and adding them into its own (a server shard
        applying a push): n·(beta + gamma). Its link takes one such message at a time, so concurrent ones queue."""
        return n * (self.links.beta + self.gamma)

    def gossip(self, n: float, src: np.ndarray, dst: np.ndarray, messages: int = 1) -> np.ndarray:
        """The time of each pair's exchange when every listed message of ``n`` bytes (``src[i]`` → ``dst[i]``)
        travels at once, sharing links, and each pair exchanges ``messages`` of them one after the other."""
        return messages * self.links.arrivals(src, dst, np.full(len(src), float(n)))

    def activation(self, p: int) -> float:
        """The activation token's binomial-tree broadcast over ``p`` ranks."""
        return _activation_time(self, p)

    def allreduce(self, ranks: Ranks, n: float, algorithm: str | None = None) -> float:
        """Allreduce of ``n`` bytes over ``ranks`` (a list, or a count meaning ranks 0..count-1), in two levels when
        they share nodes; ``algorithm``: this one rather than the scenario's."""
        algorithm = algorithm or self.allreduce_algorithm
        if algorithm == "auto":
            return min(self.allreduce(ranks, n, a) for a in TUNED)
        return _allreduce_time(self, algorithm, members(ranks), float(n))

    def time(self, schedule: schedules.Schedule, owners: int = 1) -> np.ndarray:
        """Seconds each owner's exchange of a (merged) schedule takes: the sum over its steps of its latest message's
        arrival, plus the receiver's addition where it reduces."""
        total = np.zeros(owners)
        for s in schedule:
            end = self.links.arrivals(s.src, s.dst, s.nbytes) + self.gamma * s.nbytes * s.reduce
            latest = np.zeros(owners)
            np.maximum.at(latest, s.owner, end)
            total += s.repeat * latest
        return total

    def chosen(self, ranks: Ranks, n: float) -> str:
        """The allreduce algorithm an exchange of ``n`` bytes over ``ranks`` uses (``auto``: the fastest)."""
        if self.allreduce_algorithm != "auto":
            return self.allreduce_algorithm
        return min(TUNED, key=lambda a: self.allreduce(ranks, n, algorithm=a))

    def lower_bound(self, ranks: Ranks, n: float) -> float:
        """⌈log2 p⌉·alpha + 2(p−1)/p·n·beta over the links the set uses (intra-node for a set inside one node): no
        allreduce of ``n`` bytes over ``ranks`` is faster."""
        group = members(ranks)
        p, links = len(group), self.links
        if p <= 1:
            return 0.0
        inside = len({r // links.per_node for r in group}) == 1
        alpha, beta = (links.intra_alpha, links.intra_beta) if inside else (links.alpha, links.beta)
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


@lru_cache(maxsize=4096)
def _allreduce_time(model: NetworkModel, algorithm: str, group: tuple[int, ...], n: float) -> float:
    """An allreduce's time, once per (model, algorithm, ranks, bytes): the engines ask for the same ones often."""
    if len(group) < 2:
        return 0.0
    world = 1 + max(group)
    return float(model.time(schedules.allreduce(algorithm, group, n, model.links.per_node, world))[0])


@lru_cache(maxsize=256)
def _activation_time(model: NetworkModel, p: int) -> float:
    tree = schedules.activation(tuple(range(p)))
    return float(model.time(tree)[0]) + len(tree) * model.activation_delay


def message_bytes(scenario: Scenario) -> int:
    """Bytes of one gradient or model: ``workload.params`` float32 elements."""
    return scenario.workload.params * BYTES_PER_ELEMENT
