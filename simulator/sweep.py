"""Sweeps: the cross product of scenario keys and seeds, one run folder per cell, run in parallel and resumable.

A cell is one scenario of the product; its folder ``DIR/<cell name>/`` is named from its grid values and seed
(``algorithm-sync_workers-64_seed-0``: each grid key by its last dotted part, or the whole key when two grid keys
share it; ``algorithm.name`` by ``algorithm``), so the same sweep always maps a cell to the same folder. A re-run
skips the cells whose ``meta.json`` says finished for the same scenario and reruns the others (killed, failed or
never started); a finished run of a *different* scenario in a cell's folder is an error rather than overwritten
(unless forced; a real run never is).

Cells run in processes (``concurrent.futures``). The sweep owns them: an interruption (Ctrl-C) or a failed cell
cancels the queued cells and kills the running ones at once (their folders stay unfinished, so a re-run redoes
them), and on Linux every worker gets the parent-death signal, so killing the sweep's process takes its workers with
it. One sweep at a time runs into a folder (a lock in it, ``.sweep.lock``): a second one meanwhile is a one-line error.
Under ``mpiexec -n N`` (detected from the launcher's environment, or forced with ``mpi=True``) the same cells
run on MPI ranks instead, through mpi4py's ``MPICommExecutor``: rank 0 hands out cells and the other N - 1 ranks
simulate them. mpi4py is imported only then.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import multiprocessing
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.outputs import make_folder
from stragglerlab.analysis.runfolder import SIMULATED, UNFINISHED, stored
from stragglerlab.simulator.lifetime import LINUX, die_with_parent
from stragglerlab.simulator.run import simulate
from stragglerlab.simulator.scenario import Scenario, ScenarioError, from_dict, parse_override, to_dict

#: environment variables a launcher sets to the number of ranks (MPICH / Intel MPI, Open MPI)
MPI_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
LOCK = ".sweep.lock"  # in the sweep folder, held by the sweep running into it


@dataclass(frozen=True)
class Cell:
    """One scenario of a sweep: its folder name, the grid values that make it, and the scenario itself."""

    name: str
    values: dict[str, Any]
    scenario: Scenario


def split_values(text: str) -> list[str]:
    """Split ``v1,v2,...`` at the commas outside brackets and quotes, so ``[1,2],[3,4]`` is two values."""
    values, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append(text[start:i])
            start = i + 1
    values.append(text[start:])
    return [v.strip() for v in values]


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    """``["key=v1,v2", ...]`` -> ``{key: [v1, v2]}``, each value read as ``--set`` reads it (TOML, else a string)."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise ScenarioError(f"--grid {item}: expected key=v1,v2,..., e.g. --grid cluster.workers=64,256")
        if key == "seed":
            raise ScenarioError(f"--grid {item}: seeds come from --seeds")
        if key in grid:
            raise ScenarioError(f"--grid {key}: given twice")
        grid[key] = [parse_override(f"{key}={v}")[1] for v in split_values(text)]
    return grid


def short_names(keys: list[str]) -> dict[str, str]:
    """How each grid key appears in cell names: its last dotted part (the section for ``name``) where unique."""

    def last(key: str) -> str:
        parts = key.split(".")
        return parts[-2] if parts[-1] == "name" and len(parts) > 1 else parts[-1]

    counts: dict[str, int] = {}
    for key in keys:
        counts[last(key)] = counts.get(last(key), 0) + 1
    return {key: last(key) if counts[last(key)] == 1 else key for key in keys}


def _text(value: Any) -> str:
    """A value as it appears in a cell name: lists joined by "-", and nothing but letters, digits, ".", "-", "+"."""
    text = "-".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return re.sub(r"[^A-Za-z0-9.+-]", "", text.replace("/", "-")) or "empty"


def cells(base: Scenario, grid: dict[str, list[Any]], seeds: int = 1) -> list[Cell]:
    """The cross product of ``grid`` (in the order given, the last key varying fastest) and seeds
    ``base.seed + k`` for k in 0 .. seeds-1; each cell validated like ``--set``."""
    if seeds < 1:
        raise ScenarioError(f"--seeds {seeds}: must be at least 1")
    short = short_names(list(grid))
    out, names = [], set()
    for combo in itertools.product(*grid.values(), range(base.seed, base.seed + seeds)):
        *chosen, seed = combo
        values = dict(zip(grid, chosen, strict=True))
        name = "_".join([*(f"{short[k]}-{_text(v)}" for k, v in values.items()), f"seed-{seed}"])
        if name in names:
            raise ScenarioError(f"--grid: two cells would share the folder {name}; give distinct values")
        names.add(name)
        origin = "--grid " + ", ".join(f"{k}={v}" for k, v in values.items()) if values else "--seeds"
        out.append(Cell(name, values, base.replace(origin, **values, seed=seed)))
    return out


