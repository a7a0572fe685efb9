"""What the ranks of a real run or a calibration hold in memory, estimated from the scenario before any rank starts:
``stragglerlab run`` and ``calibrate`` refuse a job whose ranks together need more memory than this machine has
available (unless ``--force``), as ``simulate`` does, instead of swapping for minutes or being killed part way.

One rank holds the interpreter with its libraries (:data:`BASE`, or :data:`TORCH_BASE` where it imports torch: a torch
workload or ``--backend torch``), the data set of a numpy workload (samples × dimension float64), and the model's
vectors: its exchange's ``bytes_per_parameter`` times the parameter count (``workload.params``, or the built-in
model's own). A torch model's parameter count is known only once it is built, in the ranks, so its vectors are not in
the estimate (nor in the simulator's).

The figures are each rank's peak resident set in short timing-only runs of every exchange at 1 M and 25.6 M
parameters (3 and 5 ranks: the same figures), and in runs of ``torch:mlp``, measured by
``python tests/benchmarks/bench_footprint.py``: 180–210 MiB of interpreter and libraries, 400–480 MiB with torch,
and 7 (local SGD, torch's DDP) to 80 (AD-PSGD) bytes per parameter. A resident set counts the pages of shared
libraries in every rank, so the sum over ranks is an upper bound: the estimate errs on the side of refusing.
"""

from __future__ import annotations

from stragglerlab.realrun.algorithms.base import exchange_class
from stragglerlab.realrun.replica import is_torch
from stragglerlab.simulator import algorithms
from stragglerlab.simulator.estimate import Estimate
from stragglerlab.simulator.modelsize import model_parameters
from stragglerlab.simulator.scenario import BUILTIN_MODELS, Scenario

MiB = 2**20
#: one rank's interpreter and libraries (numpy, pandas, pyarrow, mpi4py, the native core), and with torch imported
BASE, TORCH_BASE = 210 * MiB, 480 * MiB


def _interpreter(model: str, backend: str) -> float:
    return TORCH_BASE if is_torch(model) or backend == "torch" else BASE


def _data(scenario: Scenario) -> float:
    """A numpy workload's data set: samples × dimension float64."""
    w = scenario.workload
    return w.samples * w.dimension * 8 if w.model in BUILTIN_MODELS else 0


def _per_parameter(algorithm: str, backend: str) -> float:
    return exchange_class(algorithms.get(algorithm), backend).bytes_per_parameter


def rank_memory(scenario: Scenario, backend: str) -> float:
    """Bytes one rank of a real run of ``scenario`` on ``backend`` holds at its peak."""
    model = scenario.workload.model
    memory = _interpreter(model, backend) + _data(scenario)
    params = scenario.workload.params if model == "none" else model_parameters(scenario)
    if params is not None:  # None: a torch model's, unknown until it is built
        memory += _per_parameter(scenario.algorithm.name, backend) * params
    return memory


def run_memory(scenario: Scenario, backend: str, ranks: int) -> Estimate:
    """The memory of ``ranks`` ranks of a real run of ``scenario``."""
    return Estimate(ranks * rank_memory(scenario, backend))


def calibration_memory(scenario: Scenario, ranks: int, backend: str, timed: list[str], largest: int) -> Estimate:
    """The memory of ``ranks`` ranks of ``calibrate``: the scenario's workload, whose computation every rank times
    (a model and its gradient, less than any exchange holds), then, with ``--collectives``, the rounds of each
    algorithm of ``timed`` on ``backend``, timing only at messages of up to ``largest`` bytes (0: DDP's buckets of
    the scenario's torch model)."""
    workload = _interpreter(scenario.workload.model, "native") + _data(scenario)
    rounds = [_interpreter("none", backend) + _per_parameter(name, backend) * largest / 4 for name in timed]
    return Estimate(ranks * max([workload, *rounds]))
