"""Per-iteration compute times of every worker: the compute distribution times the imbalance model.

Common random numbers: the time of worker i at iteration n is a pure function of the scenario's seed,
i, n and the compute and imbalance models, never of the algorithm. Each iteration draws from its own streams
(``SeedSequence(seed, spawn_key=(n, stream))``): one for the base compute time, where worker i takes the i-th draw
(so its value does not depend on the number of workers either), one for the random-delay selection, and one for the
software cost of the calls that wait for no exchange (``workload.call``, :class:`CallCosts`), drawn alike. Any block of
iterations can therefore be produced on its own, in any order, by the simulator or by a real run's rank.

The spread of exchange times (:class:`ExchangeSpread`) comes from streams of its own as well: a standard normal and a
uniform draw per round index, and per worker-iteration, which an exchange's :class:`Spread` turns into its factor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from stragglerlab.simulator.keys import ScenarioError

if TYPE_CHECKING:
    from stragglerlab.simulator.scenario import Compute, Imbalance, Scenario

_BASE, _SLOW, _CALL, _ROUND, _WORKER = 0, 1, 2, 3, 4
KEPT_ROWS = 256  # of the worker stream, for the reference engine, which asks for an exchange's factor at a time


def _stream(seed: int, iteration: int, stream: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(iteration, stream))))


def read_trace(path: Path, workers: int, origin: str = "imbalance.file") -> np.ndarray:
    """An iterations x workers matrix of compute times from ``.npy`` or ``.csv``, checked for shape and sign."""
    where = f"{origin}: imbalance.file = {path}"
    if not path.is_file():
        raise ScenarioError(f"{where}: no such file")
    try:
        data = np.load(path) if path.suffix == ".npy" else np.loadtxt(path, delimiter=",", ndmin=2)
    except (ValueError, OSError, EOFError) as err:
        raise ScenarioError(f"{where}: cannot read it as .npy or comma-separated numbers ({err})") from None
    if not isinstance(data, np.ndarray) or data.dtype.kind not in "biuf":  # an archive, strings, dates, records
        raise ScenarioError(f"{where}: holds {getattr(data, 'dtype', 'no')} values, not numbers of seconds")
    data = np.asarray(data, dtype=np.float64)
    if data.ndim == 1 and workers == 1:
        data = data[:, None]
    if data.ndim != 2 or data.shape[1] != workers or data.shape[0] == 0:
        raise ScenarioError(f"{where}: shape {data.shape} must be (iterations, {workers}) with one column per worker")
    if not np.all(np.isfinite(data)) or np.any(data < 0):
        raise ScenarioError(f"{where}: compute times must be finite and >= 0")
    return data


def _draw_base(c: Compute, rng: np.random.Generator, size: int) -> np.ndarray:
    """Compute times with mean ``c.mean``, parameterised by the coefficient of variation or the shape (the scenario
    checks that the distribution has the one it needs)."""
    if c.dist == "pareto":  # Lomax draws + 1, scaled so the mean is c.mean
        assert c.shape is not None
        return (rng.pareto(c.shape, size) + 1.0) * (c.mean * (c.shape - 1.0) / c.shape)
    if c.dist == "gamma" and c.shape is not None:
        return rng.gamma(c.shape, c.mean / c.shape, size)
    assert c.cv is not None
    if c.dist == "normal":
        return np.maximum(rng.normal(c.mean, c.cv * c.mean, size), 0.0)
    if c.dist == "lognormal":
        sigma2 = np.log1p(c.cv**2)
        return rng.lognormal(np.log(c.mean) - sigma2 / 2, np.sqrt(sigma2), size)
    k = 1.0 / c.cv**2  # gamma
    return rng.gamma(k, c.mean / k, size)


def _draw_row(c: Compute, seed: int, n: int, stream: int, out: np.ndarray) -> None:
    """Iteration ``n``'s draws of ``c`` for every worker, from its ``stream``, into ``out``."""
    if c.dist == "constant":
        out.fill(c.mean)
    else:
        out[:] = _draw_base(c, _stream(seed, n, stream), len(out))


