"""Prediction judged where the network is the bottleneck: on an emulated cluster (``stragglerlab testbed``), calibrate
at small node counts, then predict communication-heavy real runs at a larger one, and report how far the simulation
is from them in mean iteration, median round and waits, in each of several repeats of the whole benchmark.

    python tests/benchmarks/bench_testbed.py [--setup flat racks pairs] [--repeats 3] [--link 50mbit]
                                             [--iterations 30] [-o DIR]

Setups (each its own testbed, built and removed here; run as root):

- ``flat``: 8 nodes, one rank each, every link ``--link``; calibrated at 2 and 4 nodes, predicted at 8;
- ``racks``: 2 racks of 4 nodes whose uplinks carry a quarter of a rack's node links (one link's rate), calibrated at
  2 and 4 nodes (1 and 2 a rack), predicted at 8; the calibration times WAGMA in groups of 2, whose butterfly pairs
  cross the racks at 4 nodes: of what a 2-rack × 2-node job runs, the only exchange an uplink slows beyond a node's
  own link, so the only figure that tells the fit the uplinks' rate;
- ``pairs``: 4 nodes of 2 ranks (shared memory inside a node), calibrated at 2 and 4 ranks (1 and 2 nodes), predicted
  at 8 ranks.

Per setup and repeat: one ``stragglerlab calibrate --testbed --np A,B --collectives`` of sync, WAGMA's groups, D-PSGD's
gossip and the parameter server's pushes at the runs' message size and a quarter of it, back to back
(``--balanced``); its fitted per-node bandwidth beside the links' rate and the probe's; then one real run of each
algorithm below at the predicted size (timing-only, 1 MB messages, lognormal compute of mean 0.25 s and cv 0.1, one
random worker 0.1 s late in each iteration), each validated trace-driven with the calibration: every exchange priced
by the fitted model alone (nothing was measured at that size). Prints one Markdown row per run (real mean iteration
and median round, their errors, the KS distance of the waits, whether each meets 5 %, 10 % and 0.25), then, per setup
and algorithm, the spread of the real runs' median rounds over the repeats (max/min − 1); writes DIR/testbed.csv.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.analysis.runfolder import load_run
from stragglerlab.realrun.testbed import parse_rate
from stragglerlab.realrun.validate import read_calibration, validate
from stragglerlab.simulator.measured import Extrapolated

#: (name, algorithm, extra keys)
CASES = (
    ("sync", "sync", ""),
    ("eager-solo", "eager-solo", ""),
    ("eager-majority", "eager-majority", ""),
    ("wagma-2", "wagma", "group_size = 2"),
    ("wagma-4", "wagma", "group_size = 4"),
    ("quorum", "quorum", "quorum = 6"),
    ("d-psgd", "d-psgd", ""),
    ("ad-psgd", "ad-psgd", ""),
    ("async-ps", "async-ps", ""),
)
CALIBRATED = "sync,wagma,d-psgd,async-ps"
TARGETS = {"mean_iteration_error": 0.05, "round_time_error": 0.10, "ks_wait": 0.25}
PARAMS = 262_144  # 1 MB of float32
#: setup -> (testbed up options, ranks a node, calibrated rank counts, predicted rank count, the calibration's keys)
SETUPS = {
    "flat": (["--nodes", "8"], 1, "2,4", 8, ""),
    "racks": (["--nodes", "8", "--racks", "2", "--uplink", "LINK"], 1, "2,4", 8, "group_size = 2"),
    "pairs": (["--nodes", "4", "--ranks-per-node", "2"], 2, "2,4", 8, ""),
}


def scenario_text(name: str, algorithm: str, extra: str, P: int, per_node: int, iterations: int) -> str:
    return f"""
