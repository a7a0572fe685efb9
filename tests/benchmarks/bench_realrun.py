"""Benchmark of real runs: iterations per second of every algorithm on P ranks of this machine under the
eager-SGD paper's injection scaled down (every iteration 50 ms of compute, one rank of four chosen at random
delayed 50 ms more), eager-solo's speedup over sync, and where an iteration's time goes: compute (as injected),
communication (wait), and the harness's own overhead.

    python tests/benchmarks/bench_realrun.py [--ranks 4] [--iterations 60] [--compute 0.05] [--delay 0.05]
                                             [--params 262144]

Each run is ``stragglerlab run --np P`` on a timing-only scenario (a vector of ``params`` float32 exchanged every
iteration). The harness's overhead per iteration is what is neither compute nor wait: the time between a call's
return and the next iteration's start (rows, flushes, bookkeeping) plus the injected compute's excess over the
scheduled time (sleep accuracy, building the contribution).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from stragglerlab.analysis.runfolder import load_run
from stragglerlab.simulator.imbalance import ComputeTimes
from stragglerlab.simulator.scenario import load

RUNS = [
    ("sync", "native"),
    ("sync", "torch"),
    ("eager-solo", "native"),
    ("eager-majority", "native"),
    ("wagma", "native"),
    ("local-sgd", "native"),
    ("lsgd", "native"),
]


def scenario_text(args: argparse.Namespace) -> str:
    return f"""
name = "bench-realrun"
seed = 1
iterations = {args.iterations}
[cluster]
workers = {args.ranks}
[workload]
params = {args.params}
compute = {{ dist = "constant", mean = {args.compute} }}
[imbalance]
kind = "random-delay"
slow = [1, 1]
delay = {args.delay}
[algorithm]
sync_period = 33
group_size = 2
period = 16
global_period = 64
"""


def measure(path: Path, folder: Path, algorithm: str, backend: str, ranks: int) -> dict[str, float]:
    command = [
        sys.executable,
        "-m",
        "stragglerlab.cli",
        "run",
        str(path),
        "--np",
        str(ranks),
        "-o",
        str(folder),
        "--set",
        f"algorithm.name={algorithm}",
        "--backend",
        backend,
    ]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=600)
    run = load_run(folder)
    it = run.iterations.sort_values(["worker", "iteration"])
    P, N = run.meta["ranks"], len(it) // run.meta["ranks"]
    scheduled = ComputeTimes(load(path, [f"algorithm.name={algorithm}"])).block(0, N).T.ravel()
    start, done = it["t_start"].to_numpy().reshape(P, N), it["t_done"].to_numpy().reshape(P, N)
    duration = float(done[:, -1].max() - start[:, 0].min())
    gap = float((start[:, 1:] - done[:, :-1]).mean())
    excess = float((it["compute"].to_numpy() - scheduled).mean())
    return {
        "it/s": N / duration,
        "compute": float(it["compute"].mean()),
        "wait": float(it["wait"].mean()),
        "gap": gap,
        "excess": excess,
        "duration": duration,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--compute", type=float, default=0.05)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--params", type=int, default=262_144)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.toml"
        path.write_text(scenario_text(args))
        results = {}
        for algorithm, backend in RUNS:
            label = algorithm if backend == "native" else f"{algorithm} (torch.distributed)"
            results[label] = measure(path, Path(tmp) / label.replace(" ", "_"), algorithm, backend, args.ranks)
    print(
        f"{args.ranks} ranks, {args.iterations} iterations, compute {args.compute * 1e3:g} ms, one rank in "
        f"{args.ranks} +{args.delay * 1e3:g} ms per iteration, {args.params * 4 / 2**20:.2f} MiB per exchange"
    )
    print(
        f"{'algorithm':<32}{'it/s':>8}{'vs sync':>9}{'compute ms':>12}{'wait ms':>9}{'overhead ms':>13}"
        f"{'(gap':>7}{' + excess)':>11}"
    )
    base = results["sync"]["it/s"]
    for label, r in results.items():
        overhead = r["gap"] + r["excess"]
        print(
            f"{label:<32}{r['it/s']:>8.2f}{r['it/s'] / base:>8.2f}x{r['compute'] * 1e3:>12.2f}"
            f"{r['wait'] * 1e3:>9.2f}{overhead * 1e3:>13.3f}{r['gap'] * 1e3:>7.3f}{r['excess'] * 1e3:>11.3f}"
        )
    print(f"eager-solo speedup over sync: {results['eager-solo']['it/s'] / base:.2f}x")


if __name__ == "__main__":
    main()
