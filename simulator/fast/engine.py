"""The fast engine: the reference engine's tables from compiled sweeps over arrays.

Each algorithm's record names its kernel (:mod:`.rounds` for the round-per-call algorithms); the kernel takes the
very rules object the reference engine's process takes, so the two engines cannot disagree on parameters, only on
mechanics, and a test compares their tables on random scenarios. This module is what every kernel shares: the window
of rows and compute times, and handing final rows and round rows over.

Rows are produced in a sliding window of iterations: a row is handed to ``rows`` once no later event can change
it, so memory grows with the window (a few dozen iterations × workers), not with the run, and nothing is kept when
the caller only aggregates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from numba import njit

from stragglerlab.simulator.imbalance import CallCosts, ComputeTimes

if TYPE_CHECKING:
    from stragglerlab.simulator.scenario import Scenario

RowsCallback = Callable[[Mapping[str, np.ndarray]], None]
#: what a kernel returns when it stops: all done, or it needs the driver to slide the window, to widen its queues,
#: or to hand over the round rows it filled
DONE, NEED_ROWS, NEED_PENDING, OUT_FULL = 0, 1, 2, 3
#: the columns of round rows a kernel fills (the driver adds ``kind`` and ``group``)
ROUND_OUTPUT = {
    "round": np.int64,
    "initiator": np.int64,
    "t_trigger": np.float64,
    "t_done": np.float64,
    "contributors": np.int64,
    "fresh": np.int64,
}


@njit(cache=True)
def returned(post, release, cost):
    """When a call posted at ``post`` and released at ``release`` returns: after its software cost ``cost`` when it
    was released the instant it posted (it waited for no exchange), else at its release."""
    return post + cost if release == post else release


def _block(
    window: _Window,
    last: int,
    version: Callable[[np.ndarray, np.ndarray], np.ndarray],
    limit: np.ndarray | None = None,
) -> dict:
    """The recorded columns of the final rows of iterations [window.base, last), iteration-major, only those below
    each worker's ``limit`` when one is given (the time budget stopped the workers there); the times are views into
    the window's buffers, valid until the window slides, or copies when rows are left out."""
    count = last - window.base
    iteration = np.repeat(np.arange(window.base, last, dtype=np.int64), window.workers)
    worker = np.tile(np.arange(window.workers, dtype=np.int64), count)
    columns = {
        "worker": worker,
        "iteration": iteration,
        "t_start": window.start[:count].ravel(),
        "t_post": window.post[:count].ravel(),
        "t_done": window.done[:count].ravel(),
        "round": window.round[:count].ravel(),
        "fresh": window.fresh[:count].ravel(),
    }
    if limit is not None:
        kept = iteration < limit[worker]
        columns = {name: column[kept] for name, column in columns.items()}
    columns["model_version"] = version(columns["iteration"], columns["round"])
    return columns


#: ``factors(n0, n1, out)``: the factors of every worker's exchange at iterations n0 .. n1-1 into ``out``
Factors = Callable[[int, int, np.ndarray], None]


class _Window:
    """Row buffers, compute times, call costs (``calls``, all 0 without ``workload.call``) and, where the rules give
    them, the factors of each worker's own exchange (``factors``; else one row of 1s) for iterations [base, base +
    size), slid forward as rows become final."""

    def __init__(
        self, compute: ComputeTimes, calls: CallCosts, iterations: int, size: int, factors: Factors | None = None
    ):
        self.compute, self.call_costs, self.iterations, self.workers = compute, calls, iterations, compute.workers
        self.exchange_factors = factors
        self.base, self.size = 0, size
        self._allocate(size)
        self._fill(0, min(size, iterations))

    def _allocate(self, size: int) -> None:
        shape = (size, self.workers)
        self.start, self.post, self.done = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        self.round = np.full(shape, -1, dtype=np.int64)
        self.fresh = np.zeros(shape, dtype=np.bool_)
        self.times = np.zeros(shape)
        self.calls = np.zeros(shape)
        self.factors = np.ones(shape if self.exchange_factors is not None else (1, self.workers))

    def _fill(self, first: int, last: int) -> None:
        """Compute times, call costs and exchange factors of iterations [first, last) into the window."""
        if last > first:
            rows = slice(first - self.base, last - self.base)
            self.compute.block(first, last, out=self.times[rows])
            if self.call_costs.call is not None:
                self.call_costs.block(first, last, out=self.calls[rows])
            if self.exchange_factors is not None:
                self.exchange_factors(first, last, self.factors[rows])

    def released(self, last: int) -> np.ndarray:
        """When the calls of iterations [base, last) were released: a call that returned after its software cost
        was released at its post."""
        count = last - self.base
        post, done = self.post[:count], self.done[:count]
        return np.where(done == post + self.calls[:count], post, done)

    def slide(self, final: int) -> None:
        """Drop the final rows [base, final) and move the rest to the front; double the window when none could be
        dropped."""
        shift = final - self.base
        keep = self.size - shift
        buffers = self._buffers()
        if shift == 0:
            self.size *= 2
            self._allocate(self.size)
        for new, old in zip(self._buffers(), buffers, strict=True):
            # one flat move: numpy would copy overlapping rows through a temporary
            new.reshape(-1)[: keep * self.workers] = old.reshape(-1)[shift * self.workers :]
        if shift:
            self.round[keep:] = -1
            self.fresh[keep:] = False
        self.base = final
        self._fill(min(self.base + keep, self.iterations), min(self.base + self.size, self.iterations))

    def _buffers(self) -> tuple[np.ndarray, ...]:
        rows = self.start, self.post, self.done, self.round, self.fresh, self.times, self.calls
        return (*rows, self.factors) if self.exchange_factors is not None else rows


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
        self.requested = window

    def run(self, kernel: Callable[[Any, FastEngine], None], rules: Any) -> None:
        """Run an algorithm's ``kernel`` with its ``rules``."""
        kernel(rules, self)

    def window_size(self, stride: int = 1) -> int:
        """Iterations per window: enough to amortise the sweeps, few enough to keep it under ~100 MB."""
        return self.requested or max(64, 4 * stride, min(2048, 2**21 // self.P))

    def window(self, size: int, factors: Factors | None = None) -> _Window:
        """A window of ``size`` iterations; ``factors`` fills its exchange factors (else all 1)."""
        return _Window(self.compute, self.calls, self.N, size, factors)

    @staticmethod
    def round_buffers(size: int) -> dict[str, np.ndarray]:
        """Arrays for up to ``size`` round rows of a kernel's output."""
        return {name: np.zeros(size, dtype=dtype) for name, dtype in ROUND_OUTPUT.items()}

    def flush(
        self,
        window: _Window,
        final: int,
        version: Callable[[np.ndarray, np.ndarray], np.ndarray],
        limit: np.ndarray | None = None,
    ) -> None:
        """Hand over the window's rows before iteration ``final``, and below worker i's ``limit[i]`` when given
        (where the time budget stopped it); ``version(iteration, round)`` gives their model versions."""
        if final > window.base:
            block = _block(window, final, version, limit)
            self.rows(block)
            if self.progress is not None:
                self.progress(len(block["iteration"]))

    def emit_rounds(self, count: int, out: dict[str, np.ndarray], kind: np.ndarray, group: np.ndarray) -> None:
        """Hand over the first ``count`` round rows of a kernel's output, with their kinds and groups."""
        if count:
            self.rounds({**{name: out[name][:count].copy() for name in ROUND_OUTPUT}, "kind": kind, "group": group})
