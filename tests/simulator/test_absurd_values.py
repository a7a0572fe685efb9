"""Every numeric key of docs/scenarios.md, fed 0, −1, NaN, ±inf, 1e308 and 2^63 − 1: ``simulate`` either refuses the
value in one line with exit status 2 or runs to a finite summary; it never prints a traceback or hangs (each case
under a 60-second timeout). Each key is set where it matters (an algorithm's key under that algorithm, a model's key
with that model), in a run small enough that the whole property takes seconds."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.simulator import algorithms

DOCS = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"
VALUES = ("0", "-1", "nan", "inf", "-inf", "1e308", str(2**63 - 1))
#: keys of tables the docs describe in one row (a distribution's parameters, a worker's factor)
TABLE_KEYS = (
    "workload.compute.mean",
    "workload.compute.cv",
    "workload.compute.shape",
    "workload.call.mean",
    "workload.call.cv",
    "workload.call.shape",
    "imbalance.factors.1",
    "imbalance.slow",
)
#: what makes a key matter, beyond the small base run
CONTEXT = {
    "workload.compute.cv": ["workload.compute.dist='lognormal'"],
    "workload.compute.shape": ["workload.compute.dist='gamma'"],
    "workload.call.mean": ["workload.call.dist='constant'"],
    "workload.call.cv": ["workload.call.dist='normal'", "workload.call.mean=0.001"],
    "workload.call.shape": ["workload.call.dist='pareto'", "workload.call.mean=0.001"],
    "imbalance.factors.1": ["imbalance.kind='persistent'"],
    "imbalance.slow": ["imbalance.kind='random-delay'"],
    "imbalance.delay": ["imbalance.kind='random-delay'"],
    "workload.dimension": ["workload.model='hyperplane'"],
    "workload.noise": ["workload.model='hyperplane'"],
    "workload.samples": ["workload.model='hyperplane'"],
    "workload.test_fraction": ["workload.model='hyperplane'"],
    "workload.classes": ["workload.model='logistic'"],
    "workload.buckets": ["algorithm.name='sync'"],
    "workload.backward": ["algorithm.name='sync'", "workload.buckets=2"],
    "evals.every_seconds": ["workload.model='hyperplane'"],
    "evals.every_iterations": ["workload.model='hyperplane'"],
    "algorithm.lr": ["workload.model='hyperplane'"],
    "algorithm.momentum": ["workload.model='hyperplane'"],
    "algorithm.weight_decay": ["workload.model='hyperplane'"],
}
BASE = [
    "--set",
    "cluster.workers=4",
    "--set",
    "iterations=6",
    "--set",
    "workload.params=1000",
    "--set",
    "workload.samples=2048",
    "--set",
    "workload.batch=16",
    "--set",
    "workload.compute.dist='normal'",
    "--set",
    "workload.compute.cv=0.1",
]
NUMBER = re.compile(r"^[−-]?[0-9][0-9,]*(\.[0-9]+)?(e[−-]?[0-9]+)?$|^[0-9]+/[0-9]+$|^alpha, beta$")


def numeric_keys() -> list[str]:
    """The keys of docs/scenarios.md's table whose default is a number, and those of its one-row tables."""
    keys = []
    for line in DOCS.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 3 and cells[0].startswith("`") and NUMBER.match(cells[1]):
            keys += re.findall(r"`([a-z_.]+)`", cells[0])
    return keys + list(TABLE_KEYS)


def context(key: str) -> list[str]:
    """Overrides under which ``key`` is read: an algorithm's key runs under the first algorithm that declares it."""
    if key.startswith("algorithm.") and key not in CONTEXT:
        name = key.split(".")[1]
        for record in map(algorithms.get, algorithms.names()):
            if any(k.name == name for k in record.keys):
                return [f"algorithm.name='{record.name}'"]
    return CONTEXT.get(key, [])


def test_the_docs_table_gives_the_keys():
    keys = numeric_keys()
    assert {"network.beta", "network.fabric_beta", "workload.params", "algorithm.servers", "seed"} <= set(keys)
    assert "network.allreduce" not in keys and len(keys) > 40


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("key", numeric_keys())
def test_an_absurd_value_is_refused_in_one_line_or_runs_finite(key, value, tmp_path, capsys):
    sets = [f"--set={item}" for item in context(key)]
    argv = ["simulate", "--example", "eager-injected", *BASE, *sets, "--set", f"{key}={value}"]
    status = main([*argv, "--json", "-o", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    if status == 2:
        assert len(err.strip().splitlines()) == 1, err
        assert "error:" in err and any(word in err for word in (key.rsplit(".", 1)[-1], "network", "of memory")), err
        return
    assert status == 0, err
    for run in json.loads(out)["runs"]:
        for field in ("samples_per_s", "mean_iteration", "mean_wait"):
            assert run[field] is not None and math.isfinite(run[field]) and run[field] >= 0, (field, run)
