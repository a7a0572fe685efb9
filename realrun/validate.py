"""Simulator against real runs: simulate a real run again and measure how far the simulation is from it.

- **Trace-driven** (:func:`trace_driven`): the real run's scenario with its calibrated network (its own ``[network]``,
  or a ``stragglerlab calibrate`` fragment's, with its cost table and server cost) and its own measured compute times
  and update gaps (:func:`trace_and_update`: the mean gap as ``workload.update``, the rest in an iterations × workers
  matrix written as a ``.npy``, which the simulation reads with ``imbalance.kind = "trace"``). In a real run the
  injected imbalance (the sleep or burnt work of :mod:`.injection`) happens between ``t_start`` and ``t_post``, so it
  is part of the measured compute already: the trace replaces the scenario's imbalance instead of being added to it.
  What the simulation then predicts is everything else: waits, rounds, staleness, throughput.
  A call that waits for no exchange (a local step, a post whose round is done) costs the harness its software time,
  which the simulation takes as ``workload.call``: the distribution (:func:`call_model`) of the real waits of the calls
  that a first simulation, without it, released at their posts (:func:`released_at_post`).
- **Out-of-sample** (:func:`predict`): a second real run (say another injected delay) predicted from the first
  ones alone: its own scenario and imbalance, the first runs' network, and the compute-time distribution fitted to
  the first runs' measured compute with their own injection taken out (:func:`base_compute`; fitted like
  ``stragglerlab calibrate`` fits it, :func:`stragglerlab.realrun.calibration.compute_model`), and the call cost
  fitted to the first runs' calls that waited for no exchange.

Simulations are timing-only (``workload.model = "none"`` with the real run's resolved ``workload.params``, so
messages have the real model's size): validation compares timings, not training.

:func:`compare` gives one row per (real, simulated) pair: :func:`~stragglerlab.analysis.compare.sim_vs_real`'s
means and relative errors (``sim / real − 1``) of the mean and 95th-percentile iteration time, throughput (over the
span the workers computed, :func:`~stragglerlab.analysis.metrics.active_samples_per_s`: a real run's start-up is not
modelled), mean wait, wait fraction and mean staleness, and the distance between distributions: Kolmogorov–Smirnov
of iteration times and of waits, total variation of staleness. And the round time of each, real and simulated
(``round_time_real``, ``round_time_sim``: the median over the run's rounds of the least wait among the calls that
joined each fresh, :func:`~stragglerlab.realrun.roundtimes.median_round`, as calibrate times rounds, taken alike from
both runs), with its relative error ``round_time_error``: whether the network model priced this run's rounds, which a
calibration measured in another minute or under another load need not have (``ROUND_WARNING``). Where the rounds are
a small part of an iteration (under ``EXCHANGE_SHARE``) the mean iteration time cannot judge the network model, and
``validate`` says so.
"""

from __future__ import annotations

import copy
import math
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stragglerlab.analysis.collection import summary_table
from stragglerlab.analysis.compare import (
    ALGORITHM,
    KS_WAIT_TARGET,
    VALIDATION_TARGETS,
    ks_apart,
    ks_distance,
    sim_vs_real,
    tv_distance,
)
from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.metrics import active_samples_per_s, iteration_times
from stragglerlab.analysis.outputs import make_folder
from stragglerlab.analysis.runfolder import SIMULATED, Run, load_run
from stragglerlab.realrun.calibration import compute_model, lognormal_cv, lognormal_model, quartile_sigma
from stragglerlab.realrun.roundtimes import median_round
from stragglerlab.simulator.imbalance import CallCosts, ComputeTimes
from stragglerlab.simulator.run import simulate
from stragglerlab.simulator.scenario import Scenario, from_dict

#: the metrics whose means :func:`compare` reports, real and simulated, with the relative error
METRICS = ("mean_iteration", "p95_iteration", "throughput", "mean_wait", "wait_fraction", "mean_staleness")
#: the error of the mean iteration time that validation aims for, per mode
TARGETS = VALIDATION_TARGETS
#: a simulation whose median round time is off the run's by more than this factor either way is warned of: the
#: calibration's rounds are not this run's (on a 2-core machine, within a factor of 1.34 in 213 of 216 validated
#: runs, 1.63-1.83 in the 3 whose calibration was measured in a slow minute; in a later 216, all within 1.45)
ROUND_WARNING = 1.5
#: a run whose median round is under this share of its mean iteration time is warned of: its iteration times hide
#: the network (a 16-rank round priced 5x too fast was within 3 % in iteration time, behind 70 ms of compute)
EXCHANGE_SHARE = 0.10
#: the sections of a calibrate fragment a simulation takes (:func:`read_calibration`): section -> key -> value
Calibration = dict[str, dict[str, Any]]


