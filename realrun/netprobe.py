"""What a testbed's links really carry, measured through MPI between two of its nodes (the path ranks use).

- :func:`probe`: the one-way latency (the median of 1-byte ping-pongs, halved) and bandwidth (bytes over the one-way
  time of a message of about half a second at the shaped rate), beside the rate the links were shaped to;
- :func:`tcp_cpu`: the seconds of CPU (all cores, the whole machine) that a byte costs through MPI's TCP path, both
  nodes sending and receiving at once on links not yet shaped: what ``testbed up`` keeps the links' total under.

Run as a module it is the ranks' part of both: ``MODE OUT`` (``probe`` or ``cpu``), rank 0 writing JSON to OUT.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from stragglerlab.analysis.errors import UserError
from stragglerlab.realrun.testbed import Testbed, launcher_options

#: ping-pongs of the latency; messages of the bandwidth
PINGS, STREAMS = 50, 5
#: bytes each rank sends while the CPU is measured
CPU_BYTES = 64 << 20


def _job(tb: Testbed, mode: str, nbytes: int) -> dict[str, Any]:
    """Run this module on nodes 0 and 1 of ``tb``; what rank 0 wrote."""
    from stragglerlab.realrun.mpiexec import mpiexec, start

    with tempfile.TemporaryDirectory(prefix="stragglerlab-probe-") as tmp:
        out = Path(tmp) / "out.json"
        command = [
            mpiexec(),
            *launcher_options(tb, 2, 1, tb.nodes[:2]),
            "-n", "2", sys.executable, "-m", __name__, mode, str(out), str(nbytes),
        ]  # fmt: skip
        proc = start(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        said, _ = proc.communicate(timeout=300)
        if proc.returncode != 0 or not out.exists():
            last = said.strip().splitlines()[-1] if said.strip() else f"exit status {proc.returncode}"
            raise UserError(f"testbed {tb.prefix}: the probe between {tb.nodes[0].name} and {tb.nodes[1].name} "
                            f"failed: {last}")  # fmt: skip
        return json.loads(out.read_text())


def probe(tb: Testbed) -> dict[str, float]:
    """``{"bandwidth": B/s, "latency": s, "rate": B/s}`` between nodes 0 and 1 (module doc)."""
    if len(tb.nodes) < 2:
        raise UserError(f"testbed {tb.prefix}: a probe needs two nodes; it has one")
    nbytes = int(min(max(tb.rate / 2, 1 << 16), 256 << 20))
    return {**_job(tb, "probe", nbytes), "rate": tb.rate}


def tcp_cpu(tb: Testbed) -> float:
    """Seconds of CPU a byte costs through MPI's TCP path (module doc)."""
    return float(_job(tb, "cpu", CPU_BYTES)["cpu_per_byte"])


def _busy() -> float:
    """Seconds of CPU the whole machine has spent busy (not idle or waiting)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / 100.0  # USER_HZ


def main(mode: str, out: str, nbytes: int) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, peer = comm.Get_rank(), 1 - comm.Get_rank()
    result: dict[str, float] = {}
    if mode == "probe":
        one = np.zeros(1, np.uint8)
        big = np.zeros(nbytes, np.uint8)
        for buf, count, key in ((one, PINGS, "latency"), (big, STREAMS, "bandwidth")):
            times = []
            for _ in range(count):
                comm.Barrier()
                t = time.perf_counter()
                if rank == 0:
                    comm.Send(buf, peer)
                    comm.Recv(buf, peer)
                else:
                    comm.Recv(buf, peer)
                    comm.Send(buf, peer)
                times.append((time.perf_counter() - t) / 2)
            one_way = float(np.median(times))
            result[key] = one_way if key == "latency" else (nbytes - 1) / (one_way - result["latency"])
    else:
        chunk = np.zeros(1 << 20, np.uint8)
        back = np.empty_like(chunk)
        comm.Sendrecv(chunk, peer, recvbuf=back, source=peer)  # connections made before the clock starts
        comm.Barrier()
        before = _busy()
        for _ in range(nbytes // len(chunk)):
            comm.Sendrecv(chunk, peer, recvbuf=back, source=peer)
        comm.Barrier()
        result["cpu_per_byte"] = (_busy() - before) / (2 * nbytes)
    if rank == 0:
        Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
