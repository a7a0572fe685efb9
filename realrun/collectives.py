"""Partial collectives from Python: a ctypes binding of the native core (``native/include/pcoll.h``).

``Collective(kind, count=n, comm=...)`` runs a sequence of rounds: each call posts this rank's float32 vector and
waits for the result of its round (the rules of ``docs/semantics.md``). The library is compiled on first use
(:mod:`.build`). Every misuse raises here, before C is reached: wrong dtype or length, two posts without a wait, a
wait without a post, use after close, an unknown kind or a bad option value.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.runfolder import SCHEMAS
from stragglerlab.realrun.build import build

KINDS = {"sync": 0, "eager-solo": 0, "eager-majority": 1, "wagma": 2, "quorum": 0}
LATE = {"accumulate": 0, "drop": 1}
DIVIDE_BY = {"workers": 0, "contributors": 1}
ROUND_KINDS = ("sync", "async", "group", "average")
ROUND_COLUMNS = SCHEMAS["rounds"].names  # the rounds table of the run folder


class _Options(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("late", ctypes.c_int),
        ("divide_by", ctypes.c_int),
        ("group_size", ctypes.c_int),
        ("sync_period", ctypes.c_uint64),
        ("seed", ctypes.c_uint64),
        ("ring_min_bytes", ctypes.c_size_t),
        ("quorum", ctypes.c_int),
    ]


class _Round(ctypes.Structure):
    _fields_ = [
        ("round", ctypes.c_uint64),
        ("kind", ctypes.c_int),
        ("initiator", ctypes.c_int),
        ("group", ctypes.c_int),
        ("contributors", ctypes.c_int),
        ("fresh", ctypes.c_int),
        ("gradients", ctypes.c_int),
        ("hops", ctypes.c_int),
        ("t_trigger", ctypes.c_double),
        ("t_done", ctypes.c_double),
    ]


class RoundInfo(NamedTuple):
    """What a wait returned: round ``round`` of kind ``kind`` ("sync", "async", "group" or "average").

    ``contributors``: ranks that contributed anything (within the group for wagma group rounds); ``fresh``: this
    rank's own contribution of this call is in it; ``gradients``: gradients (wagma: models) summed; ``mask``: a
    bool per rank, True where it contributed; ``group``: the wagma butterfly phase, -1 when all ranks took part;
    ``initiator``: the rank whose post activated the round (sync rounds: the last to post).
    """

    round: int
    kind: str
    contributors: int
    fresh: bool
    gradients: int
    mask: tuple[bool, ...]
    group: int
    initiator: int


class _Addresses:
    """Data addresses of the last two arrays the caller passed to C: reading one costs about a microsecond (as
    much as a small round), and a loop passes the same buffers again and again. Holding the arrays keeps the
    addresses valid (numpy refuses to resize an array in place while another reference to it exists)."""

    def __init__(self, size: int = 2) -> None:
        self._arrays: list[tuple[np.ndarray, int]] = []
        self._size = size

    def of(self, x: np.ndarray) -> int:
        for array, address in self._arrays:
            if array is x:
                return address
        address = x.ctypes.data
        self._arrays = [(x, address), *self._arrays[: self._size - 1]]
        return address


_LIB: ctypes.CDLL | None = None


def _built(comm: Any) -> str:
    """Path of the library, built by rank 0 first so that a job's ranks do not all compile it at once; a build
    error reaches every rank (raising on rank 0 alone would leave the others waiting)."""
    error = None
    if comm.Get_rank() == 0:
        try:
            build()
        except UserError as err:
            error = str(err)
    error = comm.bcast(error, root=0)
    if error is not None:
        raise UserError(error)
    return str(build())  # a cache hit, unless this node's cache differs from rank 0's


def _library(comm: Any) -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        lib = ctypes.CDLL(_built(comm))
        p = ctypes.c_void_p
        lib.pcoll_create.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(_Options), ctypes.POINTER(p)]
        lib.pcoll_post.argtypes = [p, p]
        lib.pcoll_wait.argtypes = [p, p, ctypes.POINTER(_Round), ctypes.POINTER(ctypes.c_int), p]
        lib.pcoll_num_rounds.argtypes = [p]
        lib.pcoll_num_rounds.restype = ctypes.c_size_t
        lib.pcoll_get_rounds.argtypes = [p, ctypes.c_size_t, ctypes.c_size_t, p]
        lib.pcoll_close.argtypes = [p]
        lib.pcoll_abort.argtypes = [p]
        lib.pcoll_strerror.restype = ctypes.c_char_p
        lib.pcoll_last_error.argtypes = [p]
        lib.pcoll_last_error.restype = ctypes.c_char_p
        _LIB = lib
    return _LIB


def _choice(name: str, value: Any, allowed: dict[str, int]) -> int:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(allowed)}")
    return allowed[value]


def _integer(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")
    return int(value)


class Collective:
    """A sequence of partial-collective rounds over ``comm`` (collective: every rank creates and closes it).

    Parameters
    ----------
    kind : "sync" | "eager-solo" | "eager-majority" | "wagma" | "quorum"
    count : int
        Elements (float32) of every contribution and result.
    comm : mpi4py communicator (duplicated inside; MPI must run with MPI_THREAD_MULTIPLE)
    sync_period : int
        k > 0: round n is synchronous iff n % k == k - 1; 0: never.
    late : "accumulate" | "drop"
        Eager kinds: a gradient that misses its round goes into the next one, or is discarded.
    divide_by : "workers" | "contributors"
        Eager kinds: the result is the sum over P, or over the number of gradients summed.
    seed : int
        eager-majority: seed of the initiator draw (the same on every rank).
    group_size : int
        wagma: butterfly group size.
    ring_min_bytes : int
        Contributions of at least this many bytes are reduced by the ring, smaller ones by recursive doubling
        (0: 128 KiB).
    quorum : int or None
        quorum: the k-th post of a call activates its round, 1 <= k <= the ranks (1: as eager-solo); None: half the
        ranks, rounded up. Other kinds ignore it.
    """

    def __init__(
        self,
        kind: str,
        *,
        count: int,
        comm: Any,
        sync_period: int = 0,
        late: str = "accumulate",
        divide_by: str = "workers",
        seed: int = 0,
        group_size: int = 2,
        ring_min_bytes: int = 0,
        quorum: int | None = None,
    ) -> None:
        options = _Options(
            kind=_choice("kind", kind, KINDS),
            late=_choice("late", late, LATE),
            divide_by=_choice("divide_by", divide_by, DIVIDE_BY),
            group_size=_integer("group_size", group_size, 1),
            sync_period=_integer("sync_period", sync_period, 0),
            seed=_integer("seed", seed, 0) % 2**64,
            ring_min_bytes=_integer("ring_min_bytes", ring_min_bytes, 0),
        )
        self.kind = kind
        self.count = _integer("count", count, 1)
        if not hasattr(comm, "py2f"):
            raise TypeError(f"comm must be an mpi4py communicator, not {type(comm).__name__}")
        from mpi4py import MPI

        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise UserError("the native core needs MPI initialised with MPI_THREAD_MULTIPLE")
        self.size = comm.Get_size()
        if quorum is not None:
            options.quorum = _integer("quorum", quorum, 1)
            if quorum > self.size:
                raise ValueError(f"quorum={quorum!r} must be at most the {self.size} ranks of the communicator")
        if kind != "quorum":
            options.quorum = {"sync": self.size, "eager-solo": 1}.get(kind, 0)
        if kind == "sync":
            options.sync_period = 1
        self._lib = _library(comm)
        handle = ctypes.c_void_p()
        self._check(self._lib.pcoll_create(comm.py2f(), self.count, ctypes.byref(options), ctypes.byref(handle)))
        self._handle: ctypes.c_void_p | None = handle
        self._posted = False
        # The arguments of every wait, made once: building ctypes arguments costs as much as a small round.
        self._record, self._fresh = _Round(), ctypes.c_int()
        self._mask = np.zeros(self.size, dtype=np.uint8)
        self._out_args = (ctypes.byref(self._record), ctypes.byref(self._fresh), self._mask.ctypes.data)
        self._addresses = _Addresses()
        # Stop the progress thread before MPI finalises if the owner never closes (no collective at exit).
        self._finalizer = weakref.finalize(self, self._lib.pcoll_abort, handle)

    def _check(self, status: int, handle: ctypes.c_void_p | None = None) -> None:
        if status == 0:
            return
        detail = self._lib.pcoll_last_error(handle).decode() if handle else ""
        message = self._lib.pcoll_strerror(status).decode() + (f" ({detail})" if detail else "")
        raise ValueError(message) if status == 1 else RuntimeError(message)

    def _live(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise RuntimeError("the collective is closed")
        return self._handle

    def _vector(self, what: str, x: Any) -> np.ndarray:
        if not isinstance(x, np.ndarray) or x.dtype != np.float32:
            raise TypeError(f"{what} needs a float32 numpy array, not {getattr(x, 'dtype', type(x).__name__)}")
        if x.shape != (self.count,):
            raise ValueError(f"{what} needs shape ({self.count},), not {x.shape}")
        return x

    def post(self, x: np.ndarray) -> None:
        """Post this rank's contribution of the next call (copied in)."""
        handle = self._live()
        x = np.ascontiguousarray(self._vector("post", x))
        if self._posted:
            raise RuntimeError("post: the previous call was not waited for")
        self._check(self._lib.pcoll_post(handle, self._addresses.of(x)), handle)
        self._posted = True

    def wait(self, out: np.ndarray | None = None) -> tuple[np.ndarray, RoundInfo]:
        """Block until the round of the posted call completes; its result (float32, ``count``) and RoundInfo.

        The result goes into a new array, or into ``out`` (a writable C-contiguous float32 array of ``count``),
        which a loop can pass every time to spare an allocation per round.
        """
        handle = self._live()
        if out is None:
            out = np.empty(self.count, dtype=np.float32)
            address = out.ctypes.data
        elif self._vector("wait(out=...)", out).flags.c_contiguous and out.flags.writeable:
            address = self._addresses.of(out)
        else:
            raise ValueError("wait(out=...) needs a writable C-contiguous array")
        if not self._posted:
            raise RuntimeError("wait: no call was posted")
        self._check(self._lib.pcoll_wait(handle, address, *self._out_args), handle)
        self._posted = False
        record = self._record
        info = RoundInfo(
            round=record.round,
            kind=ROUND_KINDS[record.kind],
            contributors=record.contributors,
            fresh=bool(self._fresh.value),
            gradients=record.gradients,
            mask=tuple(self._mask.astype(bool).tolist()),
            group=record.group,
            initiator=record.initiator,
        )
        return out, info

    def _records(self, first: int) -> ctypes.Array:
        """This rank's records of the rounds it completed so far, from index ``first`` on (none if it has fewer)."""
        handle = self._live()
        n = max(self._lib.pcoll_num_rounds(handle) - first, 0)
        records = (_Round * n)()
        self._check(self._lib.pcoll_get_rounds(handle, first, n, records), handle)
        return records

    def triggers(self, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The round indices and ``t_trigger`` of the rounds this rank completed so far, from record ``first`` on:
        rounds whose results are queued but not yet waited for (a rank that lags) included. Cheap (a copy of the new
        records), for a loop that reads only the records it has not seen."""
        records = self._records(first)
        return (
            np.array([r.round for r in records], dtype=np.int64),
            np.array([r.t_trigger for r in records], dtype=np.float64),
        )

    def rounds(self) -> pd.DataFrame:
        """The rounds this rank completed so far: the run folder's ``rounds`` table."""
        records = self._records(0)
        return pd.DataFrame(
            {
                "round": np.array([r.round for r in records], dtype=np.int64),
                "kind": [ROUND_KINDS[r.kind] for r in records],
                "initiator": np.array([r.initiator for r in records], dtype=np.int64),
                "t_trigger": np.array([r.t_trigger for r in records], dtype=np.float64),
                "t_done": np.array([r.t_done for r in records], dtype=np.float64),
                "contributors": np.array([r.contributors for r in records], dtype=np.int64),
                "fresh": np.array([r.fresh for r in records], dtype=np.int64),
                "group": np.array([r.group for r in records], dtype=np.int64),
            },
            columns=ROUND_COLUMNS,
        )

    def close(self) -> None:
        """Collective: complete every round any rank started, then free the handle (idempotent)."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        self._finalizer.detach()
        self._check(self._lib.pcoll_close(handle))

    def __enter__(self) -> Collective:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        elif self._handle is not None:
            # Another rank may never reach close: stop locally and let the job abort instead of hanging.
            self._finalizer()
            self._handle = None
