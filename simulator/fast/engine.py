"""The fast engine: the reference engine's tables from compiled sweeps (``stragglerlab.simulator.fast.kernels``).

It takes its rules (which rounds are synchronous, exchange times, initiators, late rule, LSGD periods and costs)
from the very algorithm objects the reference engine uses, so the two engines cannot disagree on parameters, only
on mechanics — and a test compares their tables on random scenarios.

Rows are produced in a sliding window of iterations: a row is handed to ``rows`` once no later event can change
it, so memory grows with the window (a few dozen iterations × workers), not with the run, and nothing is kept when
the caller only aggregates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from stragglerlab.simulator.algorithms import make
from stragglerlab.simulator.algorithms.lsgd import Lsgd
from stragglerlab.simulator.fast import kernels as K
from stragglerlab.simulator.imbalance import ComputeTimes
from stragglerlab.simulator.scenario import Scenario

RowsCallback = Callable[[Mapping[str, np.ndarray]], None]
_LATE = {"accumulate": K.ACCUMULATE, "drop": K.DROP, "deposit": K.DEPOSIT}
SUPPORTED = ("sync", "eager-solo", "eager-majority", "wagma", "lsgd", "local-sgd")


def supports(scenario: Scenario) -> bool:
    """Whether the fast engine implements the scenario's algorithm (all of DESIGN §4's do)."""
    return scenario.algorithm.name in SUPPORTED


def _block(window: _Window, last: int, version: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> dict:
    """The recorded columns of the final rows of iterations [window.base, last), iteration-major; the times are
    views into the window's buffers, valid until the window slides."""
    count = last - window.base
    iteration = np.repeat(np.arange(window.base, last, dtype=np.int64), window.workers)
    round_ = window.round[:count].ravel()
    return {
        "worker": np.tile(np.arange(window.workers, dtype=np.int64), count),
        "iteration": iteration,
        "t_start": window.start[:count].ravel(),
        "t_post": window.post[:count].ravel(),
        "t_done": window.done[:count].ravel(),
        "round": round_,
        "model_version": version(iteration, round_),
        "fresh": window.fresh[:count].ravel(),
    }


class _Window:
    """Row buffers and compute times for iterations [base, base + size), slid forward as rows become final."""

    def __init__(self, compute: ComputeTimes, iterations: int, size: int):
        self.compute, self.iterations, self.workers = compute, iterations, compute.workers
        self.base, self.size = 0, size
        self._allocate(size)
        self._fill(0, min(size, iterations))

    def _allocate(self, size: int) -> None:
        shape = (size, self.workers)
        self.start, self.post, self.done = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        self.round = np.full(shape, -1, dtype=np.int64)
        self.fresh = np.zeros(shape, dtype=np.bool_)
        self.times = np.zeros(shape)

    def _fill(self, first: int, last: int) -> None:
        """Compute times of iterations [first, last) into the window."""
        if last > first:
            self.compute.block(first, last, out=self.times[first - self.base : last - self.base])

    def slide(self, final: int) -> None:
        """Drop the final rows [base, final) and move the rest to the front; double the window when none could be
        dropped."""
        shift = final - self.base
        keep = self.size - shift
        buffers = (self.start, self.post, self.done, self.round, self.fresh, self.times)
        if shift == 0:
            self.size *= 2
            self._allocate(self.size)
        for new, old in zip(
            (self.start, self.post, self.done, self.round, self.fresh, self.times), buffers, strict=True
        ):
            # one flat move: numpy would copy overlapping rows through a temporary
            new.reshape(-1)[: keep * self.workers] = old.reshape(-1)[shift * self.workers :]
        if shift:
            self.round[keep:] = -1
            self.fresh[keep:] = False
        self.base = final
        self._fill(min(self.base + keep, self.iterations), min(self.base + self.size, self.iterations))