class ComputeTimes:
    """Compute time of each worker-iteration: ``block(n0, n1)`` is the (n1 - n0) x workers matrix."""

    def __init__(self, scenario: Scenario):
        self.seed = scenario.seed
        self.workers = scenario.workers
        self.compute: Compute = scenario.workload.compute
        self.imbalance: Imbalance = scenario.imbalance
        file = self.imbalance.file
        self.trace = read_trace(file, self.workers) if file is not None and self.imbalance.kind == "trace" else None
        self.factors = np.ones(self.workers)
        if self.imbalance.kind == "persistent":
            for worker, factor in self.imbalance.factors.items():
                self.factors[worker] = factor

    def row(self, n: int, out: np.ndarray | None = None) -> np.ndarray:
        """The compute times of all workers at iteration ``n`` (written into ``out`` when given)."""
        if out is None:
            out = np.empty(self.workers)
        if self.trace is not None:
            out[:] = self.trace[n % len(self.trace)]
            return out
        _draw_row(self.compute, self.seed, n, _BASE, out)
        if self.imbalance.kind == "persistent":
            out *= self.factors
        elif self.imbalance.kind == "random-delay":
            out[self.slow_workers(n)] += self.imbalance.delay
        return out

    def slow_workers(self, n: int) -> np.ndarray:
        """Workers delayed at iteration ``n`` by random-delay imbalance (sorted; empty for other kinds). ``draw =
        count``: a count k uniform in [min, max], then k distinct workers; ``independent``: max independent uniform
        draws with replacement, each drawn worker delayed once (as the released eager-SGD code meant to)."""
        if self.imbalance.kind != "random-delay":
            return np.empty(0, dtype=np.int64)
        lo, hi = self.imbalance.slow
        rng = _stream(self.seed, n, _SLOW)
        if self.imbalance.draw == "independent":
            return np.unique(rng.integers(0, self.workers, size=hi))
        k = int(rng.integers(lo, hi + 1))
        return np.sort(rng.choice(self.workers, size=k, replace=False))

    def block(self, n0: int, n1: int, out: np.ndarray | None = None) -> np.ndarray:
        """Compute times of iterations ``n0 .. n1-1`` as an (n1 - n0) x workers matrix (``out`` when given)."""
        if out is None:
            out = np.empty((max(n1 - n0, 0), self.workers))
        for k, n in enumerate(range(n0, n1)):
            self.row(n, out[k])
        return out


class CallCosts:
    """The software cost of each worker-iteration's call when it waits for no exchange (``workload.call``): the
    time from its post to its return, drawn from the call stream as compute times are from theirs. All 0 without
    ``workload.call``."""

    def __init__(self, scenario: Scenario):
        self.seed = scenario.seed
        self.workers = scenario.workers
        self.call: Compute | None = scenario.workload.call

    def block(self, n0: int, n1: int, out: np.ndarray | None = None) -> np.ndarray:
        """Call costs of iterations ``n0 .. n1-1`` as an (n1 - n0) x workers matrix (``out`` when given)."""
        if out is None:
            out = np.empty((max(n1 - n0, 0), self.workers))
        if self.call is None:
            out.fill(0.0)
            return out
        for k, n in enumerate(range(n0, n1)):
            _draw_row(self.call, self.seed, n, _CALL, out[k])
        return out


def lognormal_factor(z: np.ndarray | float, cv: float) -> np.ndarray | float:
    """The lognormal factor of mean 1 and coefficient of variation ``cv`` for standard normal draws ``z``: exactly
    1 when ``cv`` is 0."""
    sigma2 = np.log1p(cv**2)
    return np.exp(np.sqrt(sigma2) * z - sigma2 / 2)


