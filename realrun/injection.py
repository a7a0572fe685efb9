"""Imbalance injected into a real run from the scenario's keys, with the simulator's common random numbers.

The simulator's compute time of worker i at iteration n is ``ComputeTimes.row(n)[i]``. A real run has a
real computation, so what each imbalance kind means there is:

- ``random-delay``: a rank that ``slow_workers(n)`` selects adds exactly ``imbalance.delay`` seconds at iteration n,
  the very (worker, iteration) pairs the simulator delays under the same seed.
- ``persistent``: a rank with factor f adds (f − 1) × its measured compute time of that iteration (a device f times
  slower); factors below 1 cannot speed a real device up and add nothing.
- ``trace``: the trace holds whole compute times; a rank pads its measured time up to the trace's value (nothing
  when it already took longer).
- ``none``: nothing.

With ``workload.model = "none"`` (timing only) there is no real computation: a rank spends the whole simulated
compute time ``row(n)[i]`` (the compute distribution plus the imbalance), and after each iteration the scenario's
``workload.update`` in place of an optimizer step, so simulation and run share every number.

``imbalance.mode``: ``sleep`` sleeps; ``work`` burns the time in real computation (small numpy matrix products on
the CPU, about 0.1 ms each, checking the clock between them), so the delay also takes a core as a real straggler's
work does.
"""

from __future__ import annotations

import time

import numpy as np

from stragglerlab.simulator.imbalance import ComputeTimes
from stragglerlab.simulator.scenario import Scenario


class Injection:
    """What rank ``rank`` adds at each iteration, and how it spends it."""

    def __init__(self, scenario: Scenario, rank: int, timing_only: bool):
        self.times = ComputeTimes(scenario)
        self.kind, self.rank, self.timing_only = scenario.imbalance.kind, rank, timing_only
        self.delay, self.factor = scenario.imbalance.delay, float(self.times.factors[rank])
        self.work = scenario.imbalance.mode == "work"
        self.update = scenario.workload.update if timing_only else 0.0  # a real model's update takes its own time
        self._burn = _numpy_burn()

    def extra(self, n: int, measured: float) -> float:
        """Seconds to add at iteration ``n`` after a computation of ``measured`` seconds."""
        if self.timing_only or self.kind == "trace":  # pad up to the simulated compute time
            return max(float(self.times.row(n)[self.rank]) - measured, 0.0)
        if self.kind == "random-delay":
            return self.delay if self.rank in self.times.slow_workers(n) else 0.0
        if self.kind == "persistent":
            return max(self.factor - 1.0, 0.0) * measured
        return 0.0

    def due(self, n: int, computed: float, elapsed: float, share: float) -> float:
        """Seconds to add now at iteration ``n``, ``share`` of its work done (micro-batches, which preemption may
        stop between): the injection spread evenly over the work. ``computed``: the seconds of real computation so
        far, ``elapsed``: of computation and injection. At ``share`` = 1 the iteration has been given what
        :meth:`extra` gives it at once."""
        if self.timing_only or self.kind == "trace":
            return max(share * float(self.times.row(n)[self.rank]) - elapsed, 0.0)
        spent = elapsed - computed
        if self.kind == "random-delay":
            return max(share * self.extra(n, computed) - spent, 0.0)
        return max(self.extra(n, computed) - spent, 0.0)

    def spend(self, seconds: float) -> None:
        """Let ``seconds`` pass: asleep, or in real computation (``mode = "work"``)."""
        if seconds <= 0:
            return
        end = time.perf_counter() + seconds
        if self.work:  # at least one unit of work, however late this thread is scheduled
            self._burn()
            while time.perf_counter() < end:
                self._burn()
        else:
            time.sleep(seconds)


def _numpy_burn():
    """One small unit of real work (about 0.1 ms) when the workload offers none of its own."""
    a = np.random.default_rng(0).standard_normal((48, 48))

    def burn() -> None:
        np.dot(a, a)

    return burn