def measured_compute(run: Run) -> np.ndarray:
    """The iterations × workers matrix of a run's measured compute times (seconds) of a whole batch; the run must be
    complete. A worker-iteration cut short after k of its b samples (``preempt``) counts compute·b/k: at the rate it
    processed its samples, the time all b would have taken, which is what a simulation cuts short again."""
    it = run.iterations
    scenario = run.meta["scenario"]
    P, N = scenario["cluster"]["workers"], scenario["iterations"]
    if scenario.get("duration", 0) > 0:
        raise UserError(
            f"{run.path}: a run with a time budget (duration = {scenario['duration']}) has no trace of every "
            f"worker's {N} iterations; validate a run with duration = 0"
        )
    if len(it) != P * N:
        raise UserError(f"{run.path}: has {len(it)} of {P} x {N} worker-iterations; validate a finished run")
    whole = it["compute"] * (scenario["workload"]["batch"] / it["samples"])
    matrix = it.assign(whole=whole).pivot(index="iteration", columns="worker", values="whole")
    return matrix.reindex(index=range(N), columns=range(P)).to_numpy(dtype=float, copy=True)


def update_gaps(run: Run) -> np.ndarray:
    """The (iterations − 1) × workers matrix of a run's update gaps: each iteration's ``t_start`` less the previous
    iteration's ``t_done`` on the same worker (one clock, the worker's own)."""
    start, done = (
        run.iterations.pivot(index="iteration", columns="worker", values=c).sort_index().to_numpy(dtype=float)
        for c in ("t_start", "t_done")
    )
    return start[1:] - done[:-1]


def trace_and_update(run: Run) -> tuple[np.ndarray, float]:
    """What a trace-driven simulation of ``run`` is given: the mean update gap as ``workload.update`` and, per
    worker-iteration, the time from the previous iteration's end to the post less that mean (the first iteration:
    its compute). So every simulated post lands where the real one did after the same previous release, the gaps'
    variation carried in the trace, and the mean iteration time keeps the real gaps' mean."""
    gaps = update_gaps(run)
    update = max(float(gaps.mean()), 0.0) if gaps.size else 0.0
    trace = measured_compute(run)
    trace[1:] += gaps - update
    return np.maximum(trace, 0.0), update


def read_calibration(path: str | Path) -> Calibration:
    """The sections of a ``stragglerlab calibrate`` fragment a simulation of a real run takes: ``network`` (its cost
    table, ``network.table``, made absolute: it is named relative to the fragment) and ``algorithm`` (the server's
    ``server_gamma``, where the fragment has it), their values checked as a scenario's."""
    try:
        fragment = tomllib.loads(Path(path).read_text())
    except OSError as err:
        raise UserError(f"{path}: cannot read the calibration ({err.strerror})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file (a calibration is TOML)") from None
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{path}: not valid TOML ({err})") from None
    if not isinstance(fragment.get("network"), dict):
        raise UserError(f"{path}: no [network] table (write one with: stragglerlab calibrate -o {path})")
    sections = {"network": dict(fragment["network"]), "algorithm": dict(fragment.get("algorithm", {}))}
    if isinstance(sections["network"].get("table"), str):
        sections["network"]["table"] = str((Path(path).resolve().parent / sections["network"]["table"]).resolve())
    from_dict(sections, str(path))
    return sections


def timing_scenario(stored: dict[str, Any], calibration: Calibration | None, **sections: dict[str, Any]) -> Scenario:
    """A stored (``meta.json``) scenario made timing-only, with the keys of ``calibration``'s sections, then of the
    given sections, replacing its own (validated like any scenario)."""
    raw = copy.deepcopy(stored)
    raw["workload"]["model"] = "none"
    for section, keys in [*(calibration or {}).items(), *sections.items()]:
        raw[section].update(keys)
    return from_dict(raw, f"simulation of {stored['name']}")


def released_at_post(real: Run, sim: Run, scenario: Scenario) -> np.ndarray:
    """Which calls ``sim``, a simulation of ``real`` under ``scenario``, released at their posts (their wait is
    exactly their drawn call cost, 0 without ``workload.call``), as a mask over ``real``'s iterations rows."""
    drawn = CallCosts(scenario).block(0, scenario.iterations)
    it = real.iterations[["worker", "iteration"]].merge(sim.iterations, on=["worker", "iteration"], how="left")
    cost = drawn[it["iteration"].to_numpy(), it["worker"].to_numpy()]
    return np.isclose(it["wait"].to_numpy(), cost, rtol=1e-9, atol=1e-12)


