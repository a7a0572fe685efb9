"""Regression fixtures: the tables of every shipped example, and of every algorithm on two of them, are the ones
committed in ``fixtures/`` (a digest per table), and the evaluations of small trained runs of every algorithm match
committed values. A change of semantics must change the fixtures, deliberately, with the reason in its commit.

Digests are of the column arrays (little-endian values in schema order), not of the Parquet bytes, so they do not
depend on the Parquet writer's version. Regenerate with ``python tests/simulator/test_examples.py``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stragglerlab.analysis.runfolder import SCHEMAS, load_run
from stragglerlab.simulator.catalog import example_path, examples
from stragglerlab.simulator.run import simulate
from stragglerlab.simulator.scenario import ALGORITHMS, Scenario, from_dict, load

FIXTURES = Path(__file__).parent / "fixtures"
TABLES = FIXTURES / "example_tables.json"
EVALS = FIXTURES / "convergence_evals.json"
#: examples run with every algorithm (the others with their own)
EVERY_ALGORITHM = ("eager-injected", "lsgd-4x4")


def digest(frame: pd.DataFrame, table: str) -> str:
    """SHA-256 of a table's columns in schema order: numbers as little-endian arrays, strings joined by NUL."""
    h = hashlib.sha256()
    for field in SCHEMAS[table]:
        column = frame[field.name].to_numpy()
        h.update(field.name.encode() + b"\0")
        if column.dtype.kind == "O":
            h.update("\0".join(map(str, column)).encode())
        elif column.dtype.kind == "b":
            h.update(column.astype(np.uint8).tobytes())
        else:
            h.update(np.ascontiguousarray(column, dtype=column.dtype.newbyteorder("<")).tobytes())
    return h.hexdigest()


def example_cases() -> dict[str, Scenario]:
    cases = {}
    for name in examples():
        base = load(example_path(name))
        for algorithm in ALGORITHMS if name in EVERY_ALGORITHM else (base.algorithm.name,):
            cases[f"{name}/{algorithm}"] = base.replace(**{"algorithm.name": algorithm})
    return cases


def trained_cases() -> dict[str, Scenario]:
    cases = {}
    for model in ("hyperplane", "mlp"):
        for algorithm in ALGORITHMS:
            raw = {
                "seed": 3,
                "iterations": 60,
                "cluster": {"workers": 8, "workers_per_node": 2},
                "workload": {
                    "model": model,
                    "dimension": 20,
                    "samples": 4096,
                    "batch": 16,
                    "hidden": [16],
                    "compute": {"dist": "lognormal", "mean": 0.1, "cv": 0.5},
                },
                "imbalance": {"kind": "random-delay", "slow": [1, 2], "delay": 0.2},
                "evals": {"every_iterations": 10},
                "algorithm": {
                    "name": algorithm,
                    "sync_period": 4,
                    "group_size": 2,
                    "period": 3,
                    "global_period": 6,
                    "lr": 0.05,
                    "momentum": 0.5,
                },
            }
            cases[f"{model}/{algorithm}"] = from_dict(raw)
    return cases


def table_digests(scenario: Scenario, folder: Path) -> dict[str, str]:
    run = load_run(simulate(scenario, folder))
    return {table: digest(getattr(run, table), table) for table in ("iterations", "rounds")}


@pytest.mark.parametrize("case", sorted(json.loads(TABLES.read_text())))
def test_example_tables_are_the_committed_ones(case, tmp_path):
    assert set(json.loads(TABLES.read_text())) == set(example_cases())
    assert table_digests(example_cases()[case], tmp_path / "run") == json.loads(TABLES.read_text())[case]


@pytest.mark.parametrize("case", sorted(json.loads(EVALS.read_text())))
def test_trained_evaluations_are_the_committed_ones(case, tmp_path):
    expected = json.loads(EVALS.read_text())[case]
    evals = load_run(simulate(trained_cases()[case], tmp_path / "run")).evals
    for column, values in expected.items():
        np.testing.assert_allclose(evals[column].to_numpy(), values, rtol=1e-9, atol=1e-12, err_msg=column)


def regenerate(tmp: Path) -> None:
    """Write both fixtures from the code as it is (after a deliberate change of semantics)."""
    tables = {key: table_digests(s, tmp / key) for key, s in example_cases().items()}
    TABLES.write_text(json.dumps(tables, indent=1, sort_keys=True) + "\n")
    evals = {}
    for key, s in trained_cases().items():
        frame = load_run(simulate(s, tmp / key)).evals
        evals[key] = {column: frame[column].tolist() for column in frame.columns}
    EVALS.write_text(json.dumps(evals, indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        regenerate(Path(folder))
    print(f"wrote {TABLES} and {EVALS}", file=sys.stderr)
