"""One clock per real run: seconds since the run's start, aligned across ranks to rank 0's ``MPI_Wtime``.

``MPI_Wtime`` need not be global, so each rank measures its offset to rank 0 by a few ping-pongs and keeps the one
with the shortest round trip (the native core aligns its own clock the same way); rank 0 then fixes the origin.
The error is about half the best round trip: microseconds on one node, tens of microseconds across a network.

The run starts (:meth:`RunClock.start`) once every rank is set up: the native core loaded (compiled on first use),
the exchange's threads and communicators made, DDP's buckets built. What a run measures (its iterations' times and
its throughput) is then the training alone, whether the run is the first on a fresh install or a rerun.
"""

from __future__ import annotations

from typing import Any

PINGS = 8
TAG = 7301


class RunClock:
    """``now()``: seconds since the run's start on rank 0's clock. Collective to create and to :meth:`start`; until
    started, the start is when it was created."""

    def __init__(self, comm: Any):
        from mpi4py import MPI

        self._wtime = MPI.Wtime
        rank, self.offset = comm.Get_rank(), 0.0  # rank 0's MPI_Wtime less this rank's
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
                        best, self.offset = t2 - t1, theirs - 0.5 * (t1 + t2)
        self.start(comm)

    def start(self, comm: Any) -> None:
        """Collective: the run starts now, when the last rank calls this (rank 0's reading)."""
        comm.Barrier()
        self.started = comm.bcast(self.reading() if comm.Get_rank() == 0 else None, root=0)

    def reading(self) -> float:
        """Rank 0's ``MPI_Wtime`` now, as this rank reads it."""
        return self._wtime() + self.offset

    def now(self) -> float:
        return self.reading() - self.started
