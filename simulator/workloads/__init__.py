"""Workloads of the convergence replay, chosen by ``workload.model``: ``hyperplane``, ``logistic``, ``mlp`` (numpy,
built in) or ``module:function`` (a torch workload, :mod:`.torch_bridge`; torch is imported only then). The interface
is in :mod:`.base`."""

from __future__ import annotations

from stragglerlab.simulator.scenario import BUILTIN_MODELS, Scenario
from stragglerlab.simulator.workloads.base import ArrayWorkload
from stragglerlab.simulator.workloads.classifier import Classifier, layer_sizes, parameters
from stragglerlab.simulator.workloads.hyperplane import Hyperplane
from stragglerlab.simulator.workloads.torch_bridge import TorchWorkload, load_task

__all__ = ["BUILTIN_MODELS", "load", "model_parameters"]


def _hidden(scenario: Scenario) -> tuple[int, ...]:
    return scenario.workload.hidden if scenario.workload.model == "mlp" else ()


def load(scenario: Scenario) -> ArrayWorkload | TorchWorkload:
    """The workload of ``scenario`` with its data made from the seed (``model`` must not be ``none``)."""
    name = scenario.workload.model
    if name == "hyperplane":
        return Hyperplane(scenario)
    if name in ("logistic", "mlp"):
        return Classifier(scenario, _hidden(scenario))
    return TorchWorkload(scenario, load_task(name, scenario.seed))


def model_parameters(scenario: Scenario) -> int | None:
    """The parameter count of a built-in model, from the scenario alone (a torch model's is known once it is built:
    None)."""
    name = scenario.workload.model
    if name == "hyperplane":
        return scenario.workload.dimension
    if name in ("logistic", "mlp"):
        return parameters(layer_sizes(scenario, _hidden(scenario)))
    return None
