"""One clock per real run: seconds since the run's start, aligned across ranks to rank 0's ``MPI_Wtime``.

``MPI_Wtime`` need not be global, so each rank measures its offset to rank 0 by a few ping-pongs and keeps the one
with the shortest round trip (the native core aligns its own clock the same way); rank 0 then fixes the origin.
The error is about half the best round trip: microseconds on one node, tens of microseconds across a network.
"""

from __future__ import annotations

from typing import Any

PINGS = 8
TAG = 7301


class RunClock:
    """``now()``: seconds since the run's origin on rank 0's clock. Collective to create."""

    def __init__(self, comm: Any):
        from mpi4py import MPI

        self._wtime = MPI.Wtime
        rank, offset = comm.Get_rank(), 0.0
        comm.Barrier()
        for r in range(1, comm.Get_size()):
            best = None
            for _ in range(PINGS):
                if rank == 0:
                    comm.recv(source=r, tag=TAG)
                    comm.send(MPI.Wtime(), dest=r, tag=TAG)
                elif rank == r:
                    t1 = MPI.Wtime()
                    comm.send(None, dest=0, tag=TAG)
                    theirs = comm.recv(source=0, tag=TAG)
                    t2 = MPI.Wtime()
                    if best is None or t2 - t1 < best:
                        best, offset = t2 - t1, theirs - 0.5 * (t1 + t2)
        start = comm.bcast(MPI.Wtime() if rank == 0 else None, root=0)
        self.origin = start - offset  # the run's start, in this rank's MPI_Wtime

    def now(self) -> float:
        return self._wtime() - self.origin
