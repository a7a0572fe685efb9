"""The fast engine: the reference engine's tables from compiled sweeps over arrays.

The engine owns the loop over time. It keeps a window of iterations (every worker's compute times, call costs and
exchange factors, and the rows being written), and calls the algorithm's *step*: a function compiled with numba that
advances the run as far as the window and its round output allow, and says why it stopped (:data:`DONE`,
:data:`NEED_ROWS`, :data:`OUT_FULL`). The engine then hands the round rows over, hands the final rows over and slides
the window, and calls the step again. An algorithm's fast path is a :class:`Kernel`: its step and the state it starts
from, built from the very rules object the reference engine's process takes, so the two engines cannot disagree on
parameters, only on mechanics; a test compares their tables on random scenarios.

A step sees the window as :class:`Rows` and the round output as :class:`RoundRows`, and its own state as one tuple of
arrays and parameters; it keeps in that state everything it needs to resume. A helper that a step calls once per
worker takes arrays, not these tuples: numba counts a reference to every array of a tuple it passes, even to an
inlined function, which costs a hundred times a small helper's work (a helper called once per round or batch may
take them). It writes every recorded column of a
row (``model_version`` included) and, when it stops for rows, how many of the window's iterations are final
(``Rows.at[FINAL]``: no later event can change them); when it is done, how many rows each worker has
(``Rows.stop``: fewer than the iterations where the time budget stopped it).

Rows are handed over in a sliding window, so memory grows with the window (a few dozen iterations × workers), not
with the run, and nothing is kept when the caller only aggregates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np
from numba import njit

from stragglerlab.simulator.imbalance import CallCosts, ComputeTimes

if TYPE_CHECKING:
    from stragglerlab.simulator.scenario import Scenario

RowsCallback = Callable[[Mapping[str, np.ndarray]], None]
#: why a step stopped: the run is done; the window must slide (or grow, when no row is final); the round output is full
DONE, NEED_ROWS, OUT_FULL = 0, 1, 2
#: ``Rows.at``: the window's first iteration (set by the engine), the end of its final rows (set by the step)
BASE, FINAL = 0, 1
#: round rows a step may write before it hands them over (at least one iteration's of every worker)
OUT_ROWS = 1 << 18

#: ``factors(n0, n1, out)``: the factors of every worker's exchange at iterations n0 .. n1-1 into ``out``
Factors = Callable[[int, int, np.ndarray], None]


class Rows(NamedTuple):
    """The window as a step sees it: rows × workers arrays of iterations [at[BASE], at[BASE] + rows)."""

    compute: np.ndarray  # compute times
    calls: np.ndarray  # software cost of a call released at its post (0 without ``workload.call``)
    factors: np.ndarray  # each worker's exchange factor (one row of 1s where the kernel asks for none)
    start: np.ndarray  # the recorded columns the step writes
    post: np.ndarray
    done: np.ndarray
    round: np.ndarray
    version: np.ndarray
    fresh: np.ndarray
    samples: np.ndarray  # int64: of its batch each worker-iteration processed (the batch unless a step cuts it)
    at: np.ndarray  # int64: BASE, FINAL
    stop: np.ndarray  # int64, one per worker: its rows in the run, set by the step when it is done


class RoundRows(NamedTuple):
    """Round rows a step writes, from index 0; ``written[0]`` of them so far. ``kind`` is an index into the
    kernel's :attr:`Kernel.kinds`."""

    round: np.ndarray
    kind: np.ndarray
    initiator: np.ndarray
    t_trigger: np.ndarray
    t_done: np.ndarray
    contributors: np.ndarray
    fresh: np.ndarray
    group: np.ndarray
    written: np.ndarray

    @classmethod
    def empty(cls, size: int) -> RoundRows:
        ints = ("round", "kind", "initiator", "contributors", "fresh", "group")
        return cls(
            **{name: np.zeros(size, dtype=np.int64 if name in ints else np.float64) for name in cls._fields[:-1]},
            written=np.zeros(1, dtype=np.int64),
        )


