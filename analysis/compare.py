"""Comparisons across runs, on a :func:`.collection.summary_table`: means with confidence intervals across
seeds, speedup over a named baseline paired by seed, and simulated against real runs.

Runs that share a seed share their compute times and delays (common random numbers), so an algorithm and its baseline
on one seed are a paired experiment. The speedup is therefore estimated from the per-seed ratios r_s: the reported
speedup is their geometric mean and its interval is Student's t-interval of the mean of log r_s, transformed back
(ratios are multiplicative; the log makes the interval symmetric in "x times faster" and "x times slower").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from stragglerlab.analysis.errors import UserError

ALGORITHM = "algorithm.name"
#: what validation aims for: the relative error of the simulated mean iteration time, per mode (trace-driven: the
#: run's own compute times; out of sample: another run predicted from the first ones) ...
VALIDATION_TARGETS = {"trace": 0.02, "out-of-sample": 0.05}
#: ... and the Kolmogorov–Smirnov distance between the real and simulated waits
KS_WAIT_TARGET = 0.25
#: metrics where less is better: the speedup of these is baseline / algorithm rather than algorithm / baseline
LOWER_IS_BETTER = frozenset(
    {
        "makespan",
        "span",
        "mean_iteration",
        "p95_iteration",
        "mean_wait",
        "wait_fraction",
        "time_to_loss",
        "iterations_to_loss",
    }
)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (numerically: Simpson's rule on the density,
    then bisection; accurate to about 1e-6, which is plenty for an interval)."""
    if not 0 < p < 1 or df < 1:
        raise ValueError(f"t_quantile: p = {p} must be in (0, 1) and df = {df} at least 1")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(t: float) -> float:
        x = np.linspace(0.0, t, 4001)
        y = np.exp(log_norm - (df + 1) / 2 * np.log1p(x * x / df))
        h = t / 4000
        return 0.5 + h / 3 * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def mean_interval(values: Iterable[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student's t-interval of the mean, ``(mean, low, high)``; one value: the interval is NaN."""
    x = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    if len(x) == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(x.mean())
    if len(x) < 2:
        return mean, float("nan"), float("nan")
    half = t_quantile((1 + level) / 2, len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return mean, mean - half, mean + half


def aggregate(table: pd.DataFrame, by: list[str], metrics: list[str], level: float = 0.95) -> pd.DataFrame:
    """One row per group of ``by`` (e.g. the grid keys without the seed): ``runs``, and for each metric its mean
    and the ``level`` t-interval across the group's runs (columns ``<m>``, ``<m>_lo``, ``<m>_hi``)."""
    rows = []
    for key, group in table.groupby(by, sort=True, dropna=False):
        row = dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True))
        row["runs"] = len(group)
        for m in metrics:
            row[m], row[f"{m}_lo"], row[f"{m}_hi"] = mean_interval(group[m], level)
        rows.append(row)
    return pd.DataFrame(rows)


def speedup(
    table: pd.DataFrame, baseline: str, metric: str = "samples_per_s", by: Iterable[str] = (), level: float = 0.95
) -> pd.DataFrame:
    """Speedup of every algorithm over ``baseline`` in ``metric``, paired by seed within each group of ``by``.

    Returns one row per (group, algorithm): ``speedup`` (geometric mean of the per-seed ratios), ``low`` and ``high``
    (the t-interval, NaN with one seed) and ``seeds`` (pairs used). Ratios are algorithm / baseline, or baseline /
    algorithm for :data:`LOWER_IS_BETTER` metrics, so above 1 is always better.
    """
    by = list(by)
    if baseline not in set(table[ALGORITHM]):
        raise UserError(f"baseline {baseline}: no run of it (algorithms: {', '.join(sorted(set(table[ALGORITHM])))})")
    keys = [*by, "seed"]
    base = table[table[ALGORITHM] == baseline].set_index(keys)[metric]
    if base.index.duplicated().any():
        raise UserError(f"baseline {baseline}: more than one run per seed; group by the keys that differ")
    rows = []
    for key, group in table.groupby([*by, ALGORITHM], sort=True):
        mine = group.set_index(keys)[metric]
        pairs = pd.concat([mine, base], axis=1, join="inner", keys=["mine", "base"]).dropna()
        ratio = pairs["base"] / pairs["mine"] if metric in LOWER_IS_BETTER else pairs["mine"] / pairs["base"]
        mean, low, high = mean_interval(np.log(ratio[ratio > 0]), level)
        rows.append(
            {
                **dict(zip([*by, ALGORITHM], key, strict=True)),
                "speedup": math.exp(mean),
                "low": math.exp(low),
                "high": math.exp(high),
                "seeds": len(pairs),
            }
        )
    return pd.DataFrame(rows)


def sim_vs_real(
    table: pd.DataFrame,
    metrics: Iterable[str] = ("mean_iteration", "p95_iteration", "samples_per_s", "wait_fraction", "mean_staleness"),
) -> pd.DataFrame:
    """Per algorithm, each metric's mean over the real runs and over the simulated ones and the relative error
    ``sim / real - 1`` (columns ``<m>_real``, ``<m>_sim``, ``<m>_error``); the table needs both sources."""
    sources = set(table["source"])
    if not {"sim", "real"} <= sources:
        raise UserError(f"sim against real needs runs of both sources; got only {', '.join(sorted(sources))}")
    rows = []
    for algorithm, group in table.groupby(ALGORITHM, sort=True):
        row = {ALGORITHM: algorithm}
        for m in metrics:
            real = group.loc[group["source"] == "real", m].mean()
            sim = group.loc[group["source"] == "sim", m].mean()
            row[f"{m}_real"], row[f"{m}_sim"] = real, sim
            row[f"{m}_error"] = sim / real - 1 if real else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def ks_distance(a: Iterable[float], b: Iterable[float]) -> float:
    """Two-sample Kolmogorov–Smirnov distance: the largest gap between the empirical CDFs of ``a`` and ``b``
    (0: the same distribution of values; 1: disjoint). NaN when either sample is empty."""
    x, y = np.sort(np.asarray(list(a), dtype=float)), np.sort(np.asarray(list(b), dtype=float))
    if len(x) == 0 or len(y) == 0:
        return float("nan")
    grid = np.concatenate([x, y])
    gap = np.searchsorted(x, grid, side="right") / len(x) - np.searchsorted(y, grid, side="right") / len(y)
    return float(np.abs(gap).max())


def ks_apart(samples: Sequence[Iterable[float]]) -> float:
    """The mean :func:`ks_distance` over every pair of ``samples``: how far repeats of one measurement lie from each
    other (for real runs of one scenario, the machine's own noise, against which a simulation's distance is read).
    NaN for fewer than two samples."""
    kept = [np.asarray(list(s), dtype=float) for s in samples]
    pairs = [ks_distance(a, b) for i, a in enumerate(kept) for b in kept[i + 1 :]]
    return float(np.mean(pairs)) if pairs else float("nan")


def tv_distance(a: Iterable[int], b: Iterable[int]) -> float:
    """Total-variation distance between the distributions of two samples of discrete values (e.g. staleness):
    half the sum of the absolute differences of their shares per value, in [0, 1]. NaN when either is empty."""
    x, y = pd.Series(list(a)).value_counts(normalize=True), pd.Series(list(b)).value_counts(normalize=True)
    if x.empty or y.empty:
        return float("nan")
    return float(0.5 * x.sub(y, fill_value=0.0).abs().sum())
