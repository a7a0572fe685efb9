"""The size of a built-in model, from the scenario alone, before anything is built: its layers and its parameter
count. The message sizes, the memory estimate and the bounds read it; the workloads build their models by it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stragglerlab.simulator.scenario import Scenario


def hidden_widths(scenario: Scenario) -> tuple[int, ...]:
    """The hidden layers' widths: ``workload.hidden`` for ``mlp``, none for the other models."""
    return scenario.workload.hidden if scenario.workload.model == "mlp" else ()


def layer_sizes(scenario: Scenario, hidden: tuple[int, ...]) -> tuple[int, ...]:
    """Features, the ``hidden`` widths and the classes: the widths of a classifier's layers."""
    return (scenario.workload.dimension, *hidden, scenario.workload.classes)


def parameters(sizes: tuple[int, ...]) -> int:
    """Weights and biases of a dense network with layers of ``sizes``."""
    return sum((a + 1) * b for a, b in zip(sizes, sizes[1:], strict=False))


def model_parameters(scenario: Scenario) -> int | None:
    """The parameter count of a built-in model (a torch model's is known once it is built: None)."""
    name = scenario.workload.model
    if name == "hyperplane":
        return scenario.workload.dimension
    if name in ("logistic", "mlp"):
        return parameters(layer_sizes(scenario, hidden_widths(scenario)))
    return None
