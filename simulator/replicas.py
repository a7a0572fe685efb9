"""The P model replicas that the convergence replay trains, and what every algorithm's *apply* (its record's
``apply``: what its rounds do to the replicas) works with: SGD over the replicas (:func:`sgd`, :class:`Optimizer`),
the engine's ``iterations`` table as worker × iteration matrices (:func:`matrix`, :func:`row_counts`), and the
signature of an apply (:class:`Apply`).

The replicas are one P × d array updated by vectorised steps (SGD with momentum and weight decay, as
``torch.optim.SGD`` with dampening 0). A run stopped by the time budget (``duration``) has a ragged table: worker i
has rows 0 … n_i − 1 (:func:`row_counts`), and :func:`matrix` pads the others with a fill value the apply chooses.
No apply takes a gradient step beyond a worker's rows.

Only numpy is imported here: the algorithms' modules, which the scenario loader reads, import this one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from stragglerlab.simulator.scenario import Scenario

#: ``observe(event, round, value)``: lets tests look inside a replay (:mod:`.convergence`)
Observer = Callable[[str, int, object], None]


def sgd(w, g, buf, lr: float, momentum: float, weight_decay: float):
    """One step of SGD in place on numpy arrays or torch tensors alike (``torch.optim.SGD`` with dampening 0: the
    first step's buffer is a copy of the gradient, so a caller may reuse the gradient's own buffer); returns the new
    momentum buffer. Real runs step with it too."""
    d = g + weight_decay * w if weight_decay else g
    if momentum:
        buf = d * 1.0 if buf is None else buf * momentum + d
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
        if buf is not None and self.buf is not None:
            self.buf[rows] = buf


class Apply(Protocol):
    """An algorithm's apply: replays its rounds in order on the replicas ``W`` (P × d, a row more for a central
    model) and yields each round's index (its row in ``rounds``) after applying it, or (that index, the replicas an
    evaluation then averages) where those are not ``W``'s current rows (ad-psgd's workers drift apart)."""

    def __call__(
        self,
        rules: Any,
        workload: Any,
        it: pd.DataFrame,
        rounds: pd.DataFrame,
        W: np.ndarray,
        opt: Optimizer,
        note: Observer,
    ) -> Iterator[int | tuple[int, np.ndarray]]: ...


def row_counts(it: pd.DataFrame, P: int) -> np.ndarray:
    """The number of rows of each of the P workers in the iterations table: N each without a time budget, n_i ≤ N
    with one (worker i's rows are its iterations 0 … n_i − 1)."""
    return np.bincount(it["worker"].to_numpy(), minlength=P)


def matrix(it: pd.DataFrame, column: str, P: int, fill: float) -> np.ndarray:
    """A column of the iterations table (sorted by worker, iteration) as a P × n matrix, n the most rows of any
    worker; a worker stopped early by the time budget has ``fill`` after its last row."""
    values, counts = it[column].to_numpy(), row_counts(it, P)
    if (counts == counts[0]).all():
        return values.reshape(P, -1)
    out = np.full((P, counts.max()), fill, dtype=np.result_type(values, np.asarray(fill)))
    out[np.arange(counts.max()) < counts[:, None]] = values
    return out
