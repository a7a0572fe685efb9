"""``d-psgd``, ``sgp`` and ``swarm-sgd`` with plain MPI point to point: at iteration n every rank sends its model to
the ranks that receive from it in phase n mod phases and receives from its own peers (the rules'
:class:`~stragglerlab.simulator.algorithms.gossip.GossipRules`: d-psgd's neighbours, sgp's source), all at once
with non-blocking sends and receives on a duplicated communicator; the exchange is done when its receives have
completed, and its sends too where the rules' ``waits_for_sends`` says so. Where the rules' sends wait for their
receivers (swarm-sgd), they are synchronous sends (``MPI_Issend``).

Each message holds the sender's post time and push-sum weight (two float64) and its model (float32). D-PSGD then
sets w ← mean of its own posted model and its neighbours', and steps with its gradient. SGP (the rules' ``push_sum``)
steps its numerator x with the gradient taken on x/weight, sends it, and keeps x ← (x + Σ x_src)/(k + 1),
weight ← (weight + Σ weight_src)/(k + 1) over its k sources, loading x/weight for the next gradient.

Rows: every iteration is carried by its own round (version n, fresh); each rank's ``rounds`` row of iteration n (the
latest post among it and its peers as ``t_trigger``, the peer that posted last as ``group``) is gathered to rank 0
when the run ends (:class:`PerRankRounds`, which ad-psgd's exchange shares).
"""

from __future__ import annotations

import numpy as np

from stragglerlab.realrun.algorithms.base import Exchange, iteration_row

_META = 16  # bytes of a message before the model: post time and push-sum weight, float64
_TAGS = 1 << 15  # tags cycle: ranks are never that many iterations apart


class PerRankRounds(Exchange):
    """What the gossip exchanges share: every iteration carried by its own round, and one ``rounds`` row per rank
    and iteration, kept by each rank and gathered to rank 0 when the run ends."""

    identical = False

    def __init__(self, scenario, rules, comm, replica, clock, sink):
        super().__init__(scenario, rules, comm, replica, clock, sink)
        self.done: list[tuple] = []
        self.final: list[tuple] = []  # every rank's rows, on rank 0 once the run ends

    def record(self, n: int, t_start: float, t_post: float, row: tuple) -> tuple[float, int]:
        """Iteration ``n`` exchanged as ``row`` (a ``rounds`` row); returns what :meth:`iteration` returns."""
        t_done = row[4]
        self.done.append(row)
        self.sink("iterations", iteration_row(self.rank, n, t_start, t_post, t_done, n, n, True, self.batch))
        return t_done, n + 1

    def rounds(self):
        """Nothing until the run ends: every rank's rows are gathered then (:meth:`gather`)."""
        rows, self.final = self.final, []
        return rows

    def gather(self) -> None:
        """Collective: every rank's rows to rank 0."""
        gathered = self.comm.gather(self.done, root=0)
        self.final = [row for rows in gathered for row in rows] if self.rank == 0 else []


class GossipExchange(PerRankRounds):
    bytes_per_parameter = 36

    def __init__(self, scenario, rules, comm, replica, clock, sink):
        super().__init__(scenario, rules, comm, replica, clock, sink)
        self.gossip = comm.Dup()
        self.push_sum = rules.push_sum
        # push-sum's numerator, and where _mix leaves the mixed model (float64 buffers kept across iterations)
        self.x = self.replica.host(self.replica.params()).astype(np.float64)
        self.loaded = np.empty(self.d)  # x / weight
        self.summed = np.empty(self.d, dtype=np.float32)  # the peers' models, summed
        self.weight = 1.0
        self.spare: list[np.ndarray] = []  # send buffers free to fill
        self.sending: list[tuple[list, np.ndarray]] = []  # push-sum's sends not yet seen complete, with their buffer
        self.inbox = [self._message() for _ in range(rules.most_peers())]

    def _message(self) -> np.ndarray:
        return np.empty(_META + 4 * self.d, dtype=np.uint8)

    def _outbox(self) -> np.ndarray:
        """A send buffer that no send in flight still reads."""
        from mpi4py import MPI

        pending = []
        for sends, buffer in self.sending:
            if MPI.Request.Testall(sends):
                self.spare.append(buffer)
            else:
                pending.append((sends, buffer))
        self.sending = pending
        return self.spare.pop() if self.spare else self._message()

    def iteration(self, n, g, loss, t_start, t_post):
        from mpi4py import MPI

        rules, rank = self.rules, self.rank
        if self.push_sum:
            self.replica.load(self.x)
            self.replica.step(g)
        posted = self.replica.host(self.replica.params())
        out = self._outbox()
        out[:_META].view(np.float64)[:] = (t_post, self.weight)
        out[_META:].view(np.float32)[:] = posted
        peers = rules.peers(n, rank)
        inbox = self.inbox[: len(peers)]
        tag = n % _TAGS
        receives = [self.gossip.Irecv(m, source=j, tag=tag) for m, j in zip(inbox, peers, strict=True)]
        # a send that waits for its receiver (rendezvous: swarm-sgd) is synchronous, so that it does whatever the
        # message's size (MPI sends small messages eagerly, done before their receiver is there)
        send = self.gossip.Issend if rules.rendezvous else self.gossip.Isend
        sends = [send(out, dest=j, tag=tag) for j in rules.receivers(n, rank)]
        if not rules.waits_for_sends:  # its sends complete once their receivers have posted
            self.sending.append((sends, out))
            MPI.Request.Waitall(receives)
        else:
            MPI.Request.Waitall(receives + sends)
            self.spare.append(out)
        t_done = self.clock.now()
        meta = [m[:_META].view(np.float64) for m in inbox]
        models = [m[_META:].view(np.float32) for m in inbox]
        if self.push_sum:
            self._mix(posted, models, 1 + len(models))
            self.weight = (self.weight + sum(float(m[1]) for m in meta)) / (1 + len(meta))
            self.replica.load(np.divide(self.x, self.weight, out=self.loaded))
        else:
            self.replica.load(self._mix(posted, models, 1 + len(models)))
            self.replica.step(g)
        posts = [float(m[0]) for m in meta]
        group = peers[int(np.argmax(posts))] if posts else -1
        t_trigger = max([t_post, *posts])
        return self.record(
            n, t_start, t_post, (n, rules.kind, rank, t_trigger, t_done, 1 + len(peers), 1 + len(peers), group)
        )

    def _mix(self, posted: np.ndarray, models: list[np.ndarray], divisor: int) -> np.ndarray:
        """(posted + Σ models) / divisor in float64, the models summed in float32 first, into ``x`` (returned): buffers
        kept across iterations, since every fresh temporary of the model's size costs page faults, and those of this
        sum took milliseconds an iteration, beside the exchanges, on ranks that share the cores with them."""
        mixed = self.x
        mixed[:] = posted
        if models:
            np.copyto(self.summed, models[0])
            for m in models[1:]:
                self.summed += m
            mixed += self.summed
        mixed /= divisor
        return mixed

    def close(self):
        from mpi4py import MPI

        MPI.Request.Waitall([request for sends, _ in self.sending for request in sends])
        self.gather()
        self.gossip.Free()
