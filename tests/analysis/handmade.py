"""Hand-made run folders with known answers, written through the same :class:`RunWriter` as real runs."""

from __future__ import annotations

from pathlib import Path

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
) -> Path:
    """A finished run folder with exactly these rows (in the column order of ``SCHEMAS``)."""
    meta = {
        "source": source,
        "seed": seed,
        "scenario": {
            "name": "handmade",
            "seed": seed,
            "iterations": max((r[1] for r in iterations), default=-1) + 1,
            "cluster": {"workers": workers},
            "workload": {"batch": batch},
            "algorithm": {"name": algorithm},
        },
    }
    with RunWriter(folder, meta) as writer:
        for table, rows in (("iterations", iterations), ("rounds", rounds), ("evals", evals)):
            if rows:
                writer.add_block(table, dict(zip(SCHEMAS[table].names, zip(*rows, strict=True), strict=True)))
    return folder


def one_iteration(folder: Path, seconds: float, **keys) -> Path:
    """A run of one worker-iteration that computes for ``seconds``: its makespan (and samples/s = batch / seconds)."""
    return write_run(folder, [(0, 0, 0.0, seconds, seconds, seconds, 0.0, 0, 0, 0, True)], **keys)
