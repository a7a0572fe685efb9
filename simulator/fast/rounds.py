"""The fast path of round-per-call algorithms (sync, eager-SGD, quorum, WAGMA, local SGD): the rules of
:class:`~stragglerlab.simulator.algorithms.rounds.RoundRules` as a compiled step.

Rounds are strictly sequential, so every worker's post of call m is known once round m − 1 is done: a round is one
O(P) sweep (trigger, exchange start, fresh or late, release, late contributions taken) instead of events.

A worker's late contributions not yet taken by an exchange are always its latest calls: a fresh post of call m is in
round m, whose exchange starts after every earlier post of that worker, so it takes all of them; and an exchange takes
a worker's late contributions in the order they were posted. So each worker's pending contributions are a range of
calls (its first, and how many), whose post times are in the window's rows, which the window keeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numba import njit

from stragglerlab.simulator.algorithms.rounds import ACCUMULATE, DEPOSIT, DROP
from stragglerlab.simulator.algorithms.sync import bucketed_end as _bucketed_end
from stragglerlab.simulator.fast.engine import BASE, DONE, FINAL, NEED_ROWS, OUT_FULL, Kernel, returned
from stragglerlab.simulator.fast.order import kth_smallest

if TYPE_CHECKING:
    from stragglerlab.simulator.algorithms.rounds import RoundRules

#: the late rules as the step knows them
LATE = {ACCUMULATE: 0, DROP: 1, DEPOSIT: 2}
_ACCUMULATE, _DROP, _DEPOSIT = LATE.values()
#: ``State.at``: the next round, whether the time budget ended the run (its last round was the one before the next)
ROUND, OVER = 0, 1
#: a post's wave: its phase (after how many completions of its instant) in the bits from here, its place in a chain
#: of posts below (:func:`wave_of`)
PHASE = 32

bucketed_end = njit(cache=True)(_bucketed_end)


class State(NamedTuple):
    """What the step reads and keeps: per round, per worker, and the rules' parameters."""

    synchronous: np.ndarray  # per round
    t_exchange: np.ndarray
    initiator: np.ndarray  # the only worker whose post triggers it; -1: the quorum-th poster
    quorum: np.ndarray
    kind: np.ndarray  # 0: the synchronous kind, 1: the other
    group: np.ndarray
    ends_budget: np.ndarray
    t_bucket: np.ndarray  # a synchronous round's bucket allreduce
    t_start: np.ndarray  # per worker: when it starts its next iteration
    first_post: np.ndarray  # its first post (deposits count as contributions from then on)
    wave_at: np.ndarray  # the instant of its last release after which its next post computes nothing ...
    wave_then: np.ndarray  # ... and that post's wave (:func:`wave_of`)
    pending: np.ndarray  # its first call whose late contribution no exchange has taken
    pending_count: np.ndarray  # how many such calls
    scratch: np.ndarray  # P floats for the trigger's selection
    at: np.ndarray  # int64: ROUND, OVER
    last_done: np.ndarray  # the completion of the last round processed
    t_act: float
    stride: int
    late: int
    update: float
    buckets: int
    backward: float
    budget: float
    iterations: int


def kernel(rules: RoundRules) -> Kernel:
    """The fast path of ``rules``."""
    P, total = rules.P, rules.total
    rounds = range(total)
    synchronous = np.array([rules.synchronous(m) for m in rounds], dtype=np.bool_)
    state = State(
        synchronous=synchronous,
        t_exchange=np.array([rules.exchange_time(m) for m in rounds], dtype=np.float64),
        initiator=np.array([-1 if synchronous[m] else rules.fixed_initiator(m) for m in rounds], dtype=np.int64),
        quorum=np.array([rules.quorum(m) for m in rounds], dtype=np.int64),
        kind=np.array([rules.kind(m) != rules.sync_kind for m in rounds], dtype=np.int64),
        group=np.array([rules.group(m) for m in rounds], dtype=np.int64),
        ends_budget=np.array([rules.ends_budget(m) for m in rounds], dtype=np.bool_),
        t_bucket=rules.t_bucket * rules.factors,
        t_start=np.zeros(P),
        first_post=np.full(P, np.inf),
        wave_at=np.full(P, -np.inf),
        wave_then=np.zeros(P, dtype=np.int64),
        pending=np.zeros(P, dtype=np.int64),
        pending_count=np.zeros(P, dtype=np.int64),
        scratch=np.zeros(P),
        at=np.zeros(2, dtype=np.int64),
        last_done=np.full(1, -np.inf),
        t_act=float(rules.t_act),
        stride=int(rules.stride),
        late=LATE[rules.late],
        update=float(rules.update),
        buckets=int(rules.buckets),
        backward=float(rules.backward),
        budget=float(rules.budget),
        iterations=int(rules.N),
    )
    return Kernel(step, state, (rules.sync_kind, rules.async_kind), window=2 * rules.stride)


