"""The run folder: ``meta.json`` and the Parquet tables ``iterations``, ``rounds`` and ``evals``.

It is the contract between the simulator, real runs and analysis. While a run goes, each table is a directory
``<table>.parquet/`` of numbered parts, one written per flush, so a killed run leaves a readable prefix and a
``meta.json`` whose ``finished`` is false. Closing the run merges the parts into one sorted file per table and marks
it finished. :func:`load_run` reads either form.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.outputs import make_folder

INT, FLOAT, BOOL, STR = pa.int64(), pa.float64(), pa.bool_(), pa.string()
SCHEMAS: dict[str, pa.Schema] = {
    "iterations": pa.schema(
        [
            ("worker", INT),
            ("iteration", INT),
            ("t_start", FLOAT),
            ("t_post", FLOAT),
            ("t_done", FLOAT),
            ("compute", FLOAT),
            ("wait", FLOAT),
            ("round", INT),
            ("model_version", INT),
            ("staleness", INT),
            ("fresh", BOOL),
            ("samples", INT),
        ]
    ),
    "rounds": pa.schema(
        [
            ("round", INT),
            ("kind", STR),
            ("initiator", INT),
            ("t_trigger", FLOAT),
            ("t_done", FLOAT),
            ("contributors", INT),
            ("fresh", INT),
            ("group", INT),
        ]
    ),
    "evals": pa.schema([("t", FLOAT), ("iteration", INT), ("worker", INT), ("loss", FLOAT), ("accuracy", FLOAT)]),
}
#: the order of a finished table's rows
SORT_KEYS = {
    "iterations": ["worker", "iteration"],
    "rounds": ["round", "initiator"],
    "evals": ["t", "iteration", "worker"],
}
TABLES = tuple(SCHEMAS)
#: what an engine or a real run records of each worker-iteration; the other columns of ``iterations`` follow from it
RECORDED = ("worker", "iteration", "t_start", "t_post", "t_done", "round", "model_version", "fresh", "samples")
#: which run an existing run folder may hold for a new run to replace it (a real run is never replaced): none, a
#: simulated one (``--force``), or an unfinished run of the same scenario (a sweep resuming its cell)
NEVER, SIMULATED, UNFINISHED = "never", "simulated", "unfinished"
META_TMP = "meta.json.tmp"  # meta.json is written through this name, so a killed write leaves no half file


def iteration_columns(recorded: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Every column of the ``iterations`` table from the :data:`RECORDED` ones: ``compute = t_post − t_start``,
    ``wait = t_done − t_post`` and ``staleness = round − model_version``, or −1 when no round carried the
    contribution (``round`` −1)."""
    out = {name: np.asarray(recorded[name]) for name in RECORDED}
    out["compute"] = out["t_post"] - out["t_start"]
    out["wait"] = out["t_done"] - out["t_post"]
    out["staleness"] = np.where(out["round"] >= 0, out["round"] - out["model_version"], -1)
    return {name: out[name] for name in SCHEMAS["iterations"].names}


def columns(table: str, rows: list[tuple]) -> dict[str, np.ndarray]:
    """Rows (at least one) as they are recorded, as columns: ``iterations`` rows hold the :data:`RECORDED` fields,
    rows of the other tables every column of :data:`SCHEMAS`, in order."""
    names = RECORDED if table == "iterations" else SCHEMAS[table].names
    return {n: np.asarray(c) for n, c in zip(names, zip(*rows, strict=True), strict=True)}


def arrow(table: str, columns: Mapping[str, Any]) -> pa.Table:
    """One of the run folder's tables from one array per column of :data:`SCHEMAS` (extra columns are ignored)."""
    schema = SCHEMAS[table]
    return pa.Table.from_arrays([pa.array(columns[f.name], type=f.type) for f in schema], schema=schema)


def rows_table(table: str, rows: list[tuple]) -> pa.Table:
    """Recorded rows (at least one, as :func:`columns` reads them) as one of the run folder's tables."""
    recorded = columns(table, rows)
    return arrow(table, iteration_columns(recorded) if table == "iterations" else recorded)


def _table_path(folder: Path, table: str) -> Path:
    return folder / f"{table}.parquet"