def call_model(waits: np.ndarray) -> dict[str, Any] | None:
    """The ``workload.call`` table of measured call costs: the lognormal with their median and interquartile range
    (constant when that is narrower than 1 %); None when there are none (every call waited for an exchange) or they
    are all 0 (a simulated run). **(choice)** Quartiles, not the mean and cv: a real call that waited for an exchange
    the simulation did not give it (LSGD's trigger, which counts posts, one post apart) waits tens of milliseconds,
    and a few of those would set the cost of every call. **(choice)** Its sigma is at most the one that gives the
    calls' own mean: where such calls are many (a quarter or more), the quartiles straddle two modes, and their
    lognormal's tail (cv 100 and over for eager-solo's calls on shared cores) would cost tens of times what the calls
    did."""
    if not waits.size or waits.mean() <= 0:
        return None
    q25, median, q75 = np.percentile(waits, [25, 50, 75])
    if q25 <= 0:
        return compute_model(waits)
    mean = float(waits.mean())
    sigma = min(quartile_sigma(q25, q75), math.sqrt(2 * math.log(mean / median)) if mean > median else 0.0)
    return lognormal_model(float(median * math.exp(sigma**2 / 2)), lognormal_cv(sigma))


#: simulations that refit the call cost on the calls the previous one released at their posts, at most
CALL_FITS = 3
#: how close (relative) the fitted activation delay brings a replay's fresh contributions per round to the run's
FRESH_TOLERANCE = 0.01


def trace_driven(
    run: Run, folder: Path, trace: Path, calibration: Calibration | None = None
) -> tuple[Run, np.ndarray, float | None]:
    """Simulate ``run`` with its own measured compute times (written to ``trace``) into ``folder``; also returns the
    real waits of the calls it released at their posts, which give its call cost: found first on a simulation
    without one, then again on the simulation with the cost fitted, until the calls found no longer change (a call
    cost moves later posts, and with them which posts come after their round); and the activation delay fitted to
    the run (:func:`fit_activation`; None where the replay needed none)."""
    make_folder(trace.parent)
    times, update = trace_and_update(run)
    np.save(trace, times)
    imbalance = {"kind": "trace", "file": str(trace.resolve())}
    scenario = timing_scenario(run.meta["scenario"], calibration, imbalance=imbalance, workload={"update": update})
    scenario = scenario.replace(**{"workload.call": None})
    sim = load_run(simulate(scenario, folder, replace=SIMULATED))
    released = released_at_post(run, sim, scenario)
    waits = run.iterations["wait"].to_numpy()
    for _ in range(CALL_FITS):
        call = call_model(waits[released])
        if call is None:
            break
        scenario = scenario.replace(**{"workload.call": call})
        sim = load_run(simulate(scenario, folder, replace=SIMULATED))
        found = released_at_post(run, sim, scenario)
        if np.array_equal(found, released):
            break
        released = found
    sim, delay = fit_activation(run, sim, scenario, folder)
    return sim, waits[released], delay


def fresh_per_round(run: Run) -> float:
    """The mean number of contributions a round of ``run`` took fresh (0 without rounds)."""
    return float(run.rounds["fresh"].mean()) if len(run.rounds) else 0.0


def fit_activation(run: Run, sim: Run, scenario: Scenario, folder: Path) -> tuple[Run, float | None]:
    """``sim``, the replay of ``run`` under ``scenario``, again with ``network.activation_delay`` fitted so that its
    rounds take as many contributions fresh as the real ones did (bisection to :data:`FRESH_TOLERANCE`, between the
    scenario's own delay and the run's mean iteration time), and that delay; ``sim`` and None where they already
    take as many. A rank joins a round fresh when it posts before the round's activation reaches it, and on cores
    the ranks share, that takes as long as the rank's progress engine waits for a core: more than the token's
    message, and measured by no calibration, since it would take comparing two ranks' clocks. So the fresh
    contributions per round, read on one clock each, give it instead, as the parameter server's cost is found from
    its rounds' times."""
    target = fresh_per_round(run)
    if fresh_per_round(sim) >= target * (1 - FRESH_TOLERANCE):
        return sim, None

    def replay(delay: float) -> Run:
        return load_run(simulate(scenario.replace(**{"network.activation_delay": delay}), folder, replace=SIMULATED))

    low, high = scenario.network.activation_delay, float(iteration_times(run).mean())
    while high - low > FRESH_TOLERANCE * high:
        middle = (low + high) / 2
        if fresh_per_round(replay(middle)) < target * (1 - FRESH_TOLERANCE):
            low = middle
        else:
            high = middle
    return replay(high), high


