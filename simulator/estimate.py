"""A rough estimate of a simulation's peak memory and wall time, from the scenario alone, before anything runs: so
a run that cannot fit in memory is refused in a second instead of swapping for minutes or being killed, and a long
one says so before it starts.

The figures are what the engines and the run-folder writer hold (measured on this toolkit's own runs; right within a
factor of about two, which is enough to tell a run that fits from one that does not):

- the fast engine keeps a window of W = max(64, min(2048, 2^21 / P)) iterations of all P workers in nine buffers of
  8 bytes a cell (compute times, call costs, the recorded columns), and a few arrays of P;
- the reference engine keeps about 2 KiB of simpy objects per worker;
- compute times come in rows of P float64;
- a kept ``iterations`` table is 11 columns of 8 bytes per worker-iteration, held about four times over when the
  parts are merged into the sorted file at the end (``rounds`` likewise per round); a trained model keeps its
  schedule (the same columns) and a replica, a momentum buffer and a gradient per worker, of the model's parameter
  count (which sets the message sizes then, whatever ``workload.params`` says; a torch model's count is known only
  once it is built, so its replicas are not estimated), and a built-in model's data set (:func:`data_bytes`).

Times: the fast engine runs about 5 million worker-iterations per second (far more at thousands of workers), the
reference one about 40,000 (sync about 140,000 at 256 workers on a 2-core machine, d-psgd about 15,000), and writing
the kept table about a million rows per second; training a model adds its gradients, not estimated here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from stragglerlab.analysis.errors import UserError
from stragglerlab.simulator.modelsize import model_parameters
from stragglerlab.simulator.scenario import Scenario

GIB = 2**30
#: above either, the estimate is printed before the run
LARGE_BYTES, LARGE_SECONDS = GIB, 60.0
#: the interpreter and the libraries loaded by a simulation
BASE_BYTES = 250 * 2**20
ROW_BYTES = 11 * 8
MERGE_COPIES = 4
RATES = {"fast": 5e6, "reference": 4e4}
WRITE_RATE = 1e6


@dataclass(frozen=True)
class Estimate:
    """Peak memory (bytes) and wall time (seconds; 0: not estimated) of a simulation, or of several
    (:func:`combined`), or of a real run's ranks."""

    memory: float
    seconds: float = 0.0

    @property
    def large(self) -> bool:
        return self.memory > LARGE_BYTES or self.seconds > LARGE_SECONDS

    def __str__(self) -> str:
        time = f" and {_duration(self.seconds)}" if self.seconds else ""
        return f"about {_size(self.memory)} of memory{time}"


def _size(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", GIB), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n / 2**10:.3g} KiB"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def window(workers: int) -> int:
    """Iterations in the fast engine's window for ``workers`` workers."""
    return max(64, min(2048, 2**21 // workers))


def estimate(scenario: Scenario, engine: str, tables: tuple[str, ...] = ("iterations", "rounds")) -> Estimate:
    """Peak memory and wall time of simulating ``scenario`` on ``engine`` (``fast`` or ``reference``), keeping
    ``tables``."""
    P, N = scenario.workers, scenario.iterations
    rows = P * N
    held = window(P) * P * 9 * 8 + P * 16 * 8 if engine == "fast" else P * 2048
    held += 4 * P * 8  # rows of compute times
    kept = 0
    if "iterations" in tables:
        kept += rows * ROW_BYTES * MERGE_COPIES
    if "rounds" in tables:
        kept += N * 8 * 8 * MERGE_COPIES
    if scenario.workload.model != "none":  # its schedule, and per worker a replica, a momentum buffer, a gradient
        params = model_parameters(scenario)
        kept += rows * ROW_BYTES + (P * params * 8 * 3 if params is not None else 0) + data_bytes(scenario)
    seconds = rows / RATES[engine] + (rows / WRITE_RATE if "iterations" in tables else 0.0)
    return Estimate(BASE_BYTES + held + kept, seconds)


def data_bytes(scenario: Scenario) -> int:
    """The peak bytes of making a built-in model's data set (0 for a torch workload's, which it makes itself):
    hyperplane's samples in float32 and their targets; a mixture's float64 samples, made as two such arrays, and
    their labels."""
    w = scenario.workload
    if w.model == "hyperplane":
        return w.samples * (w.dimension * 4 + 16)
    if w.model in ("logistic", "mlp"):
        return w.samples * (w.dimension * 8 * 2 + 16)
    return 0


def combined(estimates: list[Estimate], jobs: int = 1) -> Estimate:
    """Several simulations run ``jobs`` at a time: the memory of the ``jobs`` largest side by side, the time of all
    shared among the jobs."""
    memory = sorted((e.memory for e in estimates), reverse=True)[:jobs]
    return Estimate(sum(memory), sum(e.seconds for e in estimates) / jobs)


def available_memory() -> int | None:
    """Bytes of memory this machine can still give (``MemAvailable``), or None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def check(
    what: str,
    need: Estimate,
    force: bool,
    advice: str = "keep less (--tables rounds, --summary-only), run fewer workers or iterations",
) -> str | None:
    """The line to print before a large run (None for a small one); a one-line error when ``need`` exceeds the
    memory available, unless ``force``: it says what needs it, and ``advice``, how to need less."""
    free = available_memory()
    if free is not None and need.memory > free and not force:
        raise UserError(
            f"{what} needs {need} (estimated), more than the {_size(free)} of memory available; {advice}, "
            "or give --force to try anyway"
        )
    return f"{what}: estimated {need}" if need.large else None
