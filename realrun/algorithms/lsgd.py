"""``lsgd`` with plain MPI: free-running workers, a counting server, and blocking leader exchanges.

As in the released LSGD code, a counting server decides when workers meet. Here it is a thread on rank 0 with its own
duplicated communicator: every worker reports each post (iteration done) and gets an answer at once (rank 0 hands its
own reports to the thread in the process, :mod:`.service`). The server counts posts over all workers in arrival order
and asks the simulator's rules which exchange a count triggers
(:meth:`~stragglerlab.simulator.algorithms.lsgd.LsgdRules.trigger`: a multiple of P·global_period a global one, of
P·period a local one), initiated by that post. Every worker joins the next exchange with the first post it makes after
the trigger (the initiator at once), so it joins after its current iteration (docs/semantics.md). Once some worker has
posted its last iteration no exchange is triggered (a blocking exchange needs everyone). With a time budget, the first
exchange that rank 0 sees complete at or after it is the last: rank 0 tells every rank so right after it, and every rank
tells the server it has stopped.

An exchange is blocking: an all-gather of each worker's running-mean loss (its last 10 training losses) and
iterations so far, a broadcast of each node leader's model inside its node (``workers_per_node`` consecutive ranks)
and, for a global exchange, of the global leader's model to all. The all-gather is where the workers that joined first
wait for the last, up to an iteration: it is ``MPI_Iallgather`` tested between sleeps (:func:`.service.until`), since
ranks spinning in a blocking one keep the run queue full where ranks outnumber cores (at 4 ranks on 2 cores, 2 runs
of 7 had an exchange take 60–200 ms after its last join, against 1.5–2 ms; none of 12 since). Then every worker is
there and the broadcasts are blocking ``MPI_Bcast``; then w ← w − pull·(w − w_local) − global_pull·(w − w_global)
from the models as they were at the exchange (the global term only in global exchanges). Leaders are the
simulator's (:func:`~stragglerlab.simulator.algorithms.lsgd.leaders`): the lowest running mean, ties to the lowest
rank. An iteration's round is the exchange its worker joins next (−1 after its last exchange).
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

from stragglerlab.realrun.algorithms.base import Exchange, iteration_row
from stragglerlab.realrun.algorithms.service import Service, until
from stragglerlab.simulator.algorithms.lsgd import GLOBAL, LOSS_WINDOW, LsgdRules, leaders

STEP, LAST, STOPPED = 0, 1, 2  # what a worker reports: a post, its last iteration's post, or that it has stopped


class CountingServer:
    """Rank 0's thread answering every post with the exchange its worker must join now (−1: none)."""

    def __init__(self, service: Service, rules: LsgdRules):
        self.service, self.rules, self.workers = service, rules, rules.P
        self.thread = threading.Thread(target=self._serve, name="stragglerlab-lsgd-counter", daemon=True)

    def _serve(self) -> None:
        count, closed, finished = 0, False, 0
        triggered: list[tuple[int, int, float]] = []  # (global, initiator, t_trigger) of each exchange
        joined = [0] * self.workers
        while finished < self.workers:
            worker, (report, t_post) = self.service.take()
            if report == STOPPED:  # at the budget's last exchange: no post, no answer
                finished += 1
                continue
            count += 1
            kind = None if closed else self.rules.trigger(count)
            if kind is not None:
                triggered.append((int(kind == GLOBAL), worker, t_post))
            if report == LAST:
                closed, finished = True, finished + 1
            reply = np.array([-1.0, 0.0, -1.0, -1.0])
            if joined[worker] < len(triggered):
                reply[:] = (joined[worker], *triggered[joined[worker]])
                joined[worker] += 1
            self.service.answer(worker, reply)
        self.service.close()