def base_compute(run: Run) -> np.ndarray:
    """A run's measured compute times with its own injected imbalance taken out: the delay of each worker-iteration
    that random-delay slowed, or the factor of a persistent straggler (which multiplies its compute)."""
    stored = run.meta["scenario"]
    kind = stored["imbalance"]["kind"]
    if kind == "trace":
        raise UserError(f"{run.path}: its imbalance is a trace; the compute model cannot be told from it")
    times = ComputeTimes(from_dict(stored, str(run.path)))
    measured = measured_compute(run)
    if kind == "random-delay":
        for n in range(len(measured)):
            measured[n, times.slow_workers(n)] -= times.imbalance.delay
    return np.maximum(measured / times.factors, 0.0)


def predict(
    runs: Sequence[Run],
    other: Run,
    folder: Path,
    calibration: Calibration | None = None,
    call: dict[str, Any] | None = None,
    activation_delay: float | None = None,
) -> Run:
    """Simulate ``other`` from ``runs`` only: its own scenario and imbalance, with the compute distribution fitted
    to the ``runs``' measured compute (their injection taken out), their mean update gap, ``calibration``
    (default: the first run's network), ``call``, the ``workload.call`` found from them (default: none), and
    ``activation_delay``, the ``network.activation_delay`` fitted to them (default: the calibration's)."""
    compute = compute_model(np.concatenate([base_compute(r).ravel() for r in runs]))
    gaps = np.concatenate([update_gaps(r).ravel() for r in runs])
    update = max(float(gaps.mean()), 0.0) if gaps.size else 0.0
    calibration = calibration or {"network": runs[0].meta["scenario"]["network"]}
    network = {} if activation_delay is None else {"activation_delay": activation_delay}
    scenario = timing_scenario(
        other.meta["scenario"], calibration, workload={"compute": compute, "update": update}, network=network
    )
    return load_run(simulate(scenario.replace(**{"workload.call": call}), folder, replace=SIMULATED))


def compare(real: Run, sim: Run) -> dict[str, Any]:
    """Real against simulated for one pair: means, relative errors and distribution distances (module doc)."""
    table = summary_table([real, sim]).assign(throughput=[active_samples_per_s(real), active_samples_per_s(sim)])
    row = sim_vs_real(table, METRICS).iloc[0].to_dict()
    carried = [r.iterations.loc[r.iterations["round"] >= 0, "staleness"] for r in (real, sim)]
    rounds = median_round(real), median_round(sim)
    return {
        **row,
        "round_time_real": rounds[0],
        "round_time_sim": rounds[1],
        "round_time_error": rounds[1] / rounds[0] - 1 if rounds[0] > 0 else math.nan,
        "ks_iteration": ks_distance(iteration_times(real), iteration_times(sim)),
        "ks_wait": ks_distance(real.iterations["wait"], sim.iterations["wait"]),
        "tv_staleness": tv_distance(*carried),
    }


def round_warnings(table: pd.DataFrame) -> list[str]:
    """One line per trace-driven row whose simulated round time is off the real one by more than ``ROUND_WARNING``
    either way: the network model does not price that run's rounds."""
    ratio = 1 + table["round_time_error"]  # nan (a run without rounds) is never off
    off = table[(table["mode"] == "trace") & ((ratio > ROUND_WARNING) | (ratio < 1 / ROUND_WARNING))]
    return [
        f"{Path(row.run).name}: its simulation's rounds take a median of {row.round_time_sim * 1e3:.3g} ms, the "
        f"run's {row.round_time_real * 1e3:.3g} ms: the network model (the calibration, or the run's own [network]) "
        "was not measured under this run's load; calibrate --collectives again just before the runs"
        for row in off.itertuples()
    ]


def share_warnings(table: pd.DataFrame) -> list[str]:
    """One line per real run (trace-driven rows) whose rounds are under ``EXCHANGE_SHARE`` of its mean iteration
    time: its iteration times cannot judge the network model."""
    share = table["round_time_real"] / table["mean_iteration_real"]
    hidden = table[(table["mode"] == "trace") & (share < EXCHANGE_SHARE)]
    return [
        f"{Path(row.run).name}: its rounds take {row.round_time_real * 1e3:.3g} ms of a "
        f"{row.mean_iteration_real * 1e3:.3g} ms iteration (under {EXCHANGE_SHARE:.0%}): its iteration times cannot "
        "judge the network model; compare round_time_real and round_time_sim, or validate a run whose exchanges take "
        "longer"
        for row in hidden.itertuples()
    ]