@njit(cache=True)
def step(s, rows, out):
    """Process rounds from ``s.at[ROUND]`` until all are done (then the local steps after the last one), the window
    or the round output is full. A round m triggered at or after the time budget is the last if
    ``s.ends_budget[m]``: every worker then stops at its first release after it, or at its call of that round."""
    P = s.t_start.shape[0]
    total = s.synchronous.shape[0]
    base = rows.at[BASE]
    size = rows.post.shape[0]
    stride = s.stride
    written = out.written[0]
    while s.at[ROUND] < total:
        m = s.at[ROUND]
        if written == out.round.shape[0]:
            out.written[0] = written
            return OUT_FULL
        if (m + 1) * stride - base > size:
            out.written[0] = written
            rows.at[FINAL] = _final(s, rows, m * stride)
            return NEED_ROWS
        _round(s, rows, out, m, written)
        written += 1
        s.at[ROUND] = m + 1
        if out.t_trigger[written - 1] >= s.budget and s.ends_budget[m]:  # the time budget's last round
            s.at[OVER] = 1
            out.written[0] = written
            calls = (m + 1) * stride
            for i in range(P):  # a worker stops at its first release after the last round, or at its call of it
                rows.stop[i] = min(base + _released_by(rows, i, calls - base, s.last_done[0]) + 1, calls)
            return DONE
    out.written[0] = written
    first = total * stride
    if first < s.iterations:  # local steps after the last round (local SGD's incomplete last period)
        if s.iterations - base > size:
            rows.at[FINAL] = first
            return NEED_ROWS
        _local_steps(s, rows, first, s.iterations, -1, total)
    return DONE


@njit(cache=True)
def _final(s, rows, final):
    """The end of the window's final rows: those before ``final`` (the round in progress), before every pending
    contribution, and, with a time budget, released by the last round's completion (a later one may be its
    worker's last)."""
    base = rows.at[BASE]
    for i in range(s.t_start.shape[0]):
        if s.pending_count[i] > 0:
            final = min(final, (s.pending[i] + 1) * s.stride - 1)
    if s.budget < np.inf:
        for i in range(s.t_start.shape[0]):
            final = min(final, base + _released_by(rows, i, final - base, s.last_done[0]))
    return final


@njit(cache=True)
def _released_by(rows, i, count, t):
    """How many of worker i's first ``count`` rows of the window were released no later than ``t`` (a call that
    returned after its software cost was released at its post)."""
    for k in range(count):
        post, done = rows.post[k, i], rows.done[k, i]
        released = post if done == post + rows.calls[k, i] else done
        if released > t:
            return k
    return count


