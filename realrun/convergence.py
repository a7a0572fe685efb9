"""Training across planes: a real run's evaluations against the simulator's replay of the run's own tables.

Timing never depends on model values, so a run's ``iterations`` and ``rounds`` tables say everything the simulator's
convergence replay (:mod:`stragglerlab.simulator.convergence`) needs to train the model again: which contribution went
into which round, on which model version, which deposit a WAGMA group read, what an AD-PSGD peer held. The replay
trains the run's workload (its seed, data shards and hyperparameters, from ``meta.json``) along those tables and
evaluates at the run's own evaluation points; :func:`compare` puts each of the run's evaluations beside the
replay's. Both planes compute in float32 on the model and the replay keeps float64 replicas, so they agree to float32
rounding: :data:`TOLERANCE` on the loss, relative, at every evaluation.

The real run's evaluation points must be the replay's: every rank copies its replica at the points of
``evals.every_iterations``, while a point that only ``evals.every_seconds`` makes is copied up to an iteration late
on the other ranks where the replicas differ (:mod:`.evaluation`), so such a run is refused here.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.metrics import model_evals
from stragglerlab.analysis.plots.base import figure, legend, styled
from stragglerlab.analysis.runfolder import Run, load_run
from stragglerlab.analysis.style import SOURCE_LINESTYLE
from stragglerlab.realrun.algorithms.base import exchange_class
from stragglerlab.simulator.imbalance import ComputeTimes
from stragglerlab.simulator.plan import plan
from stragglerlab.simulator.run import simulate, train
from stragglerlab.simulator.scenario import Scenario, ScenarioError, from_dict
from stragglerlab.simulator.workloads import load

#: the largest relative difference of the loss, replay against real run, at any evaluation: float32 rounding
TOLERANCE = 1e-4
#: the simulated schedules a predicted time to a target loss is the median of (:func:`time_to_target`)
SCHEDULES = 21
COLUMNS = ("run", "iteration", "t", "loss_real", "loss_sim", "accuracy_real", "accuracy_sim", "loss_error")


def scenario_of(run: Run) -> Scenario:
    """The scenario a real run ran, as its ``meta.json`` holds it; a run the replay cannot reproduce is a one-line
    error."""
    if run.meta.get("source") != "real":
        raise UserError(
            f"{run.path}: not a real run (source = {run.meta.get('source', 'sim')}); --convergence "
            "replays the run folders of stragglerlab run"
        )
    try:
        scenario = from_dict(run.meta["scenario"], str(run.path / "meta.json"))
    except ScenarioError as err:
        raise UserError(str(err)) from None
    if scenario.workload.model == "none":
        raise UserError(f"{run.path}: a timing-only run (workload.model = none) trains no model")
    if run.evals.empty:
        raise UserError(f"{run.path}: the run has no evaluations")
    return scenario


def replay_run(run: Run) -> pd.DataFrame:
    """The replay of ``run``'s tables evaluated at the run's evaluation points: t, iteration, loss, accuracy of the
    averaged model."""
    scenario = scenario_of(run)
    workload = load(scenario)
    the_plan = plan(scenario)
    exchange = exchange_class(the_plan.record, run.meta.get("backend", "native"))
    exact = exchange.identical and not getattr(workload, "buffers", None)
    if scenario.evals.every_seconds > 0 and not exact:
        raise UserError(
            f"{run.path}: evals.every_seconds = {scenario.evals.every_seconds}: this run's replicas differ at such "
            "points, and the ranks copy them up to an iteration apart; replay a run with evals.every_seconds = 0"
        )
    real = model_evals(run)  # the first is before training and the last at its end, as the replay's are
    rows = train(the_plan, workload, run.iterations, run.rounds, points=real["iteration"].iloc[1:-1].tolist())
    frame = pd.DataFrame(rows, columns=["t", "iteration", "worker", "loss", "accuracy"])
    return frame[frame["worker"] == -1].drop(columns="worker").reset_index(drop=True)


def _numbered(frame: pd.DataFrame) -> pd.DataFrame:
    """Each row with the count of earlier rows at the same iteration (-1: the final evaluation, which may repeat the
    iteration of the last round's)."""
    k = frame.groupby("iteration").cumcount().to_numpy(copy=True)
    k[-1:] = -1
    return frame.assign(k=k)


def compare(run: Run, name: str | None = None) -> pd.DataFrame:
    """One row per evaluation of ``run``: its loss and accuracy, the replay's at the same point, and the relative
    difference of the losses (``loss_error``, NaN where the replay has no such point). ``t`` is the run's."""
    real = _numbered(model_evals(run))
    sim = _numbered(replay_run(run))
    both = real.merge(sim, on=["iteration", "k"], how="left", suffixes=("_real", "_sim"))
    both["run"] = name or run.path.name
    both["t"] = both["t_real"]
    both["loss_error"] = (both["loss_sim"] / both["loss_real"] - 1).abs()
    return both[list(COLUMNS)]


def agrees(table: pd.DataFrame) -> pd.Series:
    """Per run: whether every evaluation's loss is within :data:`TOLERANCE` of the replay's."""
    return table.groupby("run", sort=False)["loss_error"].agg(lambda e: bool((e <= TOLERANCE).all()))


def draw(table: pd.DataFrame) -> Figure:
    """Both loss curves of every run against time, one panel per run: the real run solid, the replay dashed."""
    runs = list(dict.fromkeys(table["run"]))
    with styled():
        fig, axes = figure(len(runs), wide=len(runs) > 1, columns=min(len(runs), 2))
        for ax, name in zip(axes, runs, strict=True):
            mine = table[table["run"] == name]
            for source, style in SOURCE_LINESTYLE.items():
                label = "real run" if source == "real" else "replay of its tables"
                ax.plot(mine["t"], mine[f"loss_{source}"], linestyle=style, marker=".", label=label)
            worst = mine["loss_error"].max()
            ax.set_title(f"{name}: largest difference {worst:.1e}", fontsize="small")
            ax.set_xlabel("time [s]")
            ax.set_ylabel("test loss")
        legend(fig, columns=2)
    return fig


def crossing(evals: pd.DataFrame, target: float, at: str = "t") -> float:
    """When (``at``: ``t`` or ``iteration``) the loss of ``evals`` (sorted by ``t``) first reaches ``target``,
    interpolated linearly between the evaluation before and the first at or below it (evaluations are some
    iterations apart); NaN if it never does."""
    t, loss = evals[at].to_numpy(dtype=float), evals["loss"].to_numpy()
    below = np.flatnonzero(loss <= target)
    if not len(below):
        return float("nan")
    k = int(below[0])
    if k == 0:
        return float(t[0])
    return float(t[k - 1] + (t[k] - t[k - 1]) * (loss[k - 1] - target) / (loss[k - 1] - loss[k]))


@dataclass(frozen=True)
class Schedules:
    """Each simulated schedule's time and iterations per worker to the loss ``target`` (:func:`schedules_to_target`)."""

    target: float
    times: np.ndarray
    iterations: np.ndarray


def schedules_to_target(real: Run, predicted: Run, target: float, schedules: int = SCHEDULES) -> Schedules:
    """The predicted side of :func:`time_to_target`: the time and the iterations per worker to the test loss
    ``target`` along each of ``schedules`` simulated schedules, ``predicted``'s first. ``predicted`` is the
    (timing-only) simulation that predicts ``real`` from other runs; along each schedule, ``real``'s model (its data,
    initial weights and hyperparameters) is trained and evaluated. Each time is counted from the schedule's first
    computation; NaN where a schedule never gets there. It depends on the two runs' scenarios only, so repeats of one
    real scenario can share it."""
    scenario = scenario_of(real)
    the_plan, data = plan(scenario), load(scenario)
    times, iterations = [], []
    for sim in [predicted, *redrawn(predicted, schedules - 1)]:
        rows = train(the_plan, data, sim.iterations, sim.rounds)
        simulated = pd.DataFrame(rows, columns=["t", "iteration", "worker", "loss", "accuracy"])
        simulated = simulated[simulated["worker"] == -1]
        times.append(crossing(simulated, target) - sim.iterations["t_start"].min())
        iterations.append(crossing(simulated, target, "iteration"))
    return Schedules(target, np.array(times), np.array(iterations))


def time_to_target(real: Run, predicted: Schedules) -> dict[str, float]:
    """Out of sample: the real run's time to the test loss ``predicted.target`` against its prediction's, each counted
    from its run's first computation, since a real run's start-up (MPI, torch, the data) is no part of what the
    simulator predicts, and interpolated between evaluations (:func:`crossing`), as are the iterations per worker to it:
    where those agree, the time's error is the schedule's. NaN where a run never gets there; the error NaN too where the
    real run is there from the start.

    **(choice)** The prediction is the median over the schedules of :func:`schedules_to_target`: the predicted run's
    and those of its scenario with its compute times and call costs drawn anew (:func:`redrawn`; the imbalance, the
    model, its data and its initial weights stay the real run's). Which gradients share a round moves a loss that
    jumps between evaluations by whole evaluations, so one schedule's crossing can be far from another's where the
    rounds take some contributions late (eager-SGD on 4 ranks with ``torch:cnn``: 0.95 to 1.87 s over 21
    schedules); the median is what the simulation expects, and ``time_to_target_sim_low`` and ``_high`` (the least
    and the most) say how far one schedule can be from it. **(choice)** :data:`SCHEDULES` = 21: over the first 5 of
    those schedules the median was 1.20 s, over 21 1.28 s; repeats of one real scenario share the schedules, so
    they are trained once. The real run is timed as the simulation is (:func:`timed`)."""
    evals = timed(real)
    real_time = crossing(evals, predicted.target) - real.iterations["t_start"].min()
    sim_time = median(predicted.times)
    return {
        "target_loss": predicted.target,
        "time_to_target_real": real_time,
        "time_to_target_sim": sim_time,
        "time_to_target_sim_low": float(np.min(predicted.times)),
        "time_to_target_sim_high": float(np.max(predicted.times)),
        "time_to_target_error": sim_time / real_time - 1 if real_time > 0 else float("nan"),  # 0: met at the start
        "iterations_to_target_real": crossing(evals, predicted.target, "iteration"),
        "iterations_to_target_sim": median(predicted.iterations),
    }


def timed(real: Run) -> pd.DataFrame:
    """A real run's evaluations timed as a simulation times its own: each at the completion of the round that made
    it, from the replay of the run's tables (:func:`replay_run`, whose losses are the run's to :data:`TOLERANCE`). The
    run records an evaluation when rank 0 learns that round is done, at the end of its own iteration, up to an
    iteration later (3-5 % of the time to the target for eager-SGD and WAGMA on 4 ranks). Where the replay cannot
    place the run's evaluations (``evals.every_seconds``), the run's own."""
    try:
        return replay_run(real)
    except UserError:
        return model_evals(real)


def redrawn(predicted: Run, count: int) -> list[Run]:
    """``count`` simulations of ``predicted``'s scenario that keep its imbalance and draw the rest anew: compute times
    and call costs under the seeds after its own, each worker-iteration's compute then slowed as the scenario's
    imbalance slowed it (a random delay delays the very worker-iterations it delayed, which a real run's delays were
    too), given to the simulation as a trace."""
    scenario = from_dict(predicted.meta["scenario"], str(predicted.path / "meta.json"))
    imbalance = ComputeTimes(scenario)
    N = scenario.iterations
    out = []
    with tempfile.TemporaryDirectory(prefix="stragglerlab-schedules-") as tmp:
        for k in range(1, count + 1):
            seed = scenario.seed + k
            drawn = scenario.replace(seed=seed)
            if scenario.imbalance.kind != "trace":
                times = ComputeTimes(drawn.replace(**{"imbalance.kind": "none"})).block(0, N) * imbalance.factors
                for n in range(N):
                    times[n, imbalance.slow_workers(n)] += scenario.imbalance.delay
                np.save(trace := Path(tmp) / f"{k}.npy", times)
                drawn = drawn.replace(**{"imbalance.kind": "trace", "imbalance.file": str(trace)})
            out.append(load_run(simulate(drawn, Path(tmp) / str(k))))
    return out


def median(values: np.ndarray) -> float:
    """The median, a NaN (never reached) counted as later than every time; NaN where that is the median."""
    middle = float(np.median(np.nan_to_num(np.array(values), nan=np.inf)))
    return middle if np.isfinite(middle) else float("nan")
