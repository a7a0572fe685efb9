"""What a testbed's links really carry and cost, measured between two of its nodes.

- :func:`probe`: through MPI (the path ranks use), the one-way latency (the median of 1-byte ping-pongs, halved) and
  bandwidth (bytes over the one-way time of a message of about half a second at the shaped rate), beside the rate
  the links were shaped to;
- :func:`tcp_cpu`: the seconds of CPU a byte costs its sender and receiver through the TCP path of the shaped links
  (a stream of about a second between two nodes, each end timing its own CPU): what ``testbed up`` keeps the links'
  total under. Unshaped links are no guide: there a byte cost a tenth as much (the kernel moves 64 kB segments
  whole, where a shaper passes them a frame at a time).

Run as a module it is either end of one: ``probe OUT NBYTES`` on two MPI ranks (rank 0 writes JSON to OUT), or
``receive PORT OUT`` and ``send ADDRESS PORT NBYTES OUT`` in the two nodes' namespaces (each writes its CPU seconds).
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
from stragglerlab.realrun.mpiexec import mpiexec, start
from stragglerlab.realrun.testbed import Testbed, launcher_options

#: ping-pongs of the latency; messages of the bandwidth
PINGS, STREAMS = 50, 5
#: the port the CPU measurement's stream uses (inside the testbed's own namespaces)
PORT = 5201
#: seconds the CPU measurement's stream lasts at the shaped rate
STREAM_SECONDS = 1.0
CHUNK = 1 << 16


def _failed(tb: Testbed, what: str, said: str, code: int | None) -> UserError:
    last = said.strip().splitlines()[-1] if said.strip() else f"exit status {code}"
    return UserError(
        f"testbed {tb.prefix}: the {what} between {tb.nodes[0].name} and {tb.nodes[1].name} failed: {last}"
    )


def _job(tb: Testbed, nbytes: int) -> dict[str, Any]:
    """Run the probe on nodes 0 and 1 of ``tb``; what rank 0 wrote."""
    with tempfile.TemporaryDirectory(prefix="stragglerlab-probe-") as tmp:
        out = Path(tmp) / "out.json"
        command = [
            mpiexec(),
            *launcher_options(tb, 2, 1, tb.nodes[:2]),
            "-n", "2", sys.executable, "-m", __name__, "probe", str(out), str(nbytes),
        ]  # fmt: skip
        proc = start(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        said, _ = proc.communicate(timeout=300)
        if proc.returncode != 0 or not out.exists():
            raise _failed(tb, "probe", said, proc.returncode)
        return json.loads(out.read_text())


def probe(tb: Testbed) -> dict[str, float]:
    """``{"bandwidth": B/s, "latency": s, "rate": B/s}`` between nodes 0 and 1 (module doc)."""
    if len(tb.nodes) < 2:
        raise UserError(f"testbed {tb.prefix}: a probe needs two nodes; it has one")
    nbytes = int(min(max(tb.rate / 2, 1 << 16), 256 << 20))
    return {**_job(tb, nbytes), "rate": tb.rate}


def tcp_cpu(tb: Testbed) -> float:
    """Seconds of CPU a byte costs through the shaped links' TCP path, sender and receiver together (module doc)."""
    nbytes = max(int(tb.rate * STREAM_SECONDS), 1 << 20)
    with tempfile.TemporaryDirectory(prefix="stragglerlab-probe-") as tmp:
        ends = [Path(tmp) / "receive", Path(tmp) / "send"]
        here = [sys.executable, "-m", __name__]
        node = [["nsenter", f"--net=/run/netns/{n.name}"] for n in tb.nodes[:2]]
        receiver = subprocess.Popen([*node[1], *here, "receive", str(PORT), str(ends[0])], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)  # fmt: skip
        if receiver.stdout is None or receiver.stdout.readline().strip() != "listening":
            raise _failed(tb, "CPU measurement", receiver.communicate()[0], receiver.wait())
        sender = subprocess.run([*node[0], *here, "send", tb.nodes[1].address, str(PORT), str(nbytes), str(ends[1])],
                                capture_output=True, text=True, timeout=300)  # fmt: skip
        said = receiver.communicate(timeout=60)[0]
        if sender.returncode or receiver.returncode or not all(e.exists() for e in ends):
            raise _failed(tb, "CPU measurement", sender.stderr + said, sender.returncode or receiver.returncode)
        return sum(float(e.read_text()) for e in ends) / nbytes


def _stream(mode: str, argv: list[str]) -> None:
    """Either end of :func:`tcp_cpu`'s stream, writing the CPU seconds it spent on it."""
    import socket

    buffer = bytearray(CHUNK)
    if mode == "receive":
        port, out = argv
        with socket.create_server(("0.0.0.0", int(port))) as server:
            print("listening", flush=True)
            conn, _ = server.accept()
            cpu = time.process_time()
            with conn:
                while conn.recv_into(buffer):
                    pass
                cpu = time.process_time() - cpu
                conn.sendall(b"x")
    else:
        address, port, nbytes, out = argv
        with socket.create_connection((address, int(port))) as conn:
            cpu = time.process_time()
            view = memoryview(buffer)
            for _ in range(int(nbytes) // CHUNK):
                conn.sendall(view)
            conn.shutdown(socket.SHUT_WR)
            conn.recv(1)
            cpu = time.process_time() - cpu
    Path(out).write_text(repr(cpu))


def main(out: str, nbytes: int) -> None:
    """The ranks' part of :func:`probe`."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    peer = 1 - rank
    result: dict[str, float] = {}
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
    if rank == 0:
        Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1] == "probe":
        main(sys.argv[2], int(sys.argv[3]))
    else:
        _stream(sys.argv[1], sys.argv[2:])
