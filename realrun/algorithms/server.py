"""``async-ps`` and ``easgd`` with plain MPI: a parameter server as a thread of rank 0.

The server is one thread on rank 0 with its own duplicated communicator, as the simulator models it: P workers (rank
0 computes too) and a server that takes one push at a time, in the order the pushes arrive, and answers each before
taking the next. It starts from rank 0's initial model. A push is one message of the worker's vector (float32, the
bytes the simulator charges) and its iteration (4 bytes more; rank 0 hands its own to the thread in the process,
:mod:`.service`); the reply is the
server's answer with the update's index k (the ``round`` of the push, counted from 0) in its last 8 bytes. A worker
waits for its reply and continues from it; its model is then ``model_version`` k + 1. Each rank writes the
``rounds`` rows of its own pushes (kind ``push``, ``t_trigger`` its post, ``t_done`` the reply's arrival). Real runs
have one server: ``algorithm.servers`` must be 1.

With a time budget (``duration``), a worker stops at its first reply that reaches it at or after the budget on the
run's clock (for easgd, only pushes have replies: its local steps after the budget reach the server with the push
that ends their period), as the simulator's workers do. Workers may so push different numbers of times: each tells
the server when it has stopped (an empty push, whether the budget or its last iteration ended it), and the server
ends once every worker has.

- :class:`AsyncPsExchange`: every iteration pushes its gradient; the server steps its model with it (SGD with the
  scenario's momentum and weight decay, its own momentum buffer) and replies with the new model, which the worker
  loads.
- :class:`EasgdExchange`: every iteration steps locally; every ``period``-th pushes the worker's model x, the
  server replies with d = a(x − w̃) and sets w̃ ← w̃ + d, the worker sets x ← x − d. A local step's round is its
  worker's next push (−1 after the last).

Evaluations are of the server's model, as the simulator's (worker −1): the server keeps a copy of its model after each
push that the simulator's schedule makes an evaluation point (the pushing worker's iterations being the model's, as
the replay counts them), and the evaluations are made when the run ends (:mod:`..evaluation`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from stragglerlab.analysis.errors import UserError
from stragglerlab.realrun.algorithms.base import Exchange, iteration_row
from stragglerlab.realrun.algorithms.service import Service
from stragglerlab.realrun.clock import RunClock
from stragglerlab.realrun.evaluation import STAND_IN, Unevaluated
from stragglerlab.simulator.algorithms.server import PUSH
from stragglerlab.simulator.convergence import Evaluations
from stragglerlab.simulator.replicas import sgd

#: the server's answer to a push: (the server's model, which it may change in place; the pushed vector, in a buffer
#: the next push overwrites) -> reply
Serve = Callable[[np.ndarray, np.ndarray], np.ndarray]


class ParameterServer:
    """Rank 0's thread: serves pushes one at a time, in the order they arrive, until each of the ``workers`` has
    sent its empty push (it has stopped). After each push it asks ``schedule`` (the simulator's evaluation schedule,
    given the pushing worker's iterations) whether its model is to be evaluated, and keeps a copy then
    (:attr:`points`)."""

    def __init__(self, service: Service, w0: np.ndarray, workers: int, serve: Serve, schedule: Any, clock: RunClock):
        self.service, self.w, self.workers, self.serve = service, w0.astype(np.float64), workers, serve
        self.schedule, self.clock = schedule, clock
        self.points: list[tuple[float, int, np.ndarray]] = []  # (t, iterations, model) at each evaluation point
        self.thread = threading.Thread(target=self._run, name="stragglerlab-parameter-server", daemon=True)

    def _run(self) -> None:
        d = len(self.w)
        reply = np.zeros(d + 2, dtype=np.float32)
        # every push in one buffer: a fresh float64 copy of the model's size costs page faults, and made each push
        # take 4x as long on a 4 MB model (the server's turn, which every worker queues for)
        vector = np.empty(d)
        k, stopped = 0, 0
        while stopped < self.workers:
            rank, pushed = self.service.take()
            if len(pushed) == 0:  # a worker has stopped: no reply
                stopped += 1
                continue
            np.copyto(vector, pushed[:d])
            reply[:d] = self.serve(self.w, vector)
            reply[d:].view(np.int64)[0] = k
            t, iterations = self.clock.now(), int(pushed[d]) + 1
            if self.schedule.after_round(t, iterations, STAND_IN):
                self.points.append((t, iterations, self.w.copy()))
            self.service.answer(rank, reply)
            k += 1
        self.service.close()


class ServerExchange(Exchange):
    """A worker's side: local steps and pushes by the rules' stride; subclasses say what is pushed and what the
    server and the worker do with it."""

    identical = False
    bytes_per_parameter = 40

    central = True

    def __init__(self, scenario, rules, comm, replica, clock, sink):
        super().__init__(scenario, rules, comm, replica, clock, sink)
        self.link = comm.Dup()
        self.service = Service(self.link, np.zeros(self.d + 1, dtype=np.float32))
        self.push = np.zeros(self.d + 1, dtype=np.float32)  # the pushed vector, then the worker's iteration
        self.reply = np.zeros(self.d + 2, dtype=np.float32)
        self.version = 0
        self.waiting: list[tuple] = []  # (n, t_start, t_post, t_done, version) of local steps until their push
        self.server = None
        if self.rank == 0:
            w0 = self.replica.host(self.replica.params())
            schedule = Evaluations(scenario, Unevaluated())
            self.server = ParameterServer(self.service, w0, self.size, self.serve, schedule, clock)
            self.server.thread.start()

    @classmethod
    def check(cls, scenario, replica):
        if scenario.algorithm.servers != 1:
            raise UserError(
                f"algorithm.servers = {scenario.algorithm.servers}: real runs have one server "
                "(a thread of rank 0); --set algorithm.servers=1"
            )

    @classmethod
    def stops(cls, rules):
        return True

    def serve(self, w: np.ndarray, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def pushed(self, g) -> np.ndarray:
        """What this worker pushes after computing ``g`` (and taking its local step, if any)."""
        raise NotImplementedError

    def received(self, reply: np.ndarray) -> None:
        """Apply the server's reply to this worker's model."""
        raise NotImplementedError

    def local_step(self, g) -> None:
        """The worker's own step with ``g`` before it pushes (or instead of pushing)."""

    def iteration(self, n, g, loss, t_start, t_post):
        self.local_step(g)
        if not self.rules.exchanges(n):
            self.waiting.append((n, t_start, t_post, self.clock.now(), self.version))
            return None
        self.push[: self.d] = self.pushed(g)
        self.push[self.d] = n
        self.service.ask(self.push, self.reply)
        k = int(self.reply[self.d :].view(np.int64)[0])
        self.received(self.reply[: self.d])
        t_done = self.clock.now()
        self.stopped = t_done >= self.scenario.budget  # the budget ends this worker at its first reply after it
        for step in self.waiting:
            self._emit(step, k)
        self.waiting.clear()
        self.sink("iterations", iteration_row(self.rank, n, t_start, t_post, t_done, k, self.version, True, self.batch))
        self.sink("rounds", (k, PUSH, self.rank, t_post, t_done, 1, 1, -1))
        self.version = k + 1
        return t_done, n + 1

    def _emit(self, step: tuple, round_: int) -> None:
        n, t_start, t_post, t_done, version = step
        self.sink(
            "iterations", iteration_row(self.rank, n, t_start, t_post, t_done, round_, version, round_ >= 0, self.batch)
        )

    def close(self):
        for step in self.waiting:
            self._emit(step, -1)
        self.waiting.clear()
        self.service.tell(np.zeros(0, dtype=np.float32))
        if self.server is not None:
            self.server.thread.join()
        self.comm.Barrier()
        self.link.Free()

    def central_models(self, t_end, iterations):
        assert self.server is not None, "rank 0 keeps the server"
        return [*self.server.points, (t_end, iterations, self.server.w.copy())]


class AsyncPsExchange(ServerExchange):
    """Push the gradient; load the server's new model."""

    def __init__(self, scenario, rules, comm, replica, clock, sink):
        a = scenario.algorithm
        self.lr, self.momentum, self.weight_decay = a.lr, a.momentum, a.weight_decay
        self.buf = None  # the server's momentum buffer
        super().__init__(scenario, rules, comm, replica, clock, sink)

    def serve(self, w, g):
        self.buf = sgd(w, g, self.buf, self.lr, self.momentum, self.weight_decay)
        return w

    def pushed(self, g):
        return self.replica.host(g)

    def received(self, reply):
        self.replica.load(reply)


class EasgdExchange(ServerExchange):
    """Step locally; push the model; move it by the elastic difference the server returns."""

    def serve(self, w, x):
        d = self.rules.pull * (x - w)
        w += d
        return d

    def local_step(self, g):
        self.replica.step(g)

    def pushed(self, g):
        return self.replica.host(self.replica.params())

    def received(self, reply):
        self.replica.load(self.replica.host(self.replica.params()) - reply)