def run_names(runs: Iterable[Run]) -> list[str]:
    """A distinct folder name per run: its own, numbered when two share one."""
    names: list[str] = []
    for r in runs:
        name, k = r.path.name, 2
        while name in names:
            name, k = f"{r.path.name}-{k}", k + 1
        names.append(name)
    return names


def validate(
    runs: Sequence[Run], out: Path, calibration: Calibration | None = None, others: Sequence[Run] = ()
) -> tuple[pd.DataFrame, dict[str, list[Run]]]:
    """Trace-driven validation of every run of ``runs`` and, for each of ``others``, its out-of-sample prediction
    from ``runs``; ``calibration``: the sections of a calibrate fragment (:func:`read_calibration`), else each run's
    own network. Simulations go to ``out/trace/<run>`` (traces to ``out/traces/<run>.npy``) and
    ``out/out-of-sample/<run>``. Returns one :func:`compare` row per pair (with ``run``, ``mode`` and the target
    first) and, per mode, the real and simulated runs (for the figures)."""
    if not runs:
        raise UserError("no runs to validate")
    for r in [*runs, *others]:
        if r.meta.get("source") != "real":
            raise UserError(
                f"{r.path}: not a real run (source = {r.meta.get('source', 'sim')}); validate takes "
                "the run folders of stragglerlab run"
            )
    rows: list[dict] = []
    pairs: dict[str, list[Run]] = {mode: [] for mode in TARGETS}  # per mode: real, simulated, real, ...
    costs, delays = [], []
    for name, real in zip(run_names(runs), runs, strict=True):
        sim, waits, delay = trace_driven(real, out / "trace" / name, out / "traces" / f"{name}.npy", calibration)
        pairs["trace"] += [real, sim]
        costs.append(waits)
        delays += [] if delay is None else [delay]
    call = call_model(np.concatenate(costs))
    delay = float(np.median(delays)) if delays else None
    for name, other in zip(run_names(others), others, strict=True):
        sim = predict(runs, other, out / "out-of-sample" / name, calibration, call, delay)
        pairs["out-of-sample"] += [other, sim]
    for mode, found in pairs.items():
        for real, sim in zip(found[::2], found[1::2], strict=True):
            rows.append(
                {
                    "run": str(real.path),
                    "mode": mode,
                    "target": TARGETS[mode],
                    "ks_wait_target": KS_WAIT_TARGET,
                    **compare(real, sim),
                }
            )
    table = pd.DataFrame(rows)
    return table[
        [
            "run",
            "mode",
            ALGORITHM,
            "target",
            *[c for c in table.columns if c not in ("run", "mode", ALGORITHM, "target")],
        ]
    ], pairs


def repeats(table: pd.DataFrame, k: int, pairs: dict[str, list[Run]]) -> pd.DataFrame:
    """Each mode's rows in consecutive groups of ``k`` (``k`` real runs of one configuration): per group, the mean
    of every error and distance (``<column>``) and its spread over the ``k`` runs (``<column>_spread``, the sample
    standard deviation), and ``ks_wait_apart``, the mean KS distance of the waits between the group's real runs,
    pair by pair (:func:`~stragglerlab.analysis.compare.ks_apart`): what the machine's own noise leaves between runs
    of one scenario, beside which ``ks_wait`` is read. ``pairs``: per mode, the real and simulated runs as
    :func:`validate` returns them; ``run`` is the group's first run."""
    measured = [c for c in table.columns if c.endswith("_error") or c.startswith(("ks_", "tv_"))]
    out = []
    for mode, rows in table.groupby("mode", sort=False):
        if len(rows) % k:
            raise UserError(f"--repeat {k}: {len(rows)} {mode} runs are not groups of {k} repeats")
        reals = pairs[mode][::2]  # in the order of the mode's rows
        for first in range(0, len(rows), k):
            group = rows.iloc[first : first + k]
            algorithms_seen = group[ALGORITHM].unique()
            if len(algorithms_seen) > 1:
                raise UserError(f"--repeat {k}: one group of repeats mixes {', '.join(algorithms_seen)}")
            spread = group[measured].std(ddof=1) if k > 1 else group[measured].iloc[0] * 0.0
            out.append(
                {
                    "run": group["run"].iloc[0],
                    "mode": mode,
                    ALGORITHM: algorithms_seen[0],
                    "target": group["target"].iloc[0],
                    "repeats": k,
                    **group[measured].mean().to_dict(),
                    **{f"{c}_spread": spread[c] for c in measured},
                    "ks_wait_apart": ks_apart([r.iterations["wait"] for r in reals[first : first + k]]),
                }
            )
    return pd.DataFrame(out)
