"""Asynchronous EASGD (Zhang, Choromanska and LeCun, 2015), the baseline of LSGD's paper: workers take local SGD
steps; every ``period``-th iteration a worker exchanges its model with the parameter server (:mod:`.server`: one
push and one reply, FIFO service), and the worker and the server's centre move toward each other by the elastic
pull a: w_j ← w_j − a(w_j − w̃), w̃ ← w̃ + a(w_j − w̃), both from the values before the exchange. The other iterations
are local and return at their post.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from stragglerlab.simulator.algorithms.async_ps import gradient, served
from stragglerlab.simulator.algorithms.local_sgd import PERIOD
from stragglerlab.simulator.algorithms.lsgd import PULL
from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.algorithms.server import KERNEL, SERVER_GAMMA, SERVERS, ServerProcess, ServerRules
from stragglerlab.simulator.replicas import Observer, Optimizer, row_counts

if TYPE_CHECKING:
    import pandas as pd

    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.scenario import Scenario


class EasgdRules(ServerRules):
    """Every ``period``-th iteration exchanges with the server, pulling by ``pull``."""

    def __init__(self, scenario: Scenario, costs: CostModel):
        super().__init__(scenario, costs, stride=scenario.algorithm.period)
        self.pull = scenario.algorithm.pull


def apply(
    rules: EasgdRules,
    workload: Any,
    it: pd.DataFrame,
    rounds: pd.DataFrame,
    W: np.ndarray,
    opt: Optimizer,
    note: Observer,
) -> Iterator[int]:
    """Server updates in order: the served worker's local steps up to its exchange iteration (each its own
    gradient step, on its copy with its own momentum buffer), then the elastic exchange with the centre (row P);
    the steps after each worker's last exchange stay local, up to its own row count."""
    P, a = rules.P, rules.pull
    done = np.zeros(P, dtype=np.int64)  # iterations each worker has stepped

    def steps(j: int, last: int) -> None:
        for n in range(done[j], last):
            opt.step(W, gradient(workload, W, j, n), np.array([j]))
        done[j] = last

    for k, (j, n) in enumerate(zip(*served(it, rounds), strict=True)):
        steps(j, n + 1)
        pull = a * (W[j] - W[P])
        note("elastic", k, pull)
        W[j] -= pull
        W[P] += pull
        yield k
    for j, count in enumerate(row_counts(it, P)):
        steps(j, int(count))


RECORD = Algorithm(
    name="easgd",
    legend="stale: server updates for others between the model it computed on and its next exchange; "
    "fresh: carried by one",
    summary="asynchronous EASGD: local steps; every period-th iteration an elastic exchange with a parameter server",
    keys=(PERIOD, PULL, SERVERS, SERVER_GAMMA),
    rules=EasgdRules,
    process=ServerProcess,
    kernel=KERNEL,
    apply=apply,
    exchanges={"native": "stragglerlab.realrun.algorithms.server:EasgdExchange"},
    style=Style("#994F00", "h"),
    central=True,
    own_step=True,
)
