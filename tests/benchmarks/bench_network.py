"""How long the network model takes to price an exchange it has not priced before: building its schedule of messages
and sharing each step's links, at 1,024 and 65,536 ranks (the target: under 50 ms for a 1,024-rank collective). The
engines price each kind of exchange once per run, so this is a run's set-up, not its speed.

    python tests/benchmarks/bench_network.py [--ranks 1024 65536] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

from stragglerlab.simulator import schedules
from stragglerlab.simulator.algorithms.wagma import phase_groups
from stragglerlab.simulator.costs import cost_model
from stragglerlab.simulator.scenario import load

N = 100e6  # bytes: ResNet-50's gradient


def timed(call, *args, repeats: int) -> float:
    """The least seconds of ``repeats`` calls ``call(*args)``, each on caches emptied first."""
    best = float("inf")
    for _ in range(repeats):
        schedules.allreduce.cache_clear()
        start = time.perf_counter()
        call(*args)
        best = min(best, time.perf_counter() - start)
    return best


def priced(model, algorithm: str, p: int, layout: int) -> None:
    model.time(schedules.allreduce(algorithm, tuple(range(p)), N, layout, p))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1024, 65536])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'exchange':<48}{'ranks':>7}{'ms':>10}")
    for p in args.ranks:
        for layout in (1, 8):
            s = load(text="", name="b", overrides=[f"cluster.workers={p}", f"cluster.workers_per_node={layout}"])
            for algorithm in ("ring", "recursive-doubling", "rabenseifner", "tree", "native"):
                model = cost_model(s.replace(**{"network.allreduce": algorithm}))
                seconds = timed(priced, model, algorithm, p, layout, repeats=args.repeats)
                name = f"allreduce {algorithm}, {layout} rank(s) a node"
                print(f"{name:<48}{p:>7}{seconds * 1e3:>10.1f}")
            model = cost_model(s)
            groups = phase_groups(1, p, 8)
            seconds = timed(model.concurrent, "group", N, groups, repeats=args.repeats)
            name = f"{len(groups)} concurrent groups of 8, {layout} a node"
            print(f"{name:<48}{p:>7}{seconds * 1e3:>10.1f}")


if __name__ == "__main__":
    main()