@dataclass(frozen=True)
class Kernel:
    """An algorithm's fast path for one scenario: ``step(state, rows, out) -> status``, compiled, and the state it
    starts from (a tuple of arrays and parameters, built from the algorithm's rules)."""

    step: Callable[[Any, Rows, RoundRows], int]
    state: tuple
    kinds: tuple[str, ...]  # the ``kind`` of each index a step writes into RoundRows.kind
    factors: Factors | None = None  # fills Rows.factors; None: all 1
    window: int = 1  # the fewest iterations the window may hold


@njit(cache=True, inline="always")
def returned(post, release, calls, k, w):
    """When worker ``w``'s call of window row ``k``, posted at ``post`` and released at ``release``, returns: after its
    software cost ``calls[k, w]`` when it was released the instant it posted (it waited for no exchange), else at its
    release. The cost is read only then: a step that takes posts in time order reads rows scattered over the window,
    each read a cache miss."""
    return post + calls[k, w] if release == post else release


@njit(cache=True)
def starts_and_posts(rows, first, update, last):
    """Write the start and post of every window row before iteration ``last``, for a step that leaves them to this
    sweep: a row starts at its worker's previous return (``Rows.done``) plus the update, and posts its compute time
    later. ``first[w]``: the start of worker w's first row not yet written, moved on to its row ``last``. A step that
    takes posts in time order writes rows at scattered places, a cache miss each; in row order they are one after
    the other."""
    compute, start, post, done = rows.compute, rows.start, rows.post, rows.done
    for k in range(last - rows.at[BASE]):
        for w in range(first.shape[0]):
            t = first[w]
            start[k, w] = t
            post[k, w] = t + compute[k, w]
            first[w] = done[k, w] + update


