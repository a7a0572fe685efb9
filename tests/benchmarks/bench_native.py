"""Benchmark of the native core against MPI_Allreduce, run as ``mpiexec -n P python tests/benchmarks/bench_native.py``.

1. Balanced arrival: for float32 counts (default 1, 256, 16 Ki, 256 Ki and 4 Mi), the time per round of each kind
   beside ``MPI_Allreduce`` on the same buffers, as a ratio (targets: within 1.3x at 1, 256 and 16 Ki floats;
   >= 0.9x bandwidth from 4 MiB, i.e. a time ratio <= 1.11); quorum with k = P. Two pairs of columns: the core
   (``pcoll_post`` + ``pcoll_wait`` against ``MPI_Allreduce``, both timed in a C loop, ``bench_native_loop.c``, so
   that no Python call overhead enters), and what the harness pays (``Collective.post`` + ``Collective.wait(out)``
   against mpi4py's ``Allreduce``; target within 1.3x). Short blocks alternate between the sides, and the ratio is
   the median over blocks of ours / theirs in neighbouring blocks: a shared machine's speed drifts by tens of
   percent over seconds, which the ratio of two blocks a few milliseconds apart mostly cancels. Times are medians
   over blocks.
2. One straggler: every rank computes 5 ms per iteration, the last rank 20 ms more; the fast ranks' mean wait under
   eager-solo (no periodic sync), as a percentage of the delay (target <= 2 %), beside quorum with k = P - 1 (from
   P = 3: the others' posts activate the round, the straggler's is not waited for) and sync for reference.
3. The progress thread's CPU use while the application sleeps for a second with a collective open.
Rank 0 prints the tables (and with ``--out FILE`` writes them there too); ``--counts``, ``--kinds``, ``--repeats``,
``--calls`` and ``--straggler-counts`` narrow a run (``--help``).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import subprocess
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from stragglerlab.realrun.build import SOURCE_DIR, build, find_mpicc
from stragglerlab.realrun.collectives import KINDS, Collective, binding, mechanism

COUNTS = [1, 256, 16 * 1024, 256 * 1024, 4 * 1024 * 1024]
DELAY = 0.020
COMPUTE = 0.005
LOOP_SOURCE = Path(__file__).with_name("bench_native_loop.c")


def iterations(count: int) -> int:
    return {1: 500, 256: 500, 16 * 1024: 100, 256 * 1024: 20}.get(count, 5)


def timed(comm: MPI.Comm, block, n: int) -> float:
    """Seconds per round of block(n) (which runs n rounds), after a warm-up block; the slowest rank's figure."""
    block(max(2, n // 10))
    comm.Barrier()
    start = time.perf_counter()
    block(n)
    return comm.allreduce((time.perf_counter() - start) / n, op=MPI.MAX)


def loop_library(comm: MPI.Comm) -> ctypes.CDLL:
    """bench_native_loop.c compiled (by rank 0, beside the cached core) against libpcoll.so, and loaded."""
    core = Path(build()) if comm.rank == 0 else None
    core = Path(comm.bcast(str(core) if core else None, root=0))
    flags = ["-O2", "-Wall", "-Wextra", "-shared", "-fPIC", "-I", str(SOURCE_DIR / "include")]
    key = hashlib.sha256(LOOP_SOURCE.read_bytes() + " ".join(flags).encode()).hexdigest()[:12]
    target = core.parent / f"libbenchloop-{key}.so"
    if comm.rank == 0 and not target.exists():
        libraries = ["-L", str(core.parent), "-lpcoll", f"-Wl,-rpath,{core.parent}"]
        command = [find_mpicc(), *flags, str(LOOP_SOURCE), *libraries, "-o", str(target)]
        subprocess.run(command, check=True)
    comm.Barrier()
    lib = ctypes.CDLL(str(target))
    p = ctypes.c_void_p
    lib.bench_native_open.argtypes = [ctypes.c_int] * 6
    lib.bench_native_open.restype = p
    lib.bench_native_close.argtypes = [p]
    lib.bench_native_loop.argtypes = [p, ctypes.c_int, p, p, ctypes.c_int, ctypes.c_int]
    lib.bench_native_loop.restype = ctypes.c_double
    return lib


def compare(comm: MPI.Comm, loop: ctypes.CDLL, kind: str, count: int, repeats: int) -> dict[str, np.ndarray]:
    """Seconds per round of each block: MPI_Allreduce and ours in C, mpi4py and our Python API."""
    x = np.full(count, comm.rank + 1.0, dtype=np.float32)
    out = np.empty_like(x)
    n = iterations(count)
    samples: dict[str, list[float]] = {"mpi": [], "core": [], "mpi4py": [], "py": []}
    core_kind, k, sync_period = mechanism(kind, comm.size, comm.size, 0)
    handle = loop.bench_native_open(comm.py2f(), count, getattr(binding(comm), core_kind), k, sync_period, 2)
    assert handle, "the benchmark's own handle did not open"
    with Collective(kind, count=count, comm=comm, group_size=2, quorum=comm.size) as coll:
        args = (comm.py2f(), x.ctypes.data, out.ctypes.data, count)

        def python_api(rounds: int) -> None:
            for _ in range(rounds):
                coll.post(x)
                coll.wait(out)

        def mpi4py(rounds: int) -> None:
            for _ in range(rounds):
                comm.Allreduce(x, out, op=MPI.SUM)

        blocks = {
            "mpi": lambda rounds: loop.bench_native_loop(None, *args, rounds),
            "core": lambda rounds: loop.bench_native_loop(handle, *args, rounds),
            "mpi4py": mpi4py,
            "py": python_api,
        }
        for _ in range(repeats):
            for name, block in blocks.items():
                samples[name].append(timed(comm, block, n))
    loop.bench_native_close(handle)
    return {name: np.array(values) for name, values in samples.items()}


def straggler(comm: MPI.Comm, kind: str, count: int, calls: int) -> float:
    """Fast ranks' mean wait per call as a fraction of DELAY, the last rank delayed DELAY per iteration."""
    x = np.ones(count, dtype=np.float32)
    out = np.empty_like(x)
    slow = comm.rank == comm.size - 1
    waits = []
    with Collective(kind, count=count, comm=comm, sync_period=0, quorum=max(1, comm.size - 1)) as coll:
        for _ in range(calls):
            time.sleep(COMPUTE + (DELAY if slow else 0.0))
            coll.post(x)
            t = time.perf_counter()
            coll.wait(out)
            waits.append(time.perf_counter() - t)
    fast = comm.gather(None if slow else float(np.mean(waits)), root=0)
    return float(np.mean([w for w in (fast or []) if w is not None] or [0.0])) / DELAY


def idle_cpu(comm: MPI.Comm) -> float:
    """Fraction of a core this process uses while its application thread sleeps 1 s with a collective open."""
    with Collective("eager-solo", count=256, comm=comm) as coll:
        coll.post(np.ones(256, dtype=np.float32))
        coll.wait()
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(1.0)
        share = (time.process_time() - cpu) / (time.perf_counter() - wall)
    return comm.allreduce(share, op=MPI.MAX)


def integers(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=integers, default=COUNTS, help="float32 counts, comma-separated")
    parser.add_argument("--kinds", type=lambda t: t.split(","), default=list(KINDS), help="kinds, comma-separated")
    parser.add_argument("--repeats", type=int, default=15, help="blocks per side and count (default 15)")
    parser.add_argument("--calls", type=int, default=30, help="straggler iterations per kind and count (default 30)")
    parser.add_argument("--straggler-counts", type=integers, default=[256, 262144], help="counts of part 2")
    parser.add_argument("--out", type=Path, help="also write the tables to this file (rank 0)")
    return parser.parse_args()


def main() -> None:
    args = options()
    comm = MPI.COMM_WORLD
    loop = loop_library(comm)
    rows = [(c, kind, compare(comm, loop, kind, c, args.repeats)) for c in args.counts for kind in args.kinds]
    lagging = ("eager-solo", "quorum", "sync")
    lag = [(kind, c, straggler(comm, kind, c, args.calls)) for kind in lagging for c in args.straggler_counts]
    cpu = idle_cpu(comm)
    if comm.rank:
        return
    lines = [
        f"# native core vs MPI_Allreduce, P = {comm.size}, {MPI.Get_library_version().splitlines()[0]}",
        "# time per round in us; ratio = ours / MPI_Allreduce; core: C loops; python: Collective vs mpi4py",
        f"# {'count':>8} {'kind':<15} {'MPI':>9} {'core':>9} {'ratio':>6} {'mpi4py':>9} {'python':>9} {'ratio':>6}",
    ]
    for count, kind, t in rows:
        us = {name: np.median(values) * 1e6 for name, values in t.items()}
        core = f"{us['mpi']:>9.1f} {us['core']:>9.1f} {np.median(t['core'] / t['mpi']):>6.2f}"
        python = f"{us['mpi4py']:>9.1f} {us['py']:>9.1f} {np.median(t['py'] / t['mpi4py']):>6.2f}"
        lines.append(f"  {count:>8} {kind:<15} {core} {python}")
    lines.append(f"# one rank delayed {DELAY * 1e3:.0f} ms per iteration, all compute {COMPUTE * 1e3:.0f} ms")
    lines.append("# fast ranks' mean wait, as a share of the delay")
    lines += [f"  {kind:<15} count {count:>7}: {share * 100:6.1f} % of the delay" for kind, count, share in lag]
    lines.append(f"# progress thread while idle: {cpu * 100:.2f} % of a core (max over ranks)")
    print("\n".join(lines), flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
