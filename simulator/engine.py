"""The reference event engine: each worker a simpy process, each collective round a scheduled completion.

Worker i runs iterations n = 0, 1, …: compute for its time of (seed, i, n), post call n, wait until the algorithm
releases it, apply, go on. What happens between post and release is the algorithm's (:mod:`.algorithms`).

Ties are part of the semantics, not an accident of event order: every post made at one instant is resolved after all
other events of that instant, in increasing worker order; round completions come after the posts of their instant.
So a post at exactly the time a data exchange starts is in it, and the first of several simultaneous posts is the
lowest-ranked worker's. Decisions compare recorded times, never the order simpy happens to pop events in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import simpy
from simpy.events import NORMAL

from stragglerlab.simulator.imbalance import ComputeTimes
from stragglerlab.simulator.scenario import Scenario

POSTS = NORMAL + 1  # resolved after every ordinary event of the instant
COMPLETIONS = NORMAL + 2  # after the posts of the instant
_BLOCK = 256  # iterations of compute times drawn at a time


class Call:
    """One worker-iteration: its times, the round that carried its contribution and the model it computed on.

    A call is emitted once ``final``: the algorithm may revise ``round`` until then (a WAGMA deposit overwritten
    by the next one, an LSGD local step whose exchange is still to come). ``round`` -1: carried by no round.
    """

    __slots__ = (
        "worker",
        "iteration",
        "t_start",
        "t_post",
        "t_done",
        "round",
        "model_version",
        "fresh",
        "final",
        "done",
    )

    def __init__(self, worker: int, iteration: int, t_start: float, model_version: int):
        self.worker = worker
        self.iteration = iteration
        self.t_start = t_start
        self.t_post = t_start
        self.t_done = t_start
        self.model_version = model_version
        self.round = -1
        self.fresh = False
        self.final = False
        self.done: simpy.Event | None = None

    def row(self) -> tuple:
        """What the ``iterations`` table records of this call (:data:`~stragglerlab.analysis.runfolder.RECORDED`)."""
        return (
            self.worker,
            self.iteration,
            self.t_start,
            self.t_post,
            self.t_done,
            self.round,
            self.model_version,
            self.fresh,
        )


class Sink:
    """Where the engine's rows go: the run-folder writer, or a list in tests."""

    def iteration(self, row: tuple) -> None: ...

    def round(self, row: tuple) -> None: ...


class Engine:
    """Runs one scenario; the algorithm object decides triggers, contributions and releases."""

    def __init__(self, scenario: Scenario, sink: Sink, progress: Callable[[int], None] | None = None):
        from stragglerlab.simulator.algorithms import make

        self.scenario = scenario
        self.workers = scenario.workers
        self.iterations = scenario.iterations
        self.env = simpy.Environment()
        self.sink = sink
        self.progress = progress
        self.compute = ComputeTimes(scenario)
        self._blocks: dict[int, np.ndarray] = {}  # compute times by block of _BLOCK iterations
        self._iteration = [0] * self.workers  # the iteration each worker is on
        self._posted: list[Call] = []
        self._open: list[deque[Call]] = [deque() for _ in range(self.workers)]
        self.applied = [0] * self.workers  # rounds each worker has applied to its model
        self.algorithm = make(scenario, self)

    @property
    def now(self) -> float:
        return self.env.now

    def run(self) -> None:
        for i in range(self.workers):
            self.env.process(self._worker(i))
        self.env.run()

    def compute_time(self, n: int, i: int) -> float:
        """Worker ``i``'s compute time at iteration ``n``, drawn a block of iterations at a time; a block is
        dropped once every worker has gone past it."""
        b = n // _BLOCK
        block = self._blocks.get(b)
        if block is None:
            oldest = min(self._iteration) // _BLOCK
            for old in [k for k in self._blocks if k < oldest]:
                del self._blocks[old]
            block = self._blocks[b] = self.compute.block(b * _BLOCK, min((b + 1) * _BLOCK, self.iterations))
        return float(block[n - b * _BLOCK, i])

    def _start(self, i: int, n: int) -> Call:
        """Worker ``i`` starts iteration ``n`` now."""
        self._iteration[i] = n
        call = Call(i, n, self.env.now, self.applied[i])
        self._open[i].append(call)
        return call

    def _worker(self, i: int):
        env = self.env
        call = self._start(i, 0)
        yield env.timeout(self.compute_time(0, i))
        while call is not None:
            call.t_post = env.now
            call.done = env.event()
            if not self._posted and env.peek() > env.now:
                self.algorithm.post(call)  # nothing else happens at this instant: no order to resolve
            else:
                if not self._posted:
                    self.at(0.0, POSTS, self._resolve_posts)
                self._posted.append(call)
            call = yield call.done  # released, and done computing the next iteration (None after the last)
            self._emit(i)
        for done in self._open[i]:
            done.final = True
        self._emit(i)

    def _resolve_posts(self) -> None:
        posted, self._posted = self._posted, []
        posted.sort(key=lambda c: c.worker)
        for call in posted:
            self.algorithm.post(call)

    def _emit(self, i: int) -> None:
        queue = self._open[i]
        emitted = 0
        while queue and queue[0].final:
            self.sink.iteration(queue.popleft().row())
            emitted += 1
        if emitted and self.progress is not None:
            self.progress(emitted)

    def release(self, call: Call, applied: bool = True) -> None:
        """Return ``call`` to its worker now; ``applied``: it returns with a round's result to apply.

        The worker starts its next iteration at once, so one event wakes it when that iteration's compute ends
        (rather than one now and one then)."""
        call.t_done = self.env.now
        i = call.worker
        if applied:
            self.applied[i] += 1
        n = call.iteration + 1
        following = self._start(i, n) if n < self.iterations else None
        done = call.done
        done._ok, done._value = True, following
        self.env.schedule(done, NORMAL, self.compute_time(n, i) if following is not None else 0.0)

    def at(self, delay: float, priority: int, action: Callable[[], None]) -> None:
        """Run ``action`` after ``delay`` seconds, ordered among the instant's events by ``priority``."""
        event = simpy.Event(self.env)
        event._ok = True
        event._value = None
        event.callbacks.append(lambda _: action())
        self.env.schedule(event, priority, delay)
