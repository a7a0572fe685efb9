"""Messages on shared links: when a set of messages that travel at the same time arrive, each getting a max-min fair
share of every link it crosses, as flow-level network simulators (SimGrid's, for one) share bandwidth.

What a message crosses:

- between two nodes (``cluster.workers_per_node`` ranks each): the sending node's injection link and the receiving
  node's ejection link, each of bandwidth 1/``beta``, shared by every rank of the node, and the fabric, of aggregate
  bandwidth 1/``fabric_beta`` (0: a fabric that is never the bottleneck, such as a full-bisection fat tree);
- between two racks (``cluster.nodes_per_rack`` nodes each, where it is set): also the sending rack's uplink out and
  the receiving rack's uplink in, each of bandwidth 1/``uplink_beta`` (0: never the bottleneck), shared by every
  message leaving (or entering) the rack: a two-level fabric whose taper is the uplink against the rack's node
  links;
- inside one node: the sending rank's and the receiving rank's own copy bandwidth, 1/``intra_beta`` each.

A message of n bytes is sent ``o`` (LogGP's per-message software overhead) after its sender's previous message of the
same step (the k-th message a rank sends in a step leaves at k·o), its bytes then flow at the max-min fair rate,
reallocated whenever a message starts or finishes, and it arrives the link's latency (``alpha``, or ``intra_alpha``
inside a node) after its last byte left. Alone on its links it so arrives o + alpha + n·beta after the step began:
the Hockney time of one message, plus the overhead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: two flows finishing closer than this (relative) finish together
_TIE = 1e-12


@dataclass(frozen=True)
class Links:
    """The links of a cluster and what they cost (module doc)."""

    alpha: float
    beta: float
    intra_alpha: float
    intra_beta: float
    per_node: int = 1  # ranks of one node
    o: float = 0.0  # seconds of software overhead per message
    fabric_beta: float = 0.0  # seconds per byte of the fabric's aggregate bandwidth; 0: never a bottleneck
    per_rack: int = 0  # nodes of one rack; 0: every node on one switch
    uplink_beta: float = 0.0  # seconds per byte of a rack's uplink, each way; 0: never a bottleneck

    def intra(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Whether each message stays inside one node."""
        return src // self.per_node == dst // self.per_node

    def latency(self, intra: np.ndarray) -> np.ndarray:
        return np.where(intra, self.intra_alpha, self.alpha)

    def arrivals(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        """When each of a step's messages (``src[m]`` → ``dst[m]``, ``nbytes[m]``) arrives, in seconds from the
        step's start (module doc)."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        nbytes = np.asarray(nbytes, dtype=float)
        if not len(src):
            return np.zeros(0)
        intra = self.intra(src, dst)
        order = np.argsort(src, kind="stable")  # a rank's messages leave one o after another, in the step's order
        first = np.searchsorted(src[order], src[order], side="left")
        sent = np.empty(len(src), dtype=np.int64)
        sent[order] = np.arange(len(src)) - first + 1
        start = sent * self.o
        if not nbytes.any():  # empty messages (activation tokens) share no bandwidth
            return start + self.latency(intra)
        return self._finish(src, dst, nbytes, start, intra) + self.latency(intra)

    def _finish(
        self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, start: np.ndarray, intra: np.ndarray
    ) -> np.ndarray:
        """When each message's last byte leaves: a fluid simulation of the flows, each starting at ``start``, their
        rates max-min fair over their links and recomputed at every start and finish."""
        links, capacity = self._links(src, dst, intra)
        done = np.where(nbytes > 0, np.nan, start)
        left = nbytes.copy()
        t = float(start.min())
        while np.isnan(done).any():
            waiting = np.isnan(done)
            flowing = waiting & (start <= t)
            if not flowing.any():
                t = float(start[waiting].min())
                continue
            rate = np.zeros(len(src))
            rate[flowing] = max_min(links[flowing], capacity)
            ahead = start[waiting & ~flowing]
            with np.errstate(divide="ignore"):
                finishing = np.where(flowing, left / rate, np.inf)
            step = min(float(finishing.min()), float(ahead.min()) - t if len(ahead) else math.inf)
            if not math.isfinite(step):  # a rate so small its bytes take forever: the scenario's checks keep it out
                raise OverflowError(f"messages of {float(left[flowing].max()):.3g} bytes never finish at their rates")
            ended = flowing & (finishing <= step * (1 + _TIE))
            t += step
            done[ended] = t
            moving = flowing & ~ended
            left[moving] -= rate[moving] * step
        return done

    def _links(self, src: np.ndarray, dst: np.ndarray, intra: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each message's links (a row of indices, −1 for none) and every link's bandwidth (bytes per second)."""
        P = int(max(src.max(), dst.max())) + 1
        nodes = -(-P // self.per_node)
        racks = -(-nodes // self.per_rack) if self.per_rack else 1
        # links: injection and ejection per node, send and receive per rank (inside a node), the fabric, uplinks out
        # of and into each rack
        inject, eject, send, receive, fabric = 0, nodes, 2 * nodes, 2 * nodes + P, 2 * nodes + 2 * P
        out, into = fabric + 1, fabric + 1 + racks
        ns, nd = src // self.per_node, dst // self.per_node
        rows = np.full((len(src), 5), -1, dtype=np.int64)
        rows[:, 0] = np.where(intra, send + src, inject + ns)
        rows[:, 1] = np.where(intra, receive + dst, eject + nd)
        if self.fabric_beta > 0:
            rows[:, 2] = np.where(intra, -1, fabric)
        if self.per_rack and self.uplink_beta > 0:
            rs, rd = ns // self.per_rack, nd // self.per_rack
            rows[:, 3] = np.where(rs != rd, out + rs, -1)
            rows[:, 4] = np.where(rs != rd, into + rd, -1)
        capacity = np.empty(into + racks)
        capacity[: 2 * nodes] = _bandwidth(self.beta)
        capacity[2 * nodes : fabric] = _bandwidth(self.intra_beta)
        capacity[fabric] = _bandwidth(self.fabric_beta)
        capacity[out:] = _bandwidth(self.uplink_beta)
        return rows, capacity


def _bandwidth(beta: float) -> float:
    return math.inf if beta == 0 else 1.0 / beta


def max_min(links: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """The max-min fair rates of flows over links (``links``: a row of link indices per flow, −1 for none;
    ``capacity``: each link's bandwidth) by progressive filling: the link whose remaining bandwidth, shared equally
    by its flows not yet fixed, is least fixes those flows at that share; then the next."""
    rate = np.full(len(links), math.inf)
    free = np.ones(len(links), dtype=bool)
    left = capacity.astype(float).copy()
    used = links >= 0
    safe = np.where(used, links, 0)
    while free.any():
        count = np.bincount(links[free][used[free]], minlength=len(capacity))
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(count > 0, left / count, math.inf)
        least = float(share.min())
        if math.isinf(least):
            break  # the flows left cross no link of finite bandwidth
        tight = share <= least * (1 + _TIE)
        fixed = free & (used & tight[safe]).any(axis=1)
        rate[fixed] = least
        left -= least * np.bincount(links[fixed][used[fixed]], minlength=len(capacity))
        free &= ~fixed
    return rate
