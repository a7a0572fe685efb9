"""Validation of the simulator against real runs on this machine: every algorithm, P ranks, a persistent straggler and
random delays, the network calibrated with ``stragglerlab calibrate --collectives``; the mean iteration-time error
trace-driven and out of sample, and the Kolmogorov–Smirnov distance of the waits, each over K repeated real runs.

    python tests/benchmarks/bench_validation.py [--ranks 2 3 4] [--repeats 3] [--iterations 240] [--compute 0.03]
                                                [--delay 0.03] [--factor 1.5] [--params 100000] [-o DIR]
    python tests/benchmarks/bench_validation.py --ddp [--ranks 2 3 4] [--repeats 3] [-o DIR]
    python tests/benchmarks/bench_validation.py --revalidate [--ranks 2 3 4] [--repeats 3] [-o DIR]

Per P: one calibration (the cost table of the round kinds at 200, 400 and 800 kB, timed under the straggler imbalance,
and the update gap), or with ``--calibrate-each`` one per algorithm and imbalance just before its runs, timed under that
scenario (that algorithm and sync, at the runs' message size); then per algorithm and imbalance K real runs
(``stragglerlab run --np P``, timing-only: ``params`` float32 exchanged, lognormal compute of mean ``compute`` and cv
0.1). With ``--calibrate-each``, where ``validate`` warns that the calibration does not price the runs' rounds (one
taken in a slow minute), it is taken once more right after them and used instead: the runs are kept, the case marked
"calibrated again". Each run is validated trace-driven with its calibration (and, for comparison, with the scenario's
default network formulas), and the same repeat under the other imbalance predicted out of sample from it. Prints one
Markdown row per (P, algorithm, imbalance): the real mean iteration time, each error as mean ± standard deviation over
the K repeats, the KS distance of the waits and beside it that between the repeats' own waits (the machine's noise:
what real runs of one scenario seconds apart agree to), and whether it meets the targets (2 % trace-driven, 5 % out of
sample, KS of the waits ≤ 0.25); writes every row to DIR/validation.csv.

``--revalidate``: no real run and no calibration; validates again the runs and calibrations a run of this benchmark left
in DIR (``P<P>/runs``, ``P<P>/calibration-<algorithm>-<imbalance>.toml`` or ``P<P>/calibration.toml``): what a change to
the simulator or to validation does to the same real runs.

``--ddp``: real sync under DistributedDataParallel (``--backend torch``: torch:mlp, a bucket cap of a quarter of its
gradient, 10 ms random delays) against the simulated bucketed sync, trace-driven, with the backward share
``stragglerlab profile`` measures and the bucket time ``calibrate --collectives --backend torch`` measures.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.analysis.compare import KS_WAIT_TARGET, VALIDATION_TARGETS, ks_apart
from stragglerlab.analysis.runfolder import load_run
from stragglerlab.realrun.validate import Calibration, read_calibration, round_warnings, validate
from stragglerlab.simulator import algorithms

IMBALANCES = {
    "straggler": lambda a: f"kind = 'persistent'\nfactors = {{ 0 = {a.factor} }}",
    "delays": lambda a: f"kind = 'random-delay'\nslow = [1, 1]\ndelay = {a.delay}",
}


def scenario_text(args: argparse.Namespace, P: int, algorithm: str, imbalance: str) -> str:
    return f"""
