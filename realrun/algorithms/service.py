"""Service threads: a rank's thread that takes messages from any rank, and rank 0's services that every rank asks,
rank 0 included.

A service thread waits for a message by testing a receive from any source between sleeps that double from 10 µs
to 200 µs (:func:`until`): a blocking receive would poll on a core the ranks need (on this 2-core machine it made
the exchanges slower: gossip 0.60 → 0.90 ms, a push 0.38 → 0.54 ms at P = 2).

A :class:`Service` is the channel to one service thread of rank 0 (LSGD's counting server, the parameter server of
async-ps and easgd). The other ranks ask it over MPI; rank 0's own thread hands its requests over in the process
and waits on an event for the answer. **(choice)** Not over MPI to itself: between two threads of one process,
MPICH passes a message late (the thread that waits for it sees it about 0.16 ms after it was sent, either way), so
rank 0's pushes to its own parameter server took 0.8–0.9 ms against 0.55–0.6 ms from the other ranks (3 ranks,
400 kB), which the simulator's one push cost cannot follow. In the process, rank 0's requests skip the two messages
a remote rank pays, as a worker beside its server would.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

FIRST_PAUSE, LAST_PAUSE = 1e-5, 2e-4
REQUEST, ANSWER = 31, 32
#: where the answer to one of rank 0's own requests goes, and the event its thread waits on
Asking = tuple[np.ndarray, threading.Event]


def until(ready: Callable[[], Any]) -> None:
    """Return once ``ready()`` is true, testing it between sleeps that double from 10 µs to 200 µs."""
    pause = FIRST_PAUSE
    while not ready():
        time.sleep(pause)
        pause = min(pause * 2, LAST_PAUSE)


def receive(comm: Any, buffer: np.ndarray, status: Any) -> None:
    """Wait for a message of any tag from any rank into ``buffer``; ``status`` then says whose it is."""
    from mpi4py import MPI

    pending = comm.Irecv(buffer, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
    until(lambda: pending.Test(status))


class Service:
    """The channel between every rank and one service thread of rank 0, over ``comm`` (a communicator of its own).
    Requests are arrays of ``inbox``'s dtype, at most its length; the thread takes them one at a time
    (:meth:`take`), in the order they reach it, and answers those that want an answer (:meth:`answer`)."""

    def __init__(self, comm: Any, inbox: np.ndarray):
        from mpi4py import MPI

        self.comm, self.inbox, self.status = comm, inbox, MPI.Status()
        self.rank = comm.Get_rank()
        #: rank 0's requests not yet taken, each with where its answer goes (None: told, no answer)
        self.local: deque[tuple[np.ndarray, Asking | None]] = deque()
        self.asking: list[Asking] = []  # rank 0's request being served
        self.pending: Any = None

    def ask(self, request: np.ndarray, answer: np.ndarray) -> None:
        """Any rank: send ``request`` and wait for its answer, written into ``answer``."""
        if self.rank == 0:
            done = threading.Event()
            self.local.append((request, (answer, done)))
            done.wait()
        else:
            self.comm.Send(request, dest=0, tag=REQUEST)
            self.comm.Recv(answer, source=0, tag=ANSWER)

    def tell(self, request: np.ndarray) -> None:
        """Any rank: send ``request``, which has no answer."""
        if self.rank == 0:
            self.local.append((request, None))
        else:
            self.comm.Send(request, dest=0, tag=REQUEST)

    def take(self) -> tuple[int, np.ndarray]:
        """The service thread: the next request and the rank that sent it."""
        from mpi4py import MPI

        if self.pending is None:
            self.pending = self.comm.Irecv(self.inbox, source=MPI.ANY_SOURCE, tag=REQUEST)
        until(lambda: self.local or self.pending.Test(self.status))
        if self.pending == MPI.REQUEST_NULL:  # a message came (a completed receive is null)
            self.pending = None
            return self.status.Get_source(), self.inbox[: self.status.Get_count() // self.inbox.itemsize]
        request, asking = self.local.popleft()  # the receive stays posted for the next take
        if asking is not None:
            self.asking.append(asking)
        return 0, request

    def answer(self, rank: int, reply: np.ndarray) -> None:
        """The service thread: answer the request it took from ``rank``."""
        if rank == 0:
            answer, done = self.asking.pop()
            answer[:] = reply
            done.set()
        else:
            self.comm.Send(reply, dest=rank, tag=ANSWER)

    def close(self) -> None:
        """The service thread, when it has taken its last request: withdraw the receive still posted."""
        if self.pending is not None:
            self.pending.Cancel()
            self.pending.Wait()
            self.pending = None