@njit(cache=True)
def _round(s, rows, out, m, written):
    """Round ``m``: the local steps before its call, every post, the trigger, the exchange, and every worker's
    release and contributions; its round row at ``written``."""
    # the arrays as locals: read through the tuples, every access in a loop would load them again
    t_start, first_post, pending, pending_count = s.t_start, s.first_post, s.pending, s.pending_count
    wave_at, wave_then = s.wave_at, s.wave_then
    compute, calls, start, post, done_, round_, version, fresh_ = (
        rows.compute,
        rows.calls,
        rows.start,
        rows.post,
        rows.done,
        rows.round,
        rows.version,
        rows.fresh,
    )
    P = t_start.shape[0]
    base = rows.at[BASE]
    stride, late, update = s.stride, s.late, s.update
    call = m * stride + stride - 1
    k = call - base
    sync = s.synchronous[m]
    _local_steps(s, rows, m * stride, call, m, m)
    for i in range(P):
        t = t_start[i] + compute[k, i]
        start[k, i] = t_start[i]
        post[k, i] = t
    version[k] = m
    if m == 0:
        first_post[:] = post[k]
    posts = post[k]
    # the trigger: the fixed initiator's post, else the quorum-th post (the last of all for a synchronous round)
    initiator = s.initiator[m] if s.initiator[m] >= 0 else kth_post(posts, s.quorum[m], s.scratch, wave_at, wave_then)
    t_trigger = posts[initiator]
    x = t_trigger if sync else t_trigger + s.t_act
    if sync and s.buckets > 1:
        done = bucketed_end(start[k], posts, s.buckets, s.backward, s.t_bucket[m])
    else:
        done = x + s.t_exchange[m]
    # the wave of a post at the completion's instant by a worker it released: the phase after the completion's
    after = ((wave_of(wave_at, wave_then, initiator, t_trigger) >> PHASE) + 1 if done == t_trigger else 1) << PHASE
    ties = _may_tie(compute, k, update)
    contributors = 0
    fresh_count = 0
    for i in range(P):
        fresh = posts[i] <= x
        # late contributions of earlier calls that this exchange takes (posted no later than its start)
        taken = 0
        while taken < pending_count[i] and post[(pending[i] + taken) * stride + stride - 1 - base, i] <= x:
            taken += 1
        for j in range(taken):
            kj = (pending[i] + j) * stride + stride - 1 - base
            if late == _DEPOSIT and (fresh or j < taken - 1):
                round_[kj, i] = -1  # overwritten by a later deposit before any exchange read it
            else:
                round_[kj, i] = m
        pending[i] += taken
        pending_count[i] -= taken
        if fresh:
            fresh_count += 1
            round_[k, i] = m
            fresh_[k, i] = True
            released = returned(posts[i], done, calls, k, i)
        else:
            round_[k, i] = -1
            fresh_[k, i] = False
            released = returned(posts[i], max(posts[i], done), calls, k, i)
            if late != _DROP:
                if pending_count[i] == 0:
                    pending[i] = m
                pending_count[i] += 1
        done_[k, i] = released
        t_start[i] = released + update
        if ties and _computes_nothing(compute, k, i):  # its next post may tie with this release
            held = fresh or done >= posts[i]  # released by the round's end, else at once at its own post
            own = wave_of(wave_at, wave_then, i, posts[i]) + 1 if released == posts[i] else 0
            _released(wave_at, wave_then, i, released, (after if released == done else 0) if held else own)
        if late == _DEPOSIT:
            contributors += first_post[i] <= x
        elif fresh or taken > 0:
            contributors += 1
    out.round[written] = m
    out.kind[written] = s.kind[m]
    out.initiator[written] = initiator
    out.t_trigger[written] = t_trigger
    out.t_done[written] = done
    out.contributors[written] = contributors
    out.fresh[written] = fresh_count
    out.group[written] = s.group[m]
    s.last_done[0] = done