name = "validation-{algorithm}-{imbalance}-{P}"
seed = 11
iterations = {args.iterations}
[cluster]
workers = {P}
[workload]
params = {args.params}
compute = {{ dist = "lognormal", mean = {args.compute}, cv = 0.1 }}
[imbalance]
{IMBALANCES[imbalance](args)}
[algorithm]
name = "{algorithm}"
sync_period = 8
group_size = 2
period = 4
global_period = 8
"""


def stragglerlab(*argv: str, timeout: float = 600) -> None:
    proc = subprocess.run([sys.executable, "-m", "stragglerlab.cli", *argv], timeout=timeout)
    if proc.returncode:
        raise SystemExit(f"stragglerlab {' '.join(argv)}: exit {proc.returncode}")


def calibrate(args: argparse.Namespace, P: int, fragment: Path, algorithm: str, imbalance: str = "straggler") -> None:
    """``calibrate --collectives`` under the ``imbalance`` scenario: every algorithm at three sizes, or
    (``algorithm``) that one and sync (whose rounds serve the kinds it has none of) at the runs' message size."""
    timed = fragment.with_name("timed-under.toml")  # the compute and imbalance the rounds are timed under
    timed.write_text(scenario_text(args, P, "sync", imbalance))
    if algorithm:
        which = ["--algorithms", ",".join(dict.fromkeys(["sync", algorithm])), "--sizes", str(4 * args.params)]
    else:
        which = ["--sizes", "200000,400000,800000"]
    stragglerlab("calibrate", str(timed), "--np", str(P), "--collectives", *which, "--max-blocks", "12", "-o",
                 str(fragment), "--force")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--iterations",
        type=int,
        default=240,
        help="per real run (default 240: this machine's speed wanders over seconds, and 60-iteration runs of one "
        "scenario drew waits as far apart from each other as from their simulations)",
    )
    parser.add_argument("--compute", type=float, default=0.03)
    parser.add_argument("--delay", type=float, default=0.03)
    parser.add_argument("--factor", type=float, default=1.5)
    parser.add_argument("--params", type=int, default=100_000)
    parser.add_argument("--algorithms", nargs="+", default=[r.name for r in algorithms.RECORDS])
    parser.add_argument("-o", "--output", type=Path, default=Path("bench-validation"))
    parser.add_argument(
        "--calibrate-each",
        action="store_true",
        help="calibrate under each algorithm's and imbalance's scenario just before its runs (a changing load)",
    )
    parser.add_argument("--ddp", action="store_true", help="only the DDP comparison")
    parser.add_argument("--revalidate", action="store_true", help="validate the runs already in DIR again")
    args = parser.parse_args()
    out = args.output
    if args.ddp:
        ddp(args)
        return
    rows = []
    for P in args.ranks:
        shared = out / f"P{P}" / "calibration.toml"
        shared.parent.mkdir(parents=True, exist_ok=True)
        each = args.calibrate_each if not args.revalidate else not shared.exists()  # one calibration per algorithm
        if not each and not args.revalidate:
            calibrate(args, P, shared, "")
        for algorithm in args.algorithms:
            runs: dict[str, list] = {}
            calibrations = {}
            again = dict.fromkeys(IMBALANCES, False)
            for imbalance in IMBALANCES:
                fragment = out / f"P{P}" / f"calibration-{algorithm}-{imbalance}.toml" if each else shared
                if each and not args.revalidate:  # just before these runs, under their scenario, at their size only
                    calibrate(args, P, fragment, algorithm, imbalance)
                calibrations[imbalance] = read_calibration(fragment)
                path = out / f"P{P}" / f"{algorithm}-{imbalance}.toml"
                if not args.revalidate:
                    path.write_text(scenario_text(args, P, algorithm, imbalance))
                runs[imbalance] = []
                for k in range(args.repeats):
                    folder = out / f"P{P}" / "runs" / f"{algorithm}-{imbalance}-{k}"
                    if not args.revalidate:
                        stragglerlab("run", str(path), "--np", str(P), "-o", str(folder), "--force")
                    runs[imbalance].append(load_run(folder))
                if each:
                    calibrations[imbalance], again[imbalance] = checked(args, P, fragment, algorithm, imbalance, runs)
            rows += validated(out / f"P{P}" / "val", P, algorithm, runs, calibrations, again)
            pd.DataFrame(rows).to_csv(out / "validation.csv", index=False)
    report(pd.DataFrame(rows))


