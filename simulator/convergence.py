"""Convergence: real model updates replayed along the engine's schedule (DESIGN §6), yielding ``evals`` rows.

Timing never depends on model values, so the model is trained *after* the engine has run, from its tables alone:
which iteration's contribution went into which round, and on which model version it was computed. Rounds are
replayed in order; the P replicas are one P × d array updated by vectorised steps (SGD with momentum and weight
decay, as ``torch.optim.SGD`` with dampening 0). Per algorithm (docs/semantics.md):

- ``sync``, ``eager-*``: the gradient of worker i's iteration n is computed on model version n (all P of a version
  at once) and kept until its round m consumes it; round m applies Σ(rows with ``round == m``) / D with D = P
  (``divide_by = workers``) or the number of gradients summed (``contributors``). Rows of round −1 (dropped, or
  after the last exchange) are never applied. Every replica applies every round, so replicas stay identical.
- ``wagma``: round m reads, for each worker j, its latest deposit posted by the exchange start x(m) (t_trigger +
  T_act; t_trigger for the periodic global average); a deposit is the model the worker computed its gradient on,
  and before its first post a worker's deposit is the initial model (which is what it deposits first). A group
  round applies w ← (Σ_group deposits + w)/(|group| + 1), a global one w ← mean of all deposits (every worker is
  fresh there, as the released code's Σ_all W_j / P); then each worker steps with its own gradient.
- ``local-sgd``: ``period`` local steps, then w ← mean(w) at each average; steps after the last average stay local.
- ``lsgd``: each worker's local steps carried by exchange m, then the pulls
  x ← x − pull·(x − x_local_leader) − global_pull·(x − x_global_leader) (the global term only at global exchanges,
  ``group == -1``), all from the models as they were when the exchange started; a leader is the worker with the
  lowest running mean of its last :data:`LOSS_WINDOW` training losses (ties: the lowest rank), local per node of
  ``workers_per_node``, global over all workers. A leader's own term is zero.

Evaluations of the averaged model (worker −1), and of each replica with ``evals.replicas``, are taken at the start,
after the first round completing at or past each multiple of ``evals.every_seconds`` (simulated) or of
``evals.every_iterations``, and at the end (after any trailing local steps). ``iteration`` is the iterations per
worker that the evaluated model contains. ``observe(event, round, value)`` lets tests look inside: ``applied``
(the gradient sum a round applies, before division), ``averaged`` (replicas after a model average), ``exchange``
(LSGD: (models, running-mean losses) before the pulls) and ``round`` (replicas after each round).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd

from stragglerlab.analysis.runfolder import SCHEMAS
from stragglerlab.simulator.algorithms.wagma import phase_count, phase_groups
from stragglerlab.simulator.network import NetworkModel
from stragglerlab.simulator.scenario import Scenario

LOSS_WINDOW = 10  # LSGD: the leader is chosen on the mean of each worker's last training losses
Observer = Callable[[str, int, object], None]


class Schedule:
    """Keeps the columns of the engine's tables that the replay needs; :meth:`tables` gives them as frames."""

    COLUMNS = ("worker", "iteration", "round", "model_version", "t_post", "t_done")

    def __init__(self):
        self.it: list[pd.DataFrame] = []
        self.rounds: list[pd.DataFrame] = []

    def add_iterations(self, columns) -> None:
        """A block of ``iterations`` rows (column arrays)."""
        self.it.append(pd.DataFrame({c: np.asarray(columns[c]) for c in self.COLUMNS}))

    def add_rounds(self, columns) -> None:
        """A block of ``rounds`` rows (column arrays)."""
        self.rounds.append(pd.DataFrame({c: np.asarray(columns[c]) for c in SCHEMAS["rounds"].names}))

    def tables(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(iterations, rounds) with the columns of the run folder's tables that the replay reads."""
        it = pd.concat(self.it, ignore_index=True) if self.it else pd.DataFrame(columns=list(self.COLUMNS))
        rounds = (
            pd.concat(self.rounds, ignore_index=True) if self.rounds else pd.DataFrame(columns=SCHEMAS["rounds"].names)
        )
        return it, rounds


def sgd(w, g, buf, lr: float, momentum: float, weight_decay: float):
    """One step of SGD in place on numpy arrays or torch tensors alike (``torch.optim.SGD`` with dampening 0: the
    first step's buffer is the gradient); returns the new momentum buffer. Real runs step with it too."""
    d = g + weight_decay * w if weight_decay else g
    if momentum:
        buf = d if buf is None else buf * momentum + d
        d = buf
    w -= lr * d
    return buf


class Optimizer:
    """SGD with momentum and weight decay over P replicas (one momentum buffer each)."""

    def __init__(self, scenario: Scenario, shape: tuple[int, int]):
        a = scenario.algorithm
        self.lr, self.momentum, self.weight_decay = a.lr, a.momentum, a.weight_decay
        self.buf = np.zeros(shape) if self.momentum else None

    def step(self, W: np.ndarray, g: np.ndarray, rows: np.ndarray | slice = slice(None)) -> None:
        """:func:`sgd` on ``W[rows]``; ``g`` (d,) or one row each."""
        w = W[rows]
        buf = sgd(w, g, None if self.buf is None else self.buf[rows], self.lr, self.momentum, self.weight_decay)
        W[rows] = w
        if buf is not None:
            self.buf[rows] = buf


class Evaluations:
    """Decides when to evaluate and produces the ``evals`` rows (t, iteration, worker, loss, accuracy)."""

    def __init__(self, scenario: Scenario, workload):
        e = scenario.evals
        self.workload, self.replicas = workload, e.replicas
        self.every_s, self.every_it = e.every_seconds, e.every_iterations
        self.next_s, self.next_it = e.every_seconds, e.every_iterations
        self.last: tuple[float, int] | None = None  # (t, iteration) of the last evaluation

    def rows(self, t: float, iteration: int, W: np.ndarray) -> list[tuple]:
        self.last = (t, iteration)
        out = [(t, iteration, -1, *self.workload.evaluate(W.mean(axis=0)))]
        if self.replicas:
            out += [(t, iteration, j, *self.workload.evaluate(W[j])) for j in range(len(W))]
        return out

    def after_round(self, t: float, iteration: int, W: np.ndarray) -> list[tuple]:
        due = (self.every_it and iteration >= self.next_it) or (self.every_s and t >= self.next_s)
        if not due:
            return []
        if self.every_it:
            self.next_it = (iteration // self.every_it + 1) * self.every_it
        if self.every_s:
            self.next_s = (np.floor(t / self.every_s) + 1) * self.every_s
        return self.rows(t, iteration, W)

    def final(self, t: float, iteration: int, W: np.ndarray) -> list[tuple]:
        return [] if self.last == (t, iteration) else self.rows(t, iteration, W)


def replay(
    scenario: Scenario, workload, iterations: pd.DataFrame, rounds: pd.DataFrame, observe: Observer | None = None
) -> Iterator[tuple]:
    """Train ``workload`` along the schedule in the (finished) ``iterations`` and ``rounds`` tables; yields the
    ``evals`` rows as they are computed."""
    it = iterations.sort_values(["worker", "iteration"], kind="stable").reset_index(drop=True)
    rounds = rounds.sort_values("round", kind="stable").reset_index(drop=True)
    P, N = scenario.workers, scenario.iterations
    if len(it) != P * N:
        raise ValueError(f"the replay needs the whole iterations table ({P * N} rows, got {len(it)})")
    W = np.tile(workload.initial().astype(np.float64), (P, 1))
    evals = Evaluations(scenario, workload)
    yield from evals.rows(0.0, 0, W)
    carried = it[it["round"] >= 0]
    reached = (carried.groupby("round")["iteration"].max() + 1).reindex(range(len(rounds)), fill_value=0)
    name = scenario.algorithm.name
    run = {"wagma": _wagma, "local-sgd": _local_sgd, "lsgd": _lsgd}.get(name, _gradient_rounds)
    note = observe or (lambda event, m, value: None)
    t_done, reached = rounds["t_done"].to_numpy(), reached.to_numpy()
    for m in run(scenario, workload, it, rounds, W, note):
        note("round", m, W)
        yield from evals.after_round(float(t_done[m]), int(reached[m]), W)
    yield from evals.final(float(it["t_done"].max()), N, W)


def _matrix(it: pd.DataFrame, column: str, P: int) -> np.ndarray:
    """A column of the iterations table (sorted by worker, iteration) as a P × N matrix."""
    return it[column].to_numpy().reshape(P, -1)


def _gradient_rounds(scenario, workload, it, rounds, W, note) -> Iterator[int]:
    """sync and eager: version m's gradients are kept until their round consumes them; round m applies its sum."""
    P = scenario.workers
    if not (it["model_version"] == it["iteration"]).all():
        raise ValueError("a round-per-call schedule must have model_version == iteration")
    target = _matrix(it, "round", P)
    opt = Optimizer(scenario, W.shape)
    sums: dict[int, list] = {}  # round -> [gradient sum, count]
    by_workers = scenario.algorithm.divide_by == "workers"
    for m in range(len(rounds)):
        rows = np.flatnonzero(target[:, m] >= 0)
        if len(rows):
            G, _ = workload.gradient(W[rows], workload.batches(rows, np.full(len(rows), m)))
            goes = target[rows, m]
            parts = [(m, G)] if (goes == m).all() else [(int(r), G[goes == r]) for r in np.unique(goes)]
            for r, part in parts:
                acc = sums.setdefault(r, [np.zeros(W.shape[1]), 0])
                acc[0] += part.sum(axis=0)
                acc[1] += len(part)
        g, count = sums.pop(m, [np.zeros(W.shape[1]), 0])
        note("applied", m, g)
        opt.step(W, g / (P if by_workers else max(count, 1)))
        yield m


def _wagma(scenario, workload, it, rounds, W, note) -> Iterator[int]:
    """WAGMA: group (or global) average of the deposits read at each exchange start, then each worker's own step."""
    P, N = scenario.workers, scenario.iterations
    S = scenario.algorithm.group_size
    t_act = NetworkModel.of(scenario).activation(P)
    t_post, target = _matrix(it, "t_post", P), _matrix(it, "round", P)
    groups = []  # per phase: ranks ordered by group, where each group starts in that order, group of each rank
    for s in range(phase_count(P, S)):
        members = phase_groups(s, P, S)
        gid = np.empty(P, dtype=np.int64)
        for g, ranks_of in enumerate(members):
            gid[ranks_of] = g
        sizes = np.array([len(g) for g in members])
        groups.append((np.concatenate(members), np.cumsum(sizes) - sizes, gid, sizes.astype(np.float64)))
    opt = Optimizer(scenario, W.shape)
    ranks = np.arange(P)
    deposit, read = W.copy(), np.zeros(P, dtype=np.int64)  # the deposit each worker last contributed, and its call
    saved: dict[tuple[int, int], np.ndarray] = {}
    group_of, t_trigger = rounds["group"].to_numpy(), rounds["t_trigger"].to_numpy()
    for m in range(len(rounds)):
        G, _ = workload.gradient(W, workload.batches(ranks, np.full(P, m)))
        kept = np.flatnonzero(target[:, m] >= 0) if m else ranks[:0]  # deposit 0 is the initial model
        for j, row in zip(kept, W[kept], strict=True):  # W[kept] is a copy
            saved[(int(j), m)] = row
        group = int(group_of[m])
        x = float(t_trigger[m]) + (0.0 if group < 0 else t_act)
        latest = read.copy()
        while True:  # each worker's latest deposit posted by x (monotone in m: advance a pointer)
            ahead = np.minimum(latest + 1, min(m, N - 1))
            move = (ahead > latest) & (t_post[ranks, ahead] <= x)
            if not move.any():
                break
            latest[move] = ahead[move]
        for j in np.flatnonzero(latest != read):
            deposit[j] = saved.pop((int(j), int(latest[j])))
        read = latest
        if group < 0:
            W[:] = deposit.mean(axis=0)
        else:
            order, starts, gid, sizes = groups[group]
            sums = np.add.reduceat(deposit[order], starts, axis=0)
            W[:] = (sums[gid] + W) / (sizes[gid] + 1)[:, None]
        note("averaged", m, W)
        opt.step(W, G)
        yield m


def _local_sgd(scenario, workload, it, rounds, W, note) -> Iterator[int]:
    """Local SGD: ``period`` local steps of every worker, then the average."""
    P, N, period = scenario.workers, scenario.iterations, scenario.algorithm.period
    opt, ranks = Optimizer(scenario, W.shape), np.arange(P)

    def steps(first: int, last: int) -> None:
        for n in range(first, last):
            G, _ = workload.gradient(W, workload.batches(ranks, np.full(P, n)))
            opt.step(W, G)

    for m in range(len(rounds)):
        steps(m * period, (m + 1) * period)
        W[:] = W.mean(axis=0)
        note("averaged", m, W)
        yield m
    steps(len(rounds) * period, N)


def _lsgd(scenario, workload, it, rounds, W, note) -> Iterator[int]:
    """LSGD: each worker's free-running steps up to its exchange, then the pulls toward the leaders."""
    P, a = scenario.workers, scenario.algorithm
    node = np.arange(P) // scenario.cluster.workers_per_node
    target, global_ = _matrix(it, "round", P), rounds["group"].to_numpy() < 0
    opt = Optimizer(scenario, W.shape)
    losses = np.full((P, LOSS_WINDOW), np.nan)  # ring of each worker's last training losses
    done = np.zeros(P, dtype=np.int64)  # iterations each worker has stepped

    def steps(count: np.ndarray) -> None:
        for s in range(int(count.max(initial=0))):
            rows = np.flatnonzero(count > s)
            n = done[rows] + s
            G, loss = workload.gradient(W[rows], workload.batches(rows, n))
            losses[rows, n % LOSS_WINDOW] = loss
            opt.step(W, G, rows)
        done[:] += count

    for m in range(len(rounds)):
        steps((target == m).sum(axis=1))
        mean = np.nanmean(losses, axis=1)
        note("exchange", m, (W.copy(), mean))
        X = W.copy()
        local = np.empty(P, dtype=np.int64)
        for k in np.unique(node):
            members = np.flatnonzero(node == k)
            local[members] = members[np.argmin(mean[members])]
        W -= a.pull * (X - X[local])
        if global_[m]:
            W -= a.global_pull * (X - X[np.argmin(mean)])
        yield m
    steps(scenario.iterations - done)
