"""The fast engine's compiled kernels: the semantics of ``docs/semantics.md`` as sweeps over arrays.

Rounds are strictly sequential, so for the round-per-call algorithms every worker's post of call m is known once
round m − 1 is done: a round is one O(P) sweep (trigger, exchange start, fresh or late, release) instead of events.
LSGD's workers run free between exchanges, so its kernel merges their posts in (time, worker) order with a heap.

Both kernels work on a window of iterations [base, base + rows) held in row buffers (times, round, fresh) and a
compute-time block of the same window, and return a status when they need the driver to slide or grow the window
(or, for the round kernel, the per-worker pending queues); the state arrays keep everything needed to resume.
"""

from __future__ import annotations

import numpy as np
from numba import njit

DONE, NEED_ROWS, NEED_PENDING, OUT_FULL = 0, 1, 2, 3
ACCUMULATE, DROP, DEPOSIT = 0, 1, 2
# state of the round kernel (int64 array)
S_ROUND, S_BASE = 0, 1
# state of the LSGD kernel (int64 array)
L_ROUND, L_COUNT, L_ENDING, L_ACTIVE, L_JOINED, L_INITIATOR, L_GLOBAL, L_BASE, L_HEAP = range(9)


@njit(cache=True)
def round_kernel(
    state,
    t_start,
    first_post,
    pend_n,
    pend_t,
    pend_head,
    pend_len,
    compute,
    r_start,
    r_post,
    r_done,
    r_round,
    r_fresh,
    is_sync,
    t_exchange,
    fixed_initiator,
    t_act,
    stride,
    late_mode,
    out_round,
    out_initiator,
    out_trigger,
    out_done,
    out_contributors,
    out_fresh,
):
    """Process rounds from ``state[S_ROUND]`` until all are done or the window is full.

    ``t_start[i]``: when worker i starts its next iteration. ``pend_*``: each worker's late contributions not yet
    taken by an exchange (ring buffers of iteration and post time). Round rows go to the ``out_*`` arrays, from
    index 0; returns (status, rounds written).
    """
    P = t_start.shape[0]
    total = is_sync.shape[0]
    base = state[S_BASE]
    rows = r_post.shape[0]
    R = pend_n.shape[1]
    written = 0
    full = np.any(pend_len == R)  # a round pushes at most one pending contribution per worker
    while state[S_ROUND] < total:
        m = state[S_ROUND]
        if written == out_round.shape[0]:
            return OUT_FULL, written
        if (m + 1) * stride - base > rows:
            return NEED_ROWS, written
        if full:
            return NEED_PENDING, written
        first = m * stride
        call = first + stride - 1
        k = call - base
        # local steps (local SGD), then the post of call m; the trigger on the way: the last post (synchronous,
        # the highest rank among ties), the first post (the lowest rank among ties) or the fixed initiator's post
        sync = is_sync[m]
        initiator = -1 if sync else fixed_initiator[m]
        pick = initiator < 0
        for i in range(P):
            t = _local_steps(i, t_start[i], first, call, base, compute, r_start, r_post, r_done, r_round, r_fresh, m)
            r_start[k, i] = t
            t = t + compute[k, i]
            r_post[k, i] = t
            if m == 0:
                first_post[i] = t
            if pick and (i == 0 or (t >= r_post[k, initiator] if sync else t < r_post[k, initiator])):
                initiator = i
        posts = r_post[k]
        t_trigger = posts[initiator]
        x = t_trigger if sync else t_trigger + t_act
        done = x + t_exchange[m]
        contributors = 0
        fresh_count = 0
        for i in range(P):
            fresh = posts[i] <= x
            # late contributions of earlier calls that this exchange takes (posted no later than its start)
            taken = 0
            while taken < pend_len[i] and pend_t[i, (pend_head[i] + taken) % R] <= x:
                taken += 1
            for j in range(taken):
                slot = (pend_head[i] + j) % R
                kj = pend_n[i, slot] - base
                if late_mode == DEPOSIT and (fresh or j < taken - 1):
                    r_round[kj, i] = -1  # overwritten by a later deposit before any exchange read it
                else:
                    r_round[kj, i] = m
            pend_head[i] = (pend_head[i] + taken) % R
            pend_len[i] -= taken
            if fresh:
                fresh_count += 1
                r_round[k, i] = m
                r_fresh[k, i] = True
                r_done[k, i] = done
                t_start[i] = done
            else:
                r_round[k, i] = -1
                r_fresh[k, i] = False
                r_done[k, i] = max(posts[i], done)
                t_start[i] = r_done[k, i]
                if late_mode != DROP:
                    slot = (pend_head[i] + pend_len[i]) % R
                    pend_n[i, slot] = call
                    pend_t[i, slot] = posts[i]
                    pend_len[i] += 1
                    full |= pend_len[i] == R
            if late_mode == DEPOSIT:
                contributors += first_post[i] <= x
            elif fresh or taken > 0:
                contributors += 1
        out_round[written] = m
        out_initiator[written] = initiator
        out_trigger[written] = t_trigger
        out_done[written] = done
        out_contributors[written] = contributors
        out_fresh[written] = fresh_count
        written += 1
        state[S_ROUND] = m + 1
    return DONE, written