def checked(
    args: argparse.Namespace, P: int, fragment: Path, algorithm: str, imbalance: str, runs: dict[str, list]
) -> tuple[Calibration, bool]:
    """The calibration to validate ``runs[imbalance]`` with, and whether it was taken again: what a user does when
    ``validate`` warns that the calibration does not price the runs' rounds (a median round time more than
    ``ROUND_WARNING`` off the run's), calibrating once more, right after the runs, under the same scenario. The runs
    stay as they are; the first calibration is kept beside the second (``--revalidate`` takes the second)."""
    second = fragment.with_name(f"{fragment.stem}-again.toml")
    if args.revalidate:
        return read_calibration(second if second.exists() else fragment), second.exists()
    first = read_calibration(fragment)
    table, _ = validate(runs[imbalance], fragment.parent / "val" / "check" / f"{algorithm}-{imbalance}", first)
    warnings = round_warnings(table)
    if not warnings:
        return first, False
    print(*(f"{fragment.name}: {w}" for w in warnings), "calibrating again", sep="\n", file=sys.stderr)
    calibrate(args, P, second, algorithm, imbalance)
    return read_calibration(second), True


def validated(
    val: Path,
    P: int,
    algorithm: str,
    runs: dict[str, list],
    calibrations: dict[str, Calibration],
    again: dict[str, bool],
) -> list[dict]:
    """One row per real run of ``runs`` (per imbalance, the K repeats): trace-driven with its imbalance's calibration
    and with the formulas, and the same repeat under the other imbalance predicted out of sample from it (with its
    calibration: what was measured before that run); and how far apart the repeats' own waits lie (the machine's
    own noise: what runs of one scenario seconds apart agree to)."""
    rows = []
    for imbalance, mine in runs.items():
        other = next(i for i in IMBALANCES if i != imbalance)
        apart = ks_apart([r.iterations["wait"] for r in mine])  # one figure for the K repeats
        for k, real in enumerate(mine):
            where = val / f"{algorithm}-{imbalance}"
            calibrated, _ = validate([real], where / f"cal-{k}", calibrations[imbalance], others=[runs[other][k]])
            formulas, _ = validate([real], where / f"formulas-{k}", None)
            trace = calibrated.set_index("mode").loc["trace"]
            oos = calibrated.set_index("mode").loc["out-of-sample"]
            rows.append(
                {
                    "P": P,
                    "algorithm": algorithm,
                    "imbalance": imbalance,
                    "repeat": k,
                    "mean_iteration_real": trace["mean_iteration_real"],
                    "trace_error": trace["mean_iteration_error"],
                    "trace_error_formulas": formulas.loc[0, "mean_iteration_error"],
                    # the other imbalance's run of this repeat, predicted from this one
                    "oos_error": oos["mean_iteration_error"],
                    "ks_wait": trace["ks_wait"],
                    "ks_wait_oos": oos["ks_wait"],
                    "ks_wait_repeats": apart,
                    "wait_fraction_real": trace["wait_fraction_real"],
                    "wait_fraction_sim": trace["wait_fraction_sim"],
                    "round_time_error": trace["round_time_error"],
                    "recalibrated": again[imbalance],
                }
            )
    return rows