class FastEngine:
    """Runs one scenario; ``rows(columns)`` receives final iteration rows, ``rounds(columns)`` round rows."""

    def __init__(
        self,
        scenario: Scenario,
        rows: RowsCallback,
        rounds: RowsCallback,
        progress: Callable[[int], None] | None = None,
        window: int | None = None,
    ):
        self.scenario = scenario
        self.P, self.N = scenario.workers, scenario.iterations
        self.algorithm = make(scenario, None)
        self.emit_rows, self.emit_rounds, self.progress = rows, rounds, progress
        self.compute = ComputeTimes(scenario)
        # enough iterations per window to amortise the sweeps, few enough to keep it under ~100 MB
        self.window_size = window or max(64, 4 * getattr(self.algorithm, "stride", 1), min(2048, 2**21 // self.P))

    def run(self) -> None:
        if isinstance(self.algorithm, Lsgd):
            self._run_lsgd()
        else:
            self._run_rounds()

    def _flush(self, window: _Window, final: int, version) -> None:
        if final > window.base:
            self.emit_rows(_block(window, final, version))
            if self.progress is not None:
                self.progress((final - window.base) * self.P)

    def _emit_rounds(self, count: int, out: dict[str, np.ndarray], kind: np.ndarray, group: np.ndarray) -> None:
        """Hand over the first ``count`` round rows of the kernel's output, with their kinds and groups."""
        if count:
            columns = {
                name: out[name][:count].copy()
                for name in ("round", "initiator", "t_trigger", "t_done", "contributors", "fresh")
            }
            self.emit_rounds({**columns, "kind": kind, "group": group})

    def _run_rounds(self) -> None:
        a, P = self.algorithm, self.P
        total, stride = a.total, a.stride
        rounds = range(total)
        is_sync = np.array([a.synchronous(m) for m in rounds], dtype=np.bool_)
        t_exchange = np.array([a.exchange_time(m) for m in rounds], dtype=np.float64)
        initiator = np.array([-1 if is_sync[m] else a.fixed_initiator(m) for m in rounds], dtype=np.int64)
        kind = np.where(is_sync, a.sync_kind, a.async_kind).astype(object)
        group = np.array([a.group(m) for m in rounds], dtype=np.int64)
        late = _LATE[a.late_rule]
        window = _Window(self.compute, self.N, max(self.window_size, 2 * stride))
        state = np.zeros(2, dtype=np.int64)
        t_start, first_post = np.zeros(P), np.full(P, np.inf)
        depth = max(8, a.options.sync_period + 2)
        pend_n, pend_t = np.zeros((P, depth), dtype=np.int64), np.zeros((P, depth))
        pend_head, pend_len = np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64)
        batch = max(1, window.size // stride)
        out = {
            "round": np.zeros(batch, dtype=np.int64),
            "initiator": np.zeros(batch, dtype=np.int64),
            "t_trigger": np.zeros(batch),
            "t_done": np.zeros(batch),
            "contributors": np.zeros(batch, dtype=np.int64),
            "fresh": np.zeros(batch, dtype=np.int64),
        }

        def version(iteration: np.ndarray, _: np.ndarray) -> np.ndarray:
            return iteration // stride

        while True:
            state[K.S_BASE] = window.base
            status, written = K.round_kernel(
                state,
                t_start,
                first_post,
                pend_n,
                pend_t,
                pend_head,
                pend_len,
                window.times,
                window.start,
                window.post,
                window.done,
                window.round,
                window.fresh,
                is_sync,
                t_exchange,
                initiator,
                a.t_act,
                stride,
                late,
                out["round"],
                out["initiator"],
                out["t_trigger"],
                out["t_done"],
                out["contributors"],
                out["fresh"],
            )
            idx = out["round"][:written]
            self._emit_rounds(written, out, kind[idx], group[idx])
            if status == K.DONE:
                break
            if status == K.OUT_FULL:
                continue
            if status == K.NEED_PENDING:
                pend_n, pend_t = _widen(pend_n, pend_head, pend_len), _widen(pend_t, pend_head, pend_len)
                pend_head[:] = 0
                continue
            # rows before the oldest pending contribution, and before the round in progress, are final
            final = state[K.S_ROUND] * stride
            if pend_len.any():
                final = min(final, int(pend_n[np.arange(P), pend_head][pend_len > 0].min()))
            self._flush(window, final, version)
            window.slide(final)
        if total * stride < self.N:
            if window.base + window.size < self.N:
                self._flush(window, total * stride, version)
                window.slide(total * stride)
            K.local_tail(
                t_start,
                window.times,
                window.start,
                window.post,
                window.done,
                window.round,
                window.fresh,
                total * stride,
                self.N,
                window.base,
            )
        self._flush(window, self.N, version)

    def _run_lsgd(self) -> None:
        """LSGD's driver: the kernel needs only P, N, the two counts that trigger exchanges, the exchange time and
        the window."""
        a: Lsgd = self.algorithm
        P, N, local_every, global_every, t_exchange = self.P, self.N, a.local_every, a.global_every, a.t_exchange
        window = _Window(self.compute, N, self.window_size)
        state = np.zeros(3, dtype=np.int64)
        t_start = np.zeros(P)
        iteration, unresolved = np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64)
        batch = 256
        out = {
            "round": np.zeros(batch, dtype=np.int64),
            "initiator": np.zeros(batch, dtype=np.int64),
            "t_trigger": np.zeros(batch),
            "t_done": np.zeros(batch),
            "global": np.zeros(batch, dtype=np.bool_),
        }

        def version(iteration_: np.ndarray, rnd: np.ndarray) -> np.ndarray:
            return np.where(rnd >= 0, rnd, state[K.L_ROUND])

        while True:
            state[K.L_BASE] = window.base
            status, written = K.lsgd_kernel(
                state,
                t_start,
                iteration,
                unresolved,
                window.times,
                window.start,
                window.post,
                window.done,
                window.round,
                window.fresh,
                N,
                local_every,
                global_every,
                t_exchange,
                out["round"],
                out["initiator"],
                out["t_trigger"],
                out["t_done"],
                out["global"],
            )
            every = np.full(written, P, dtype=np.int64)
            self._emit_rounds(
                written,
                {**out, "contributors": every, "fresh": every},
                np.full(written, "leader", dtype=object),
                np.where(out["global"][:written], -1, 0).astype(np.int64),
            )
            if status == K.DONE:
                break
            if status == K.OUT_FULL:
                continue
            final = int(unresolved.min())  # rows from a worker's first unresolved iteration on may still change
            self._flush(window, final, version)
            window.slide(final)
        self._flush(window, N, version)


def _widen(queue: np.ndarray, head: np.ndarray, length: np.ndarray) -> np.ndarray:
    """A ring buffer per row, twice as deep, each row's live entries moved to its start."""
    rows, depth = queue.shape
    out = np.zeros((rows, 2 * depth), dtype=queue.dtype)
    for r in range(rows):
        idx = (head[r] + np.arange(length[r])) % depth
        out[r, : length[r]] = queue[r, idx]
    return out