class RunWriter:
    """Writes one run folder while the run goes: rows are buffered and flushed as parts every ``flush_rows``
    rows or ``flush_seconds`` seconds; :meth:`close` merges the parts and records whether the run finished.
    ``replace`` says which earlier run the folder may hold (:func:`check_replaceable`)."""

    def __init__(
        self,
        folder: str | Path,
        meta: dict[str, Any],
        flush_rows: int = 200_000,
        flush_seconds: float = 10.0,
        replace: str = NEVER,
    ):
        self.folder = Path(folder)
        _prepare(self.folder, replace, meta.get("scenario"))
        self.meta = {**meta, "finished": False}
        self.flush_rows, self.flush_seconds = flush_rows, flush_seconds
        self._rows: dict[str, list[tuple]] = {t: [] for t in TABLES}  # rows added one by one ...
        self._chunks: dict[str, list[pa.Table]] = {t: [] for t in TABLES}  # ... and in blocks, in order
        self._parts = dict.fromkeys(TABLES, 0)
        self._last_flush = time.monotonic()
        self._buffered = 0
        self._write_meta()  # first: a run killed at any later point leaves a folder that reads as its unfinished run
        for table in TABLES:
            _table_path(self.folder, table).mkdir()

    def add(self, table: str, row: tuple) -> None:
        """Append one row (as :func:`columns` reads rows)."""
        self._rows[table].append(row)
        self._count(1)

    def add_block(self, table: str, block: Mapping[str, Any]) -> None:
        """Append many rows at once: one array per column of :data:`SCHEMAS`."""
        self._settle(table)
        data = arrow(table, block)
        self._chunks[table].append(data)
        self._count(len(data))

    def _count(self, rows: int) -> None:
        before, self._buffered = self._buffered, self._buffered + rows
        if self._buffered >= self.flush_rows or (
            before // 4096 != self._buffered // 4096 and time.monotonic() - self._last_flush > self.flush_seconds
        ):
            self.flush()

    def _settle(self, table: str) -> None:
        """Turn the rows added one by one into a block."""
        rows = self._rows[table]
        if rows:
            self._chunks[table].append(rows_table(table, rows))
            rows.clear()

    def flush(self) -> None:
        """Write the buffered rows of every table as new parts."""
        for table, chunks in self._chunks.items():
            self._settle(table)
            if chunks:
                pq.write_table(
                    pa.concat_tables(chunks), _table_path(self.folder, table) / f"part-{self._parts[table]:06d}.parquet"
                )
                self._parts[table] += 1
                chunks.clear()
        self._buffered = 0
        self._last_flush = time.monotonic()

    def close(self, finished: bool = True, **extra_meta: Any) -> None:
        """Flush, merge each table's parts into one sorted file, and rewrite ``meta.json``."""
        self.flush()
        if finished:
            for table in TABLES:
                path = _table_path(self.folder, table)
                merged = _read_table(path, table).sort_values(SORT_KEYS[table], kind="stable")
                tmp = path.with_suffix(".parquet.tmp")
                pq.write_table(pa.Table.from_pandas(merged, schema=SCHEMAS[table], preserve_index=False), tmp)
                shutil.rmtree(path)
                tmp.rename(path)
        self.meta.update(extra_meta, finished=finished)
        self._write_meta()

    def _write_meta(self) -> None:
        tmp = self.folder / META_TMP
        tmp.write_text(json.dumps(self.meta, indent=2, default=str) + "\n")
        tmp.rename(self.folder / "meta.json")

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(finished=exc_type is None)


def stored(value: Any) -> Any:
    """``value`` as ``meta.json`` holds it (after a JSON round trip): what a stored scenario is compared with."""
    return json.loads(json.dumps(value, default=str))


