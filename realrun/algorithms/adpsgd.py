"""``ad-psgd`` with MPI point to point and a communication thread per rank (``MPI_THREAD_MULTIPLE``).

Every rank runs a :class:`PeerThread` on its own duplicated communicator: it takes the exchange requests other ranks
send it one at a time, in the order they arrive (MPI matches a receive from any source in arrival order), and the
rank's own computation goes on meanwhile. After its gradient of iteration n, a rank sends its model to the neighbour
the simulator's rules draw (:meth:`~stragglerlab.simulator.algorithms.adpsgd.AdPsgdRules.peer`) and waits for the
reply; the peer's thread, when it takes the request (the exchange's start), moves its own model halfway toward the
one sent and replies with their average. The initiator then takes that average and applies its gradient step.

The thread never touches the replica, which the computation is using: it adds what each exchange it serves changes
to a *held* vector (under a lock), and the rank folds it into its model when its own exchange completes. So a rank's
gradient of iteration n, and the model it sends, are its model as its own step n − 1 left it; the model it steps
after its exchange is the average it got back plus what its thread served meanwhile. Both ends of an exchange move
halfway toward each other, and the sum of the models moves by the steps alone, as the simulator replays it. The
start of a serve and a rank's release (``t_done``) are read under that lock, on the rank's one clock, so the tables
say which of the peer's iterations each serve came after: what the replay needs to find the peer's model.

A rank's last iteration (its N-th, or with a time budget (``duration``) its first exchange that completes at or
after the budget on the run's clock, as the simulator's workers stop) ends once every rank has ended its own: its
thread serves the others' exchanges meanwhile with the model it has, and their averages change that model as
always. The rank then folds them in, so its final model (the one evaluated and saved) holds every exchange it
served, as the simulator's replay holds them.

Rows: every iteration is carried by its own round (version n, fresh); each rank's ``rounds`` row (``t_trigger`` the
exchange's start on the peer's clock, ``group`` the peer) is gathered to rank 0 when the run ends.
"""

from __future__ import annotations

import threading

import numpy as np

from stragglerlab.realrun.algorithms.gossip import PerRankRounds
from stragglerlab.realrun.algorithms.service import receive

REQUEST, REPLY, STOP = 21, 22, 23
_META = 16  # bytes of a message before the model: two float64 (request: post time, iteration; reply: start, 0)


def _message(d: int) -> np.ndarray:
    return np.zeros(_META + 4 * d, dtype=np.uint8)


class PeerThread:
    """This rank's communication thread: serves the exchanges others start with it, one at a time, first come first
    served, until its own rank sends it ``STOP``."""

    def __init__(self, exchange: AdPsgdExchange):
        self.exchange = exchange
        self.inbox, self.reply = _message(exchange.d), _message(exchange.d)
        # float64 buffers of every serve: fresh temporaries of the model's size cost page faults, milliseconds a serve
        self.theirs, self.mine, self.average = np.empty(exchange.d), np.empty(exchange.d), np.empty(exchange.d)
        self.thread = threading.Thread(target=self._serve, name="stragglerlab-ad-psgd-peer", daemon=True)

    def _serve(self) -> None:
        from mpi4py import MPI

        ex, status = self.exchange, MPI.Status()
        while True:
            receive(ex.requests, self.inbox, status)
            if status.Get_tag() == STOP:
                return
            theirs, mine, average = self.theirs, self.mine, self.average
            np.copyto(theirs, self.inbox[_META:].view(np.float32))
            with ex.lock:
                start = ex.clock.now()
                np.add(ex.current, ex.held, out=mine)
                np.add(theirs, mine, out=average)
                average /= 2
                ex.held += np.subtract(average, mine, out=theirs)  # theirs, read, now holds the change
            self.reply[:_META].view(np.float64)[:] = (start, 0.0)
            self.reply[_META:].view(np.float32)[:] = average
            ex.replies.Send(self.reply, dest=status.Get_source(), tag=REPLY)


class AdPsgdExchange(PerRankRounds):
    bytes_per_parameter = 84

    def __init__(self, scenario, rules, comm, replica, clock, sink):
        super().__init__(scenario, rules, comm, replica, clock, sink)
        self.requests, self.replies = comm.Dup(), comm.Dup()
        self.lock = threading.Lock()
        self.current = self.replica.host(self.replica.params()).astype(np.float64)  # the model as last loaded
        self.held = np.zeros(self.d)  # what exchanges served since then changed
        self.moved = np.empty(self.d)  # what this rank's own exchange changed (a buffer kept across iterations)
        self.out, self.answer = _message(self.d), _message(self.d)
        self.peer = PeerThread(self)
        self.peer.thread.start()

    @classmethod
    def stops(cls, rules):
        return True

    def _fold(self) -> None:
        """What the thread has served into the replica (holding the lock)."""
        if self.held.any():
            self.current += self.held
            self.held[:] = 0.0
            self.replica.load(self.current)

    def iteration(self, n, g, loss, t_start, t_post):
        rank = self.rank
        j = self.rules.peer(rank, n)
        start = t_post
        if j >= 0:
            self.out[:_META].view(np.float64)[:] = (t_post, n)
            self.out[_META:].view(np.float32)[:] = self.current
            self.requests.Send(self.out, dest=j, tag=REQUEST)
            self.replies.Recv(self.answer, source=j, tag=REPLY)
            start = float(self.answer[:_META].view(np.float64)[0])
        with self.lock:
            t_done = self.clock.now()
            if j >= 0:
                self.held += np.subtract(self.answer[_META:].view(np.float32), self.current, out=self.moved)
            self._fold()
            self.replica.step(g)
            np.copyto(self.current, self.replica.host(self.replica.params()))
        self.stopped = t_done >= self.scenario.budget
        if self.stopped or n == self.rules.N - 1:
            self.comm.Barrier()  # every rank's requests are answered: no more will come
            with self.lock:
                self._fold()
        return self.record(n, t_start, t_post, (n, self.rules.kind, rank, start, t_done, 1 + (j >= 0), 1, j))

    def close(self):
        from mpi4py import MPI

        stop = self.requests.Isend(np.zeros(_META, dtype=np.uint8), dest=self.rank, tag=STOP)
        self.peer.thread.join()
        MPI.Request.Wait(stop)
        self.gather()
        self.requests.Free()
        self.replies.Free()
