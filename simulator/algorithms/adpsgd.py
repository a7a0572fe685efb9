"""AD-PSGD (Lian et al., ICML'18): asynchronous pairwise gossip.

After each gradient, worker i averages its model with one neighbour j in ``algorithm.topology``, drawn uniformly by
:func:`peer`, a pure function of (seed, i, n). Every worker has a communication thread that serves the exchanges other
workers start with it, one at a time, first come first served (requests of one instant in worker order): the exchange
starts at max(t_post(n, i), when j's thread is free) and takes two messages, t_done = start + 2·p2p(n); j itself
computes on meanwhile. **(choice)** p2p(n) is a message's time when every worker sends one at once (to the next, i → i +
1), as the workers' exchanges overlap when balanced: links they share (a node's, the fabric) are shared; inside a node
or across, whichever the pair is. At the start w_i, w_j ← (w_i + w_j)/2, then i applies its gradient step (taken on the
model it had when it started the iteration; exchanges it served meanwhile are in the model it steps).

Rounds: one row per exchange (kind ``gossip``): ``round`` n, ``initiator`` i, ``t_trigger`` the start (when j's
thread takes it), ``t_done``, ``contributors`` 2, ``fresh`` 1 (i's own iteration; j's model is whatever it holds),
``group`` j. With one worker there is no peer: the iteration is released at its post (``group`` −1, 1 contributor).

With a time budget (``duration``), a worker stops at its first exchange that completes at or after it; its thread
still serves the others' exchanges (its model stays as it was).

The fast engine (:func:`fast_kernel`) takes the posts in the same order, a batch of posts that commute at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from numba import njit

from stragglerlab.simulator.algorithms.eager import SPLITMIX, splitmix
from stragglerlab.simulator.algorithms.gossip import KIND, TOPOLOGY, PeerCosts
from stragglerlab.simulator.algorithms.record import Algorithm, Style
from stragglerlab.simulator.convergence import Observer, Optimizer, matrix, row_counts
from stragglerlab.simulator.engine import Call, Engine
from stragglerlab.simulator.fast.engine import DONE, NEED_ROWS, OUT_FULL, returned
from stragglerlab.simulator.topology import neighbours

if TYPE_CHECKING:
    from stragglerlab.simulator.costs import CostModel
    from stragglerlab.simulator.fast.engine import FastEngine

_ROWS_OUT = 1 << 18  # round rows handed over at a time (at least one batch's)


def peer(seed: int, worker: int, n: int, peers: list[int]) -> int:
    """The neighbour ``worker`` averages with at iteration ``n``: ``peers[h mod len(peers)]``, h the splitmix64 hash
    of majority's initiator applied twice, h = splitmix(splitmix(seed, worker), n) in uint64 (-1 without peers)."""
    if not peers:
        return -1
    return peers[splitmix(splitmix(seed, int(worker)), int(n)) % len(peers)]


