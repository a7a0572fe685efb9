"""Benchmark: simulated worker-iterations per second of the reference engine, per algorithm, beside the sync
closed form t_{n+1} = t_n + max_i c_{n,i} + T_ar computed with numpy on the same compute times.

    python tests/benchmarks/bench_engine.py [--workers 1024] [--iterations 1000]

Both sides draw the same common random numbers, so the ratio column is measured side by side on one machine.
DESIGN §9 targets >= 1 M/s for sync and >= 0.5 M/s for the others.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from simulator.engine import Engine
from simulator.imbalance import ComputeTimes
from simulator.network import NetworkModel, message_bytes
from simulator.scenario import ALGORITHMS, from_dict


class CountingSink:
    """Keeps only counts, so the figure is the engine's and not the run-folder writer's."""

    def __init__(self):
        self.rows = 0

    def iteration(self, row: tuple) -> None:
        self.rows += 1

    def round(self, row: tuple) -> None:
        pass


def bench_scenario(workers: int, iterations: int, algorithm: str):
    return from_dict({"iterations": iterations, "cluster": {"workers": workers},
                      "imbalance": {"kind": "random-delay", "slow": [1, 2], "delay": 0.32},
                      "algorithm": {"name": algorithm, "group_size": 8, "period": 16, "global_period": 64}})


def closed_form_rate(workers: int, iterations: int) -> float:
    s = bench_scenario(workers, iterations, "sync")
    started = time.perf_counter()
    c = ComputeTimes(s).block(0, iterations)
    t_ar = NetworkModel.of(s).allreduce(workers, message_bytes(s))
    np.cumsum(c.max(axis=1) + t_ar)
    return workers * iterations / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1024)
    parser.add_argument("--iterations", type=int, default=1000)
    args = parser.parse_args()
    P, N = args.workers, args.iterations
    print(f"# reference engine, {P} workers x {N} iterations (random-delay imbalance)")
    print(f"{'algorithm':<15} {'seconds':>8} {'worker-it/s':>12} {'closed form/s':>14} {'engine/closed':>14}")
    for name in ALGORITHMS:
        closed = closed_form_rate(P, N)
        sink = CountingSink()
        started = time.perf_counter()
        Engine(bench_scenario(P, N, name), sink).run()
        seconds = time.perf_counter() - started
        rate = sink.rows / seconds
        print(f"{name:<15} {seconds:8.2f} {rate:12,.0f} {closed:14,.0f} {rate / closed:14.4f}")


if __name__ == "__main__":
    main()