def report(table: pd.DataFrame) -> None:
    """One Markdown row per (P, algorithm, imbalance): means ± standard deviations over the repeats."""

    def cell(values: pd.Series, scale: float = 100.0, digits: int = 1) -> str:
        m, s = scale * values.mean(), scale * values.std(ddof=1) if len(values) > 1 else float("nan")
        return f"{m:+.{digits}f} ± {s:.{digits}f}" if np.isfinite(s) else f"{m:+.{digits}f}"

    print(
        "| P | algorithm | imbalance | real mean it. [ms] | trace-driven err % | (formulas) | out of sample err % "
        "| KS waits | (repeats) | met |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (P, algorithm, imbalance), g in table.groupby(["P", "algorithm", "imbalance"], sort=False):
        met = [
            "trace" if abs(g["trace_error"].mean()) <= VALIDATION_TARGETS["trace"] else "",
            "oos" if abs(g["oos_error"].mean()) <= VALIDATION_TARGETS["out-of-sample"] else "",
            "KS" if g["ks_wait"].mean() <= KS_WAIT_TARGET else "",
        ]
        print(
            f"| {P} | {algorithm} | {imbalance} | {1e3 * g['mean_iteration_real'].mean():.1f} | "
            f"{cell(g['trace_error'])} | {cell(g['trace_error_formulas'])} | {cell(g['oos_error'])} | "
            f"{cell(g['ks_wait'], 1.0, 2)} | {g['ks_wait_repeats'].mean():.2f} | "
            f"{' '.join(m for m in met if m) or '-'}{' (calibrated again)' if g['recalibrated'].any() else ''} |"
        )
    again = table.groupby(["P", "algorithm", "imbalance"])["recalibrated"].any()
    print(f"\ncalibrated again after validate's round warning: {again.sum()} of {len(again)} cases")


DDP_SCENARIO = """
name = "validation-ddp-{P}"
seed = 11
iterations = {iterations}
[cluster]
workers = {P}
[workload]
model = "torch:mlp"
batch = 32
buckets = {buckets}
backward = {backward}
[imbalance]
kind = "random-delay"
slow = [1, 1]
delay = {delay}
[algorithm]
name = "sync"
"""


def ddp(args: argparse.Namespace, buckets: int = 4) -> None:
    """Real sync under DistributedDataParallel (``--backend torch``, gloo, a cap of ``buckets`` buckets) against the
    simulated bucketed sync, trace-driven, at each P; the backward share from ``stragglerlab profile``, the bucket
    all-reduce time from ``calibrate --collectives --backend torch`` under the same scenario (DDP's own rounds)."""
    print("| P | buckets (DDP's) | real mean it. [ms] | trace-driven err % (repeats) | KS waits |")
    print("|---|---|---|---|---|")
    for P in args.ranks:
        out = args.output / f"P{P}" / "ddp"
        out.mkdir(parents=True, exist_ok=True)
        profiled = out / "profile.toml"
        plain = out / "plain.toml"
        plain.write_text('[workload]\nmodel = "torch:mlp"\nbatch = 32\n')
        stragglerlab("profile", str(plain), "--iterations", "30", "-o", str(profiled), "--force")
        backward = tomllib.loads(profiled.read_text())["workload"]["backward"]
        path = out / "ddp.toml"
        text = DDP_SCENARIO.format(P=P, iterations=args.iterations, buckets=buckets, backward=backward, delay=0.01)
        path.write_text(text)
        gloo = out / "gloo.toml"
        stragglerlab("calibrate", str(path), "--np", str(P), "--collectives", "--backend", "torch", "-o", str(gloo),
                     "--force")  # fmt: skip
        calibration = read_calibration(gloo)
        errors, ks, real_mean = [], [], []
        for k in range(args.repeats):
            folder = out / f"run-{k}"
            stragglerlab("run", str(path), "--np", str(P), "--backend", "torch", "-o", str(folder), "--force")
            table, _ = validate([load_run(folder)], out / f"val-{k}", calibration)
            errors.append(table.loc[0, "mean_iteration_error"])
            ks.append(table.loc[0, "ks_wait"])
            real_mean.append(table.loc[0, "mean_iteration_real"])
        e = 100 * np.array(errors)
        spread = e.std(ddof=1) if len(e) > 1 else 0.0
        real = 1e3 * np.mean(real_mean)
        made = load_run(out / "run-0").meta["scenario"]["workload"]["buckets"]
        print(f"| {P} | {buckets} ({made}) | {real:.2f} | {e.mean():+.1f} ± {spread:.1f} | {np.mean(ks):.2f} |")


if __name__ == "__main__":
    main()
