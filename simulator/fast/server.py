"""The fast path of the parameter-server algorithms (async-ps, easgd): the FIFO server of
:class:`~stragglerlab.simulator.algorithms.server.ServerRules` as a compiled step.

Each worker has at most one push on its way to or in the server: it computes its local steps and its exchange
iteration, pushes, and waits for the reply. The pushes are served in arrival order, ties as the reference engine
has them (:func:`step`), which is a merge of the workers' streams of arrivals. The step takes them a batch at a time:
every arrival earlier than the *horizon*, the earliest instant a push served now could make its worker's next push
arrive (its arrival + its service and reply + the update + its next compute), and the least arrival in any case.
Nothing arrives inside the batch's span but the batch, so the batch is sorted (:func:`~.order.sort_batch`) and
served in that order, then every worker of the batch computes on to its next push.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numba import njit

from stragglerlab.simulator.fast.engine import BASE, DONE, FINAL, NEED_ROWS, OUT_FULL, Kernel, returned
from stragglerlab.simulator.fast.order import sort_batch

if TYPE_CHECKING:
    from stragglerlab.simulator.algorithms.server import ServerRules

#: ``State.at``: server updates so far
UPDATES = 0


class State(NamedTuple):
    arrival: np.ndarray  # per worker: when its push reaches the server (inf: none on its way)
    wave: np.ndarray  # the push's wave at its instant
    parked: np.ndarray  # its next rows are still to compute, past the window
    next: np.ndarray  # its next iteration to compute; while a push is on its way, the one after that push
    first: np.ndarray  # its first iteration that no served push carries yet
    t_start: np.ndarray  # when it starts its next iteration
    version: np.ndarray  # server updates in its model
    released: np.ndarray  # when it was last released, and in which batch of that instant's completions
    batch_of: np.ndarray
    batch: np.ndarray  # scratch: the batch in worker order, sorted, and the sort's buckets
    sorted: np.ndarray
    buckets: np.ndarray
    at: np.ndarray  # int64: UPDATES
    free: np.ndarray  # float[1]: when the server has served every push so far
    t_push: float
    t_service: float
    stride: int
    update: float
    budget: float
    iterations: int


def kernel(rules: ServerRules) -> Kernel:
    """The fast path of ``rules``."""
    P = rules.P
    state = State(
        np.full(P, np.inf), np.zeros(P, dtype=np.int64), np.ones(P, dtype=np.bool_), np.zeros(P, dtype=np.int64),
        np.zeros(P, dtype=np.int64), np.zeros(P), np.zeros(P, dtype=np.int64), np.full(P, -np.inf),
        np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64),
        np.zeros(P + 2, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(1),
        float(rules.t_push), float(rules.t_service), int(rules.stride), float(rules.update), float(rules.budget),
        int(rules.N),
    )  # fmt: skip
    return Kernel(step, state, ("push",), rules.factors)


@njit(cache=True)
def _advance(s, rows, w):
    """Worker ``w`` computes from ``s.next[w]`` on: local steps, released at their posts, up to its next exchange
    iteration, whose push it sends; or to its last iteration. Returns False when it needs rows past the window
    (it is parked there)."""
    base = rows.at[BASE]
    n = s.next[w]
    t = s.t_start[w]
    while n < s.iterations:
        k = n - base
        if k == rows.post.shape[0]:
            s.next[w], s.t_start[w] = n, t
            return False
        rows.start[k, w] = t
        post = t + rows.compute[k, w]
        rows.post[k, w] = post
        rows.version[k, w] = s.version[w]
        n += 1
        if n % s.stride == 0:  # its exchange: the push is on its way
            s.arrival[w] = post + s.t_push * rows.factors[k, w]
            # a push at the instant of the worker's release comes after the completions that released it
            s.wave[w] = s.batch_of[w] if s.arrival[w] == s.released[w] else 0
            s.next[w] = n
            return True
        rows.done[k, w] = post + rows.calls[k, w]
        t = rows.done[k, w] + s.update
    s.next[w] = n  # its last local steps: no exchange carries them
    s.first[w] = n
    return True


@njit(cache=True)
def step(s, rows, out):
    """Serve the pushes in the reference engine's order until every worker has stopped, the round output is full,
    or a worker needs rows past the window.

    The reference engine serves the pushes that arrive at one instant in worker order, after everything else of that
    instant, in batches of completions: the pushes that arrived before the instant's first batch are served in it,
    a reply at that instant is a completion of the batch after the one that scheduled it, and a push sent at the
    instant by a worker that a batch released (it computed nothing since) arrives after that batch, so it is served
    in the next. So the order is (arrival, wave, worker), a push's wave the batch that released its worker when it
    arrives at the instant of that release (0 otherwise). A worker stops after its last iteration or at its first
    reply at or after the time budget."""
    P = s.arrival.shape[0]
    base = rows.at[BASE]
    size = rows.post.shape[0]
    written = out.written[0]
    parks = False
    for w in range(P):
        if s.parked[w]:
            s.parked[w] = not _advance(s, rows, w)
            parks |= s.parked[w]
    while not parks:
        if written + P > out.round.shape[0]:
            out.written[0] = written
            return OUT_FULL
        horizon, least = np.inf, -1
        for w in range(P):
            a = s.arrival[w]
            if a < np.inf:
                if least < 0 or a < s.arrival[least] or (a == s.arrival[least] and s.wave[w] < s.wave[least]):
                    least = w
                k = s.next[w] - base  # the row after the push's
                if s.next[w] < s.iterations:  # its next push: after this service, its reply, the update, a compute
                    f = rows.factors[k - 1, w]
                    horizon = min(
                        horizon, a + (s.t_service + s.t_push) * f + s.update + (rows.compute[k, w] if k < size else 0.0)
                    )
        if least < 0:
            break
        count = 0
        for w in range(P):
            if s.arrival[w] < horizon or w == least:
                s.batch[count] = w
                count += 1
        sort_batch(s.batch, count, s.arrival, s.wave, s.buckets, s.sorted)
        for a in range(count):  # the server, one push at a time
            w = s.sorted[a]
            k = s.next[w] - 1 - base
            f = rows.factors[k, w]
            s.free[0] = max(s.arrival[w], s.free[0]) + s.t_service * f
            reply = s.free[0] + s.t_push * f
            update = s.at[UPDATES]
            s.at[UPDATES] = update + 1
            out.round[written] = update
            out.kind[written] = 0
            out.initiator[written] = w
            out.t_trigger[written] = rows.post[k, w]
            out.t_done[written] = reply
            out.contributors[written] = 1
            out.fresh[written] = 1
            out.group[written] = -1
            written += 1
            # released by the batch after the one that served it when the reply takes no time, else by the first
            s.batch_of[w] = s.wave[w] + 2 if reply == s.arrival[w] else 1
            s.released[w] = reply
            s.version[w] = update + 1  # its model is the server's after this update
        for a in range(count):  # each worker's rows, in worker order
            w = s.batch[a]
            k = s.next[w] - 1 - base
            for j in range(s.first[w] - base, k + 1):  # its local steps and its push: carried by its update
                rows.round[j, w] = s.version[w] - 1
                rows.fresh[j, w] = True
            rows.done[k, w] = returned(rows.post[k, w], s.released[w], rows.calls[k, w])
            s.arrival[w] = np.inf
            s.first[w] = s.next[w]
            if s.next[w] < s.iterations and s.released[w] < s.budget:
                s.t_start[w] = rows.done[k, w] + s.update
                s.parked[w] = not _advance(s, rows, w)
                parks |= s.parked[w]
            else:
                rows.stop[w] = s.next[w]
                s.next[w] = s.first[w] = s.iterations  # it stopped: no row of it changes any more
    out.written[0] = written
    if parks:
        rows.at[FINAL] = s.first.min()
        return NEED_ROWS
    return DONE
