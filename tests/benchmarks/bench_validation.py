"""Validation of the simulator against real runs on this machine: every algorithm, P ranks, a persistent straggler and
random delays, the network calibrated with ``stragglerlab calibrate --collectives``; the mean iteration-time error
trace-driven and out of sample, and the Kolmogorov–Smirnov distance of the waits, each over K repeated real runs.

    python tests/benchmarks/bench_validation.py [--ranks 2 3 4] [--repeats 2] [--iterations 40] [--compute 0.03]
                                                [--delay 0.03] [--factor 1.5] [--params 100000] [-o DIR]

Per P: one calibration (the cost table of the round kinds at 200, 400 and 800 kB, timed under the straggler
imbalance, and the update gap); then per algorithm and
imbalance K real runs (``stragglerlab run --np P``, timing-only: ``params`` float32 exchanged, lognormal compute of
mean ``compute`` and cv 0.1); each validated trace-driven with the calibration (and, for comparison, with the
scenario's default network formulas), and predicted out of sample from the same algorithm's runs under the other
imbalance. Prints one Markdown row per (P, algorithm, imbalance): the real mean iteration time, each error as mean ±
standard deviation over the K repeats, and whether it meets the targets (2 % trace-driven, 5 % out of sample, KS of
the waits ≤ 0.25); writes every row to DIR/validation.csv.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.analysis.compare import KS_WAIT_TARGET, VALIDATION_TARGETS
from stragglerlab.analysis.runfolder import load_run
from stragglerlab.realrun.validate import calibrated_network, validate
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--compute", type=float, default=0.03)
    parser.add_argument("--delay", type=float, default=0.03)
    parser.add_argument("--factor", type=float, default=1.5)
    parser.add_argument("--params", type=int, default=100_000)
    parser.add_argument("--algorithms", nargs="+", default=[r.name for r in algorithms.RECORDS])
    parser.add_argument("-o", "--output", type=Path, default=Path("bench-validation"))
    args = parser.parse_args()
    out = args.output
    rows = []
    for P in args.ranks:
        fragment = out / f"P{P}" / "calibration.toml"
        fragment.parent.mkdir(parents=True, exist_ok=True)
        timed = fragment.with_name("timed-under.toml")  # the compute and imbalance the rounds are timed under
        timed.write_text(scenario_text(args, P, "sync", "straggler"))
        stragglerlab(
            "calibrate", str(timed), "--np", str(P), "--collectives", "--sizes", "200000,400000,800000",
            "--max-blocks", "5", "-o", str(fragment), "--force",
        )  # fmt: skip
        network = calibrated_network(fragment)
        for algorithm in args.algorithms:
            runs: dict[str, list] = {}
            for imbalance in IMBALANCES:
                path = out / f"P{P}" / f"{algorithm}-{imbalance}.toml"
                path.write_text(scenario_text(args, P, algorithm, imbalance))
                runs[imbalance] = []
                for k in range(args.repeats):
                    folder = out / f"P{P}" / "runs" / f"{algorithm}-{imbalance}-{k}"
                    stragglerlab("run", str(path), "--np", str(P), "-o", str(folder), "--force")
                    runs[imbalance].append(load_run(folder))
            for imbalance, mine in runs.items():
                other = next(i for i in IMBALANCES if i != imbalance)
                val = out / f"P{P}" / "val" / f"{algorithm}-{imbalance}"
                for k, real in enumerate(mine):
                    calibrated, _ = validate([real], val / f"cal-{k}", network, others=[runs[other][k]])
                    formulas, _ = validate([real], val / f"formulas-{k}", None)
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
                            # predicting this run from the other imbalance's run
                            "oos_error": oos["mean_iteration_error"],
                            "ks_wait": trace["ks_wait"],
                            "ks_wait_oos": oos["ks_wait"],
                            "wait_fraction_real": trace["wait_fraction_real"],
                            "wait_fraction_sim": trace["wait_fraction_sim"],
                        }
                    )
            pd.DataFrame(rows).to_csv(out / "validation.csv", index=False)
    report(pd.DataFrame(rows))


def report(table: pd.DataFrame) -> None:
    """One Markdown row per (P, algorithm, imbalance): means ± standard deviations over the repeats."""

    def cell(values: pd.Series, scale: float = 100.0, digits: int = 1) -> str:
        m, s = scale * values.mean(), scale * values.std(ddof=1) if len(values) > 1 else float("nan")
        return f"{m:+.{digits}f} ± {s:.{digits}f}" if np.isfinite(s) else f"{m:+.{digits}f}"

    print(
        "| P | algorithm | imbalance | real mean it. [ms] | trace-driven err % | (formulas) | out of sample err % "
        "| KS waits | met |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (P, algorithm, imbalance), g in table.groupby(["P", "algorithm", "imbalance"], sort=False):
        met = [
            "trace" if abs(g["trace_error"].mean()) <= VALIDATION_TARGETS["trace"] else "",
            "oos" if abs(g["oos_error"].mean()) <= VALIDATION_TARGETS["out-of-sample"] else "",
            "KS" if g["ks_wait"].mean() <= KS_WAIT_TARGET else "",
        ]
        print(
            f"| {P} | {algorithm} | {imbalance} | {1e3 * g['mean_iteration_real'].mean():.1f} | "
            f"{cell(g['trace_error'])} | {cell(g['trace_error_formulas'])} | {cell(g['oos_error'])} | "
            f"{cell(g['ks_wait'], 1.0, 2)} | {' '.join(m for m in met if m) or '-'} |"
        )


if __name__ == "__main__":
    main()
