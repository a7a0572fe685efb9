"""Workloads of the convergence replay, chosen by ``workload.model``: ``hyperplane``, ``logistic``, ``mlp`` (numpy,
built in) or ``module:function`` (a torch workload, :mod:`.torch_bridge`; torch is imported only then). The interface
is in :mod:`.base`."""

from __future__ import annotations

from stragglerlab.simulator.modelsize import hidden_widths
from stragglerlab.simulator.scenario import BUILTIN_MODELS, Scenario
from stragglerlab.simulator.workloads.base import ArrayWorkload
from stragglerlab.simulator.workloads.classifier import Classifier
from stragglerlab.simulator.workloads.hyperplane import Hyperplane
from stragglerlab.simulator.workloads.torch_bridge import TorchWorkload, load_task

__all__ = ["BUILTIN_MODELS", "load"]


def load(scenario: Scenario) -> ArrayWorkload | TorchWorkload:
    """The workload of ``scenario`` with its data made from the seed (``model`` must not be ``none``)."""
    name = scenario.workload.model
    if name == "hyperplane":
        return Hyperplane(scenario)
    if name in ("logistic", "mlp"):
        return Classifier(scenario, hidden_widths(scenario))
    return TorchWorkload(scenario, load_task(name, scenario.seed))
