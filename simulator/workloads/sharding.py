"""Which training samples each worker-iteration uses: the data sharded across workers as real runs shard it.

Real runs use torch's ``DistributedSampler(shuffle=True, drop_last=True)`` under a ``DataLoader(drop_last=True)``:
each epoch the train set is shuffled with a seed of (seed, epoch), cut to a multiple of P, and worker i takes every
P-th sample starting at i (a *strided* shard); it then reads consecutive batches of its shard and drops the last
partial one. :class:`Shards` does the same with numpy's generator, so worker i's iteration n reads a fixed set of
samples whatever the algorithm (the same data in every run of a paired comparison).
"""

from __future__ import annotations

import numpy as np


class Shards:
    """Sample indices of (worker, iteration) pairs for P workers of ``batch`` samples each over ``samples``."""

    KEEP_ENTRIES = 1 << 22  # indices kept over all cached epochs (32 MiB)

    def __init__(self, samples: int, workers: int, batch: int, seed: int):
        self.samples, self.workers, self.batch, self.seed = samples, workers, batch, seed
        self.steps = samples // workers // batch  # batches per worker per epoch
        if self.steps < 1:
            raise ValueError(f"{samples} training samples cannot give {workers} workers a batch of {batch} each")
        self._epochs: dict[int, np.ndarray] = {}
        self.keep = max(16, self.KEEP_ENTRIES // samples)  # epochs cached

    def epoch(self, e: int) -> np.ndarray:
        """The shuffled train indices of epoch ``e``, cut to a multiple of P. The epochs used last are kept (at least
        16, as many as fit :data:`KEEP_ENTRIES`): free-running LSGD workers can be tens of epochs apart."""
        perm = self._epochs.pop(e, None)
        if perm is None:
            if len(self._epochs) >= self.keep:
                del self._epochs[next(iter(self._epochs))]
            rng = np.random.default_rng([self.seed, e, 0x5A4D])
            perm = rng.permutation(self.samples)[: self.samples // self.workers * self.workers]
        self._epochs[e] = perm  # most recently used last
        return perm

    def indices(self, workers: np.ndarray, iterations: np.ndarray) -> np.ndarray:
        """(k, batch) sample indices of the k worker-iterations ``(workers[j], iterations[j])``."""
        workers, iterations = np.asarray(workers), np.asarray(iterations)
        epochs, steps = np.divmod(iterations, self.steps)
        # position in the epoch's permutation: worker + P * (step * batch + j)
        offsets = workers[:, None] + self.workers * (steps[:, None] * self.batch + np.arange(self.batch))
        out = np.empty(offsets.shape, dtype=np.int64)
        for e in np.unique(epochs):
            rows = epochs == e
            out[rows] = self.epoch(int(e))[offsets[rows]]
        return out
