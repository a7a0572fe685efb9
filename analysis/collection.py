"""Many run folders as tidy tables: one row per run with the scenario's keys as columns (flattened, dotted), or one
table of every run's rows with those keys beside them. Simulated and real runs load alike (``source`` says which).

A path given to :func:`find_runs` is either a run folder or a folder that holds run folders at any depth (a sweep's
output), so ``stragglerlab plot sweep-dir`` and ``plot run-a run-b`` both work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.metrics import run_metrics
from stragglerlab.analysis.runfolder import Run, load_run

#: the columns every row of :func:`keys_table` starts with, before the scenario's keys
RUN_COLUMNS = ("run", "source", "finished")


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"cluster": {"workers": 8}}`` -> ``{"cluster.workers": 8}``; lists become tuples (hashable, groupable)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = tuple(value) if isinstance(value, list) else value
    return out


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """The run folders at or below ``paths`` (a folder with ``meta.json`` is a run), sorted within each path."""
    found: list[Path] = []
    for path in map(Path, paths):
        if (path / "meta.json").is_file():
            found.append(path)
        elif path.is_dir():
            below = sorted(p.parent for p in path.rglob("meta.json"))
            if not below:
                raise UserError(f"{path}: holds no run folders (no meta.json below it)")
            found.extend(below)
        else:
            raise UserError(f"{path}: no such run folder")
    return found


def load_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Every run folder at or below ``paths``, loaded."""
    return [load_run(p) for p in find_runs(paths)]


def keys_of(run: Run) -> dict[str, Any]:
    """One run's identity: its folder, ``source`` (sim or real), ``finished`` and its scenario's flattened keys."""
    return {
        "run": str(run.path),
        "source": run.meta.get("source", "sim"),
        "finished": run.finished,
        **flatten(run.meta["scenario"]),
    }


def keys_table(runs: Iterable[Run]) -> pd.DataFrame:
    """One row per run: :data:`RUN_COLUMNS` and the scenario keys (a key a run lacks is NaN)."""
    return pd.DataFrame([keys_of(r) for r in runs])


def summary_table(runs: Iterable[Run], target_loss: float | None = None) -> pd.DataFrame:
    """One row per run: its keys and every metric of :func:`.metrics.run_metrics` (whose ``iterations``,
    the worker-iterations run, is renamed ``worker_iterations`` beside the scenario's ``iterations``)."""
    rows = []
    for r in runs:
        metrics = run_metrics(r, target_loss)
        metrics["worker_iterations"] = metrics.pop("iterations")
        rows.append({**keys_of(r), **metrics})
    return pd.DataFrame(rows)


def tidy(runs: Iterable[Run], table: str, keys: Iterable[str] = ("algorithm.name", "seed")) -> pd.DataFrame:
    """The rows of ``table`` (iterations, rounds or evals) of every run, each with ``run`` and the given scenario
    ``keys`` as leading columns."""
    keys = list(keys)
    frames = []
    for r in runs:
        ident = keys_of(r)
        rows = getattr(r, table)
        frames.append(rows.assign(**{k: ident.get(k) for k in ["run", *keys]})[["run", *keys, *rows.columns]])
    if not frames:
        raise UserError("no runs given")
    return pd.concat(frames, ignore_index=True)


def varying_keys(table: pd.DataFrame, ignore: Iterable[str] = ()) -> list[str]:
    """The scenario keys of a :func:`keys_table` (or :func:`summary_table`) that take more than one value, in column
    order; metric columns, which have no dot, are never among them (nor ``iterations``, which is both)."""
    skip = set(ignore)
    return [c for c in table.columns if "." in c and c not in skip and table[c].astype(str).nunique() > 1]
