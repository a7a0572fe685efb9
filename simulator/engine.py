"""The reference event engine: each worker a simpy process, each collective round a scheduled completion.

Worker i runs iterations n = 0, 1, …: compute for its time of (seed, i, n), post call n, wait until the algorithm
releases it, apply, go on. What happens between post and release is the algorithm's *process* (its record's, see
:mod:`.algorithms`), which the engine calls with every post and which calls back :meth:`Engine.release` and
:meth:`Engine.at`.

A call released at the very instant it posts (it waits for no exchange: a local step, a post whose round is done)
returns after its software cost (``workload.call``, 0 by default) instead; a call that waited returns at its release.

Ties are part of the semantics, not an accident of event order: every post made at one instant is resolved after the
other posts of that instant, in increasing worker order; round completions come after everything else of their
instant. So a post at exactly the time a data exchange starts is in it, and the first of several simultaneous posts
is the lowest-ranked worker's. Decisions compare recorded times, never the order simpy happens to pop events in.
Only simpy's public interface is used: events are triggered with ``succeed`` and ``timeout``, and a completion waits
for the rest of its instant by stepping behind whatever else is due then (``peek``).

This engine is for reading and for exactness: each rule is written once, as the events it makes, and the fast engine
(:mod:`.fast.engine`) is tested against its tables. Its speed is not a goal (a simpy process per worker and two events
per worker-iteration); large runs take the fast engine.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol

import numpy as np
import simpy

from stragglerlab.simulator.imbalance import CallCosts, ComputeTimes

if TYPE_CHECKING:
    from stragglerlab.simulator.scenario import Scenario

_BLOCK = 256  # iterations of compute times drawn at a time


def delay_short_of(now: float, t: float) -> float:
    """The longest delay d with now + d <= t in floating point. ``t − now`` itself can overshoot: when t > 2·now it is
    inexact, and now + d can miss t either way (or skip it, rounding to even), which would break the ties the
    semantics define (two posts at one instant, one computed on each side of the error). From now + d, within ulps
    of t, the rest t − (now + d) is exact, so a second step lands on t."""
    d = t - now
    while now + d > t:
        d = math.nextafter(d, -math.inf)
    return d


class _Blocks:
    """A worker-iteration matrix (compute times, call costs) drawn a block of iterations at a time; a block is
    dropped once every worker has gone past it."""

    def __init__(self, source: ComputeTimes | CallCosts, iterations: int, position: list[int]):
        self.source, self.iterations, self.position = source, iterations, position
        self.blocks: dict[int, np.ndarray] = {}

    def __call__(self, n: int, i: int) -> float:
        b = n // _BLOCK
        block = self.blocks.get(b)
        if block is None:
            oldest = min(self.position) // _BLOCK
            for old in [k for k in self.blocks if k < oldest]:
                del self.blocks[old]
            block = self.blocks[b] = self.source.block(b * _BLOCK, min((b + 1) * _BLOCK, self.iterations))
        return float(block[n - b * _BLOCK, i])


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
        "samples",
    )

    def __init__(self, worker: int, iteration: int, t_start: float, model_version: int, samples: int):
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
        self.samples = samples  # of its batch it processed (all, unless the algorithm cut its compute short)

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
            self.samples,
        )


class Sink(Protocol):
    """Where the engine's rows go: the run-folder writer, or a list in tests."""

    def iteration(self, row: tuple) -> None: ...

    def round(self, row: tuple) -> None: ...


class Process(Protocol):
    """An algorithm's side of the reference engine (its record's ``process``). A process that cuts workers' compute
    short (preemption) also has ``cut(call, compute) -> seconds``: asked as a worker starts computing ``call``, the
    seconds it computes of its draw ``compute``; it sets ``call.samples`` where the worker processes fewer than its
    batch."""

    def post(self, call: Call) -> None:
        """Worker ``call.worker`` posted ``call`` now (posts of one instant come in worker order)."""


