"""Measure what one rank of a real run holds in memory: the peak resident set of every rank of short runs of every
algorithm and backend, at two message sizes, and the per-rank footprint they fit (what ``stragglerlab run`` and
``calibrate`` estimate from, :mod:`stragglerlab.realrun.footprint`).

    python tests/benchmarks/bench_footprint.py [--ranks 3] [--small 1000000] [--large 25557032] [--algorithms A B]

Each run is ``mpiexec -n RANKS`` of ``stragglerlab run`` on a timing-only scenario (a vector of ``params`` float32),
and once more per backend on ``torch:mlp`` (the torch workload's interpreter, with torch imported). Every rank
records its own peak (``getrusage``'s ``ru_maxrss``) when it exits; a run's figure is its largest rank. The fit per
algorithm: base = the peak at ``--small`` less its vectors, bytes per parameter = the growth from ``--small`` to
``--large`` over the added parameters. The figures do not depend on the machine's speed, only on its libraries.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from stragglerlab.realrun.mpiexec import mpiexec
from stragglerlab.simulator.algorithms import RECORDS

#: each rank runs the command in argv[1:] and writes its peak resident set (bytes) to $FOOTPRINT_DIR/<rank>
RANK = """
import os, resource, sys
from stragglerlab.cli import main
try:
    code = main(sys.argv[1:])
finally:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    with open(os.path.join(os.environ["FOOTPRINT_DIR"], rank), "w") as out:
        out.write(str(peak))
sys.exit(code)
"""


def scenario_text(ranks: int, algorithm: str, model: str, params: int) -> str:
    return f"""
name = "footprint"
iterations = 20
[cluster]
workers = {ranks}
[workload]
model = "{model}"
params = {params}
batch = 32
compute = {{ dist = "constant", mean = 0.005 }}
[algorithm]
name = "{algorithm}"
sync_period = 4
period = 4
global_period = 8
"""


def peak(tmp: Path, ranks: int, algorithm: str, backend: str, model: str, params: int) -> int:
    """The largest rank's peak resident set in bytes of one run."""
    tag = f"{algorithm}-{backend}-{model.replace(':', '-')}-{params}"
    spec, peaks = tmp / f"{tag}.toml", tmp / f"{tag}.peaks"
    spec.write_text(scenario_text(ranks, algorithm, model, params))
    peaks.mkdir()
    command = [mpiexec(), "-n", str(ranks), sys.executable, "-c", RANK]
    command += ["run", str(spec), "-o", str(tmp / tag), "--backend", backend]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "FOOTPRINT_DIR": str(peaks)})
    if done.returncode != 0:
        raise SystemExit(f"{tag}: exit status {done.returncode}\n{done.stderr[-2000:]}")
    return max(int(p.read_text()) for p in peaks.iterdir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--small", type=int, default=1_000_000)
    parser.add_argument("--large", type=int, default=25_557_032)
    parser.add_argument("--algorithms", nargs="+", metavar="NAME", help="these only (default: every one)")
    args = parser.parse_args()
    runs = [(r.name, b) for r in RECORDS for b in r.exchanges if args.algorithms is None or r.name in args.algorithms]
    MiB = 2**20
    print(f"{args.ranks} ranks; peak resident set of the largest rank, timing only (model none)")
    print(f"{'algorithm':<16}{'backend':<8}{'small MiB':>10}{'large MiB':>10}{'base MiB':>10}{'bytes/param':>12}")
    with tempfile.TemporaryDirectory(prefix="bench-footprint-") as name:
        tmp = Path(name)
        for algorithm, backend in runs:
            small = peak(tmp, args.ranks, algorithm, backend, "none", args.small)
            large = peak(tmp, args.ranks, algorithm, backend, "none", args.large)
            per_param = (large - small) / (args.large - args.small)
            base = small - per_param * args.small
            print(
                f"{algorithm:<16}{backend:<8}{small / MiB:>10.0f}{large / MiB:>10.0f}{base / MiB:>10.0f}"
                f"{per_param:>12.1f}",
                flush=True,
            )
        print("torch:mlp (the interpreter with torch; its model is 7,000 parameters)")
        for backend in ("native", "torch"):
            print(f"{'sync':<16}{backend:<8}{peak(tmp, args.ranks, 'sync', backend, 'torch:mlp', 1) / MiB:>10.0f}")


if __name__ == "__main__":
    main()
