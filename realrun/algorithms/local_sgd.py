"""``local-sgd`` with plain MPI: ``period`` local steps, then an ``MPI_Allreduce`` that averages the models.

Iteration n steps locally; when it ends a period ((n + 1) mod period = 0) the rank joins average m = ⌊n/period⌋
(kind ``average``, every rank fresh; its initiator is the last rank to post, known from P post-time slots summed
along with the models). A local step's round is the average that carries it, or −1 after the last full period.
"""

from __future__ import annotations

import numpy as np

from stragglerlab.realrun.algorithms import Exchange, iteration_row, synchronous_round


class LocalSgd(Exchange):
    def __init__(self, scenario, comm, replica, clock, sink):
        super().__init__(scenario, comm, replica, clock, sink)
        self.period = scenario.algorithm.period
        self.total = scenario.iterations // self.period
        self.buffer = np.zeros(self.d + self.size, dtype=np.float32)
        self.steps: list[tuple] = []  # (n, t_start, t_post, t_done) of the local steps of the current period
        self.done: list[tuple] = []

    def iteration(self, n, g, loss, t_start, t_post):
        from mpi4py import MPI

        self.replica.step(g)
        m = n // self.period
        if (n + 1) % self.period or m >= self.total:
            t_done = self.clock.now()
            self.sink(
                "iterations",
                iteration_row(self.rank, n, t_start, t_post, t_done, m if m < self.total else -1, m, m < self.total),
            )
            return None
        buf, d = self.buffer, self.d
        buf[:d] = self.replica.host(self.replica.params())
        buf[d:] = 0.0
        buf[d + self.rank] = t_post
        self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        self.replica.load(buf[:d] / self.size)
        t_done = self.clock.now()
        self.sink("iterations", iteration_row(self.rank, n, t_start, t_post, t_done, m, m, True))
        if self.rank == 0:
            self.done.append(synchronous_round(m, "average", buf[d:].astype(np.float64), t_done))
        return t_done, n + 1

    def rounds(self):
        rows, self.done = self.done, []
        return rows