@dataclass(frozen=True)
class Spread:
    """How single exchanges of one kind vary about their mean time T: a lognormal bulk and rare stalls. A fraction
    ``stalls`` of the exchanges stall and take ``stall`` · T more than the bulk; the bulk's mean is
    T · (1 − stalls · stall), so the mean stays T, and its coefficient of variation is ``cv``. All 0 (the formulas'):
    every exchange takes exactly T."""

    cv: float = 0.0
    stalls: float = 0.0
    stall: float = 0.0

    @property
    def exact(self) -> bool:
        """Every exchange takes exactly its time (no draw is made)."""
        return self.cv == 0 and self.stalls == 0

    def factor(self, z: np.ndarray | float, u: np.ndarray | float) -> np.ndarray | float:
        """The factors on T for standard normal draws ``z`` and uniform draws ``u`` (a stall where u < stalls): of
        mean 1, and exactly the bulk's lognormal without stalls."""
        bulk = lognormal_factor(z, self.cv)
        if self.stalls == 0:
            return bulk
        return (1.0 - self.stalls * self.stall) * bulk + self.stall * (np.asarray(u) < self.stalls)


class ExchangeSpread:
    """The factors by which single exchanges vary about the cost model's time (its :class:`Spread` per exchange
    kind). An exchange that rounds number (a round, an LSGD exchange) takes the first normal and the first uniform
    draw of its index's round stream; a worker's own exchange at iteration n (gossip, ad-psgd, a push to the server)
    takes the worker's normal and uniform draws of iteration n's worker stream. No draw is made where the spread is
    exact."""

    def __init__(self, scenario: Scenario):
        self.seed = scenario.seed
        self.workers = scenario.workers
        self._rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def rounds(self, spreads: Sequence[Spread]) -> np.ndarray:
        """The factors of exchanges 0 .. len(spreads) − 1, exchange m's of spread ``spreads[m]``."""
        out = np.ones(len(spreads))
        for m, spread in enumerate(spreads):
            if not spread.exact:
                stream = _stream(self.seed, m, _ROUND)
                out[m] = spread.factor(stream.standard_normal(), stream.random())
        return out

    def block(self, spread: Spread, n0: int, n1: int, out: np.ndarray | None = None) -> np.ndarray:
        """The factors of every worker's exchange at iterations ``n0 .. n1-1``, an (n1 - n0) x workers matrix
        (``out`` when given)."""
        if out is None:
            out = np.empty((max(n1 - n0, 0), self.workers))
        if spread.exact:
            out.fill(1.0)
            return out
        for k, n in enumerate(range(n0, n1)):
            out[k] = spread.factor(*self._draws(n))
        return out

    def at(self, spread: Spread, n: int, worker: int) -> float:
        """The factor of ``worker``'s exchange at iteration ``n`` (the reference engine's, one exchange at a time:
        the iteration's draws are kept while the iterations around it run)."""
        if spread.exact:
            return 1.0
        if n not in self._rows:
            if len(self._rows) > 4 * KEPT_ROWS:
                self._rows = {k: v for k, v in self._rows.items() if k > n - KEPT_ROWS}
            self._rows[n] = self._draws(n)
        z, u = self._rows[n]
        return float(spread.factor(z[worker], u[worker]))

    def _draws(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Iteration ``n``'s normal and uniform draws of the worker stream, one of each per worker."""
        stream = _stream(self.seed, n, _WORKER)
        return stream.standard_normal(self.workers), stream.random(self.workers)


def released_eager_sgd_delays(workers: int, iterations: int, seed: int, delay: float) -> np.ndarray:
    """The delays the released eager-SGD code injected as it actually ran, an iterations x workers matrix: every rank
    seeds numpy's legacy generator alike and sleeps ``delay`` when ``rank == randint(P) or rank == randint(P)``; the
    ``or`` skips the second draw on the rank the first one picked, so from then on the ranks' generators disagree on
    who is slow (about 2 slow ranks per step on average, but some steps none and some many). Add it to the compute
    times and run it as a trace (``imbalance.kind = "trace"``) to reproduce that injection."""
    generators = [np.random.RandomState(seed) for _ in range(workers)]
    out = np.zeros((iterations, workers))
    for n in range(iterations):
        for rank, rng in enumerate(generators):
            if rng.randint(workers) == rank or rng.randint(workers) == rank:
                out[n, rank] = delay
    return out
