"""Prediction where nothing was measured: calibrate at some rank counts, then predict communication-heavy real runs
at another, and report how far the simulation is from them in mean iteration time, round time and waits.

    python tests/benchmarks/bench_extrapolation.py [--calibrate 2 3] [--predict 4] [--also wagma:3]
                                                   [--params 1000000] [--compute 0.004] [--delay 0.004]
                                                   [--iterations 240] [-o DIR]

One ``stragglerlab calibrate --np 2,3 --collectives`` under the runs' own compute and imbalance (every algorithm
below, at four sizes around the runs' message: one network model fitted to all of it, and the measured table), then one
real run (``stragglerlab run --np P``, timing-only, ``params`` float32 exchanged, lognormal compute of mean ``compute``
and cv 0.1, one rank ``delay`` late in each iteration) of each algorithm at each ``--predict`` count: sync, eager-solo,
wagma (groups of 2), quorum (k = 3), d-psgd and async-ps; ``--also NAME:P`` adds one more (default: 3-rank wagma). Every
run is validated trace-driven with the calibration: at a rank count the calibration did not measure, every exchange is
priced by the fitted model alone. Prints one Markdown row per run: the real mean iteration time and round time (the runs
are communication-heavy: their rounds take at least as long as their compute), the errors of both and the KS distance of
the waits, and whether each meets its target (5 %, 10 %, 0.25); writes DIR/extrapolation.csv.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from stragglerlab.analysis.runfolder import load_run
from stragglerlab.realrun.validate import read_calibration, validate

ALGORITHMS = ("sync", "eager-solo", "wagma", "quorum", "d-psgd", "async-ps")
TARGETS = {"mean_iteration_error": 0.05, "round_time_error": 0.10, "ks_wait": 0.25}


def scenario_text(args: argparse.Namespace, P: int, algorithm: str) -> str:
    return f"""
name = "extrapolation-{algorithm}-{P}"
seed = 5
iterations = {args.iterations}
[cluster]
workers = {P}
[workload]
params = {args.params}
compute = {{ dist = "lognormal", mean = {args.compute}, cv = 0.1 }}
[imbalance]
kind = "random-delay"
slow = [1, 1]
delay = {args.delay}
[algorithm]
name = "{algorithm}"
sync_period = 8
group_size = 2
quorum = 3
"""


def stragglerlab(*argv: str, timeout: float = 1800) -> float:
    """Run a command; its seconds."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "stragglerlab.cli", *argv], timeout=timeout)
    if proc.returncode:
        raise SystemExit(f"stragglerlab {' '.join(argv)}: exit {proc.returncode}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibrate", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--predict", type=int, nargs="+", default=[4])
    parser.add_argument("--also", nargs="*", default=["wagma:3"], metavar="NAME:P")
    parser.add_argument("--params", type=int, default=1_000_000)
    parser.add_argument("--compute", type=float, default=0.004)
    parser.add_argument("--delay", type=float, default=0.004)
    parser.add_argument("--iterations", type=int, default=240)
    parser.add_argument("--max-blocks", type=int, default=6)
    parser.add_argument("-o", "--output", type=Path, default=Path("bench-extrapolation"))
    args = parser.parse_args()
    out = args.output
    out.mkdir(parents=True, exist_ok=True)
    fragment = out / "calibration.toml"
    timed = out / "timed-under.toml"
    timed.write_text(scenario_text(args, max(args.calibrate), "sync"))
    n = 4 * args.params
    sizes = ",".join(str(int(n * f)) for f in (1 / 16, 1 / 2, 1, 2))
    seconds = stragglerlab(
        "calibrate", str(timed), "--np", ",".join(map(str, args.calibrate)), "--collectives", "--algorithms",
        ",".join(ALGORITHMS), "--sizes", sizes, "--max-blocks", str(args.max_blocks), "-o", str(fragment), "--force",
    )  # fmt: skip
    print(f"calibration at {args.calibrate} ranks: {seconds:.0f} s", flush=True)
    cases = [(name, P) for P in args.predict for name in ALGORITHMS]
    cases += [(also.split(":")[0], int(also.split(":")[1])) for also in args.also]
    calibration = read_calibration(fragment)
    rows = []
    for name, P in cases:
        spec = out / f"{name}-{P}.toml"
        spec.write_text(scenario_text(args, P, name))
        folder = out / "runs" / f"{name}-{P}"
        stragglerlab("run", str(spec), "--np", str(P), "-o", str(folder), "--force")
        table, _ = validate([load_run(folder)], out / "validation" / f"{name}-{P}", calibration)
        row = table.iloc[0]
        rows.append(
            {
                "algorithm": name,
                "ranks": P,
                "measured": "yes" if P in args.calibrate else "no",
                "mean_iteration_real": row["mean_iteration_real"],
                "round_time_real": row["round_time_real"],
                **{column: row[column] for column in TARGETS},
            }
        )
        print(f"{name} at {P} ranks: {row['mean_iteration_error']:+.1%} mean, {row['round_time_error']:+.1%} round, "
              f"KS {row['ks_wait']:.2f}", flush=True)  # fmt: skip
    frame = pd.DataFrame(rows)
    frame.to_csv(out / "extrapolation.csv", index=False)
    print("\n| algorithm | ranks | measured | mean it. [ms] | round [ms] | mean err | round err | KS waits | meets |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in frame.itertuples():
        meets = all(abs(getattr(r, c)) <= t for c, t in TARGETS.items())
        print(
            f"| {r.algorithm} | {r.ranks} | {r.measured} | {r.mean_iteration_real * 1e3:.2f} | "
            f"{r.round_time_real * 1e3:.2f} | {r.mean_iteration_error:+.1%} | {r.round_time_error:+.1%} | "
            f"{r.ks_wait:.2f} | {'yes' if meets else 'no'} |"
        )


if __name__ == "__main__":
    main()
