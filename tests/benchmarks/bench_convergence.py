"""Benchmark: seconds and simulated worker-iterations per second of ``simulate`` (engine, run folder and, when on,
the convergence replay), per algorithm, with convergence off (``model = "none"``) and on (``--model``).

    python tests/benchmarks/bench_convergence.py [--model hyperplane] [--workers 64] [--iterations 10000]
        [--dimension 1000] [--batch 8]
    python tests/benchmarks/bench_convergence.py --model mlp --workers 16 --iterations 1024 --dimension 100 \
        --batch 128 --samples 32768 --lr 0.05

Convergence off runs with ``params`` equal to the model's parameter count, so both sides simulate the same
messages. Targets: <= 30 s for each run of the hyperplane at the defaults; <= 20 s for the mlp (hidden [64]) at 16
workers x 1,024 iterations.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from stragglerlab.analysis.runfolder import load_run
from stragglerlab.simulator.run import simulate
from stragglerlab.simulator.scenario import ALGORITHMS, from_dict


def bench_scenario(args: argparse.Namespace, algorithm: str, model: str, params: int = 1):
    return from_dict(
        {
            "iterations": args.iterations,
            "cluster": {"workers": args.workers},
            "imbalance": {"kind": "random-delay", "slow": [1, 2], "delay": 0.32},
            "workload": {
                "model": model,
                "hidden": [64],
                "params": params,  # a model replaces it by its own parameter count
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
    parser.add_argument("--model", choices=("hyperplane", "logistic", "mlp"), default="hyperplane")
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
        f"# {args.model} d={args.dimension}, {args.workers} workers x {args.iterations} iterations, batch "
        f"{args.batch}, {args.samples} samples, lr {args.lr}, evals every {args.every} iterations"
    )
    print(f"{'algorithm':<15} {'off [s]':>8} {'off it/s':>10} {'on [s]':>8} {'on it/s':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ALGORITHMS:
            on = seconds(bench_scenario(args, name, args.model), Path(tmp) / f"{name}-on")
            params = load_run(Path(tmp) / f"{name}-on").meta["scenario"]["workload"]["params"]
            off = seconds(bench_scenario(args, name, "none", params), Path(tmp) / f"{name}-off")
            print(f"{name:<15} {off:8.2f} {total / off:10,.0f} {on:8.2f} {total / on:10,.0f}", flush=True)


if __name__ == "__main__":
    main()
