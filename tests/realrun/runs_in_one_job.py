"""Run under mpiexec by tests/realrun/test_training.py: several real runs through the harness one after another in
the same ranks, so that each rank starts Python, MPI and torch once for all of them.

Usage: python runs_in_one_job.py OUT SCENARIO [SCENARIO ...] (each into OUT/<the scenario file's stem>)."""

from __future__ import annotations

import sys
from pathlib import Path

from stragglerlab.realrun.harness import run_rank
from stragglerlab.simulator.scenario import load

out = Path(sys.argv[1])
for path in map(Path, sys.argv[2:]):
    run_rank(load(path), out / path.stem, notes=False)
