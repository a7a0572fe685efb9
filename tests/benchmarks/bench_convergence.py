"""Benchmark: seconds and simulated worker-iterations per second of ``simulate`` (engine, run folder and, when on,
the convergence replay), per algorithm, with convergence off (``model = "none"``) and on (``hyperplane``).

    python tests/benchmarks/bench_convergence.py [--workers 64] [--iterations 10000] [--dimension 1000] [--batch 8]

Convergence off runs with ``params`` equal to the model's dimension, so both sides simulate the same messages.
Issue 4 targets <= 30 s for each run at the defaults.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from stragglerlab.simulator.run import simulate
from stragglerlab.simulator.scenario import ALGORITHMS, from_dict


def bench_scenario(args: argparse.Namespace, algorithm: str, model: str):
    return from_dict(
        {
            "iterations": args.iterations,
            "cluster": {"workers": args.workers},
            "imbalance": {"kind": "random-delay", "slow": [1, 2], "delay": 0.32},
            "workload": {
                "model": model,
                "params": args.dimension,
                "dimension": args.dimension,
                "batch": args.batch,
                "samples": args.samples,
            },
            "evals": {"every_iterations": args.every},
            "algorithm": {"name": algorithm, "group_size": 8, "period": 16, "global_period": 64, "lr": args.lr},
        }
    )


def seconds(scenario, folder: Path) -> float:
    started = time.perf_counter()
    simulate(scenario, folder)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--dimension", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--lr", type=float, default=0.005, help="stable for single-worker steps: < 2·batch/d")
    parser.add_argument("--every", type=int, default=100, help="evals.every_iterations")
    args = parser.parse_args()
    total = args.workers * args.iterations
    print(
        f"# hyperplane d={args.dimension}, {args.workers} workers x {args.iterations} iterations, batch "
        f"{args.batch}, {args.samples} samples, lr {args.lr}, evals every {args.every} iterations"
    )
    print(f"{'algorithm':<15} {'off [s]':>8} {'off it/s':>10} {'on [s]':>8} {'on it/s':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ALGORITHMS:
            off = seconds(bench_scenario(args, name, "none"), Path(tmp) / f"{name}-off")
            on = seconds(bench_scenario(args, name, "hyperplane"), Path(tmp) / f"{name}-on")
            print(f"{name:<15} {off:8.2f} {total / off:10,.0f} {on:8.2f} {total / on:10,.0f}", flush=True)


if __name__ == "__main__":
    main()
