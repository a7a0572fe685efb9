"""``preempt`` in real runs: micro-batches, a control message per finisher, then the native core's sync round.

A rank computes its step in ``algorithm.microbatches`` micro-batches (consecutive slices of its batch; the injected
imbalance spread evenly over them, :meth:`~stragglerlab.realrun.injection.Injection.due`). A rank that finishes every
micro-batch sends a small control message (tagged with the iteration) to every other rank. Between micro-batches a
rank reads the control messages that have arrived; once q = ⌈f·P⌉ ranks have finished it stops there, at the next
micro-batch boundary after it learned of it: what the simulator models as a stop at the q-th finish itself (its
samples rounded down to micro-batches instead of samples, and the time to hear the news and end the micro-batch
under way on top).

Then every rank posts to one synchronous round of the native core (kind ``sync``, which backs off while it waits,
leaving the cores to the ranks still computing): k_i·g_i/b (k_i the samples it processed, g_i their mean gradient)
with P trailing slots in which rank i writes k_i. The rank steps with Σ k_i·g_i / Σ k_i, and receives the control
messages of the finishers it had not read. Rounds are the core's records (``sync``, the last to post the initiator);
the ``iterations`` table records k_i in ``samples``.
"""

from __future__ import annotations

import numpy as np

from stragglerlab.realrun.algorithms.base import iteration_row
from stragglerlab.realrun.algorithms.native import NativeRounds

_TAGS = 1 << 15  # tags cycle: a control message is always read within its own iteration


class PreemptExchange(NativeRounds):
    collective = "sync"
    bytes_per_parameter = 48

    def __init__(self, scenario, rules, comm, replica, clock, sink):
        super().__init__(scenario, rules, comm, replica, clock, sink, late="accumulate", divide_by="workers")
        self.control = comm.Dup()
        self.q, self.parts = rules.finishers, rules.microbatches
        self.bounds = [(j * self.batch) // self.parts for j in range(self.parts + 1)]
        self.note = np.zeros(1, dtype=np.int64)  # a control message's payload: the iteration
        self.sends: list = []
        self.heard = 0  # finishers of the current iteration this rank has read
        self.samples = self.batch

    def compute(self, n, injection, t_start):
        """Micro-batch by micro-batch, stopping at a boundary once q ranks have finished: Σ size·gradient, the mean
        loss and the post time; a rank that finished tells every other."""
        clock, tag = self.clock, n % _TAGS
        total, loss_sum, samples, computed = None, 0.0, 0, 0.0
        self.heard = 0
        for j in range(self.parts):
            lo, hi = self.bounds[j], self.bounds[j + 1]
            began = clock.now()
            g, loss = self.replica.gradient(n, slice(lo, hi))
            computed += clock.now() - began
            total = g * (hi - lo) if total is None else total + g * (hi - lo)
            loss_sum += loss * (hi - lo)
            samples += hi - lo
            injection.spend(injection.due(n, computed, clock.now() - t_start, (j + 1) / self.parts))
            if j < self.parts - 1 and self._hear(tag) >= self.q:
                break
        self.samples = samples
        if samples == self.batch:
            self.note[0] = n
            self.sends = [self.control.Isend(self.note, dest=r, tag=tag) for r in range(self.size) if r != self.rank]
        return total, loss_sum / samples, clock.now()

    def _hear(self, tag: int) -> int:
        """Read the finishers' messages that have arrived; how many this rank has read this iteration. A probe that
        finds nothing is made twice: MPICH's first makes the progress that takes an arrived message in, and answers
        false (one probe per boundary heard of a finisher 30 ms late, a micro-batch later, on 3 ranks)."""
        while self.control.Iprobe(tag=tag) or self.control.Iprobe(tag=tag):
            self.control.Recv(np.empty(1, dtype=np.int64), tag=tag)
            self.heard += 1
        return self.heard

    def iteration(self, n, g, loss, t_start, t_post):
        from mpi4py import MPI

        buf, d = self.buffer, self.d
        buf[:d] = self.replica.host(g)
        buf[:d] /= self.batch
        buf[d:] = 0.0
        buf[d + self.rank] = self.samples
        self.coll.post(buf)
        out, info = self.coll.wait()
        t_done = self.clock.now()
        self.stopped = self.budget_reached()
        counts = np.rint(out[d:] * self.size)  # the core's result is Σ/P
        self.replica.step(out[:d] * np.float32(self.size * self.batch / counts.sum()))
        finished = int(np.count_nonzero(counts == self.batch))
        for _ in range(finished - (self.samples == self.batch) - self.heard):  # the finishers not read yet
            self.control.Recv(np.empty(1, dtype=np.int64), tag=n % _TAGS)
        MPI.Request.Waitall(self.sends)
        self.sends = []
        self.sink("iterations", iteration_row(self.rank, n, t_start, t_post, t_done, info.round, n, True, self.samples))
        return t_done, n + 1

    def close(self):
        super().close()
        self.control.Free()
