"""Test helpers: build scenarios from dotted keys and run the reference engine in memory."""

from __future__ import annotations

import pandas as pd

from stragglerlab.analysis.runfolder import SCHEMAS, columns
from stragglerlab.simulator.engine import Engine
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


class ListSink:
    def __init__(self):
        self.iterations: list[tuple] = []
        self.rounds: list[tuple] = []

    def iteration(self, row: tuple) -> None:
        self.iterations.append(row)

    def round(self, row: tuple) -> None:
        self.rounds.append(row)


def run_tables(s: Scenario) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The (iterations, rounds) tables of one reference-engine run, sorted as in a finished run folder."""
    sink = ListSink()
    Engine(s, sink).run()
    it = pd.DataFrame(columns("iterations", sink.iterations))
    rounds = pd.DataFrame(sink.rounds, columns=SCHEMAS["rounds"].names)
    return (
        it.sort_values(["worker", "iteration"]).reset_index(drop=True),
        rounds.sort_values("round").reset_index(drop=True),
    )
