"""Many run folders as tidy tables: one row per run with the scenario's keys as columns (flattened, dotted), or one
table of every run's rows with those keys beside them. Simulated and real runs load alike (``source`` says which).

A path given to :func:`find_runs` is either a run folder or a folder that holds run folders at any depth (a sweep's
output), so ``stragglerlab plot sweep-dir`` and ``plot run-a run-b`` both work; :func:`select` then picks runs by
their keys' values.
"""

from __future__ import annotations

import math
import numbers
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.metrics import run_metrics
from stragglerlab.analysis.runfolder import Run, load_run

#: the columns every row of :func:`keys_table` starts with, before the scenario's keys
RUN_COLUMNS = ("run", "source", "finished")
#: the scenario keys every run must have to be summarised and compared
REQUIRED_KEYS = ("algorithm.name", "cluster.workers", "workload.batch")


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
    """Every run folder at or below ``paths``, loaded; a ``meta.json`` without a scenario that has
    :data:`REQUIRED_KEYS` is a one-line error."""
    runs = [load_run(p) for p in find_runs(paths)]
    for run in runs:
        scenario = run.meta.get("scenario") if isinstance(run.meta, dict) else None
        if not isinstance(scenario, Mapping):
            raise UserError(f"{run.path / 'meta.json'}: has no scenario; not a run folder written by stragglerlab")
        missing = [k for k in REQUIRED_KEYS if k not in flatten(scenario)]
        if missing:
            raise UserError(f"{run.path / 'meta.json'}: the scenario has no {', '.join(missing)}")
    return runs


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


def distinct(values: Iterable[Any]) -> list[Any]:
    """The different values, sorted: numbers by value and before everything else, which sorts by its text."""
    return sorted(set(values), key=_sort_key)


def _sort_key(value: Any) -> tuple:
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value):
        return (0, value, "")
    return (1, 0, str(value))


def parse_value(text: str) -> Any:
    """A value as a user types it after ``KEY=``: TOML (``0.32``, ``[1, 4]``, ``true``), else the text itself
    (``ring``); lists become tuples, as in :func:`keys_table`."""
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    return tuple(value) if isinstance(value, list) else value


def select(runs: list[Run], where: Mapping[str, Iterable[str]]) -> list[Run]:
    """The runs whose key (a column of :func:`keys_table`: ``algorithm.name``, ``seed``, ``source``, ...) has one of
    the values given for it (as typed: read by :func:`parse_value`), for every key of ``where``."""
    keys = keys_table(runs)
    chosen = pd.Series(True, index=keys.index)
    for key, texts in where.items():
        if key not in keys.columns:
            differ = ", ".join(differing_keys(keys))
            raise UserError(f"--where {key}: not a key of these runs (they differ in: {differ})")
        texts = list(texts)
        wanted = [parse_value(t) for t in texts]
        matches = keys[key].map(lambda v, w=wanted, t=texts: v in w or str(v) in t)
        if not matches.any():
            values = ", ".join(map(str, distinct(keys[key])))
            raise UserError(f"--where {key}={'|'.join(texts)}: no run has it ({key} takes: {values})")
        chosen &= matches
    picked = [r for r, keep in zip(runs, chosen, strict=True) if keep]
    if not picked:
        raise UserError(f"--where {' '.join(f'{k}={v}' for k, vs in where.items() for v in vs)}: no run has them all")
    return picked


def differing_keys(keys: pd.DataFrame) -> list[str]:
    """The columns of a :func:`keys_table` that take more than one value, ``run`` and ``finished`` aside: the
    scenario keys (``seed`` and ``iterations`` among them) and ``source``."""
    return [c for c in keys.columns if c not in ("run", "finished") and keys[c].astype(str).nunique() > 1]


def varying_keys(table: pd.DataFrame, ignore: Iterable[str] = ()) -> list[str]:
    """The scenario keys of a :func:`keys_table` (or :func:`summary_table`) that take more than one value, in column
    order; metric columns, which have no dot, are never among them (nor ``iterations``, which is both)."""
    skip = set(ignore)
    return [c for c in table.columns if "." in c and c not in skip and table[c].astype(str).nunique() > 1]
