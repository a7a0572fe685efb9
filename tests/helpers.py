"""Test helpers: build scenarios from dotted keys and run an engine in memory."""

from __future__ import annotations

import numpy as np
import pandas as pd

from stragglerlab.analysis.runfolder import SCHEMAS, SORT_KEYS, iteration_columns
from stragglerlab.simulator.plan import plan
from stragglerlab.simulator.run import run_engine
from stragglerlab.simulator.scenario import Scenario, from_dict


def scenario(**keys) -> Scenario:
    """A scenario from dotted keys: ``scenario(**{"cluster.workers": 4})``; small and cheap by default."""
    raw: dict = {"iterations": 40, "cluster": {"workers": 8}, "workload": {"params": 1000}}
    for key, value in keys.items():
        node = raw
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return from_dict(raw)


def run_tables(s: Scenario, engine: str = "reference", window: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The (iterations, rounds) tables of one run of ``engine``, sorted as in a finished run folder."""
    iterations, rounds = [], []

    def keep(block):  # an engine's blocks may be views it reuses
        iterations.append({name: np.array(column) for name, column in iteration_columns(block).items()})

    run_engine(plan(s), engine, keep, rounds.append, window=window)
    it = pd.concat([pd.DataFrame(b) for b in iterations])[SCHEMAS["iterations"].names]
    r = (
        pd.concat([pd.DataFrame(b) for b in rounds])[SCHEMAS["rounds"].names]
        if rounds
        else pd.DataFrame({c: [] for c in SCHEMAS["rounds"].names})
    )
    return (
        it.sort_values(["worker", "iteration"]).reset_index(drop=True),
        r.sort_values(SORT_KEYS["rounds"], kind="stable").reset_index(drop=True),
    )
