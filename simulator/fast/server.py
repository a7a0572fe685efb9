"""The fast path of the parameter-server algorithms (async-ps, easgd): the FIFO server of
:class:`~stragglerlab.simulator.algorithms.server.ServerRules` as a compiled step.

Each worker has at most one push on its way to or in the server: it computes its local steps and its exchange
iteration, pushes, and waits for the reply. The pushes wait in a calendar queue (:mod:`.calendar`) in the order the
reference engine serves them (:func:`step`), and the step serves them a batch at a time: it takes the first push while
it is earlier than the *horizon*, the earliest instant a push taken so far in the batch could make its worker's next
push arrive (the server's free instant if the push arrived before it, else its arrival + its service and reply + the
update + its next compute, added as the server and the worker add them, so rounding keeps the horizon at or below that
push). Nothing arrives inside the batch's span but the batch, so the server's order is the queue's; then every worker
of the batch, in worker order (where the window's rows are read and written one after the other), computes on to its
next push, which joins the queue. A service so costs O(1), never a sweep over the workers, whatever the batch's length.

A worker whose next rows are past the window is *parked*: its next push is no earlier than its next start, so the
step serves on while the first push is earlier than every parked worker's start, and stops for rows only then.

A service writes its worker's return, round and freshness; the starts, posts and model versions follow from them and
are written by a sweep in row order once the rows are final (:func:`_written`): written with each push, in the order of
pushes, each was a cache miss of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numba import njit

from stragglerlab.simulator.fast import engine
from stragglerlab.simulator.fast.calendar import Queue, add, queue, take
from stragglerlab.simulator.fast.engine import BASE, DONE, FINAL, NEED_ROWS, OUT_FULL, Kernel, returned
from stragglerlab.simulator.fast.order import by_worker, next_compute

if TYPE_CHECKING:
    from stragglerlab.simulator.algorithms.server import ServerRules

#: ``State.at``: server updates so far
UPDATES = 0


class State(NamedTuple):
    arrival: np.ndarray  # per worker: when its push reaches the server
    posted: np.ndarray  # when it posted that push
    ahead: np.ndarray  # the compute time of its next row, read with its push (-1: not read)
    wave: np.ndarray  # the push's wave at its instant
    bound: np.ndarray  # the earliest its next push can arrive if the server is free at this one's arrival
    parked: np.ndarray  # its next rows are still to compute, past the window
    next: np.ndarray  # its next iteration to compute; while a push is on its way, the one after that push
    first: np.ndarray  # its first iteration that no served push carries yet
    t_start: np.ndarray  # when it starts its next iteration
    first_start: np.ndarray  # the start and model version of its first row whose start, post and version are still
    first_version: np.ndarray  # to write (:func:`_written`)
    version: np.ndarray  # server updates in its model
    released: np.ndarray  # when it was last released, and in which batch of that instant's completions
    batch_of: np.ndarray
    queue: Queue  # the pushes on their way, in the server's order
    batch: np.ndarray  # scratch: the batch, the workers that pushed, and marks (all False between batches)
    pushed: np.ndarray
    mark: np.ndarray
    at: np.ndarray  # int64: UPDATES
    free: np.ndarray  # float[1]: when the server has served every push so far
    t_push: float  # a push's way to the server
    t_service: float  # its service there
    t_reply: float  # the reply's way back
    spread: bool  # whether pushes vary by the window's factors (else every factor is 1)
    stride: int
    update: float
    budget: float
    iterations: int


def kernel(rules: ServerRules) -> Kernel:
    """The fast path of ``rules``."""
    P = rules.P
    state = State(
        np.full(P, np.inf), np.zeros(P), np.full(P, -1.0), np.zeros(P, dtype=np.int64), np.full(P, np.inf),
        np.ones(P, dtype=np.bool_), np.zeros(P, dtype=np.int64),
        np.zeros(P, dtype=np.int64), np.zeros(P), np.zeros(P), np.zeros(P, dtype=np.int64),
        np.zeros(P, dtype=np.int64), np.full(P, -np.inf),
        np.zeros(P, dtype=np.int64), queue(P), np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64),
        np.zeros(P, dtype=np.bool_), np.zeros(1, dtype=np.int64), np.zeros(1),
        float(rules.t_push), float(rules.t_service), float(rules.t_reply), not rules.variation.exact, int(rules.stride),
        float(rules.update), float(rules.budget), int(rules.N),
    )  # fmt: skip
    return Kernel(step, state, ("push",), None if rules.variation.exact else rules.factors)


@njit(cache=True)
def _advance(s, rows, workers, count, served, hold):
    """Each of ``workers[:count]`` computes from its next iteration on: local steps, released at their posts, up to its
    next exchange iteration, whose push it sends into the queue; or to its last iteration. ``served``: the workers'
    pushes were just served, and each first takes its reply (its rows are carried, it is released or stops there). A
    worker that needs rows past the window is parked there. Returns ``hold`` lowered to the parked workers' starts
    (the earliest their next pushes can be); ``workers`` is scratch."""
    # the arrays as locals: read through the tuples, every access in a loop would load them again
    next_, t_start, parked, version, arrival, posted, ahead, wave, bound, batch_of, released, first_, pushed = (
        s.next, s.t_start, s.parked, s.version, s.arrival, s.posted, s.ahead, s.wave, s.bound, s.batch_of, s.released,
        s.first, s.pushed,
    )  # fmt: skip
    head, link, run, span, at = s.queue
    compute, calls, factors, done, round_, fresh = (
        rows.compute, rows.calls, rows.factors, rows.done, rows.round, rows.fresh
    )  # fmt: skip
    iterations, stride, t_push, t_service, t_reply, update, spread, budget = (
        s.iterations, s.stride, s.t_push, s.t_service, s.t_reply, s.update, s.spread, s.budget
    )  # fmt: skip
    base = rows.at[BASE]
    size = done.shape[0]
    sent = 0
    while count:  # one row of every worker still stepping at a time, for locality; workers[:count] are those
        going = 0
        for a in range(count):
            w = workers[a]
            n = next_[w]
            if served:  # its reply: the rows since its last one are carried by its update, it returns
                k = n - 1 - base
                for j in range(first_[w] - base, k + 1):
                    round_[j, w] = version[w] - 1
                    fresh[j, w] = True
                done[k, w] = returned(posted[w], released[w], calls, k, w)
                first_[w] = n
                if n == iterations or released[w] >= budget:
                    rows.stop[w] = n
                    next_[w] = first_[w] = iterations  # it stopped: no row of it changes any more
                    continue
                t_start[w] = done[k, w] + update
            parked[w] = False
            if n == iterations:  # its last local steps: no exchange carries them
                first_[w] = n
                continue
            k = n - base
            if k == size:
                parked[w] = True
                hold = min(hold, t_start[w])
                continue
            c = compute[k, w] if ahead[w] < 0.0 else ahead[w]
            ahead[w] = -1.0
            p = t_start[w] + c
            next_[w] = n = n + 1
            if n % stride == 0:  # its exchange: the push is on its way
                f = factors[k, w] if spread else 1.0
                arrival[w] = a_w = p + t_push * f
                posted[w] = p
                # a push at the instant of the worker's release comes after the completions that released it
                wave[w] = batch_of[w] if a_w == released[w] else 0
                # its next push: after this one's service, its reply, the update and a compute (added as the server
                # adds them, so rounding keeps the bound at or below the reply)
                c = next_compute(compute, k, w)
                bound[w] = a_w + t_service * f + t_reply * f + update + c
                if n == iterations:
                    bound[w] = np.inf
                elif k + 1 < size:  # read now, beside this row's: its own read would be a miss of its own
                    ahead[w] = c
                pushed[sent] = w
                sent += 1
                continue
            done[k, w] = p + calls[k, w]
            t_start[w] = done[k, w] + update
            workers[going] = w
            going += 1
        count = going
        served = False
    add(head, link, run, span, at, arrival, pushed, sent)
    return hold


@njit(cache=True)
def _written(s, rows, last):
    """The rows before iteration ``last`` are final: write their starts and posts (:func:`.engine.starts_and_posts`) and
    their model versions, which the steps leave to this sweep: a worker's model is the server's of its last reply
    before the row (one more than that push's round), and 0 before its first."""
    engine.starts_and_posts(rows, s.first_start, s.update, last)
    version_, round_, first_version, stride = rows.version, rows.round, s.first_version, s.stride
    base = rows.at[BASE]
    for k in range(last - base):
        pushed = (base + k + 1) % stride == 0
        for w in range(first_version.shape[0]):
            version_[k, w] = first_version[w]
            if pushed:
                first_version[w] = round_[k, w] + 1


@njit(cache=True)
def step(s, rows, out):
    """Serve the pushes in the reference engine's order until every worker has stopped, the round output is full,
    or the first push waits for a parked worker.

    The reference engine serves the pushes that arrive at one instant in worker order, after everything else of that
    instant, in batches of completions: the pushes that arrived before the instant's first batch are served in it,
    a reply at that instant is a completion of the batch after the one that scheduled it, and a push sent at the
    instant by a worker that a batch released (it computed nothing since) arrives after that batch, so it is served
    in the next. So the order is (arrival, wave, worker), a push's wave the batch that released its worker when it
    arrives at the instant of that release (0 otherwise). A worker stops after its last iteration or at its first
    reply at or after the time budget."""
    # the arrays as locals: read through the tuples, every access in a loop would load them again
    arrival, wave, bound, parked, next_, version, released, batch_of, batch = (
        s.arrival, s.wave, s.bound, s.parked, s.next, s.version, s.released, s.batch_of, s.batch
    )  # fmt: skip
    head, link, run, span, at = s.queue
    factors, posted = rows.factors, s.posted
    o_round, o_kind, o_initiator, o_trigger, o_done, o_contributors, o_fresh, o_group = out[:8]
    t_service, t_reply, spread = s.t_service, s.t_reply, s.spread
    P = arrival.shape[0]
    base = rows.at[BASE]
    written = out.written[0]
    count = 0
    for w in range(P):
        if parked[w]:
            batch[count] = w
            count += 1
    hold = _advance(s, rows, batch, count, False, np.inf)  # the parked workers' starts: no push after them is served
    while True:
        if written + P > o_round.shape[0]:
            out.written[0] = written
            return OUT_FULL
        free = s.free[0]
        count = take(head, link, run, span, at, arrival, wave, bound, free, hold, batch)
        if count == 0:
            break
        updates = s.at[UPDATES]
        for a in range(count):  # the server, one push at a time
            w = batch[a]
            k = next_[w] - 1 - base
            f = factors[k, w] if spread else 1.0
            free = max(arrival[w], free) + t_service * f
            reply = free + t_reply * f
            o_round[written] = updates
            o_initiator[written] = w
            o_trigger[written] = posted[w]
            o_done[written] = reply
            written += 1
            # released by the batch after the one that served it when the reply takes no time, else by the first
            batch_of[w] = wave[w] + 2 if reply == arrival[w] else 1
            released[w] = reply
            updates += 1
            version[w] = updates  # its model is the server's after this update
        o_kind[written - count : written] = 0
        o_contributors[written - count : written] = 1
        o_fresh[written - count : written] = 1
        o_group[written - count : written] = -1
        s.free[0] = free
        s.at[UPDATES] = updates
        by_worker(batch, count, s.mark)
        hold = _advance(s, rows, batch, count, True, hold)
    out.written[0] = written
    if hold < np.inf:
        rows.at[FINAL] = s.first.min()
        _written(s, rows, rows.at[FINAL])
        return NEED_ROWS
    _written(s, rows, min(rows.stop.max(), base + rows.done.shape[0]))
    return DONE
