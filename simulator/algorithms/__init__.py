"""The algorithm registry: one :class:`~.record.Algorithm` record per algorithm, found by name.

Every plane reads an algorithm from its record: the scenario its keys and checks, the reference engine its process,
the fast engine its kernel, the convergence replay its apply, real runs its exchange, run folders its plot style.
Nothing else in the toolkit looks at an algorithm's name. Adding an algorithm is a module here with its record
(listed below), its real-run exchange in ``stragglerlab.realrun.algorithms`` when no existing one fits, and tests;
``docs/adding-an-algorithm.md`` walks through one.
"""

from __future__ import annotations

from stragglerlab.simulator.algorithms import (
    adpsgd,
    async_ps,
    dpsgd,
    eager,
    easgd,
    local_sgd,
    lsgd,
    preempt,
    quorum,
    sgp,
    swarm,
    sync,
    wagma,
)
from stragglerlab.simulator.algorithms.record import Algorithm
from stragglerlab.simulator.keys import Key, ScenarioError

#: every algorithm, in the order of legends and listings
RECORDS: tuple[Algorithm, ...] = (
    sync.RECORD,
    eager.SOLO,
    eager.MAJORITY,
    wagma.RECORD,
    lsgd.RECORD,
    local_sgd.RECORD,
    # baselines the papers measure against: backup workers, parameter servers
    quorum.RECORD,
    async_ps.RECORD,
    easgd.RECORD,
    # decentralized gossip baselines
    dpsgd.RECORD,
    sgp.RECORD,
    adpsgd.RECORD,
    # answers to stragglers beyond the papers': SwarmSGD as released, DD-PPO's preemption
    swarm.RECORD,
    preempt.RECORD,
)
REGISTRY: dict[str, Algorithm] = {record.name: record for record in RECORDS}


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get(name: str) -> Algorithm:
    """The record of algorithm ``name``; an unknown name is a one-line error listing the known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ScenarioError(f"no algorithm named {name!r} (known: {', '.join(REGISTRY)})") from None


def order(name: str) -> int:
    """The place of algorithm ``name`` in legends and listings."""
    return names().index(name)


def declared_keys() -> tuple[Key, ...]:
    """Every ``[algorithm]`` key some algorithm declares, once each, in the order the records declare them
    (algorithms that read one key share its declaration)."""
    seen: dict[str, Key] = {}
    for record in RECORDS:
        for key in record.keys:
            seen.setdefault(key.name, key)
    return tuple(seen.values())


def users(key: str) -> tuple[str, ...]:
    """The algorithms that read ``algorithm.<key>``."""
    return tuple(record.name for record in RECORDS if any(k.name == key for k in record.keys))
