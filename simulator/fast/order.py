"""Ordering posts in the fast engine's steps: which of two posts comes first, the k-th smallest of many times (a
round's trigger, LSGD's counting trigger), a few posts sorted (a bucket of the queue of posts, :mod:`.calendar`), and a
batch of workers put back in worker order (where the window's rows are read and written one after the other).

The k-th smallest buckets the times first: a histogram over equal buckets between the least and the greatest finds
the bucket that holds the k-th (the bucket of a time is monotone in it), so only that bucket is selected from. That is
a few linear passes where a quickselect over everything took 12 times numpy's partition (and numba's ``np.partition``
five times sync's whole sweep).
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: buckets of the histogram that narrows a selection
BUCKETS = 1 << 14
#: a batch holding more than 1/_SWEEP of the workers is put in worker order by a sweep over them, else by a sort
_SWEEP = 16
#: posts sorted by insertion, up to this many; more by a stable sort on their times first
_INSERTION = 32


@njit(cache=True, inline="always")
def earlier(t, wave, w, t_v, wave_v, v):
    """Whether worker w's post (at ``t``, in ``wave``) comes before worker v's (v = -1: none) in the order of posts:
    time, then wave, then worker. Scalars only: an inlined call that passes arrays may count references to them at
    every call."""
    return v < 0 or t < t_v or (t == t_v and (wave < wave_v or (wave == wave_v and w < v)))


@njit(cache=True, inline="always")
def next_compute(compute, k, w):
    """Worker w's compute time in the window row after row ``k``; 0 past the window (a lower bound, which a horizon
    needs: the next post is at least this much after the release)."""
    return compute[k + 1, w] if k + 1 < compute.shape[0] else 0.0


@njit(cache=True)
def bucket_scale(lo, hi, buckets):
    """The factor that maps a time in [lo, hi] to its bucket ``int((t − lo)·scale)`` of ``buckets``."""
    scale = (buckets - 1) / (hi - lo) if hi > lo else 0.0
    return scale if np.isfinite(scale) else 0.0  # a spread of subnormal size: one bucket


@njit(cache=True)
def kth_smallest(x, q, scratch):
    """The ``q``-th smallest (from 1) of ``x``: its bucket's values are copied into ``scratch`` (as long as x) and
    selected from (:func:`_select`)."""
    lo, hi = x.min(), x.max()
    scale = bucket_scale(lo, hi, BUCKETS)
    histogram = np.zeros(BUCKETS, dtype=np.int64)
    for v in x:
        histogram[int((v - lo) * scale)] += 1
    b, rank = 0, q
    while rank > histogram[b]:
        rank -= histogram[b]
        b += 1
    j = 0
    for v in x:
        if int((v - lo) * scale) == b:
            scratch[j] = v
            j += 1
    return _select(scratch[:j], rank - 1)


@njit(cache=True)
def _select(a, q):
    """The ``q``-th smallest (from 0) of ``a``, which it reorders: Hoare's quickselect, median-of-three pivots."""
    lo, hi = 0, a.shape[0] - 1
    while lo < hi:
        x, y, z = a[lo], a[(lo + hi) // 2], a[hi]
        pivot = max(min(x, y), min(max(x, y), z))
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if q <= j:
            hi = j
        elif q >= i:
            lo = i
        else:
            break
    return a[q]


@njit(cache=True)
def sort_posts(items, key, wave):
    """``items`` (workers) into the order of posts (:func:`earlier`: ``key[w]``, then ``wave[w]``, then w), in place:
    by insertion when they are few or already nearly so; else put in worker order, stably sorted on their times (ties
    stay in worker order), then by insertion for the waves (a pass when they are alike)."""
    m = items.shape[0]
    a = 1
    while a < m and not earlier(
        key[items[a]], wave[items[a]], items[a], key[items[a - 1]], wave[items[a - 1]], items[a - 1]
    ):
        a += 1
    if a == m:
        return
    if m > _INSERTION:
        items.sort()
        items[:] = items[np.argsort(key[items], kind="mergesort")]
    for a in range(1, m):
        w = items[a]
        b = a
        while b > 0 and earlier(key[w], wave[w], w, key[items[b - 1]], wave[items[b - 1]], items[b - 1]):
            items[b] = items[b - 1]
            b -= 1
        items[b] = w


@njit(cache=True)
def by_worker(batch, count, mark):
    """``batch[:count]``, distinct workers, into worker order: when it holds many of the workers, by marking them in
    ``mark`` (one flag a worker, all False, left so) and a sweep; else by a sort."""
    if count * _SWEEP < mark.shape[0]:
        batch[:count].sort()
        return
    for a in range(count):
        mark[batch[a]] = True
    count = 0
    for w in range(mark.shape[0]):
        if mark[w]:
            mark[w] = False
            batch[count] = w
            count += 1