class AdPsgdRules(PeerCosts):
    """Each worker's neighbours, the peer of each exchange and what an exchange costs."""

    kind = KIND

    def __init__(self, scenario, costs):
        super().__init__(scenario, costs)
        self.topology = scenario.algorithm.topology
        self.neighbours = neighbours(self.topology, self.P)
        self.link = self.exchanges(costs)

    def exchanges(self, costs: CostModel) -> dict[bool, float]:
        """An exchange's time, a request and its reply (module doc), between two ranks of one node (True) or of two
        (False): that of the slowest such pair in a step where every worker sends to the next at once (a pair alone
        where the step has none of that sort, and no exchange of that sort happens)."""
        src = np.arange(self.P)
        dst = (src + 1) % self.P
        times = costs.gossip(self.nbytes, src, dst, messages=2)
        inside = src // self.per_node == dst // self.per_node
        return {
            intra: float(times[inside == intra].max()) if (inside == intra).any() else 2 * costs.p2p(self.nbytes, intra)
            for intra in (False, True)
        }

    def exchange_time(self, n: int, i: int, j: int) -> float:
        """Worker ``i``'s exchange with ``j`` at iteration ``n``."""
        return self.link[i // self.per_node == j // self.per_node] * self.factor(n, i)

    def peer(self, worker: int, n: int) -> int:
        return peer(self.seed, worker, n, self.neighbours[worker])

    def draws(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What the fast kernel draws :meth:`peer` from (:func:`drawn_peer`): each worker's first hash
        splitmix(seed, worker) (uint64); every worker's neighbours one after the other, then a −1; where each worker's
        begin (a worker without neighbours: at the −1) and how many each has (1 for the −1)."""
        deg = np.array([len(peers) for peers in self.neighbours], dtype=np.int64)
        flat = np.array([*(j for peers in self.neighbours for j in peers), -1], dtype=np.int64)
        begin = np.where(deg > 0, np.cumsum(deg) - deg, len(flat) - 1)
        h = splitmix(self.seed, np.arange(self.P, dtype=np.uint64))
        return h, flat, begin, np.maximum(deg, 1).astype(np.uint64)


_GOLDEN, _MIX1, _MIX2 = (np.uint64(c) for c in SPLITMIX)  # numba's uint64 wraps as splitmix's mask does


@njit(cache=True, inline="always")  # in the kernel's loops: no call per post
def drawn_peer(w, n, draws):
    """:func:`peer` of worker ``w`` at iteration ``n`` from :meth:`AdPsgdRules.draws`, in numba's uint64 (no branch:
    a branch here costs the kernel more than the hash)."""
    h, flat, begin, count = draws
    z = h[w] + np.uint64(n + 1) * _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z ^= z >> np.uint64(31)
    return flat[begin[w] + np.int64(z % count[w])]


class AdPsgdProcess:
    """The reference engine's side: each worker's communication thread as the time it is next free; posts come in
    the engine's order, which is the threads' first-come-first-served order."""

    def __init__(self, rules: AdPsgdRules, engine: Engine):
        self.rules, self.engine = rules, engine
        self.free = [0.0] * rules.P

    def post(self, call: Call) -> None:
        rules, engine = self.rules, self.engine
        i, n, now = call.worker, call.iteration, engine.now
        j = rules.peer(i, n)
        start = done = now
        if j >= 0:
            start = max(now, self.free[j])
            done = self.free[j] = start + rules.exchange_time(n, i, j)
        call.round, call.fresh, call.final = n, True, True
        row = (n, rules.kind, i, start, done, 1 + (j >= 0), 1, j)

        def release() -> None:
            engine.release(call, last=engine.now >= rules.budget)
            engine.sink.round(row)

        engine.at(done, release)


def update(
    rules: AdPsgdRules,
    workload: Any,
    it: pd.DataFrame,
    rounds: pd.DataFrame,
    W: np.ndarray,
    opt: Optimizer,
    note: Observer,
) -> Iterator[int]:
    """The exchanges in the order they start (ties: by request time, initiator, iteration); before each, the
    gradients of every iteration begun strictly earlier are taken on the models as they are then, and the
    initiator's own gradient of this iteration in any case (an exchange at the very instant an iteration starts
    comes first, unless it is that iteration's own). Each exchange averages the pair, then steps the initiator."""
    P = rules.P
    counts = row_counts(it, P)  # a worker stopped by the time budget begins no iteration after its rows
    t_post, t_done = matrix(it, "t_post", P, np.inf), matrix(it, "t_done", P, np.inf)
    N = t_done.shape[1]
    t_start = np.zeros((P, N))
    t_start[:, 1:] = t_done[:, :-1] + rules.update
    worker, n_of = rounds["initiator"].to_numpy(), rounds["round"].to_numpy()
    start, j_of = rounds["t_trigger"].to_numpy(), rounds["group"].to_numpy()
    order = np.lexsort((n_of, worker, t_post[worker, n_of], start))
    begun = np.zeros(P, dtype=np.int64)  # each worker's next iteration whose gradient is still to take
    G = np.zeros_like(W)

    def take(rows: np.ndarray) -> None:
        if len(rows):
            G[rows], _ = workload.gradient(W[rows], workload.batches(rows, begun[rows]))
            begun[rows] += 1

    for r in order:
        i, n, j, s = int(worker[r]), int(n_of[r]), int(j_of[r]), start[r]
        ahead = (begun < counts) & (t_start[np.arange(P), np.minimum(begun, N - 1)] < s)
        ahead[i] |= begun[i] == n
        while ahead.any():
            take(np.flatnonzero(ahead))
            ahead = (begun < counts) & (t_start[np.arange(P), np.minimum(begun, N - 1)] < s)
        if j >= 0:
            W[[i, j]] = (W[i] + W[j]) / 2
        opt.step(W, G[i], np.array([i]))
        note("averaged", n, W)
        yield int(r)


def fast_kernel(rules: AdPsgdRules, fast: FastEngine) -> None:
    """AD-PSGD on the fast engine: the posts in batches that commute (:func:`adpsgd_kernel`). Workers drift apart
    (nothing synchronises them), so rows are final up to the least advanced worker's iteration, and the window grows
    when that one lags a whole window behind."""
    P, N = fast.P, fast.N
    window = fast.window(fast.window_size(), rules.factors)
    pending = np.full(P, np.inf)  # each worker's next post not yet taken (inf: none)
    wave = np.zeros(P, dtype=np.int64)  # its wave at its instant (see adpsgd_kernel)
    parked = np.ones(P, dtype=np.bool_)  # its next post is still to compute (at first: every worker's)
    next_, t_start, free = np.zeros(P, dtype=np.int64), np.zeros(P), np.zeros(P)
    peer_now = np.zeros(P, dtype=np.int64)  # its peer (see adpsgd_kernel)
    scratch = (*(np.zeros(P, dtype=np.int64) for _ in range(2)), np.zeros(P + 2, dtype=np.int64), *np.zeros((3, P)))
    out = fast.round_buffers(max(P, _ROWS_OUT // P * P))
    group = np.zeros(len(out["round"]), dtype=np.int64)
    kind = np.full(len(group), rules.kind, dtype=object)
    inter, intra = (rules.link[shared] for shared in (False, True))  # what exchange_time gives: request and reply

    def version(iteration: np.ndarray, _: np.ndarray) -> np.ndarray:
        return iteration

    draws = rules.draws()
    while True:
        status, written = adpsgd_kernel(
            pending, wave, parked, next_, t_start, free, peer_now, scratch, window.base, draws,
            window.times, window.calls, window.factors,
            window.start, window.post, window.done,
            N, rules.update, rules.per_node, inter, intra, rules.budget,
            out["round"], out["initiator"], out["t_trigger"], out["t_done"], out["contributors"], out["fresh"], group,
        )  # fmt: skip
        fast.emit_rounds(written, out, kind[:written], group[:written].copy())
        if status == DONE:
            break
        if status == NEED_ROWS:
            final = int(next_.min())
            carried(window, final)
            fast.flush(window, final, version)
            window.slide(final)
    carried(window, int(next_.max()))
    fast.flush(window, int(next_.max()), version, next_)  # next_[i]: worker i's rows (fewer once it stopped)


def carried(window: Any, last: int) -> None:
    """Every row of the window before iteration ``last`` as its own round carries it, fresh (the kernel leaves these
    columns to be filled here, a row at a time)."""
    rows = last - window.base
    window.round[:rows] = np.arange(window.base, last)[:, None]
    window.fresh[:rows] = True


@njit(cache=True, inline="always")  # in the kernel's loops: no call per post
def _post(w, k, t_start, compute, r_start, r_post, pending, wave):
    """Worker ``w`` computes window row ``k`` from its start and posts: its wave holds only if it computes nothing."""
    r_start[k, w] = t_start[w]
    r_post[k, w] = pending[w] = t_start[w] + compute[k, w]
    wave[w] = wave[w] if compute[k, w] == 0.0 else 0


@njit(cache=True)
def adpsgd_kernel(
    pending,
    wave,
    parked,
    next_,
    t_start,
    free,
    peer_now,
    scratch,
    base,
    draws,
    compute,
    calls,
    factors,
    r_start,
    r_post,
    r_done,
    iterations,
    update,
    per_node,
    t_inter,
    t_intra,
    budget,
    out_round,
    out_initiator,
    out_trigger,
    out_done,
    out_contributors,
    out_fresh,
    out_group,
):
    """Take the posts as the reference engine does, in (time, wave, worker) order, until the run ends, the round
    output is full, or a worker's next row is past the window (it is *parked*: its post is computed once the window
    has slid). ``pending[i]``: worker i's next post (inf: none); ``next_[i]``: its iteration; ``peer_now[i]``: its peer,
    drawn from ``draws`` (:meth:`AdPsgdRules.draws`); ``t_start[i]``: when the one after starts; ``free[j]``: when j's
    thread is next free. A worker stops after its last iteration or its first exchange completing at or after
    ``budget``.

    Posts of one instant are taken in waves, as the reference engine's ties have them: a worker released at the
    instant it posts again (no update, no compute, no software cost) posts after the completion that released it,
    one wave after that completion's post when the exchange took no time, else in wave 1; ``wave[i]`` is the wave of
    worker i's pending post, and the order is (time, wave, worker).

    Posts are taken a batch at a time: every pending post earlier than the *horizon*, the earliest instant a post
    taken now could make its worker post again (its post + ``update`` + its next compute; 0 for a compute past the
    window), and the least post in any case. Nothing posts inside the batch's span but the batch, and two posts of it
    meet only at a common peer's thread, so the batch is taken peer by peer, each peer's requests in (time, wave,
    worker) order, which gives the reference engine's times exactly; only the times of the exchanges need that order,
    and everything else (the rows, the next posts) is done in worker order, where the window's rows are read and
    written one after the other. A scan and a counting sort per batch instead of a heap operation per post.
    ``scratch``: the batch in worker order, in peer order (P each), where each peer's requests end (P + 2), and each
    worker's exchange time, start and end (P each). The ``round`` and ``fresh`` columns of the rows are left to
    :func:`carried`. Returns (status, round rows written)."""
    batch, order, first, cost, start, end = scratch
    rows, P = r_post.shape[0], pending.shape[0]
    written = 0
    for w in range(P):
        if parked[w]:
            parked[w] = False
            _post(w, next_[w] - base, t_start, compute, r_start, r_post, pending, wave)
            peer_now[w] = drawn_peer(w, next_[w], draws)
    while True:
        if written + P > out_round.shape[0]:
            return OUT_FULL, written
        horizon, least = np.inf, -1
        for w in range(P):
            t = pending[w]
            if t < np.inf:
                if least < 0 or t < pending[least] or (t == pending[least] and wave[w] < wave[least]):
                    least = w
                k = next_[w] - base
                if next_[w] + 1 < iterations:  # its next post: after this exchange, the update and its compute
                    horizon = min(horizon, t + update + (compute[k + 1, w] if k + 1 < rows else 0.0))
        if least < 0:
            return DONE, written
        size = 0
        first[:] = 0  # counting sort of the batch by peer (no peer: P), stable in worker order
        for w in range(P):
            if pending[w] < horizon or w == least:
                j = peer_now[w]
                batch[size] = w
                size += 1
                if j >= 0:
                    first[j + 1] += 1
                    link = t_intra if w // per_node == j // per_node else t_inter
                    cost[w] = link * factors[next_[w] - base, w]
                else:
                    first[P + 1] += 1
        for j in range(P + 1):
            first[j + 1] += first[j]
        for a in range(size):
            w = batch[a]
            j = peer_now[w]
            group = j if j >= 0 else P
            order[first[group]] = w
            first[group] += 1
        begin = 0
        for j in range(P + 1):
            stop = first[j]
            for a in range(begin + 1, stop):  # one peer's requests in order: its neighbours' at most
                w = order[a]
                b = a
                while b > begin and (
                    pending[order[b - 1]] > pending[w]
                    or (pending[order[b - 1]] == pending[w] and wave[order[b - 1]] > wave[w])
                ):
                    order[b] = order[b - 1]
                    b -= 1
                order[b] = w
            begin = stop
        for a in range(first[P - 1]):  # the exchanges, each peer's requests in order (those without a peer: none)
            w = order[a]
            j = peer_now[w]
            start[w] = max(pending[w], free[j])
            end[w] = free[j] = start[w] + cost[w]
        parks = False
        for a in range(size):
            w = batch[a]
            t = pending[w]
            pending[w] = np.inf
            n = next_[w]
            k = n - base
            j = peer_now[w]
            done = end[w] if j >= 0 else t
            r_done[k, w] = returned(t, done, calls[k, w])
            out_round[written] = n
            out_initiator[written] = w
            out_trigger[written] = start[w] if j >= 0 else t
            out_done[written] = done
            out_contributors[written] = 2 if j >= 0 else 1
            out_fresh[written] = 1
            out_group[written] = j
            written += 1
            next_[w] = n + 1
            if n + 1 < iterations and done < budget:
                t_start[w] = r_done[k, w] + update
                # back at the instant it was released, the worker posts in the next wave if it computes nothing
                wave[w] = (wave[w] + 1 if done == t else 1) if update == 0.0 and r_done[k, w] == done else 0
                if k + 1 == rows:
                    parked[w] = parks = True
                else:
                    _post(w, k + 1, t_start, compute, r_start, r_post, pending, wave)
        for a in range(size):  # the peers of the posts just made, in a loop of their own, where the hashes overlap
            w = batch[a]
            if pending[w] < np.inf:
                peer_now[w] = drawn_peer(w, next_[w], draws)
        if parks:
            return NEED_ROWS, written


RECORD = Algorithm(
    name="ad-psgd",
    summary="AD-PSGD: after each gradient a worker averages with one random neighbour, served by its thread",
    keys=(TOPOLOGY,),
    rules=AdPsgdRules,
    process=AdPsgdProcess,
    kernel=fast_kernel,
    update=update,
    exchanges={"native": "stragglerlab.realrun.algorithms.adpsgd:AdPsgdExchange"},
    style=Style("#44AA99", ">"),
    own_step=True,
)
