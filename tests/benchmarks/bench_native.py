"""Benchmark of the native core against MPI_Allreduce, run as ``mpiexec -n P python tests/benchmarks/bench_native.py``.

1. Balanced arrival: for float32 counts 1, 256, 16 Ki, 256 Ki and 4 Mi, the time per round of each kind beside
   ``MPI_Allreduce`` on the same buffers, as a ratio (DESIGN §9: <= 1.1x latency up to 64 KiB, >= 0.9x bandwidth
   from 4 MiB, i.e. a time ratio <= 1.11). Two columns per kind: through the Python API (``post``/``wait``, what
   the harness pays) and through the bare C calls (``pcoll_post``/``pcoll_wait`` via ctypes, preallocated
   buffers), which is what the core costs. Short blocks alternate between the sides and each side keeps its best
   block, so that load from other processes (which only ever slows a block down) cancels out.
2. One straggler: every rank computes 5 ms per iteration, the last rank 20 ms more; the fast ranks' mean wait under
   eager-solo (no periodic sync), as a percentage of the delay (target <= 5 %), beside sync for reference.
3. The progress thread's CPU use while the application sleeps for a second with a collective open.
Rank 0 prints the tables.
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from realrun.collectives import Collective

COUNTS = [1, 256, 16 * 1024, 256 * 1024, 4 * 1024 * 1024]
KINDS = ["sync", "eager-solo", "eager-majority", "wagma"]
REPEATS = 9
DELAY = 0.020
COMPUTE = 0.005


def iterations(count: int) -> int:
    return {1: 500, 256: 500, 16 * 1024: 100, 256 * 1024: 20}.get(count, 5)


def timed(comm: MPI.Comm, step, n: int) -> float:
    """Seconds per call of step(), after n // 10 warm-up calls; the slowest rank's figure."""
    for _ in range(max(2, n // 10)):
        step()
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(n):
        step()
    return comm.allreduce((time.perf_counter() - start) / n, op=MPI.MAX)


def compare(comm: MPI.Comm, kind: str, count: int) -> tuple[float, float, float]:
    """Best block's seconds per round: MPI_Allreduce, our Python API, our bare C calls (same buffers)."""
    x = np.full(count, comm.rank + 1.0, dtype=np.float32)
    out = np.empty_like(x)
    n = iterations(count)
    samples: dict[str, list[float]] = {"mpi": [], "py": [], "c": []}
    with Collective(kind, count=count, comm=comm, group_size=2) as coll:
        lib, handle = coll._lib, coll._live()

        def python_api() -> None:
            coll.post(x)
            coll.wait()

        def bare_c() -> None:
            lib.pcoll_post(handle, x.ctypes.data)
            lib.pcoll_wait(handle, out.ctypes.data, None, None, None)

        def mpi() -> None:
            comm.Allreduce(x, out, op=MPI.SUM)

        for _ in range(REPEATS):
            samples["mpi"].append(timed(comm, mpi, n))
            samples["py"].append(timed(comm, python_api, n))
            samples["c"].append(timed(comm, bare_c, n))
    mpi_t, py_t, c_t = (min(samples[k]) for k in ("mpi", "py", "c"))
    return mpi_t, py_t, c_t


def straggler(comm: MPI.Comm, kind: str, count: int, calls: int = 30) -> float:
    """Fast ranks' mean wait per call as a fraction of DELAY, the last rank delayed DELAY per iteration."""
    x = np.ones(count, dtype=np.float32)
    slow = comm.rank == comm.size - 1
    waits = []
    with Collective(kind, count=count, comm=comm, sync_period=0) as coll:
        for _ in range(calls):
            time.sleep(COMPUTE + (DELAY if slow else 0.0))
            coll.post(x)
            t = time.perf_counter()
            coll.wait()
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


def main() -> None:
    comm = MPI.COMM_WORLD
    rows = [(count, kind, *compare(comm, kind, count)) for count in COUNTS for kind in KINDS]
    lag = [(kind, count, straggler(comm, kind, count)) for kind in ("eager-solo", "sync") for count in (256, 262144)]
    cpu = idle_cpu(comm)
    if comm.rank:
        return
    print(f"# native core vs MPI_Allreduce, P = {comm.size}, {MPI.Get_library_version().splitlines()[0]}")
    print("# time per round in us; ratio = ours / MPI_Allreduce")
    print(f"# {'count':>8} {'kind':<15} {'MPI':>9} {'py API':>9} {'ratio':>6} {'bare C':>9} {'ratio':>6}")
    for count, kind, mpi, py, c in rows:
        us = f"{mpi * 1e6:>9.1f} {py * 1e6:>9.1f} {py / mpi:>6.2f} {c * 1e6:>9.1f} {c / mpi:>6.2f}"
        print(f"  {count:>8} {kind:<15} {us}")
    print(f"# one rank delayed {DELAY * 1e3:.0f} ms per iteration, all compute {COMPUTE * 1e3:.0f} ms")
    print("# fast ranks' mean wait, as a share of the delay")
    for kind, count, share in lag:
        print(f"  {kind:<15} count {count:>7}: {share * 100:6.1f} % of the delay")
    print(f"# progress thread while idle: {cpu * 100:.2f} % of a core (max over ranks)")


if __name__ == "__main__":
    main()
