"""Ordering posts in the fast engine's steps: which of two posts comes first, the k-th smallest of many times (a
round's trigger, LSGD's counting trigger), and a batch of times sorted (the parameter server's queue).

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
def sort_batch(items, count, key, tie, buckets, sorted_, scratch):
    """``items[:count]`` (worker indices, in worker order) into ``sorted_`` in the order of posts (:func:`earlier`:
    ``key[w]``, then ``tie[w]``, then w). ``buckets``: scratch of at least count + 2 int64; ``scratch``: of at least
    count.

    A batch mostly at one instant (ties, as constant compute times make) is split around the key of its middle item:
    the items at that key stay in worker order, between the others sorted. Any other batch is bucket sorted."""
    pivot = key[items[count // 2]] if count else 0.0
    below, equal = 0, 0
    for a in range(count):
        t = key[items[a]]
        below += t < pivot
        equal += t == pivot
    if 2 * equal <= count:
        _bucket_sort(items[:count], key, tie, buckets, sorted_)
        return
    lo, above = 0, below + equal  # the items before the pivot's, and after, into scratch; the pivot's in place
    middle = below
    for a in range(count):
        w = items[a]
        t = key[w]
        if t < pivot:
            scratch[lo] = w
            lo += 1
        elif t == pivot:
            sorted_[middle] = w
            middle += 1
        else:
            scratch[above] = w
            above += 1
    _sort_ties(sorted_[below : below + equal], tie)
    _bucket_sort(scratch[:below], key, tie, buckets, sorted_[:below])
    _bucket_sort(scratch[below + equal : count], key, tie, buckets, sorted_[below + equal : count])


@njit(cache=True)
def _sort_ties(items, tie):
    """Items of one key, in worker order, into (tie, worker) order: nothing to do when their ties are alike."""
    for a in range(1, items.shape[0]):
        if tie[items[a]] != tie[items[0]]:
            items[:] = items[np.argsort(tie[items], kind="mergesort")]
            return


@njit(cache=True)
def _bucket_sort(items, key, tie, first, sorted_):
    """``items`` (in worker order) into ``sorted_`` in the order of posts: each item goes to its key's bucket (as
    many buckets as items), stable, then each bucket out of order is sorted on its own, by insertion, or, when it
    holds many, by merge sort on the key first. The comparisons are written out here: a helper that took the arrays
    would count references to them at every call."""
    count = items.shape[0]
    if count == 0:
        return
    lo, hi = np.inf, -np.inf
    for w in items:
        lo, hi = min(lo, key[w]), max(hi, key[w])
    scale = _scale(lo, hi, count)
    first[: count + 2] = 0
    for w in items:
        first[int((key[w] - lo) * scale) + 1] += 1
    for b in range(count):
        first[b + 1] += first[b]
    for w in items:  # scatter, stable: first[b] moves to bucket b's end
        b = int((key[w] - lo) * scale)
        sorted_[first[b]] = w
        first[b] += 1
    begin = 0
    for b in range(count):
        end = first[b]
        i = begin + 1
        while i < end and not earlier(
            key[sorted_[i]], tie[sorted_[i]], sorted_[i], key[sorted_[i - 1]], tie[sorted_[i - 1]], sorted_[i - 1]
        ):
            i += 1
        if i < end:  # out of order
            if end - begin > _INSERTION:
                part = sorted_[begin:end]
                part[:] = part[np.argsort(key[part], kind="mergesort")]
            for i in range(begin + 1, end):
                w = sorted_[i]
                j = i
                while j > begin and earlier(
                    key[w], tie[w], w, key[sorted_[j - 1]], tie[sorted_[j - 1]], sorted_[j - 1]
                ):
                    sorted_[j] = sorted_[j - 1]
                    j -= 1
                sorted_[j] = w
        begin = end
