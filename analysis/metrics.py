"""Metrics of one run, from its tables alone (simulated and real runs alike)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from stragglerlab.analysis.runfolder import Run


@dataclass(frozen=True)
class Summary:
    """The headline numbers of a run. Staleness is over contributions that some round carried.

    Throughput counts what training used: ``samples_per_s`` (applied throughput) is the samples of the
    worker-iterations whose gradient entered some replica (or a server's model) over ``span``, the time the last of
    them did (a worker-iteration's samples are its ``samples`` column: the batch, or fewer where preemption cut its
    work short); ``raw_samples_per_s`` counts the samples of every worker-iteration over the makespan, including
    gradients that never entered a model. Where each worker steps its own replica with its own gradient
    (``meta.json``'s ``applied`` is ``release``: model averaging, gossip, local steps) every gradient is applied when
    its worker is released, so the two are equal; elsewhere (``round``, the default of run folders without the key) a
    gradient is applied by the round or server update that carries it, and one no round carries (dropped, or after
    the last round) never is."""

    algorithm: str
    workers: int
    iterations: int  # worker-iterations run
    makespan: float  # seconds until the last worker finished
    span: float  # seconds until the last gradient was applied
    samples_per_s: float  # applied: samples of the worker-iterations whose gradient entered a model / span
    raw_samples_per_s: float  # samples of every worker-iteration / makespan
    mean_iteration: float
    mean_wait: float
    mean_staleness: float
    max_staleness: int
    fresh_fraction: float
    final_loss: float = float("nan")  # of the trained model's last evaluation (NaN: timing only)
    final_accuracy: float = float("nan")
    time_to_loss: float = float("nan")  # seconds to the target loss given to summarize (NaN: none or never)

    def as_dict(self) -> dict:
        return asdict(self)


class Tally:
    """Running sums over ``iterations`` rows: the timing part of a :class:`Summary`, fed block by block, so a run
    that keeps no table (``--summary-only``) is summarised exactly like one that does (its tally is in
    ``meta.json``)."""

    FIELDS = (
        "rows", "makespan", "span", "busy", "wait", "carried", "staleness", "max_staleness", "fresh", "samples",
        "carried_samples",
    )  # fmt: skip

    def __init__(self, **sums: float):
        self.sums = dict.fromkeys(self.FIELDS, 0) | sums

    @classmethod
    def saved(cls, sums: Mapping[str, float]) -> Tally:
        """A tally as ``meta.json`` keeps it. One written before ``span`` was tallied takes the makespan as its
        span: the applied throughput of such a run is then a lower bound (exact when the last worker-iteration
        was carried). One written before samples were tallied (``samples`` absent) counts them as rows × batch in
        :func:`summarize`."""
        return cls(**({"span": sums["makespan"], "samples": -1, "carried_samples": -1} | dict(sums)))

    def add(self, columns: Mapping[str, Any]) -> Tally:
        """Add a block of rows (a DataFrame or a mapping of column arrays)."""
        t_done = np.asarray(columns["t_done"])
        if len(t_done) == 0:
            return self
        carried = np.asarray(columns["round"]) >= 0
        staleness = np.asarray(columns["staleness"])[carried]
        s = self.sums
        s["rows"] += len(t_done)
        s["makespan"] = max(s["makespan"], float(t_done.max()))
        s["span"] = max(s["span"], float(t_done[carried].max()) if carried.any() else 0.0)
        s["busy"] += float((t_done - np.asarray(columns["t_start"])).sum())
        s["wait"] += float(np.asarray(columns["wait"]).sum())
        s["carried"] += len(staleness)
        s["staleness"] += int(staleness.sum())
        s["max_staleness"] = max(s["max_staleness"], int(staleness.max()) if len(staleness) else 0)
        s["fresh"] += int(np.count_nonzero(columns["fresh"]))
        samples = np.asarray(columns["samples"])
        s["samples"] += int(samples.sum())
        s["carried_samples"] += int(samples[carried].sum())
        return self


def _mean(total: float, count: float) -> float:
    return total / count if count else float("nan")


def _rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("nan")


def summarize(run: Run, target_loss: float | None = None) -> Summary:
    """Summary of a run; samples are the ``samples`` column's (the batch of each worker-iteration, fewer where
    preemption cut it short). Loss and accuracy are the last evaluation's of :func:`model_evals`; ``time_to_loss``:
    :func:`to_target`'s time for ``target_loss``."""
    scenario = run.meta["scenario"]
    batch = scenario["workload"]["batch"]
    kept = len(run.iterations) or "tally" not in run.meta
    s = (Tally().add(run.iterations) if kept else Tally.saved(run.meta["tally"])).sums
    if s["samples"] < 0:  # a tally saved before samples were counted: every worker-iteration had its whole batch
        s["samples"], s["carried_samples"] = s["rows"] * batch, s["carried"] * batch
    release = run.meta.get("applied") == "release"
    applied, span = (s["samples"], s["makespan"]) if release else (s["carried_samples"], s["span"])
    return Summary(
        algorithm=scenario["algorithm"]["name"],
        workers=scenario["cluster"]["workers"],
        iterations=int(s["rows"]),
        makespan=float(s["makespan"]),
        span=float(span),
        samples_per_s=_rate(applied, span),
        raw_samples_per_s=_rate(s["samples"], s["makespan"]),
        mean_iteration=_mean(s["busy"], s["rows"]),
        mean_wait=_mean(s["wait"], s["rows"]),
        mean_staleness=_mean(s["staleness"], s["carried"]),
        max_staleness=int(s["max_staleness"]),
        fresh_fraction=_mean(s["fresh"], s["rows"]),
        **_convergence(run, target_loss),
    )


def _convergence(run: Run, target_loss: float | None) -> dict[str, float]:
    ev = model_evals(run)
    if ev.empty:
        return {}
    return {
        "final_loss": float(ev["loss"].iloc[-1]),
        "final_accuracy": float(ev["accuracy"].iloc[-1]),
        "time_to_loss": to_target(run, target_loss)[0] if target_loss is not None else float("nan"),
    }


def iteration_times(run: Run) -> pd.Series:
    """Each worker-iteration's wall time ``t_done - t_start`` (compute plus wait), in seconds."""
    return run.iterations["t_done"] - run.iterations["t_start"]


def wait_fraction(run: Run) -> float:
    """The share of the workers' time spent waiting: ``Σ wait / Σ (t_done - t_start)`` over worker-iterations
    (the ratio of the summary's means, so it holds for runs that keep only their summary too)."""
    s = summarize(run)
    return s.mean_wait / s.mean_iteration if s.mean_iteration > 0 else float("nan")


def staleness_histogram(run: Run) -> pd.Series:
    """Worker-iterations per staleness value (sorted); the value -1 counts contributions that no round carried."""
    return run.iterations["staleness"].value_counts().sort_index().rename("count")


def model_evals(run: Run) -> pd.DataFrame:
    """The evaluations of the model a run trains: the averaged model's (worker -1) where the run has them, else the
    mean over the workers' own evaluations at each iteration. Columns t, iteration, loss, accuracy, sorted by t."""
    ev = run.evals
    if (ev["worker"] == -1).any():
        ev = ev[ev["worker"] == -1]
    else:
        ev = ev.groupby("iteration", as_index=False)[["t", "loss", "accuracy"]].mean()
    return ev[["t", "iteration", "loss", "accuracy"]].sort_values(["t", "iteration"]).reset_index(drop=True)


def to_target(run: Run, loss: float) -> tuple[float, float]:
    """Time and iteration of the first evaluation (of :func:`model_evals`) with loss at or below ``loss``;
    NaN, NaN if the run never gets there or has no evaluations."""
    ev = model_evals(run)
    reached = ev[ev["loss"] <= loss]
    if reached.empty:
        return float("nan"), float("nan")
    return float(reached["t"].iloc[0]), float(reached["iteration"].iloc[0])


def run_metrics(run: Run, target_loss: float | None = None) -> dict:
    """Every per-run metric as one flat dict: the :class:`Summary` fields, ``wait_fraction``, ``p95_iteration``
    and, given a target loss, ``time_to_loss`` and ``iterations_to_loss``."""
    out = summarize(run).as_dict()
    times = iteration_times(run)
    out["wait_fraction"] = wait_fraction(run)
    out["p95_iteration"] = float(times.quantile(0.95)) if len(times) else float("nan")
    if target_loss is not None:
        out["time_to_loss"], out["iterations_to_loss"] = to_target(run, target_loss)
    return out


def active_samples_per_s(run: Run) -> float:
    """Samples per second over the span the workers computed, first ``t_start`` to last ``t_done``: unlike
    ``samples_per_s`` (over the makespan from time 0) it leaves out a real run's start-up (MPI, model set-up)
    before the first iteration, which the simulator does not model. It counts every worker-iteration, carried or
    not (as ``raw_samples_per_s``). NaN without an iterations table."""
    it = run.iterations
    if it.empty:
        return float("nan")
    return _rate(int(it["samples"].sum()), float(it["t_done"].max() - it["t_start"].min()))
