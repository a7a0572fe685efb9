"""The posts waiting to be taken in a fast step (the parameter server's pushes, AD-PSGD's posts), in the order of
posts (time, wave, worker: :func:`~.order.earlier`): a calendar queue holding at most one post of each worker.

The calendar is laid out over the queued posts' times: as many buckets of equal width as posts (a power of two)
between the earliest and the latest, a post's bucket monotone in its time, each bucket an unsorted list. A post later
than the latest waits in an overflow list. The first bucket not yet taken is sorted when it is reached (its few posts),
and its posts are taken in that order; a post added to it meanwhile is sorted in before the next is taken. Once every
bucket is taken, the calendar is laid out again over the overflow. A post so costs O(1) (its bucket, its share of its
bucket's sort and of a lay-out) and allocates nothing, where a sweep over the workers to find the next batch cost O(P)
a batch, and a binary heap's O(log P) a post cost 4 times sync's whole step at 65,536 workers.

Posts are added and taken a batch at a time (one call each, which passes the arrays once: a call per post would
count a reference to each array at each call). A post's time and wave are the step's arrays (``key``, ``wave``), read
when it is added and while it is queued: they must not change until it is taken.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from stragglerlab.simulator.fast.order import bucket_scale, sort_posts

#: ``Queue.at``: the bucket being taken (its posts in ``run``), the calendar's buckets, the run's next post and end,
#: whether the run is sorted, posts queued, the overflow list's first post
FRONT, BUCKETS, CURSOR, END, SORTED, QUEUED, OVERFLOW = range(7)
#: ``Queue.span``: the calendar's earliest time, its buckets per second, its latest time
ORIGIN, SCALE, LIMIT = range(3)


class Queue(NamedTuple):
    head: np.ndarray  # per bucket: its first post's worker (-1: none)
    link: np.ndarray  # per worker: the next post in its bucket, or in the overflow (-1: none)
    run: np.ndarray  # the bucket being taken: run[at[CURSOR]:at[END]], sorted when at[SORTED]
    span: np.ndarray  # float64: ORIGIN, SCALE, LIMIT
    at: np.ndarray  # int64: FRONT, BUCKETS, CURSOR, END, SORTED, QUEUED, OVERFLOW


def queue(workers: int) -> Queue:
    """An empty queue for posts of ``workers`` workers."""
    at = np.zeros(7, dtype=np.int64)
    at[[FRONT, OVERFLOW]] = -1
    return Queue(
        np.full(1 << max(workers - 1, 0).bit_length(), -1, dtype=np.int64),
        np.full(workers, -1, dtype=np.int64),
        np.zeros(workers, dtype=np.int64),
        np.array([0.0, 0.0, -np.inf]),
        at,
    )


@njit(cache=True)
def add(head, link, run, span, at, key, workers, count):
    """Queue the posts of ``workers[:count]`` (each worker w's at ``key[w]``)."""
    for a in range(count):
        w = workers[a]
        t = key[w]
        at[QUEUED] += 1
        if t > span[LIMIT]:
            link[w] = at[OVERFLOW]
            at[OVERFLOW] = w
            continue
        b = int((t - span[ORIGIN]) * span[SCALE])
        if b <= at[FRONT]:  # the bucket being taken (those before it are empty): into its run, sorted in when taken
            if at[END] == run.shape[0]:  # the run's taken posts make room
                run[: at[END] - at[CURSOR]] = run[at[CURSOR] : at[END]].copy()
                at[END] -= at[CURSOR]
                at[CURSOR] = 0
            run[at[END]] = w
            at[END] += 1
            at[SORTED] = False
            continue
        link[w] = head[b]
        head[b] = w


@njit(cache=True)
def take(head, link, run, span, at, key, wave, bound, floor, hold, batch):
    """Take the queued posts in order into ``batch`` while each is earlier than ``hold`` and than every taken post's
    *bound* (the earliest its worker can post again): ``bound[w]``, or ``floor`` where the post is earlier than that
    (its worker waits for it, as a push waits for the server to be free). Returns how many."""
    count = 0
    horizon = hold
    while at[QUEUED]:
        if at[CURSOR] == at[END]:  # the next bucket that holds posts, into the run
            b = at[FRONT] + 1
            while b < at[BUCKETS] and head[b] < 0:
                b += 1
            if b == at[BUCKETS]:
                _lay_out(head, link, span, at, key)
                continue
            at[FRONT] = b
            m = 0
            v = head[b]
            head[b] = -1
            while v >= 0:
                run[m] = v
                m += 1
                v = link[v]
            at[CURSOR], at[END], at[SORTED] = 0, m, m == 1
        if not at[SORTED]:
            sort_posts(run[at[CURSOR] : at[END]], key, wave)
            at[SORTED] = True
        w = run[at[CURSOR]]
        if key[w] >= horizon:
            break
        at[CURSOR] += 1
        at[QUEUED] -= 1
        batch[count] = w
        count += 1
        horizon = min(horizon, bound[w] if key[w] >= floor else floor)
    return count


@njit(cache=True)
def _lay_out(head, link, span, at, key):
    """Every bucket is taken: lay the calendar out over the overflow's posts (all that are queued)."""
    lo, hi = np.inf, -np.inf
    v = at[OVERFLOW]
    while v >= 0:
        lo, hi = min(lo, key[v]), max(hi, key[v])
        v = link[v]
    buckets = 1
    while buckets < at[QUEUED]:
        buckets *= 2
    span[ORIGIN], span[SCALE], span[LIMIT] = lo, bucket_scale(lo, hi, buckets), hi
    at[FRONT], at[BUCKETS] = -1, buckets
    v = at[OVERFLOW]
    at[OVERFLOW] = -1
    while v >= 0:
        after = link[v]
        b = int((key[v] - lo) * span[SCALE])
        link[v] = head[b]
        head[b] = v
        v = after
