"""``local-sgd`` with plain MPI: ``period`` local steps, then an ``MPI_Allreduce`` that averages the models.

Iteration n steps locally; when it ends a period (the rules' :meth:`call_round`) the rank joins average
m = ⌊n/period⌋ (kind ``average``, every rank fresh; its initiator is the last rank to post, known from P post-time
slots summed along with the models). A local step's round is the average that carries it, or −1 after the last full
period. With a time budget every rank stops after the first average whose last post (its ``t_trigger``, read off the
same summed slots on every rank) is at or after it.
"""

from __future__ import annotations

import numpy as np

from stragglerlab.realrun.algorithms.base import Exchange, iteration_row, synchronous_round


class LocalSgdExchange(Exchange):
    bytes_per_parameter = 8

    def __init__(self, scenario, rules, comm, replica, clock, sink):
        super().__init__(scenario, rules, comm, replica, clock, sink)
        self.buffer = np.zeros(self.d + self.size, dtype=np.float32)
        self.done: list[tuple] = []

    def iteration(self, n, g, loss, t_start, t_post):
        from mpi4py import MPI

        rules = self.rules
        self.replica.step(g)
        m = rules.call_round(n)
        if m is None:
            t_done = self.clock.now()
            carried = n // rules.stride < rules.total
            version = n // rules.stride
            self.sink(
                "iterations",
                iteration_row(
                    self.rank, n, t_start, t_post, t_done, version if carried else -1, version, carried, self.batch
                ),
            )
            return None
        buf, d = self.buffer, self.d
        buf[:d] = self.replica.host(self.replica.params())
        buf[d:] = 0.0
        buf[d + self.rank] = t_post
        self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        self.replica.load(buf[:d] / self.size)
        t_done = self.clock.now()
        posts = buf[d:].astype(np.float64)
        self.stopped = bool(posts.max() >= rules.budget)
        self.sink("iterations", iteration_row(self.rank, n, t_start, t_post, t_done, m, m, True, self.batch))
        if self.rank == 0:
            self.done.append(synchronous_round(m, rules.kind(m), posts, t_done))
        return t_done, n + 1

    @classmethod
    def stops(cls, rules) -> bool:
        return True

    def rounds(self):
        rows, self.done = self.done, []
        return rows