class LsgdExchange(Exchange):
    bytes_per_parameter = 22
    identical = False

    def __init__(self, scenario, rules, comm, replica, clock, sink):
        super().__init__(scenario, rules, comm, replica, clock, sink)
        self.counter = comm.Dup()
        self.service = Service(self.counter, np.zeros(2))  # a report and its time
        per_node = rules.workers_per_node
        self.nodes = np.arange(self.size) // per_node
        self.node = comm.Split(self.rank // per_node, self.rank)
        self.node_first = self.rank // per_node * per_node
        self.losses: deque[float] = deque(maxlen=LOSS_WINDOW)
        self.buffer = np.zeros(self.d, dtype=np.float32)
        # this rank's model, where the pulls take it, and one pull (_exchange, _toward)
        self.own, self.pulled, self.moved = (np.empty(self.d, dtype=np.float32) for _ in range(3))
        self.waiting: list[tuple] = []  # (n, t_start, t_post, t_done, version) until the exchange carrying them
        self.version = 0
        self.done: list[tuple] = []
        self.server = None
        if self.rank == 0:
            self.server = CountingServer(self.service, rules)
            self.server.thread.start()

    def iteration(self, n, g, loss, t_start, t_post):
        self.replica.step(g)
        self.losses.append(loss)
        reply = np.zeros(4)
        report = LAST if n == self.rules.N - 1 else STEP
        self.service.ask(np.array([report, t_post]), reply)
        exchange, global_, initiator, t_trigger = int(reply[0]), bool(reply[1]), int(reply[2]), float(reply[3])
        if exchange < 0:
            self.waiting.append((n, t_start, t_post, self.clock.now(), self.version))
            return None
        reached = self._exchange(global_, n + 1)
        t_done = self.clock.now()
        self.stopped = self.budget_spent(t_done)
        if self.stopped and report != LAST:  # (a last post has told the server already)
            self.service.tell(np.array([STOPPED, t_done]))
        self.waiting.append((n, t_start, t_post, t_done, self.version))
        for call in self.waiting:
            self._emit(call, exchange)
        self.waiting.clear()
        self.version += 1
        if self.rank == 0:
            self.done.append(
                (exchange, "leader", initiator, t_trigger, t_done, self.size, self.size, -1 if global_ else 0)
            )
        return t_done, reached

    @classmethod
    def stops(cls, rules) -> bool:
        return True

    def _exchange(self, global_: bool, iterations: int) -> int:
        """The pulls of one exchange, joined after this rank's first ``iterations``; returns the most iterations any
        worker joined after (the iterations per worker the model then holds, as the replay counts them)."""
        mine = np.array([np.mean(self.losses) if self.losses else np.inf, iterations])
        gathered = np.empty((self.size, 2))
        until(self.comm.Iallgather(mine, gathered).Test)  # where the early ones wait for the last (module doc)
        w, pulled, buf = self.own, self.pulled, self.buffer
        np.copyto(w, self.replica.host(self.replica.params()))
        local, best = leaders(gathered[:, 0], self.nodes)
        pulled[:] = w
        buf[:] = w
        self.node.Bcast(buf, root=int(local[self.rank]) - self.node_first)
        pulled -= self._toward(buf, self.rules.pull)
        if global_:
            buf[:] = w
            self.comm.Bcast(buf, root=best)
            pulled -= self._toward(buf, self.rules.global_pull)
        self.replica.load(pulled)
        return int(gathered[:, 1].max())

    def _toward(self, leader: np.ndarray, pull: float) -> np.ndarray:
        """pull · (w − leader), in a buffer kept across exchanges (as every vector of the model's size here: fresh
        temporaries of that size cost page faults, milliseconds an exchange)."""
        return np.multiply(np.subtract(self.own, leader, out=self.moved), pull, out=self.moved)

    def _emit(self, call: tuple, round_: int) -> None:
        n, t_start, t_post, t_done, version = call
        self.sink(
            "iterations", iteration_row(self.rank, n, t_start, t_post, t_done, round_, version, round_ >= 0, self.batch)
        )

    def rounds(self):
        rows, self.done = self.done, []
        return rows

    def close(self):
        for call in self.waiting:
            self._emit(call, -1)
        self.waiting.clear()
        if self.server is not None:
            self.server.thread.join()
        self.comm.Barrier()
        self.counter.Free()
        self.node.Free()