class _Window:
    """The window's buffers for iterations [base, base + size), slid forward as rows become final.

    Each buffer is a view of the first ``size`` rows of a reservation. The first window is allocated as it is; a
    window that grows (its workers drift apart: LSGD's and AD-PSGD's at compute of cv 1.0) is moved once into a
    reservation of :data:`SPAN` bytes a buffer (at least four times its rows, at most the run's iterations): rows
    allocated but not touched until the window takes them, which cost no memory until then, so from then on the
    window grows in place (its new rows written with their defaults). Fresh buffers at each doubling, with the rows
    copied over, took as long as LSGD's steps (65,536 workers); a reservation of four times the first window still
    filled 256 rows of every buffer only to move them, 2 of AD-PSGD's 30 s (docs/semantics.md)."""

    #: each buffer: its dtype and the value its rows take when they join the window
    DEFAULTS: ClassVar[dict[str, tuple[type, float | int | bool]]] = {
        "times": (np.float64, 0.0), "calls": (np.float64, 0.0), "factors": (np.float64, 1.0),
        "start": (np.float64, 0.0), "post": (np.float64, 0.0), "done": (np.float64, 0.0),
        "round": (np.int64, -1), "version": (np.int64, 0), "fresh": (np.bool_, False), "samples": (np.int64, 0),
    }  # fmt: skip
    #: a reservation, once the window grows: SPAN bytes a buffer, and at least RESERVE times the window's rows
    SPAN, RESERVE = 1 << 30, 4
    times: np.ndarray
    calls: np.ndarray
    factors: np.ndarray
    start: np.ndarray
    post: np.ndarray
    done: np.ndarray
    round: np.ndarray
    version: np.ndarray
    fresh: np.ndarray
    samples: np.ndarray

    def __init__(
        self, compute: ComputeTimes, calls: CallCosts, iterations: int, size: int, factors: Factors | None, batch: int
    ):
        self.compute, self.call_costs, self.iterations, self.workers = compute, calls, iterations, compute.workers
        self.batch = batch
        self.exchange_factors = factors
        self.names = [name for name in self.DEFAULTS if name != "factors" or factors is not None]
        self.base, self.size, self.reserved = 0, 0, 0
        self.stores: dict[str, np.ndarray] = {}
        if factors is None:
            self.factors = np.ones((1, self.workers))
        self.at = np.zeros(2, dtype=np.int64)
        self.stop = np.full(self.workers, iterations, dtype=np.int64)
        # rows are handed over in blocks of the first window's iterations: their worker and iteration columns (the
        # iteration less the block's first), made once
        self.chunk = size
        self.worker = np.tile(np.arange(self.workers, dtype=np.int64), size)
        self.offset = np.repeat(np.arange(size, dtype=np.int64), self.workers)
        self._grow(size)
        self._fill(0, min(size, iterations))

    def _grow(self, size: int) -> None:
        """Make the window ``size`` rows long, its rows kept where they are, the new ones at their defaults. The new
        rows were never touched, so they are zero already; the calls are written all the same: a window without call
        costs never writes them, and reading pages of np.zeros that nothing wrote took preempt's sweep three times as
        long at 65,536 workers (writing the zeros of the buffers that the steps write took sync a fifth longer)."""
        W, old = self.workers, self.size
        if size > self.reserved:
            self.reserved = (
                max(size, min(self.iterations, max(self.RESERVE * size, self.SPAN // (8 * W)))) if old else size
            )
            stores: dict[str, np.ndarray] = {
                name: np.zeros((self.reserved, W), dtype=self.DEFAULTS[name][0]) for name in self.names
            }
            for name, store in self.stores.items():
                stores[name][:old] = store[:old]
            self.stores = stores
        for name in self.names:
            value = self.batch if name == "samples" else self.DEFAULTS[name][1]
            if value or name == "calls":
                self.stores[name][old:size] = value
            setattr(self, name, self.stores[name][:size])
        self.size = size

    def rows(self) -> Rows:
        self.at[BASE] = self.base
        return Rows(
            self.times, self.calls, self.factors, self.start, self.post, self.done, self.round, self.version,
            self.fresh, self.samples, self.at, self.stop,
        )  # fmt: skip

    def _fill(self, first: int, last: int) -> None:
        """Compute times, call costs and exchange factors of iterations [first, last) into the window."""
        if last > first:
            rows = slice(first - self.base, last - self.base)
            self.compute.block(first, last, out=self.times[rows])
            if self.call_costs.call is not None:
                self.call_costs.block(first, last, out=self.calls[rows])
            if self.exchange_factors is not None:
                self.exchange_factors(first, last, self.factors[rows])

    def blocks(self, final: int, limit: np.ndarray | None = None) -> Iterator[dict[str, np.ndarray]]:
        """The recorded columns of iterations [base, final), iteration-major, in blocks of at most :attr:`chunk`
        iterations, only those below each worker's ``limit`` when one is given. What the callbacks derive from a
        block is then made in memory of the same size each time, which the allocator hands back; the blocks of a
        window that spans a drift (LSGD's 512 iterations at 65,536 workers) were made in fresh memory each time
        (docs/semantics.md)."""
        for first in range(self.base, final, self.chunk):
            last = min(first + self.chunk, final)
            yield self._block(first, last, limit if limit is not None and (limit < last).any() else None)

    def _block(self, first: int, last: int, limit: np.ndarray | None) -> dict[str, np.ndarray]:
        """Iterations [first, last) of :meth:`blocks`; the times are views into the buffers, valid until the window
        slides, or copies when rows are left out."""
        W = self.workers
        cells = slice((first - self.base) * W, (last - self.base) * W)
        columns = {
            "worker": self.worker[: (last - first) * W],
            "iteration": self.offset[: (last - first) * W] + first,
            "t_start": self.start.reshape(-1)[cells],
            "t_post": self.post.reshape(-1)[cells],
            "t_done": self.done.reshape(-1)[cells],
            "round": self.round.reshape(-1)[cells],
            "model_version": self.version.reshape(-1)[cells],
            "fresh": self.fresh.reshape(-1)[cells],
            "samples": self.samples.reshape(-1)[cells],
        }
        if limit is not None:
            kept = columns["iteration"] < limit[columns["worker"]]
            columns = {name: column[kept] for name, column in columns.items()}
        return columns

    def slide(self, final: int) -> None:
        """Drop the final rows [base, final) and move the rest to the front; double the window (never past the run's
        last iteration) when fewer than half its rows could be dropped, so that a slide moves no more rows than it
        drops: where workers drift apart (LSGD's and AD-PSGD's at compute of cv 1.0), the rows kept span the drift,
        and sliding a window little longer than the drift by its few final rows at a time moved it whole each time
        (more time than the steps took)."""
        shift = final - self.base
        keep = self.size - shift
        if shift == 0 or (keep > shift and self.base + self.size < self.iterations):
            self._grow(min(2 * self.size, self.iterations - self.base))
        if shift:
            W = self.workers
            for name in self.names:
                # one flat move: numpy would copy overlapping rows through a temporary
                flat = self.stores[name].reshape(-1)
                flat[: keep * W] = flat[shift * W : (shift + keep) * W]
            self.round[keep:] = -1
            self.fresh[keep:] = False
            self.samples[keep:] = self.batch
        self.base = final
        self._fill(min(self.base + keep, self.iterations), min(self.base + self.size, self.iterations))


class FastEngine:
    """Runs one scenario with an algorithm's kernel: ``rows(columns)`` receives blocks of final iteration rows (the
    recorded columns), ``rounds(columns)`` blocks of round rows. ``window`` fixes the window's first size (tests)."""

    def __init__(
        self,
        scenario: Scenario,
        rows: RowsCallback,
        rounds: RowsCallback,
        progress: Callable[[int], None] | None = None,
        window: int | None = None,
    ):
        self.P, self.N = scenario.workers, scenario.iterations
        self.rows, self.rounds, self.progress = rows, rounds, progress
        self.compute, self.calls = ComputeTimes(scenario), CallCosts(scenario)
        self.batch = scenario.workload.batch
        self.requested = window

    def window_size(self, least: int = 1) -> int:
        """Iterations per window: enough to amortise the sweeps, few enough to keep it under ~100 MB, at least
        ``least``."""
        return max(self.requested or max(64, 2 * least, min(2048, 2**21 // self.P)), least)

    def run(self, kernel: Kernel) -> None:
        """Run ``kernel``'s step until it is done."""
        window = _Window(self.compute, self.calls, self.N, self.window_size(kernel.window), kernel.factors, self.batch)
        out = RoundRows.empty(max(OUT_ROWS, self.P))
        # one kind: a column of it, handed over in slices (never written); several: taken by index
        kinds = np.array(kernel.kinds, dtype=object)
        if len(kinds) == 1:
            kinds = np.full(len(out.kind), kinds[0], dtype=object)
        while True:
            status = kernel.step(kernel.state, window.rows(), out)
            self._emit(out, kinds)
            if status == DONE:
                break
            if status == NEED_ROWS:
                final = int(window.at[FINAL])
                self._flush(window, final)
                window.slide(final)
        self._flush(window, int(window.stop.max(initial=0)), window.stop)

    def _flush(self, window: _Window, final: int, limit: np.ndarray | None = None) -> None:
        """Hand over the window's rows before iteration ``final``, and below worker i's ``limit[i]`` when given."""
        for block in window.blocks(final, limit):
            self.rows(block)
            if self.progress is not None:
                self.progress(len(block["iteration"]))

    def _emit(self, out: RoundRows, kinds: np.ndarray) -> None:
        """Hand over the round rows the step wrote (copies: the step writes over them next)."""
        count = int(out.written[0])
        if count:
            columns = {
                name: getattr(out, name)[:count].copy() for name in out._fields if name not in ("written", "kind")
            }
            kind = kinds[:count] if len(kinds) == len(out.kind) else kinds[out.kind[:count]]
            self.rounds({**columns, "kind": kind})
            out.written[0] = 0