def check_replaceable(folder: Path, replace: str = NEVER, scenario: dict[str, Any] | None = None) -> None:
    """Raise a one-line error unless a new run may be written into ``folder``: nothing is there, an empty folder,
    or a run that ``replace`` allows replacing (:data:`SIMULATED`: a simulated run; :data:`UNFINISHED`: an
    unfinished run of the same ``scenario``). A real run is never replaced, nor a folder holding anything else."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise UserError(f"{folder}: exists and is not a folder")
    if not any(item.name != META_TMP for item in folder.iterdir()):  # empty, or killed writing its first meta.json
        return
    try:
        old = json.loads((folder / "meta.json").read_text())
    except FileNotFoundError:
        raise UserError(f"{folder}: not empty and not a run folder; refusing to write into it") from None
    except (OSError, ValueError):
        raise UserError(
            f"{folder}/meta.json: cannot be read, so nothing says which run the folder holds (it is never replaced, "
            f"even with --force); delete {folder} to write there again"
        ) from None
    if old.get("source") == "real":
        raise UserError(f"{folder}: holds a real run, which is never replaced; write elsewhere")
    if replace == SIMULATED or (
        replace == UNFINISHED and not old.get("finished") and old.get("scenario") == stored(scenario)
    ):
        return
    raise UserError(f"{folder}: holds a run already; give --force to replace it, or write elsewhere")


def _prepare(folder: Path, replace: str, scenario: dict[str, Any] | None) -> None:
    """Make an empty run folder, replacing an earlier run there only as :func:`check_replaceable` allows."""
    check_replaceable(folder, replace, scenario)
    if folder.is_dir():
        for item in folder.iterdir():
            if item.name == META_TMP or item.name.startswith(TABLES):
                shutil.rmtree(item) if item.is_dir() else item.unlink()
        (folder / "meta.json").unlink(missing_ok=True)  # last: until then the folder reads as the run it held
    make_folder(folder)


def _read_table(path: Path, table: str) -> pd.DataFrame:
    """One table, from a merged file or a folder of parts (possibly none yet); a damaged file is a one-line error."""
    if path.is_dir():
        files = sorted(path.glob("part-*.parquet"))
        if not files:
            return SCHEMAS[table].empty_table().to_pandas()
    elif path.exists():
        files = [path]
    else:
        return SCHEMAS[table].empty_table().to_pandas()
    data = []
    for file in files:
        try:
            _check_columns(file, table, pq.read_schema(file))
            data.append(_conform(pq.read_table(file), table))
        except (pa.ArrowException, OSError) as err:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise UserError(f"{file}: cannot read the {table} table ({reason})") from None
    return pa.concat_tables(data).to_pandas()


def _check_columns(file: Path, table: str, found: pa.Schema) -> None:
    """A one-line error naming the file and the first column of :data:`SCHEMAS` it lacks or holds with another type
    (read as if whole, a missing column would be filled with nulls and every metric of it NaN)."""
    for want in SCHEMAS[table]:
        index = found.get_field_index(want.name)
        if index < 0 and (table, want.name) == ("iterations", "samples"):
            continue  # written before the column was recorded (_conform)
        if index < 0:
            raise UserError(f"{file}: the {table} table has no column {want.name}, so it is not a run's table")
        if found.field(index).type != want.type:
            raise UserError(
                f"{file}: the {table} table's column {want.name} holds {found.field(index).type}, not {want.type}"
            )


def _conform(data: pa.Table, table: str) -> pa.Table:
    """A table read from a file in the schema of :data:`SCHEMAS`; an ``iterations`` table written before the
    ``samples`` column was recorded gets it as −1 (:func:`load_run` then puts the batch there)."""
    if table == "iterations" and "samples" not in data.column_names:
        data = data.append_column("samples", pa.array(np.full(len(data), -1), type=INT))
    return data.select(SCHEMAS[table].names).cast(SCHEMAS[table])


@dataclass
class Run:
    """One run folder in memory."""

    path: Path
    meta: dict[str, Any]
    iterations: pd.DataFrame
    rounds: pd.DataFrame
    evals: pd.DataFrame

    @property
    def finished(self) -> bool:
        return bool(self.meta.get("finished"))


def load_run(folder: str | Path) -> Run:
    """Read a run folder (finished or not); a folder without ``meta.json`` is a one-line error."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except FileNotFoundError:
        raise UserError(f"{folder}: not a run folder (no meta.json)") from None
    except (OSError, ValueError) as err:  # unreadable, not text, not JSON
        raise UserError(f"{folder}/meta.json: cannot be read as JSON ({err})") from None
    if not isinstance(meta, dict):
        raise UserError(f"{folder}/meta.json: holds a JSON {type(meta).__name__}, not a run's object")
    tables = {t: _read_table(_table_path(folder, t), t) for t in TABLES}
    samples = tables["iterations"]["samples"]
    if (samples < 0).any():  # recorded before the column was: every worker-iteration processed its whole batch
        tables["iterations"]["samples"] = samples.where(samples >= 0, meta["scenario"]["workload"]["batch"])
    return Run(folder, meta, **tables)
