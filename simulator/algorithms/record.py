"""The record of one algorithm: everything each plane needs to run it, in one place.

A record holds the algorithm's scenario keys and their checks, its *rules* (what triggers a round, who contributes
what, what happens to a late post, what a round costs; built from the scenario and the cost model, :class:`Rules`),
the reference engine's process, the fast engine's kernel (or none), the convergence replay's apply, the real-run
exchange of each backend, and its plot style. Every plane reads the algorithm from its record, found by name in the
registry (:mod:`stragglerlab.simulator.algorithms`); nothing else looks at an algorithm's name.

Loading a scenario reads the records (their keys and checks), so this module and the algorithms' modules import
only numpy and the model: the fast engine's kernel, which needs numba, is named as ``"module:function"`` and
imported when an engine runs it (:func:`resolve`); the real-run exchanges live in ``stragglerlab.realrun``, which
imports the simulator and not the other way round, so a record names them as ``"module:Class"`` too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from stragglerlab.simulator.keys import Key, ScenarioError
from stragglerlab.simulator.replicas import Apply

if TYPE_CHECKING:
    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.scenario import Scenario


class Rules(Protocol):
    """What the rules of every algorithm say, whatever the algorithm (each algorithm's rules class adds its own)."""

    P: int  # workers
    N: int  # iterations per worker
    update: float  # seconds of the optimizer step after each iteration (``workload.update``)
    budget: float  # the time budget in seconds (infinity: none)


#: ``fail(key, value, allowed)``: the one-line error about a key's value, naming where it came from
Fail = Callable[[str, Any, str], ScenarioError]


#: what ``staleness`` and ``fresh`` mean where an algorithm says nothing else: the rule of the iterations table
STALE_FRESH = "stale: rounds from the model it computed on to the round carrying its gradient; fresh: in its own round"


@dataclass(frozen=True)
class Style:
    """How figures draw the algorithm: a colour (hex) and a matplotlib marker."""

    colour: str
    marker: str


@dataclass(frozen=True)
class Algorithm:
    """One algorithm of the registry (module docstring)."""

    name: str
    summary: str  # one line: what it does
    keys: tuple[Key, ...]  # the ``[algorithm]`` keys it reads (beyond name, lr, momentum, weight_decay)
    rules: Callable[[Scenario, CostModel], Rules]  # its rules for one scenario
    process: Callable[[Any, Any], Any]  # (rules, reference engine) -> the object whose ``post(call)`` the engine calls
    kernel: str | None  # "module:function" of its fast path, (rules) -> fast.engine.Kernel; None: reference only
    apply: Apply  # the convergence replay's: what its rounds do to the replicas
    exchanges: Mapping[str, str]  # real-run backend -> "module:Class" of its exchange
    style: Style
    check: Callable[[Scenario, Fail], None] | None = None  # checks that involve other keys of the scenario
    # a central model besides the P replicas (a parameter server's): the convergence replay keeps it as row P of its
    # matrix, and evaluates it as the averaged model (worker -1)
    central: bool = False
    # each worker steps its own replica with its own gradient when it is released (model averaging, gossip, local
    # steps), so every gradient is applied; otherwise a gradient enters the replicas (or the server's model) only
    # with the round or update that carries it
    own_step: bool = False
    # what its iterations' staleness and freshness mean, one line under every summary that shows it
    legend: str = STALE_FRESH


def resolve(reference: str) -> Any:
    """The object a ``"module:name"`` reference names (a record's kernel), its module imported now."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)
