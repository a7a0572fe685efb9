"""What one scenario runs by, built once: its algorithm's record, its cost model and the rules made from both
(:class:`Plan`). The engines, the convergence replay, provenance and real runs receive the plan instead of looking
the record up and pricing the network each on their own, so they cannot disagree on either."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from stragglerlab.simulator import algorithms
from stragglerlab.simulator.costs import cost_model

if TYPE_CHECKING:
    from stragglerlab.simulator.algorithms.record import Algorithm, Rules
    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.scenario import Scenario


@dataclass(frozen=True)
class Plan:
    """A scenario with its algorithm's record, its cost model and its rules."""

    scenario: Scenario
    record: Algorithm
    costs: CostModel
    rules: Rules


def plan(scenario: Scenario) -> Plan:
    """The plan of ``scenario``."""
    record = algorithms.get(scenario.algorithm.name)
    costs = cost_model(scenario)
    return Plan(scenario, record, costs, record.rules(scenario, costs))
