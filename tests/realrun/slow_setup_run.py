"""Run under mpiexec by tests/realrun/test_runs.py: a real run through the harness whose exchange takes SECONDS to
set up on every rank, as the native core's first compilation or torch's process group does.

Usage: python slow_setup_run.py SCENARIO FOLDER SECONDS."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from stragglerlab.realrun import harness
from stragglerlab.realrun.algorithms.native import GradientExchange
from stragglerlab.simulator.scenario import load

scenario_path, folder, seconds = sys.argv[1:4]
made = GradientExchange.__init__


def slow(self, *args, **kwargs):
    time.sleep(float(seconds))
    made(self, *args, **kwargs)


GradientExchange.__init__ = slow
harness.run_rank(load(scenario_path), Path(folder))