@njit(cache=True)
def _local_steps(i, t, first, last, base, compute, r_start, r_post, r_done, r_round, r_fresh, carried_by):
    """Worker i's iterations [first, last) as local steps from time t, released at once; returns the end time."""
    for n in range(first, last):
        k = n - base
        r_start[k, i] = t
        t = t + compute[k, i]
        r_post[k, i] = t
        r_done[k, i] = t
        r_round[k, i] = carried_by
        r_fresh[k, i] = carried_by >= 0
    return t


@njit(cache=True)
def local_tail(t_start, compute, r_start, r_post, r_done, r_round, r_fresh, first, last, base):
    """Local steps after the last round (local SGD's incomplete last period): carried by no round."""
    for i in range(t_start.shape[0]):
        t_start[i] = _local_steps(
            i, t_start[i], first, last, base, compute, r_start, r_post, r_done, r_round, r_fresh, -1
        )


@njit(cache=True)
def _less(heap_t, heap_w, a, b):
    return heap_t[a] < heap_t[b] or (heap_t[a] == heap_t[b] and heap_w[a] < heap_w[b])


@njit(cache=True)
def _push(heap_t, heap_w, size, t, w):
    j = size
    heap_t[j] = t
    heap_w[j] = w
    while j > 0:
        parent = (j - 1) // 2
        if _less(heap_t, heap_w, j, parent):
            heap_t[j], heap_t[parent] = heap_t[parent], heap_t[j]
            heap_w[j], heap_w[parent] = heap_w[parent], heap_w[j]
            j = parent
        else:
            break
    return size + 1


@njit(cache=True)
def _pop(heap_t, heap_w, size):
    size -= 1
    heap_t[0] = heap_t[size]
    heap_w[0] = heap_w[size]
    j = 0
    while True:
        left = 2 * j + 1
        smallest = j
        if left < size and _less(heap_t, heap_w, left, smallest):
            smallest = left
        if left + 1 < size and _less(heap_t, heap_w, left + 1, smallest):
            smallest = left + 1
        if smallest == j:
            break
        heap_t[j], heap_t[smallest] = heap_t[smallest], heap_t[j]
        heap_w[j], heap_w[smallest] = heap_w[smallest], heap_w[j]
        j = smallest
    return size


@njit(cache=True)
def lsgd_kernel(
    state,
    t_trigger_state,
    heap_t,
    heap_w,
    iteration,
    unresolved,
    compute,
    r_start,
    r_post,
    r_done,
    r_round,
    r_fresh,
    iterations,
    local_every,
    global_every,
    t_exchange,
    out_round,
    out_initiator,
    out_trigger,
    out_done,
    out_global,
):
    """Merge the free-running workers' posts in (time, worker) order and run LSGD's exchanges.

    The heap holds each worker's next post; ``iteration[i]`` is the iteration that post ends and
    ``unresolved[i]`` the first of its iterations that no exchange has carried yet. Returns (status, rounds
    written).
    """
    P = iteration.shape[0]
    base = state[L_BASE]
    end = base + r_post.shape[0]
    written = 0
    while state[L_HEAP] > 0:
        t = heap_t[0]
        w = heap_w[0]
        completes = state[L_ACTIVE] == 1 and state[L_JOINED] == P - 1
        if completes:
            for i in range(P):
                if iteration[i] + 1 < iterations and iteration[i] + 1 >= end:
                    return NEED_ROWS, written
        elif iteration[w] + 1 < iterations and iteration[w] + 1 >= end:
            return NEED_ROWS, written
        if written == out_round.shape[0]:
            return OUT_FULL, written
        state[L_HEAP] = _pop(heap_t, heap_w, state[L_HEAP])
        n = iteration[w]
        k = n - base
        r_post[k, w] = t
        r_done[k, w] = t
        state[L_COUNT] += 1
        count = state[L_COUNT]
        if state[L_ACTIVE] == 0 and state[L_ENDING] == 0 and (count % local_every == 0 or count % global_every == 0):
            state[L_ACTIVE] = 1
            state[L_JOINED] = 0
            state[L_INITIATOR] = w
            state[L_GLOBAL] = count % global_every == 0
            t_trigger_state[0] = t
        if n == iterations - 1:
            state[L_ENDING] += 1
        if state[L_ACTIVE] == 0:
            iteration[w] = n + 1
            if n + 1 < iterations:
                r_start[k + 1, w] = t
                state[L_HEAP] = _push(heap_t, heap_w, state[L_HEAP], t + compute[k + 1, w], w)
            continue
        state[L_JOINED] += 1
        if state[L_JOINED] < P:
            continue
        # the last worker joined: the exchange starts now and releases everyone when it completes
        m = state[L_ROUND]
        done = t + t_exchange
        for i in range(P):
            for j in range(unresolved[i], iteration[i] + 1):
                r_round[j - base, i] = m
                r_fresh[j - base, i] = True
            kk = iteration[i] - base
            r_done[kk, i] = done
            unresolved[i] = iteration[i] + 1
            iteration[i] += 1
            if iteration[i] < iterations:
                r_start[kk + 1, i] = done
                state[L_HEAP] = _push(heap_t, heap_w, state[L_HEAP], done + compute[kk + 1, i], i)
        out_round[written] = m
        out_initiator[written] = state[L_INITIATOR]
        out_trigger[written] = t_trigger_state[0]
        out_done[written] = done
        out_global[written] = state[L_GLOBAL]
        written += 1
        state[L_ROUND] = m + 1
        state[L_ACTIVE] = 0
    return DONE, written
