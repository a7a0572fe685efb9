"""Run under mpiexec by tests/realrun/test_evaluation.py: a real run through the harness whose ranks each save their
final replica, so the test can compare the run's final evaluation with the mean of the replicas.

Usage: python replicas_run.py SCENARIO FOLDER OUT_PREFIX (rank r saves OUT_PREFIX<r>.npy)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from stragglerlab.realrun import harness
from stragglerlab.simulator.scenario import load

made = []


def capture(*args, **kwargs):
    replica = make(*args, **kwargs)
    made.append(replica)
    return replica


make, harness.make_replica = harness.make_replica, capture
scenario_path, folder, prefix = sys.argv[1:4]
harness.run_rank(load(scenario_path), Path(folder))
np.save(f"{prefix}{MPI.COMM_WORLD.Get_rank()}.npy", np.array(made[0].params(), dtype=np.float64))
