"""LSGD (Teng et al., NeurIPS'19): local steps, with pulls toward the best worker at communication events.

Workers run free. When the total number of iterations over all workers reaches a multiple of P·period (a local
exchange: each worker is pulled toward the best worker of its node) or of P·global_period (also a global one:
toward the best worker overall), every worker joins one blocking exchange after its current iteration, as the
released code's counting server does (:meth:`LsgdRules.trigger` is that rule, for the simulator and real runs
alike). The exchange starts when the last worker joins and, like every round's data exchange, costs one allreduce
of the model over all workers, which bounds what the released code sends (an allgather of running-mean losses, then
broadcasts of the leaders' models). A blocking exchange needs every worker, so none is triggered once some worker
has posted its last iteration (before the post that would trigger it, in the engine's order). With a time budget
(``duration``), the first exchange that completes at or after it is the last: every worker stops when it is
released from it, as the released code's stop answer reaches every worker at its next communication.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from numba import njit

from stragglerlab.simulator.algorithms.local_sgd import PERIOD
from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.convergence import Observer, Optimizer, matrix, row_counts
from stragglerlab.simulator.engine import Call, Engine
from stragglerlab.simulator.fast.engine import DONE, NEED_ROWS, OUT_FULL, returned
from stragglerlab.simulator.imbalance import ExchangeSpread
from stragglerlab.simulator.keys import FRACTION, POSITIVE_INT, Key
from stragglerlab.simulator.network import message_bytes

if TYPE_CHECKING:
    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.fast.engine import FastEngine
    from stragglerlab.simulator.scenario import Scenario

GLOBAL_PERIOD = Key("global_period", 64, POSITIVE_INT, "a global exchange every P·global_period iterations in all")
PULL = Key(
    "pull",
    0.1,
    FRACTION,
    "lsgd: λ, the pull toward the best worker of the node; easgd: a, the elastic pull between a worker and the server",
)
GLOBAL_PULL = Key("global_pull", 0.1, FRACTION, "λ_G: the pull toward the best worker overall, in [0, 1]")
LOSS_WINDOW = 10  # the leader is chosen on the mean of each worker's last training losses
LOCAL, GLOBAL = "local", "global"
# state of the fast kernel (int64 array): exchanges done, posts counted before the current free run, the window's
# first iteration, whether the time budget ended the run
L_ROUND, L_COUNT, L_BASE, L_OVER = range(4)
_BUCKETS = 1 << 14  # of the trigger's histogram


class LsgdRules:
    """When exchanges happen, what they cost and how hard they pull."""

    def __init__(self, scenario: Scenario, costs: CostModel):
        a = scenario.algorithm
        self.P, self.N = scenario.workers, scenario.iterations
        self.local_every, self.global_every = self.P * a.period, self.P * a.global_period
        nbytes = message_bytes(scenario)
        self.t_exchange = costs.collective("leader", nbytes, self.P)
        # exchange m takes t_exchange·factors[m]; each is triggered at a multiple of P·period or P·global_period posts
        exchanges = scenario.iterations // a.period + scenario.iterations // a.global_period + 1
        self.factors = ExchangeSpread(scenario).rounds([costs.spread("leader", nbytes, self.P)] * exchanges)
        self.pull, self.global_pull = a.pull, a.global_pull
        self.workers_per_node = scenario.cluster.workers_per_node
        self.update = scenario.workload.update  # the optimizer step after each iteration
        self.budget = scenario.budget  # the first exchange completing at or after it is the last

    def trigger(self, count: int) -> str | None:
        """The exchange that the ``count``-th post over all workers triggers: ``global`` (which also does the local
        pulls), ``local`` or None."""
        if count % self.global_every == 0:
            return GLOBAL
        return LOCAL if count % self.local_every == 0 else None


@dataclass
class _Exchange:
    initiator: int
    t_trigger: float
    kind: str


class LsgdProcess:
    """The reference engine's side: counts posts in the engine's order and runs the exchanges they trigger."""

    def __init__(self, rules: LsgdRules, engine: Engine):
        self.rules, self.engine = rules, engine
        self.count = 0
        self.ending = 0  # workers that have posted their last iteration
        self.rounds = 0
        self.exchange: _Exchange | None = None  # the exchange being joined
        self.joined: list[Call] = []
        self.open: list[list[Call]] = [[] for _ in range(rules.P)]  # each worker's steps since its last exchange

    def post(self, call: Call) -> None:
        rules = self.rules
        self.count += 1
        self.open[call.worker].append(call)
        ex = self.exchange
        kind = rules.trigger(self.count) if ex is None and self.ending == 0 else None
        if kind is not None:
            ex = self.exchange = _Exchange(call.worker, self.engine.now, kind)
        self.ending += call.iteration == rules.N - 1
        if ex is None:
            self.engine.release(call, applied=False)
            return
        self.joined.append(call)
        if len(self.joined) == rules.P:
            t_exchange = rules.t_exchange * rules.factors[self.rounds]
            t_done = self.engine.now + t_exchange
            self.engine.at(t_done, lambda: self.complete(ex, t_done))

    def complete(self, ex: _Exchange, t_done: float) -> None:
        m = self.rounds
        for calls in self.open:
            for call in calls:
                call.round, call.fresh, call.final = m, True, True
            calls.clear()
        last = t_done >= self.rules.budget
        for call in self.joined:
            self.engine.release(call, last=last)
        self.joined = []
        self.exchange = None
        self.rounds += 1
        group = -1 if ex.kind == GLOBAL else 0
        self.engine.sink.round((m, "leader", ex.initiator, ex.t_trigger, t_done, self.rules.P, self.rules.P, group))


def leaders(losses: np.ndarray, node: np.ndarray) -> tuple[np.ndarray, int]:
    """The best worker of each worker's node and the best overall: the lowest running mean of the last training
    losses, ties to the lowest rank."""
    local = np.empty(len(losses), dtype=np.int64)
    for k in np.unique(node):
        members = np.flatnonzero(node == k)
        local[members] = members[np.argmin(losses[members])]
    return local, int(np.argmin(losses))


def update(
    rules: LsgdRules,
    workload: Any,
    it: pd.DataFrame,
    rounds: pd.DataFrame,
    W: np.ndarray,
    opt: Optimizer,
    note: Observer,
) -> Iterator[int]:
    """Each worker's free-running steps up to its exchange, then the pulls
    x ← x − pull·(x − x_local_leader) − global_pull·(x − x_global_leader) (the global term only at global
    exchanges, ``group == -1``), all from the models as they were when the exchange started; a leader's own term is
    zero."""
    P = rules.P
    node = np.arange(P) // rules.workers_per_node
    target, global_ = matrix(it, "round", P, -1), rounds["group"].to_numpy() < 0
    losses = np.full((P, LOSS_WINDOW), np.nan)  # ring of each worker's last training losses
    done = np.zeros(P, dtype=np.int64)  # iterations each worker has stepped

    def steps(count: np.ndarray) -> None:
        for s in range(int(count.max(initial=0))):
            rows = np.flatnonzero(count > s)
            n = done[rows] + s
            G, loss = workload.gradient(W[rows], workload.batches(rows, n))
            losses[rows, n % LOSS_WINDOW] = loss
            opt.step(W, G, rows)
        done[:] += count

    for m in range(len(rounds)):
        steps((target == m).sum(axis=1))
        mean = np.nanmean(losses, axis=1)
        note("exchange", m, (W.copy(), mean))
        X = W.copy()
        local, best = leaders(mean, node)
        W -= rules.pull * (X - X[local])
        if global_[m]:
            W -= rules.global_pull * (X - X[best])
        yield m
    steps(row_counts(it, P) - done)


def fast_kernel(rules: LsgdRules, fast: FastEngine) -> None:
    """LSGD on the fast engine: all workers start together after an exchange and run free until the next, so each
    free run's post times are computed and the one that triggers the next exchange is selected (the trigger rule of
    :meth:`LsgdRules.trigger`, compiled): one O(P·period) pass per exchange."""
    P, N = fast.P, fast.N
    window = fast.window(fast.window_size())
    state = np.zeros(4, dtype=np.int64)
    t_start = np.zeros(P)
    iteration, unresolved = np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64)
    out = fast.round_buffers(256)
    is_global = np.zeros(256, dtype=np.bool_)

    def version(iteration_: np.ndarray, rnd: np.ndarray) -> np.ndarray:
        return np.where(rnd >= 0, rnd, state[L_ROUND])

    while True:
        state[L_BASE] = window.base
        status, written = lsgd_kernel(
            state, t_start, iteration, unresolved,
            window.times, window.calls, window.start, window.post, window.done, window.round, window.fresh,
            N, rules.local_every, rules.global_every, rules.t_exchange * rules.factors, rules.update, rules.budget,
            out["round"], out["initiator"], out["t_trigger"], out["t_done"], is_global,
        )  # fmt: skip
        out["contributors"][:written] = P
        out["fresh"][:written] = P
        group = np.where(is_global[:written], -1, 0).astype(np.int64)
        fast.emit_rounds(written, out, np.full(written, "leader", dtype=object), group)
        if state[L_OVER]:  # every worker stopped at its release from the budget's last exchange
            fast.flush(window, int(iteration.max()), version, iteration.copy())
            return
        if status == DONE:
            break
        if status == OUT_FULL:
            continue
        final = int(unresolved.min())  # rows from a worker's first unresolved iteration on may still change
        fast.flush(window, final, version)
        window.slide(final)
    fast.flush(window, N, version)


@njit(cache=True)
def lsgd_kernel(
    state,
    t_start,
    iteration,
    unresolved,
    compute,
    calls,
    r_start,
    r_post,
    r_done,
    r_round,
    r_fresh,
    iterations,
    local_every,
    global_every,
    t_exchange,
    update,
    budget,
    out_round,
    out_initiator,
    out_trigger,
    out_done,
    out_global,
):
    """Run LSGD's exchanges one free-running segment at a time, then the workers' free run to the end.

    Between two exchanges every worker starts together (``t_start``: the previous exchange's end, or 0) and runs
    free; the exchange is triggered by the post that brings the count of posts to the next multiple of
    ``local_every`` or ``global_every``, every other worker joins with its first post after that one in the engine's
    order, and the exchange starts at the last join. ``iteration[i]``: worker i's next iteration; ``unresolved[i]``:
    its first row that may still change. An exchange that completes at or after ``budget`` (the time budget;
    infinity: none) is the last: ``state[L_OVER]`` is set and ``iteration[i]`` is worker i's count of rows. Returns
    (status, rounds written).
    """
    P = t_start.shape[0]
    base = state[L_BASE]
    end = base + r_post.shape[0]
    before = np.zeros(P, dtype=np.int64)  # each worker's posts of the segment ahead of the trigger
    written = 0
    while True:
        if written == out_round.shape[0]:
            return OUT_FULL, written
        count = state[L_COUNT]
        target = min((count // local_every + 1) * local_every, (count // global_every + 1) * global_every)
        status, w = _lsgd_trigger(
            target - count,
            t_start,
            iteration,
            before,
            compute,
            calls,
            r_start,
            r_post,
            r_done,
            base,
            end,
            iterations,
            update,
        )
        if status != DONE:
            return status, written
        if w < 0:
            break
        # every worker's rows up to its join are carried by exchange m, which starts at the last join
        m = state[L_ROUND]
        start = 0.0
        for i in range(P):
            start = max(start, r_post[iteration[i] + before[i] - base, i])
        done = start + t_exchange[m]
        out_round[written] = m
        out_initiator[written] = w
        out_trigger[written] = r_post[iteration[w] + before[w] - base, w]
        out_done[written] = done
        out_global[written] = target % global_every == 0
        written += 1
        for r in range(before.max() + 1):
            for i in range(P):
                if r <= before[i]:
                    k = iteration[i] + r - base
                    r_round[k, i] = m
                    r_fresh[k, i] = True
        for i in range(P):
            k = iteration[i] + before[i] - base
            r_done[k, i] = returned(r_post[k, i], done, calls[k, i])
            t_start[i] = r_done[k, i] + update
            iteration[i] += before[i] + 1
            unresolved[i] = iteration[i]
        state[L_ROUND] = m + 1
        state[L_COUNT] = target + P - 1  # the trigger, then one join per other worker
        if done >= budget:
            state[L_OVER] = 1
            return DONE, written
    # after the last exchange the workers run free to the end, which is in the window: no exchange was found to come
    # only once some worker's last iteration was computed
    _lsgd_steps(t_start, iteration, np.full(P, iterations), base, compute, calls, r_start, r_post, r_done, update)
    return DONE, written


@njit(cache=True)
def _lsgd_trigger(
    posts, t_start, iteration, before, compute, calls, r_start, r_post, r_done, base, end, iterations, update
):
    """The worker whose post triggers the segment's exchange: the ``posts``-th post since the segment started, in
    the engine's order (time, then wave, then worker); ``before[i]``: worker i's posts ahead of it (for the
    initiator, those before the trigger). Returns (status, worker); worker -1 when no exchange comes: some worker
    posts its last iteration ahead of the trigger, or fewer posts remain.

    Each worker's posts are computed up to a horizon, about ``posts / P`` at first, doubled for the workers whose
    horizon does not reach past the trigger found so far (which then moves only earlier), until all do.
    """
    P = t_start.shape[0]
    if iteration.max() == iterations:  # a worker joined the last exchange with its last iteration
        return DONE, -1
    t = t_start.copy()  # each worker's next start (its last computed post, plus the update)
    reach = iteration.copy()  # the posts are computed up to here (exclusive)
    grow = np.minimum(iteration + posts // P + 2, iterations)
    if grow.max() > end:
        return NEED_ROWS, -1
    while True:
        _lsgd_steps(t, reach, grow, base, compute, calls, r_start, r_post, r_done, update)
        reach[:] = grow
        w = _lsgd_select(posts, iteration, reach, r_post, base, before)
        more = False
        for i in range(P):
            if i != w and reach[i] < iterations and (w < 0 or iteration[i] + before[i] == reach[i]):
                grow[i] = min(reach[i] + max(reach[i] - iteration[i], 1), iterations, end)
                if grow[i] == reach[i]:
                    return NEED_ROWS, -1
                more = True
        if not more:
            break
    if w >= 0:
        for i in range(P):
            if i != w and iteration[i] + before[i] == reach[i]:  # it posted its last iteration ahead of the trigger
                return DONE, -1
    return DONE, w


@njit(cache=True)
def _lsgd_select(posts, iteration, reach, r_post, base, before):
    """The worker of the ``posts``-th of the computed posts (rows [iteration, reach) of each worker) in (time, wave,
    worker) order, -1 when there are fewer; into ``before``, how many of each worker's come ahead of it.

    A histogram of the times over equal buckets finds the bucket that holds that post; only that bucket's posts are
    then partitioned (the bucket of a time is monotone in it, so every post of a lower bucket is earlier).
    """
    P = iteration.shape[0]
    if (reach - iteration).sum() < posts:
        return -1
    depth = (reach - iteration).max()
    lo, hi = np.inf, -np.inf  # each worker's posts are in time order
    for i in range(P):
        if reach[i] > iteration[i]:
            lo = min(lo, r_post[iteration[i] - base, i])
            hi = max(hi, r_post[reach[i] - 1 - base, i])
    scale = (_BUCKETS - 1) / (hi - lo) if hi > lo else 0.0
    if not np.isfinite(scale):  # a spread of subnormal size: one bucket
        scale = 0.0
    histogram = np.zeros(_BUCKETS, dtype=np.int64)
    current, run = 0, 0  # runs of one bucket are counted apart: ties make long ones
    for r in range(depth):
        for i in range(P):
            if iteration[i] + r < reach[i]:
                k = min(int((r_post[iteration[i] + r - base, i] - lo) * scale), _BUCKETS - 1)
                if k != current:
                    histogram[current] += run
                    current, run = k, 0
                run += 1
    histogram[current] += run
    b, rank = 0, posts  # the bucket of the trigger, and the trigger's rank among that bucket's posts
    while rank > histogram[b]:
        rank -= histogram[b]
        b += 1
    times, workers = np.empty(histogram[b]), np.empty(histogram[b], dtype=np.int64)
    j = 0
    before[:] = 0
    for r in range(depth):
        for i in range(P):
            if iteration[i] + r < reach[i]:
                t = r_post[iteration[i] + r - base, i]
                k = min(int((t - lo) * scale), _BUCKETS - 1)
                if k < b:
                    before[i] += 1
                elif k == b:
                    times[j], workers[j] = t, i
                    j += 1
    v = times.min()
    if v < times.max():  # (a bucket of one instant, as ties make, needs no partition)
        v = np.partition(times, rank - 1)[rank - 1]
    # the posts before instant v come first, then those at v in waves (a worker's q-th post at v is in wave q: it
    # computes nothing after a release at v), each wave by worker
    equal = np.zeros(P, dtype=np.int64)
    for j in range(times.shape[0]):
        if times[j] < v:
            before[workers[j]] += 1
            rank -= 1
        elif times[j] == v:
            equal[workers[j]] += 1
    q = 0
    while True:
        for w in range(P):
            if equal[w] > q:
                rank -= 1
                if rank == 0:
                    for i in range(P):
                        before[i] += min(equal[i], q + 1 if i < w else q)
                    return w
        q += 1


@njit(cache=True)
def _lsgd_steps(t, first, last, base, compute, calls, r_start, r_post, r_done, update):
    """Free steps: worker i's iterations [first[i], last[i]) from time t[i], each released at its post (returning
    after its call cost); t[i] ends as the next start (the last return plus the update). Row by row across the
    workers, for locality."""
    for r in range((last - first).max()):
        for i in range(t.shape[0]):
            if first[i] + r < last[i]:
                k = first[i] + r - base
                x = t[i]
                r_start[k, i] = x
                x += compute[k, i]
                r_post[k, i] = x
                x += calls[k, i]
                r_done[k, i] = x
                t[i] = x + update


RECORD = Algorithm(
    name="lsgd",
    summary="LSGD: workers run free; every P·period iterations in all they pull toward the best worker",
    keys=(PERIOD, GLOBAL_PERIOD, PULL, GLOBAL_PULL),
    rules=LsgdRules,
    process=LsgdProcess,
    kernel=fast_kernel,
    update=update,
    exchanges={"native": "stragglerlab.realrun.algorithms.lsgd:LsgdExchange"},
    style=Style("#CC79A7", "v"),
    own_step=True,
)
