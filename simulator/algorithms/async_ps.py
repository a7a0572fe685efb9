"""Asynchronous SGD through a parameter server (the baseline eager-SGD's paper measures against): every iteration
pushes its gradient to the server (:mod:`.server`), which applies it on arrival, w ← step(w, g), and replies with
its new model, which the worker computes its next gradient on. No worker waits for another, only for the server's
queue; every gradient is applied exactly once, on whatever model the server holds when it is served.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.algorithms.server import KERNEL, SERVER_GAMMA, SERVERS, ServerProcess, ServerRules
from stragglerlab.simulator.replicas import Observer, Optimizer

if TYPE_CHECKING:
    import pandas as pd

    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.scenario import Scenario


class AsyncPsRules(ServerRules):
    """Every iteration exchanges with the server."""

    def __init__(self, scenario: Scenario, costs: CostModel):
        super().__init__(scenario, costs, stride=1)


def served(it: pd.DataFrame, rounds: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(worker, iteration) of the exchange each server update served, in update order: the initiator's last
    iteration that the update carries."""
    carried = it[it["round"] >= 0]
    last = carried.groupby("round")["iteration"].max().reindex(range(len(rounds)))
    return rounds["initiator"].to_numpy(), last.to_numpy()


def gradient(workload: Any, W: np.ndarray, j: int, n: int) -> np.ndarray:
    """The gradient of worker ``j``'s iteration ``n`` on its copy ``W[j]``, as a 1 × d matrix."""
    G, _ = workload.gradient(W[j : j + 1], workload.batches(np.array([j]), np.array([n])))
    return G


def apply(
    rules: AsyncPsRules,
    workload: Any,
    it: pd.DataFrame,
    rounds: pd.DataFrame,
    W: np.ndarray,
    opt: Optimizer,
    note: Observer,
) -> Iterator[int]:
    """Server updates in order: the gradient of the served iteration, on its worker's copy (the model the server
    last returned to it), steps the server's model (row P, with its own momentum buffer); the worker's copy becomes
    the server's new model."""
    P = rules.P
    server = np.array([P])
    for k, (j, n) in enumerate(zip(*served(it, rounds), strict=True)):
        G = gradient(workload, W, j, n)
        note("applied", k, G[0])
        opt.step(W, G, server)
        W[j] = W[P]
        yield k


RECORD = Algorithm(
    name="async-ps",
    legend="stale: server updates for others between the model it computed on and its own push's; fresh: all",
    summary="asynchronous SGD: each gradient pushed to a FIFO parameter server, which replies with its new model",
    keys=(SERVERS, SERVER_GAMMA),
    rules=AsyncPsRules,
    process=ServerProcess,
    kernel=KERNEL,
    apply=apply,
    exchanges={"native": "stragglerlab.realrun.algorithms.server:AsyncPsExchange"},
    style=Style("#4B0092", "X"),
    central=True,
)
