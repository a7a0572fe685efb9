"""LSGD's compiled kernel: its workers run free between exchanges, so it merges their posts in (time, worker) order
with a heap. It works on a window of iterations [base, base + rows) held in row buffers (times, round, fresh) and a
compute-time block of the same window, and returns a status when it needs the driver to slide or grow the window;
the state arrays keep everything needed to resume.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from stragglerlab.simulator.fast.engine import DONE, NEED_ROWS, OUT_FULL, FastEngine

# state of the LSGD kernel (int64 array)
L_ROUND, L_COUNT, L_ENDING, L_ACTIVE, L_JOINED, L_INITIATOR, L_GLOBAL, L_BASE, L_HEAP = range(9)


def run(a: Any, fast: FastEngine) -> None:
    """Run LSGD's rules ``a`` on the fast engine ``fast``."""
    P, N = fast.P, fast.N
    window = fast.window(fast.window_size())
    state = np.zeros(9, dtype=np.int64)
    t_trigger = np.zeros(1)
    heap_t, heap_w = np.zeros(P), np.zeros(P, dtype=np.int64)
    for i in range(P):
        state[L_HEAP] = _push(heap_t, heap_w, state[L_HEAP], float(window.times[0, i]), i)
    iteration, unresolved = np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64)
    batch = 256
    out = {
        "round": np.zeros(batch, dtype=np.int64),
        "initiator": np.zeros(batch, dtype=np.int64),
        "t_trigger": np.zeros(batch),
        "t_done": np.zeros(batch),
        "global": np.zeros(batch, dtype=np.bool_),
    }

    def version(iteration_: np.ndarray, rnd: np.ndarray) -> np.ndarray:
        return np.where(rnd >= 0, rnd, state[L_ROUND])

    while True:
        state[L_BASE] = window.base
        status, written = lsgd_kernel(
            state,
            t_trigger,
            heap_t,
            heap_w,
            iteration,
            unresolved,
            window.times,
            window.start,
            window.post,
            window.done,
            window.round,
            window.fresh,
            N,
            a.local_every,
            a.global_every,
            a.t_exchange,
            out["round"],
            out["initiator"],
            out["t_trigger"],
            out["t_done"],
            out["global"],
        )
        every = np.full(written, P, dtype=np.int64)
        fast.emit_rounds(
            written,
            {**out, "contributors": every, "fresh": every},
            np.full(written, "leader", dtype=object),
            np.where(out["global"][:written], -1, 0).astype(np.int64),
        )
        if status == DONE:
            break
        if status == OUT_FULL:
            continue
        final = int(unresolved.min())  # rows from a worker's first unresolved iteration on may still change
        fast.flush(window, final, version)
        window.slide(final)
    fast.flush(window, N, version)


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
