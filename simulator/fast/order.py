"""Ordering posts in the fast engine's steps: the k-th smallest of many times (a round's trigger, LSGD's counting
trigger), and a batch of times sorted in place (the parameter server's queue).

Both bucket the times first: a histogram over equal buckets between the least and the greatest finds the bucket that
holds the k-th (the bucket of a time is monotone in it), or places each time in its bucket, so only one bucket is
selected from, or each bucket sorted on its own. That is a few linear passes where a quickselect over everything took
12 times numpy's partition (and numba's ``np.partition`` five times sync's whole sweep).
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: buckets of the histogram that narrows a selection
BUCKETS = 1 << 14
#: a bucket of more times than this is sorted by merge sort, not by insertion
_INSERTION = 32


@njit(cache=True)
def _scale(lo, hi, buckets):
    """The factor that maps a time in [lo, hi] to its bucket ``int((t − lo)·scale)`` of ``buckets``."""
    scale = (buckets - 1) / (hi - lo) if hi > lo else 0.0
    return scale if np.isfinite(scale) else 0.0  # a spread of subnormal size: one bucket


@njit(cache=True)
def kth_smallest(x, q, scratch):
    """The ``q``-th smallest (from 1) of ``x``: its bucket's values are copied into ``scratch`` (as long as x) and
    selected from (:func:`_select`)."""
    lo, hi = x.min(), x.max()
    scale = _scale(lo, hi, BUCKETS)
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
def sort_batch(items, count, key, tie, first, sorted_):
    """``items[:count]`` (worker indices, in worker order) into ``sorted_`` in the order of (``key[w]``, ``tie[w]``,
    w). ``first``: scratch of at least count + 2 int64. Each item goes to its time's bucket (count buckets), stable,
    then each bucket is sorted on its own: by insertion, or by merge sort on the key and insertion among equal keys
    when it holds many."""
    if count == 0:
        return
    lo, hi = np.inf, -np.inf
    for a in range(count):
        t = key[items[a]]
        lo, hi = min(lo, t), max(hi, t)
    buckets = count
    scale = _scale(lo, hi, buckets)
    first[: buckets + 2] = 0
    for a in range(count):
        first[int((key[items[a]] - lo) * scale) + 1] += 1
    for b in range(buckets):
        first[b + 1] += first[b]
    for a in range(count):  # scatter, stable: first[b] moves to bucket b's end
        w = items[a]
        b = int((key[w] - lo) * scale)
        sorted_[first[b]] = w
        first[b] += 1
    begin = 0
    for b in range(buckets):
        end = first[b]
        if end - begin > _INSERTION:
            part = sorted_[begin:end]
            part[:] = part[np.argsort(key[part], kind="mergesort")]
        _insertion(sorted_, begin, end, key, tie)
        begin = end


@njit(cache=True, inline="always")
def _insertion(a, begin, end, key, tie):
    """Insertion sort of ``a[begin:end]`` by (key, tie), stable; a run already in order costs one comparison each."""
    for i in range(begin + 1, end):
        w = a[i]
        j = i
        while j > begin and (key[a[j - 1]] > key[w] or (key[a[j - 1]] == key[w] and tie[a[j - 1]] > tie[w])):
            a[j] = a[j - 1]
            j -= 1
        a[j] = w
