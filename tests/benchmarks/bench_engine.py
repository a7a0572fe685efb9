"""Benchmark: simulated worker-iterations per second of the reference and fast engines, per algorithm, beside the
sync closed form t_{n+1} = t_n + max_i c_{n,i} + T_ar computed with numpy on the same compute times.

    python tests/benchmarks/bench_engine.py [--workers 1024 65536] [--iterations 1000] [--reference-cap 1000000]
                                            [--fast-only] [--algorithms sync d-psgd ...] [--repeat 2]

All three draw the same common random numbers, so the ratio columns are measured side by side on one machine:
``fast/sync`` is each algorithm's fast-engine seconds over sync's, at the same size in the same run (target: every
algorithm within 3x), ``ref/sync`` its reference-engine rate over sync's. ``--algorithms`` picks the algorithms (sync
always runs first, as the baseline); an algorithm without a fast kernel has only the reference columns. The reference
engine runs at most ``--reference-cap`` worker-iterations per cell (fewer iterations at 65,536 workers), its rate
being flat in the run length; ``--fast-only`` skips it. Seconds are CPU seconds of this process (the time it
computed, not the time other work on the machine took from it); the fast engine's are the least of ``--repeat K``
runs: the first run at a size also pays for touching its fresh memory. Both engines run as ``simulate`` runs them
(``run_engine`` with the scenario's plan, which builds the rules: WAGMA's prices every group of every phase), their
rows only counted.

Targets: fast >= 100 M/s, and 65,536 workers x 1,000 iterations of eager-solo in <= 5 s. The reference engine, one
simpy process per worker and two events per worker-iteration, runs sync at about 140,000 worker-iterations per second
at 256 workers on a 2-core machine and the others at 15,000-70,000 (d-psgd the slowest); it is the readable oracle
the fast engine is tested against, not the engine for large runs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from stragglerlab.simulator import algorithms
from stragglerlab.simulator.costs import cost_model
from stragglerlab.simulator.imbalance import ComputeTimes
from stragglerlab.simulator.network import message_bytes
from stragglerlab.simulator.plan import plan
from stragglerlab.simulator.run import run_engine
from stragglerlab.simulator.scenario import ALGORITHMS, from_dict


def rows_of(scenario, engine: str) -> tuple[int, float]:
    """Run ``scenario`` on ``engine``, counting its rows (not writing them): (rows, CPU seconds)."""
    rows = 0

    def count(block) -> None:
        nonlocal rows
        rows += len(block["t_done"])

    started = time.process_time()
    run_engine(plan(scenario), engine, count, lambda block: None)
    return rows, time.process_time() - started


def bench_scenario(workers: int, iterations: int, algorithm: str):
    return from_dict(
        {
            "iterations": iterations,
            "cluster": {"workers": workers},
            "imbalance": {"kind": "random-delay", "slow": [1, 2], "delay": 0.32},
            "algorithm": {"name": algorithm, "group_size": 8, "period": 16, "global_period": 64},
        }
    )


def timed(run) -> float:
    started = time.process_time()
    run()
    return time.process_time() - started


def closed_form_rate(workers: int, iterations: int) -> float:
    s = bench_scenario(workers, iterations, "sync")

    def run():
        c = ComputeTimes(s).block(0, iterations)
        np.cumsum(c.max(axis=1) + cost_model(s).collective("sync", message_bytes(s), workers))

    return workers * iterations / timed(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1024, 65536])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--reference-cap", type=int, default=1_000_000)
    parser.add_argument("--fast-only", action="store_true", help="skip the reference engine")
    parser.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, default=ALGORITHMS)
    parser.add_argument("--repeat", type=int, default=2, help="fast-engine runs per cell; the quickest counts")
    args = parser.parse_args()
    N = args.iterations
    names = ["sync", *(name for name in args.algorithms if name != "sync")]  # sync first: the others' baseline
    fast = {name: algorithms.get(name).kernel is not None for name in names}
    for name in names:  # load the compiled kernels
        if fast[name]:
            rows_of(bench_scenario(8, 4, name), "fast")
    print("# worker-iterations per second (random-delay imbalance); ratios measured side by side")
    print(
        f"{'workers':>7} {'algorithm':<15} {'reference/s':>12} {'ref/sync':>8} {'fast/s':>13} {'fast [s]':>9} "
        f"{'fast/sync':>9} {'closed/s':>13} {'fast/ref':>9} {'fast/closed':>11}"
    )
    nan = float("nan")
    for P in args.workers:
        sync_seconds = sync_rate = None
        for name in names:
            closed = closed_form_rate(P, N)
            ref_rate = nan
            if not args.fast_only:
                n_ref = max(1, min(N, args.reference_cap // P))
                rows, ref_seconds = rows_of(bench_scenario(P, n_ref, name), "reference")
                assert rows == P * n_ref
                ref_rate = rows / ref_seconds
            sync_rate = sync_rate or ref_rate
            seconds = fast_rate = nan
            if fast[name]:
                runs = [rows_of(bench_scenario(P, N, name), "fast") for _ in range(args.repeat)]
                assert all(rows == P * N for rows, _ in runs)
                seconds = min(seconds for _, seconds in runs)
                fast_rate = P * N / seconds
            sync_seconds = sync_seconds or seconds
            print(
                f"{P:>7} {name:<15} {ref_rate:12,.0f} {ref_rate / sync_rate:8.2f} {fast_rate:13,.0f} {seconds:9.2f} "
                f"{seconds / sync_seconds:9.2f} {closed:13,.0f} {fast_rate / ref_rate:9.1f} {fast_rate / closed:11.3f}"
            )


if __name__ == "__main__":
    main()