name = "testbed-{name}-{P}"
seed = 7
iterations = {iterations}
[cluster]
workers = {P}
workers_per_node = {per_node}
[workload]
params = {PARAMS}
compute = {{ dist = "lognormal", mean = 0.25, cv = 0.1 }}
[imbalance]
kind = "random-delay"
slow = [1, 1]
delay = 0.1
[algorithm]
name = "{algorithm}"
sync_period = 8
{extra}
"""


def stragglerlab(*argv: str, timeout: float = 3600, capture: bool = False) -> str:
    """Run a command (exit on failure); its standard output when ``capture``."""
    proc = subprocess.run(
        [sys.executable, "-m", "stragglerlab.cli", *argv], timeout=timeout, text=True, capture_output=capture
    )
    if proc.returncode:
        raise SystemExit(f"stragglerlab {' '.join(argv)}: exit {proc.returncode}\n{proc.stderr if capture else ''}")
    return proc.stdout if capture else ""


def fitted_bandwidth(fragment: Path) -> float:
    """The per-node bandwidth (1/beta) a calibration fitted."""
    return 1.0 / float(read_calibration(fragment)["network"]["beta"])


def one_setup(setup: str, repeat: int, args: argparse.Namespace) -> list[dict]:
    options, per_node, counts, P, calibrated = SETUPS[setup]
    out = args.output / setup / f"repeat-{repeat}"
    out.mkdir(parents=True, exist_ok=True)
    tb = out / "testbed.toml"
    up = [o.replace("LINK", args.link) for o in options]
    stragglerlab("testbed", "down", "--prefix", "slb")
    stragglerlab("testbed", "up", *up, "--link", args.link, "--prefix", "slb", "-o", str(tb), "--force")
    try:
        probe = json.loads(stragglerlab("testbed", "probe", str(tb), "--json", capture=True))
        timed = out / "timed.toml"
        timed.write_text(scenario_text("calibration", "sync", calibrated, P, per_node, args.iterations))
        fragment = out / "calibration.toml"
        n = 4 * PARAMS
        started = time.perf_counter()
        stragglerlab(
            "calibrate", str(timed), "--testbed", str(tb), "--np", counts, "--collectives", "--balanced",
            "--algorithms", CALIBRATED, "--sizes", f"{n // 4},{n}", "--max-blocks", str(args.max_blocks),
            "-o", str(fragment), "--force",
        )  # fmt: skip
        seconds = time.perf_counter() - started
        fitted = fitted_bandwidth(fragment)
        print(
            f"{setup} #{repeat}: calibrated at {counts} ranks in {seconds:.0f} s; bandwidth fitted "
            f"{fitted / 1e6:.3f} MB/s, probed {probe['bandwidth'] / 1e6:.3f}, shaped {probe['rate'] / 1e6:.3f} "
            f"(fit / probe {fitted / probe['bandwidth']:.3f})",
            flush=True,
        )
        calibration = read_calibration(fragment)
        rows = []
        for name, algorithm, extra in CASES:
            spec = out / f"{name}.toml"
            spec.write_text(scenario_text(name, algorithm, extra, P, per_node, args.iterations))
            folder = out / "runs" / name
            stragglerlab("run", str(spec), "--testbed", str(tb), "-o", str(folder))
            table, _ = validate([load_run(folder)], out / "validation" / name, calibration)
            row = table.iloc[0]
            rows.append(
                {
                    "setup": setup,
                    "repeat": repeat,
                    "algorithm": name,
                    "ranks": P,
                    "mean_iteration_real": row["mean_iteration_real"],
                    "round_time_real": row["round_time_real"],
                    **{column: row[column] for column in TARGETS},
                    "fit_over_probe": fitted / probe["bandwidth"],
                    "probe_over_rate": probe["bandwidth"] / probe["rate"],
                }
            )
            print(f"  {name}: {row['mean_iteration_error']:+.1%} mean, {row['round_time_error']:+.1%} round, "
                  f"KS {row['ks_wait']:.2f}", flush=True)  # fmt: skip
        return rows
    finally:
        stragglerlab("testbed", "down", "--prefix", "slb")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", nargs="+", choices=list(SETUPS), default=list(SETUPS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--link", default="50mbit")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--max-blocks", type=int, default=5)
    parser.add_argument("-o", "--output", type=Path, default=Path("bench-testbed"))
    args = parser.parse_args()
    parse_rate(args.link)
    warnings.simplefilter("ignore", Extrapolated)  # at the predicted size every exchange is the fitted model's
    rows = [row for setup in args.setup for repeat in range(args.repeats) for row in one_setup(setup, repeat, args)]
    frame = pd.DataFrame(rows)
    args.output.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.output / "testbed.csv", index=False)
    print("\n| setup | repeat | algorithm | mean it. [ms] | round [ms] | mean err | round err | KS waits | meets |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in frame.itertuples():
        meets = all(abs(getattr(r, c)) <= t for c, t in TARGETS.items())
        print(
            f"| {r.setup} | {r.repeat} | {r.algorithm} | {r.mean_iteration_real * 1e3:.0f} | "
            f"{r.round_time_real * 1e3:.0f} | {r.mean_iteration_error:+.1%} | {r.round_time_error:+.1%} | "
            f"{r.ks_wait:.2f} | {'yes' if meets else 'no'} |"
        )
    print("\n| setup | algorithm | median rounds over the repeats [ms] | spread (max/min - 1) |")
    print("|---|---|---|---|")
    for (setup, name), group in frame.groupby(["setup", "algorithm"], sort=False):
        rounds = group["round_time_real"].to_numpy()
        listed = ", ".join(f"{r * 1e3:.0f}" for r in rounds)
        print(f"| {setup} | {name} | {listed} | {np.max(rounds) / np.min(rounds) - 1:.1%} |")


if __name__ == "__main__":
    main()