@njit(cache=True)
def kth_post(posts, q, scratch, wave_at, wave_then):
    """The worker whose post is the ``q``-th (from 1) in the order of time, ties by wave (:func:`wave_of`) then in
    worker order: a linear scan for the first and the last, else one selection (:func:`~.order.kth_smallest`)."""
    P = posts.shape[0]
    best = 0
    # the first and the last written out: one loop over a shared (time, wave) comparison halved sync's speed
    if q == 1:
        for i in range(1, P):
            if posts[i] < posts[best] or (
                posts[i] == posts[best]
                and wave_of(wave_at, wave_then, i, posts[i]) < wave_of(wave_at, wave_then, best, posts[best])
            ):
                best = i
        return best
    if q == P:
        for i in range(1, P):
            if posts[i] > posts[best] or (
                posts[i] == posts[best]
                and wave_of(wave_at, wave_then, i, posts[i]) >= wave_of(wave_at, wave_then, best, posts[best])
            ):
                best = i
        return best
    at = kth_smallest(posts, q, scratch)
    below, equal = 0, 0  # one pass: posts before instant ``at``, and the workers posting at it
    for i in range(P):
        below += posts[i] < at  # no branch: at the median it would be mispredicted half the time
        if posts[i] == at:
            equal += 1
            best = i if equal == 1 else best
    if equal == 1:
        return best
    need, level = q - below, -1  # the need-th, in (wave, worker) order, of those posting at ``at``: wave by wave
    while True:
        level = min(
            [
                wave_of(wave_at, wave_then, i, at)
                for i in range(P)
                if posts[i] == at and wave_of(wave_at, wave_then, i, at) > level
            ]
        )
        for i in range(P):
            if posts[i] == at and wave_of(wave_at, wave_then, i, at) == level:
                need -= 1
                if need == 0:
                    return i


@njit(cache=True, inline="always")
def wave_of(wave_at, wave_then, i, t):
    """The wave of worker i's post at ``t``, which orders it among the posts of that instant (ties in time: by wave,
    then by worker). A post that computed nothing after a release at its instant is later than the posts before it:
    a worker released at once at its own post (a local step, a post after its round's end) posts one wave later, and
    the workers a round's completion releases post after every chain of waves of the instant, in the phase after the
    completion's (the high bits, :data:`PHASE`): phase 1, or one more than the trigger's when the round took no time.
    Any other post is in wave 0. Only the releases after which a worker's next post computes nothing are kept (no
    other post can tie with its release)."""
    return wave_then[i] * (t == wave_at[i])


@njit(cache=True, inline="always")
def _may_tie(compute, k, update):
    """Whether some worker's post after window row ``k`` may tie with its release (:func:`wave_of`): only where
    there is no update and some worker computes nothing in the next row (or the next row is past the window)."""
    return update == 0.0 and (k + 1 == compute.shape[0] or compute[k + 1].min() == 0.0)


@njit(cache=True, inline="always")
def _computes_nothing(compute, k, i):
    """Whether worker i computes nothing in window row ``k + 1`` (or that row is past the window)."""
    return k + 1 == compute.shape[0] or compute[k + 1, i] == 0.0


@njit(cache=True, inline="always")
def _released(wave_at, wave_then, i, t, then):
    """Worker i returns at ``t`` and computes nothing before its next post, which is in wave ``then``."""
    wave_at[i] = t
    wave_then[i] = then


@njit(cache=True)
def _local_steps(s, rows, first, last, carried_by, version_):
    """Every worker's iterations [first, last) as local steps from ``s.t_start[i]``, released at once (returning
    after their call costs), carried by round ``carried_by`` (-1: none) on model ``version_``; ``s.t_start[i]`` ends
    as the start of the next one (the last one's end plus the update). Row by row across the workers: a worker's
    column of rows is far apart in memory."""
    t_start, wave_at, wave_then = s.t_start, s.wave_at, s.wave_then
    compute, calls, start, post, done, round_, version, fresh_ = (
        rows.compute,
        rows.calls,
        rows.start,
        rows.post,
        rows.done,
        rows.round,
        rows.version,
        rows.fresh,
    )
    fresh = carried_by >= 0
    base = rows.at[BASE]
    update = s.update
    for n in range(first, last):
        k = n - base
        ties = _may_tie(compute, k, update)
        for i in range(t_start.shape[0]):
            t = t_start[i]
            start[k, i] = t
            t = t + compute[k, i]
            post[k, i] = t
            released = t + calls[k, i]
            if ties and _computes_nothing(compute, k, i):
                _released(
                    wave_at, wave_then, i, released, wave_of(wave_at, wave_then, i, t) + 1 if released == t else 0
                )
            done[k, i] = released
            t_start[i] = released + update
        round_[k] = carried_by
        fresh_[k] = fresh
        version[k] = version_
