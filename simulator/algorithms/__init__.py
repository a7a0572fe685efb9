"""The six algorithms of DESIGN §4, one module each, behind one interface: ``Algorithm(scenario, engine)`` with
``post(call)``, which the engine calls for every post in its resolved order; the algorithm releases each call
(``engine.release``) when its worker may go on and writes round rows to ``engine.sink``."""

from __future__ import annotations

from stragglerlab.simulator.algorithms.eager import EagerMajority, EagerSolo
from stragglerlab.simulator.algorithms.local_sgd import LocalSgd
from stragglerlab.simulator.algorithms.lsgd import Lsgd
from stragglerlab.simulator.algorithms.sync import Sync
from stragglerlab.simulator.algorithms.wagma import Wagma

REGISTRY = {
    "sync": Sync,
    "eager-solo": EagerSolo,
    "eager-majority": EagerMajority,
    "wagma": Wagma,
    "lsgd": Lsgd,
    "local-sgd": LocalSgd,
}


def make(scenario, engine):
    """The algorithm object named by ``scenario.algorithm.name``."""
    return REGISTRY[scenario.algorithm.name](scenario, engine)
