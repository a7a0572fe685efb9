"""Measured collective times: the second implementation of the cost seam (:class:`~.costs.CostModel`).

``network.table = "costs.csv"`` names a table of measured round times, one row per measurement: ``kind`` (a rounds kind:
``sync``, ``async``, ``group``, ``average``, ``leader``; or ``allreduce``, which serves every kind that has no rows of
its own; or ``gossip``), ``ranks``, ``bytes`` (per rank) and ``seconds``; an optional ``world`` column is the rank count
of the job that measured the row, larger than ``ranks`` for the concurrent groups of a WAGMA phase (empty or absent: a
row for a job of any size, as tables before the column were read). A round's exchange time is interpolated linearly in
log(bytes) and log(seconds) between the measured sizes at its exact rank count and job size: a measured exchange holds
its whole software cost, so ``network.overhead`` is not added to it, and the contention it met. **(choice)** Concurrent
groups take only rows measured in a job of their own size: at 3 ranks a group of 2 beside a lone rank took 1.8 times
what it took alone at 2 ranks, so a row measured beside fewer ranks would price the groups of a larger job as if they
had the machine to themselves. A (kind, rank count, job size) the table has no rows of (nor ``allreduce`` rows of that
count alone), or a size outside the measured ones, is priced by the network model of ``[network]`` (:mod:`.network`, the
model ``stragglerlab calibrate --np`` fits to the same measurements; concurrent groups sharing its links), with a
warning (:class:`Extrapolated`) saying so.
Three optional columns say how single exchanges of that row vary about its time T (empty or absent: 0):
``stalls``, the fraction of exchanges that stall, ``stall``, the seconds a stalled exchange takes beyond the others'
mean, and ``cv``, the coefficient of variation of the others, a lognormal bulk of mean T − stalls · stall. Between
sizes ``cv``, ``stalls`` and the share of the mean in stalls (stalls · stall / T, below 1) are interpolated linearly in
log(bytes); each exchange then takes its time times a factor of mean 1 (:class:`~.imbalance.Spread`,
drawn by :class:`~.imbalance.ExchangeSpread`). ``gossip`` rows, where the table has them at the
run's rank count, are the whole time of one gossip exchange once the models it needs are posted (as the real harness
meets it: far more than two messages of alpha and beta where a peer's communication thread serves the exchange), and
replace the messages the network model sends; without them a gossip exchange is the model's messages. The activation
token, the other point-to-point messages, a server's service and the lower bound still come from ``[network]``.
"""

from __future__ import annotations

import csv
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stragglerlab.simulator.bounds import HORIZON, MAX_CV
from stragglerlab.simulator.imbalance import Spread
from stragglerlab.simulator.keys import ScenarioError
from stragglerlab.simulator.network import NetworkModel, Ranks

COLUMNS = ("kind", "ranks", "bytes", "seconds")
WORLD = "world"  # the optional column of the job's rank count
ANY_JOB = 0  # a row's job size where the table does not say it
SPREAD = ("cv", "stalls", "stall")  # the optional columns of the spread
#: (kind, ranks, world) -> sorted bytes, their seconds, and their cv, stalls and share of the mean in stalls (a row
#: each)
Table = dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]
ANY_KIND = "allreduce"
GOSSIP = "gossip"