def is_done(cell: Cell, folder: Path, force: bool = False) -> bool:
    """Whether ``folder`` holds a finished run of ``cell``'s scenario; a finished run of another is an error, or,
    with ``force``, to be replaced."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    if not meta.get("finished"):
        return False
    if meta.get("scenario") != stored(to_dict(cell.scenario)):
        if force:
            return False
        raise ScenarioError(
            f"{folder}: holds a finished run of another scenario; sweep into a new folder, or give --force"
        )
    return True


def run_cell(scenario: dict[str, Any], folder: str, force: bool = False) -> str:
    """Simulate one cell (in a worker process or rank: plain data in, the folder out). It may replace an unfinished
    run of its own scenario there (resuming), or with ``force`` any simulated run."""
    simulate(from_dict(scenario), folder, replace=SIMULATED if force else UNFINISHED)
    return folder


def mpi_world_size() -> int:
    """Ranks the launcher started, from its environment (1 when not under mpiexec or srun with PMI)."""
    for variable in MPI_SIZE_VARIABLES:
        if os.environ.get(variable, "").isdigit():
            return int(os.environ[variable])
    return 1


@contextmanager
def _mpi_executor() -> Iterator[Any]:
    """mpi4py's ``MPICommExecutor`` on the world: rank 0 gets the executor, every other rank serves cells until rank
    0 is done and then gets None."""
    from mpi4py import MPI
    from mpi4py.futures import MPICommExecutor

    with MPICommExecutor(MPI.COMM_WORLD, root=0) as pool:
        yield pool


def _worker_start(sweep_process: int) -> None:
    """In each worker process: leave Ctrl-C to the sweep (which cancels and ends the workers itself), and on Linux
    die with the sweep's process (:mod:`..lifetime`); elsewhere a worker whose sweep was killed outright finishes its
    cell and then waits, until its process group is killed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(signal.SIGKILL, sweep_process)


@contextmanager
def _process_pool(jobs: int) -> Iterator[ProcessPoolExecutor]:
    """``jobs`` worker processes that do not outlive the sweep: when the body fails or is interrupted, the queued
    cells are cancelled and the running ones killed before the exception goes on. On Linux the workers are forked
    by the sweep's own thread (the parent-death signal names that thread; with the forkserver start method the
    parent would be the forkserver, which outlives a killed sweep)."""
    context = multiprocessing.get_context("fork") if LINUX else None
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_start, initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException:
        workers = list((pool._processes or {}).values())  # public only from Python 3.14 (terminate_workers)
        pool.shutdown(wait=False, cancel_futures=True)
        for process in workers:
            process.kill()
        raise
    pool.shutdown()


def _submit_all(todo: list[Cell], out: Path, pool: Executor | None, done: Callable[[], None], force: bool) -> None:
    """Simulate ``todo`` into ``out`` on ``pool`` (in this process when None), calling ``done`` after each cell."""
    if pool is None:
        for cell in todo:
            run_cell(to_dict(cell.scenario), str(out / cell.name), force)
            done()
        return
    futures = [pool.submit(run_cell, to_dict(c.scenario), str(out / c.name), force) for c in todo]
    for future in as_completed(futures):
        future.result()
        done()


@contextmanager
def _held(out: Path) -> Iterator[None]:
    """Hold the sweep folder ``out`` while this sweep runs into it: a second sweep into it meanwhile is a one-line
    error, not two sweeps writing the same cells' tables at once. The lock (``flock`` of ``out/.sweep.lock``) ends
    with the sweep's processes, however they end."""
    with open(out / LOCK, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(
                f"{out}: another sweep is running into this folder; wait for it to end, or sweep into another folder"
            ) from None
        yield


def sweep(
    all_cells: list[Cell], out: Path, jobs: int = 1, mpi: bool = False, progress: bool = True, force: bool = False
) -> tuple[int, int] | None:
    """Run the cells of ``all_cells`` not finished in ``out`` yet: in this process (``jobs`` = 1), in ``jobs``
    processes, or on MPI ranks; one sweep at a time into ``out``. ``force``: a cell's folder holding a simulated run
    of another scenario is replaced rather than an error. Returns (cells skipped as finished, cells run), or None on
    an MPI rank other than 0, which only served cells (it should then exit quietly)."""
    make_folder(out)

    def on(pool: Executor | None) -> tuple[int, int]:
        with _held(out):
            todo = [c for c in all_cells if not is_done(c, out / c.name, force)]
            with tqdm(
                total=len(todo), desc="sweep", unit="cell", disable=None if progress and todo else True, file=sys.stderr
            ) as bar:
                _submit_all(todo, out, pool, lambda: bar.update(1), force)
        return len(all_cells) - len(todo), len(todo)

    if mpi:
        with _mpi_executor() as pool:
            return None if pool is None else on(pool)
    if jobs > 1:
        with _process_pool(jobs) as pool:
            return on(pool)
    return on(None)
