"""Benchmark: simulated worker-iterations per second of the reference and fast engines, per algorithm, beside the
sync closed form t_{n+1} = t_n + max_i c_{n,i} + T_ar computed with numpy on the same compute times.

    python tests/benchmarks/bench_engine.py [--workers 1024 65536] [--iterations 1000] [--reference-cap 1000000]
                                            [--fast-only] [--algorithms sync d-psgd ...] [--repeat 2]
                                            [--scenarios random-delay eager-injected heavy-tail-256] [--command]

``--scenarios`` names the scenarios, each run with every algorithm: ``random-delay`` (constant compute, 1-2 workers
0.32 s late each iteration), or a shipped example by name (its workers, iterations and algorithm set here), such as
``eager-injected`` (eager-SGD's injected delays on lognormal compute of cv 0.039) and ``heavy-tail-256`` (lognormal
compute of cv 1.0). ``--command`` times the whole process instead: ``stragglerlab simulate --example NAME --set
cluster.workers=P --set iterations=N --set algorithm.name=A --engine fast --summary-only`` (examples only), run
``--repeat`` times, the last counting (numba's cache warm), in CPU seconds of the child process, as a ratio to sync's.

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
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

from stragglerlab.simulator import algorithms
from stragglerlab.simulator.catalog import example_path
from stragglerlab.simulator.costs import cost_model
from stragglerlab.simulator.imbalance import ComputeTimes
from stragglerlab.simulator.network import message_bytes
from stragglerlab.simulator.plan import plan
from stragglerlab.simulator.run import run_engine
from stragglerlab.simulator.scenario import ALGORITHMS, from_dict, load

#: the scenario built here; any other name is a shipped example
RANDOM_DELAY = "random-delay"


def rows_of(scenario, engine: str) -> tuple[int, float]:
    """Run ``scenario`` on ``engine``, counting its rows (not writing them): (rows, CPU seconds)."""
    rows = 0

    def count(block) -> None:
        nonlocal rows
        rows += len(block["t_done"])

    started = time.process_time()
    run_engine(plan(scenario), engine, count, lambda block: None)
    return rows, time.process_time() - started


def bench_scenario(workers: int, iterations: int, algorithm: str, name: str = RANDOM_DELAY):
    if name != RANDOM_DELAY:
        return load(example_path(name), overrides(workers, iterations, algorithm))
    return from_dict(
        {
            "iterations": iterations,
            "cluster": {"workers": workers},
            "imbalance": {"kind": "random-delay", "slow": [1, 2], "delay": 0.32},
            "algorithm": {"name": algorithm, "group_size": 8, "period": 16, "global_period": 64},
        }
    )


def overrides(workers: int, iterations: int, algorithm: str) -> list[str]:
    return [f"cluster.workers={workers}", f"iterations={iterations}", f"algorithm.name={algorithm}"]


def command_seconds(example: str, workers: int, iterations: int, algorithm: str, repeat: int) -> float:
    """CPU seconds of the last of ``repeat`` whole ``stragglerlab simulate --summary-only`` processes."""
    sets = [arg for key in overrides(workers, iterations, algorithm) for arg in ("--set", key)]
    seconds = float("nan")
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(
                [os.path.join(os.path.dirname(sys.executable), "stragglerlab"), "simulate", "--example", example, *sets]
                + ["--engine", "fast"]
                + ["--summary-only", "--force", "-o", os.path.join(folder, "run")],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            seconds = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return seconds


def commands(args: argparse.Namespace, names: list[str]) -> None:
    """The whole-process table: each algorithm's CPU seconds over sync's, per scenario and size."""
    print("# whole process (stragglerlab simulate --engine fast --summary-only), CPU seconds of the last run")
    print(f"{'scenario':<16} {'workers':>7} {'algorithm':<15} {'seconds':>9} {'/sync':>7}")
    for scenario in args.scenarios:
        for P in args.workers:
            sync = None
            for name in names:
                seconds = command_seconds(scenario, P, args.iterations, name, args.repeat)
                sync = sync or seconds
                print(f"{scenario:<16} {P:>7} {name:<15} {seconds:9.2f} {seconds / sync:7.2f}", flush=True)


def timed(run) -> float:
    started = time.process_time()
    run()
    return time.process_time() - started


def closed_form_rate(workers: int, iterations: int, name: str) -> float:
    s = bench_scenario(workers, iterations, "sync", name)

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
    parser.add_argument("--scenarios", nargs="+", default=[RANDOM_DELAY], help="random-delay, or shipped examples")
    parser.add_argument("--command", action="store_true", help="time whole simulate processes (examples only)")
    args = parser.parse_args()
    N = args.iterations
    names = ["sync", *(name for name in args.algorithms if name != "sync")]  # sync first: the others' baseline
    if args.command:
        commands(args, names)
        return
    fast = {name: algorithms.get(name).kernel is not None for name in names}
    for name in names:  # load the compiled kernels
        if fast[name]:
            rows_of(bench_scenario(8, 4, name), "fast")
    print("# worker-iterations per second; ratios measured side by side")
    print(
        f"{'scenario':<16} {'workers':>7} {'algorithm':<15} {'reference/s':>12} {'ref/sync':>8} {'fast/s':>13} "
        f"{'fast [s]':>9} {'fast/sync':>9} {'closed/s':>13} {'fast/ref':>9} {'fast/closed':>11}"
    )
    nan = float("nan")
    for scenario in args.scenarios:
        for P in args.workers:
            sync_seconds = sync_rate = None
            for name in names:
                closed = closed_form_rate(P, N, scenario)
                ref_rate = nan
                if not args.fast_only:
                    n_ref = max(1, min(N, args.reference_cap // P))
                    rows, ref_seconds = rows_of(bench_scenario(P, n_ref, name, scenario), "reference")
                    assert rows == P * n_ref
                    ref_rate = rows / ref_seconds
                sync_rate = sync_rate or ref_rate
                seconds = fast_rate = nan
                if fast[name]:
                    runs = [rows_of(bench_scenario(P, N, name, scenario), "fast") for _ in range(args.repeat)]
                    assert all(rows == P * N for rows, _ in runs)
                    seconds = min(seconds for _, seconds in runs)
                    fast_rate = P * N / seconds
                sync_seconds = sync_seconds or seconds
                print(
                    f"{scenario:<16} {P:>7} {name:<15} {ref_rate:12,.0f} {ref_rate / sync_rate:8.2f} "
                    f"{fast_rate:13,.0f} {seconds:9.2f} {seconds / sync_seconds:9.2f} {closed:13,.0f} "
                    f"{fast_rate / ref_rate:9.1f} {fast_rate / closed:11.3f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