def read_table(path: Path, origin: str = "network.table") -> Table:
    """(kind, ranks, world) -> (sorted bytes, seconds, spread) of a measured table; every flaw is a one-line
    error."""
    where = f"{origin}: network.table = {path}"
    try:
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames is None or not set(COLUMNS) <= set(reader.fieldnames):
                raise ScenarioError(f"{where}: needs the columns {', '.join(COLUMNS)}")
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise ScenarioError(f"{where}: cannot read it as comma-separated values ({err})") from None
    measured: dict[tuple[str, int, int], dict[float, tuple[float, tuple[float, float, float]]]] = {}
    for line, row in enumerate(rows, start=2):
        try:
            kind, ranks = row["kind"].strip(), int(row["ranks"])
            size, seconds = float(row["bytes"]), float(row["seconds"])
            cv, stalls, stall = (float((row.get(name) or "").strip() or 0.0) for name in SPREAD)
            world = int((row.get(WORLD) or "").strip() or ANY_JOB)
        except (ValueError, AttributeError):
            optional = ", ".join((*SPREAD, WORLD))
            raise ScenarioError(f"{where}: line {line} is not (kind, ranks, bytes, seconds[, {optional}])") from None
        if not kind or ranks < 1 or not (0 < size < math.inf and 0 < seconds <= HORIZON):
            raise ScenarioError(
                f"{where}: line {line}: ranks must be >= 1, bytes and seconds finite and > 0 (seconds at most "
                f"{HORIZON:.0e})"
            )
        if world != ANY_JOB and world < ranks:
            raise ScenarioError(f"{where}: line {line}: world (the job's rank count) must be >= ranks")
        if not (0 <= cv <= MAX_CV and 0 <= stalls < 1 and 0 <= stall <= HORIZON):
            raise ScenarioError(
                f"{where}: line {line}: cv and stall must be finite and >= 0 (cv at most {MAX_CV:g}, stall at most "
                f"{HORIZON:.0e}), stalls in [0, 1)"
            )
        if stalls * stall >= seconds:
            raise ScenarioError(f"{where}: line {line}: stalls x stall must be below seconds (the others' mean > 0)")
        measured.setdefault((kind, ranks, world), {})[size] = (seconds, (cv, stalls, stalls * stall / seconds))
    if not measured:
        raise ScenarioError(f"{where}: has no measurements")
    table = {}
    for key, v in measured.items():
        sizes = sorted(v)
        table[key] = (np.array(sizes), np.array([v[b][0] for b in sizes]), np.array([v[b][1] for b in sizes]))
    return table


class Extrapolated(UserWarning):
    """An exchange the measured table does not cover, priced by the network model instead."""