class Engine:
    """Runs one scenario; the algorithm's process decides triggers, contributions and releases."""

    def __init__(self, scenario: Scenario, sink: Sink, progress: Callable[[int], None] | None = None):
        self.workers = scenario.workers
        self.iterations = scenario.iterations
        self.update = scenario.workload.update  # the optimizer step between an iteration's release and the next
        self.batch = scenario.workload.batch
        self.env = simpy.Environment()
        self.sink = sink
        self.progress = progress
        self._iteration = [0] * self.workers  # the iteration each worker is on
        self.compute_time = _Blocks(ComputeTimes(scenario), self.iterations, self._iteration)
        self.call_cost = _Blocks(CallCosts(scenario), self.iterations, self._iteration)
        self.costly = scenario.workload.call is not None
        self._returning = [0.0] * self.workers  # the software cost each worker's last call returns after
        self._posted: list[Call] = []
        self._open: list[deque[Call]] = [deque() for _ in range(self.workers)]
        self.applied = [0] * self.workers  # rounds each worker has applied to its model
        self.process: Process | None = None
        self._actions: list[tuple[int, Callable[[], None]]] = []  # due now, waiting for the rest of the instant
        self._scheduled = 0  # actions scheduled so far: their order within an instant

    @property
    def now(self) -> float:
        return self.env.now

    def run(self, process: Process) -> None:
        """Run every worker to its last iteration, ``process`` taking their posts."""
        self.process = process
        for i in range(self.workers):
            self.env.process(self._worker(i))
        self.env.run()

    def _start(self, i: int, n: int, t_start: float) -> Call:
        """Worker ``i`` starts iteration ``n`` at ``t_start``."""
        self._iteration[i] = n
        call = Call(i, n, t_start, self.applied[i], self.batch)
        self._open[i].append(call)
        return call

    def _worker(self, i: int):
        env, process = self.env, self.process
        assert process is not None
        call: Call | None = self._start(i, 0, env.now)
        cut = getattr(process, "cut", None)
        while call is not None:
            if self._returning[i]:
                yield env.timeout(self._returning[i])  # its last call's software cost
            if call.t_start > env.now:
                yield env.timeout(self.update)
            compute = self.compute_time(call.iteration, i)
            if cut is not None:
                compute = cut(call, compute)
            if compute > 0:  # a post of no compute is made at once, with the instant's other posts
                yield env.timeout(compute)
            call.t_post = env.now
            call.done = env.event()
            if not self._posted and env.peek() > env.now:
                process.post(call)  # nothing else happens at this instant: no order to resolve
            else:
                if not self._posted:
                    env.timeout(0).callbacks.append(self._resolve_posts)  # after this instant's other posts
                self._posted.append(call)
            call = yield call.done  # released, with the next iteration started (None after the last)
            self._emit(i)
        for done in self._open[i]:
            done.final = True
        self._emit(i)

    def _resolve_posts(self, _: simpy.Event) -> None:
        posted, self._posted = self._posted, []
        posted.sort(key=lambda c: c.worker)
        process = self.process
        assert process is not None
        for call in posted:
            process.post(call)

    def _emit(self, i: int) -> None:
        queue = self._open[i]
        emitted = 0
        while queue and queue[0].final:
            self.sink.iteration(queue.popleft().row())
            emitted += 1
        if emitted and self.progress is not None:
            self.progress(emitted)

    def release(self, call: Call, applied: bool = True, last: bool = False) -> None:
        """Return ``call`` to its worker now (after its software cost when it posted now), which starts its next
        iteration after its update; ``applied``: it returns with a round's result to apply; ``last``: the time
        budget is spent, the worker stops here."""
        now, i = self.env.now, call.worker
        cost = self.call_cost(call.iteration, i) if self.costly and now == call.t_post else 0.0
        call.t_done = now + cost
        self._returning[i] = cost
        if applied:
            self.applied[i] += 1
        n = call.iteration + 1
        assert call.done is not None
        call.done.succeed(self._start(i, n, call.t_done + self.update) if n < self.iterations and not last else None)

    def at(self, t: float, action: Callable[[], None]) -> None:
        """Run ``action`` at instant ``t`` (not before now), after everything else of that instant (a round's
        completion comes after the posts of its instant, and after what those posts set off); actions due at one
        instant run in the order they were scheduled. The clock lands on ``t`` itself (:func:`delay_short_of`), so what
        the action releases starts from the time the algorithm computed."""
        order = self._scheduled
        self._scheduled += 1
        self.env.timeout(delay_short_of(self.env.now, t)).callbacks.append(partial(self._arrive, t, order, action))

    def _arrive(self, t: float, order: int, action: Callable[[], None], _: simpy.Event) -> None:
        """The clock is at or a few ulps short of ``t``: the exact rest, or ``action``'s instant."""
        if self.env.now < t:
            self.env.timeout(t - self.env.now).callbacks.append(partial(self._arrive, t, order, action))
        else:
            self._due(order, action)

    def _due(self, order: int, action: Callable[[], None]) -> None:
        self._actions.append((order, action))
        if len(self._actions) == 1:
            self._run_actions()

    def _run_actions(self, _: simpy.Event | None = None) -> None:
        """Run the due actions once nothing else is due at this instant; until then, step behind what is."""
        if self.env.peek() == self.env.now:
            self.env.timeout(0).callbacks.append(self._run_actions)
            return
        actions, self._actions = self._actions, []
        actions.sort(key=lambda due: due[0])  # as scheduled, however many steps each took
        for _order, action in actions:
            action()
