"""Hand-made run folders with known answers, written through the same :class:`RunWriter` as real runs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stragglerlab.analysis.runfolder import SCHEMAS, RunWriter


def write_run(
    folder: Path,
    iterations: list[tuple],
    *,
    algorithm: str = "sync",
    seed: int = 0,
    source: str = "sim",
    workers: int = 1,
    batch: int = 10,
    rounds: tuple = (),
    evals: tuple = (),
    style: Mapping[str, Any] | None = None,
    tally: Mapping[str, float] | None = None,
    applied: str | None = None,
    keys: Mapping[str, Any] | None = None,
    finished: bool = True,
) -> Path:
    """A run folder with exactly these rows (in the column order of ``SCHEMAS``; an ``iterations`` row without its
    last column, ``samples``, processed its whole ``batch``). ``style``: the algorithm's plot
    style as the simulator records it (``{"colour", "marker", "order"}``; none: a run from before styles);
    ``tally``: the summary's running sums, as a run that keeps no table records them; ``applied``: when the
    algorithm applies a gradient, as ``meta.json`` records it (none: a run from before it was recorded); ``keys``:
    more scenario keys, dotted (``{"imbalance.delay": 0.32}``); ``finished``: false leaves it as a killed run leaves
    it."""
    scenario: dict[str, Any] = {
        "name": "handmade",
        "seed": seed,
        "iterations": max((r[1] for r in iterations), default=-1) + 1,
        "cluster": {"workers": workers},
        "workload": {"batch": batch},
        "algorithm": {"name": algorithm},
    }
    for key, value in (keys or {}).items():
        *parents, last = key.split(".")
        node = scenario
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    meta: dict[str, Any] = {"source": source, "seed": seed, "scenario": scenario}
    if style is not None:
        meta["style"] = dict(style)
    if tally is not None:
        meta["tally"] = dict(tally)
    if applied is not None:
        meta["applied"] = applied
    writer = RunWriter(folder, meta)
    width = len(SCHEMAS["iterations"].names)
    iterations = [(*row, batch) if len(row) == width - 1 else row for row in iterations]
    for table, rows in (("iterations", iterations), ("rounds", rounds), ("evals", evals)):
        if rows:
            writer.add_block(table, dict(zip(SCHEMAS[table].names, zip(*rows, strict=True), strict=True)))
    writer.close(finished=finished)
    return folder


def one_iteration(folder: Path, seconds: float, **keys) -> Path:
    """A run of one worker-iteration that computes for ``seconds``: its makespan (and samples/s = batch / seconds)."""
    return write_run(folder, [(0, 0, 0.0, seconds, seconds, seconds, 0.0, 0, 0, 0, True)], **keys)