@dataclass(frozen=True)
class MeasuredModel:
    """Exchange times from a measured table where it has them; the network model ``formulas`` elsewhere."""

    formulas: NetworkModel
    table: Table
    name: str  # the table's file, for messages

    def collective(self, kind: str, nbytes: float, ranks: Ranks) -> float:
        p = ranks if isinstance(ranks, int) else len(ranks)
        if p <= 1:
            return 0.0
        measured = self._interpolated(self._key(kind, p, p), nbytes, kind)
        return self.formulas.collective(kind, nbytes, ranks) if measured is None else measured

    def concurrent(self, kind: str, nbytes: float, groups: Sequence[Sequence[int]]) -> list[float]:
        """Each group's rows measured in a job of this one's size (module doc); the model's concurrent groups, which
        share its links, for the groups the table lacks."""
        world = 1 + max(max(g) for g in groups)
        measured = [
            0.0 if len(g) <= 1 else self._interpolated(self._key(kind, len(g), world), nbytes, kind) for g in groups
        ]
        modelled = self.formulas.concurrent(kind, nbytes, groups) if None in measured else []
        return [modelled[i] if m is None else m for i, m in enumerate(measured)]

    def spread(self, kind: str, nbytes: float, ranks: Ranks) -> Spread:
        """The rows' spread: a gossip exchange's from the gossip rows, any other kind's from its own rows or else the
        ``allreduce`` ones, at the rank count; where the table has none there, those of the nearest rank count (and
        job size) it has (**(choice)**: how single exchanges vary about their mean is the machine's, and the model
        prices the mean); exact without any."""
        p = ranks if isinstance(ranks, int) else len(ranks)
        kinds = (kind,) if kind == GOSSIP else (kind, ANY_KIND)
        counts = {(r, w): k for k in reversed(kinds) for k_, r, w in self.table if k_ == k}  # a kind's own rows first
        if not counts:
            return Spread()

        def distance(rw: tuple[int, int]) -> tuple[float, float, int]:
            r, w = rw
            return abs(math.log(r / p)), abs(math.log((r if w == ANY_JOB else w) / p)), -r

        nearest = min(counts, key=distance)
        sizes, _, spreads = self.table[(counts[nearest], *nearest)]
        # the share of the mean in stalls is interpolated, not the stall itself, so that it stays below 1 between rows
        cv, stalls, share = (float(np.interp(math.log(nbytes), np.log(sizes), column)) for column in spreads.T)
        return Spread(cv, stalls, share / stalls if stalls > 0 else 0.0)

    def _key(self, kind: str, p: int, world: int) -> tuple[str, int, int]:
        """The rows that price ``kind`` over ``p`` ranks in a job of ``world``: its own (of that job size, else of any),
        else, for an exchange over the whole job, the ``allreduce`` rows of ``p`` ranks."""
        keys = [(kind, p, world), (kind, p, ANY_JOB)]
        if p == world:
            keys += [(ANY_KIND, p, p), (ANY_KIND, p, ANY_JOB)]
        return next((k for k in keys if k in self.table), keys[0])

    def _interpolated(self, key: tuple[str, int, int], nbytes: float, kind: str) -> float | None:
        """The table's time for ``nbytes`` in rows ``key``; None, with a warning, where it has none."""
        _, p, world = key
        if key not in self.table:
            jobs = sorted({(r, w) for k, r, w in self.table if k in (kind, ANY_KIND)})
            alone = sorted({r for r, w in jobs if w in (r, ANY_JOB)})
            beside = [over(r, w) for r, w in jobs if w not in (r, ANY_JOB)]
            parts = ([f"over {', '.join(map(str, alone))} ranks"] if alone else []) + beside
            where = f"measured {', '.join(parts)}" if jobs else "not measured"
            warnings.warn(
                f"network.table = {self.name}: no {kind} rounds {over(p, world)} ({where}): priced by the network "
                "model",
                Extrapolated,
                stacklevel=3,
            )
            return None
        sizes, seconds, _ = self.table[key]
        if not sizes[0] <= nbytes <= sizes[-1]:
            warnings.warn(
                f"network.table = {self.name}: {nbytes:g} bytes per rank is outside the {kind} rounds measured "
                f"{over(p, world)} ({sizes[0]:g} to {sizes[-1]:g} bytes): priced by the network model",
                Extrapolated,
                stacklevel=3,
            )
            return None
        if len(sizes) == 1:
            return float(seconds[0])
        return float(math.exp(np.interp(math.log(nbytes), np.log(sizes), np.log(seconds))))

    def activation(self, p: int) -> float:
        return self.formulas.activation(p)

    def p2p(self, n: float, intra: bool = False) -> float:
        return self.formulas.p2p(n, intra)

    def serve(self, n: float) -> float:
        return self.formulas.serve(n)

    def gossip(self, n: float, src: np.ndarray, dst: np.ndarray, messages: int = 1) -> np.ndarray:
        """The measured exchange for every pair where the table has gossip rows at this rank count, else the
        model's messages."""
        p = 1 + int(max(np.max(src), np.max(dst))) if len(src) else 0
        key = next((k for k in ((GOSSIP, p, p), (GOSSIP, p, ANY_JOB)) if k in self.table), None)
        if key is not None:
            measured = self._interpolated(key, n, GOSSIP)
            if measured is not None:
                return np.full(len(src), measured)
        return self.formulas.gossip(n, src, dst, messages)

    def describe(self, p: int, n: float) -> dict[str, float | str]:
        return {**self.formulas.describe(p, n), "table": self.name}


def over(ranks: int, world: int) -> str:
    """How a message names exchanges over ``ranks`` ranks in a job of ``world`` (:data:`ANY_JOB`: of any size)."""
    return f"over {ranks} ranks" if world in (ranks, ANY_JOB) else f"over {ranks} of {world} ranks"
