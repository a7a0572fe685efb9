"""Partial collectives from Python: the binding of the native core (``native/include/pcoll.h``).

``Collective(kind, count=n, comm=...)`` runs a sequence of rounds: each call posts this rank's float32 vector and
waits for the result of its round (the rules of ``docs/semantics.md``). The library and the binding's C extension
(``native/python/pcollmodule.c``) are compiled on first use (:mod:`.build`); ``post`` and ``wait`` each cross into C
once. Every misuse raises here, before the core is reached: wrong dtype or length, two posts without a wait, a
wait without a post, use after close, an unknown kind or a bad option value.
"""

from __future__ import annotations

import importlib.util
import weakref
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.runfolder import SCHEMAS
from stragglerlab.realrun.build import binding_path, build

KINDS = ("sync", "eager-solo", "eager-majority", "wagma", "quorum")
LATE = ("accumulate", "drop")
DIVIDE_BY = ("workers", "contributors")
ROUND_KINDS = ("sync", "async", "group", "average")
ROUND_COLUMNS = SCHEMAS["rounds"].names  # the rounds table of the run folder

#: One round record (``pcoll_round``) as numpy reads the bytes the core copies out; checked against the layout the
#: compiled binding states when it is loaded.
ROUND_DTYPE = np.dtype(
    [
        ("round", np.uint64),
        ("kind", np.int32),
        ("initiator", np.int32),
        ("group", np.int32),
        ("contributors", np.int32),
        ("fresh", np.int32),
        ("gradients", np.int32),
        ("hops", np.int32),
        ("t_trigger", np.float64),
        ("t_done", np.float64),
    ],
    align=True,
)


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


_BINDING: ModuleType | None = None


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


def round_layout() -> tuple[tuple[str, int, int], ...]:
    """ROUND_DTYPE's (name, offset, size) per field, as the binding states the core's."""
    fields: dict[str, Any] = dict(ROUND_DTYPE.fields or {})
    return tuple((name, fields[name][1], fields[name][0].itemsize) for name in ROUND_DTYPE.names or ())


def check_layout(fields: tuple[tuple[str, int, int], ...], size: int) -> None:
    """Raise UserError unless ROUND_DTYPE has the binding's record layout: (name, offset, size) per field, then the
    record's size (a header changed without the binding, or a stale build)."""
    ours = round_layout()
    if tuple(fields) != ours or size != ROUND_DTYPE.itemsize:
        raise UserError(
            f"the native core's round record {fields} ({size} bytes) does not match the binding's {ours} "
            f"({ROUND_DTYPE.itemsize} bytes): rebuild with stragglerlab build-native --force"
        )


def binding(comm: Any) -> ModuleType:
    """The compiled extension ``_pcoll`` (built by ``comm``'s rank 0 first if the cache lacks it), loaded once, its
    round layout checked. Its integer constants are the core's enums (QUORUM, MAJORITY, WAGMA, LATE_*, DIVIDE_*)."""
    global _BINDING
    if _BINDING is None:
        path = binding_path(Path(_built(comm)))
        spec = importlib.util.spec_from_file_location("_pcoll", path)
        if spec is None or spec.loader is None:
            raise UserError(f"cannot load the native core's binding {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        check_layout(module.ROUND_FIELDS, module.ROUND_SIZE)
        _BINDING = module
    return _BINDING


def mechanism(kind: str, size: int, quorum: int, sync_period: int) -> tuple[str, int, int]:
    """How the core runs ``kind`` over ``size`` ranks: the name of its C kind (a constant of :func:`binding`), the
    quorum k (0: half the ranks, rounded up) and sync_period. sync, eager-solo and quorum are one k-of-P quorum:
    sync a quorum of every rank with every round synchronous, eager-solo a quorum of one."""
    if kind == "sync":
        return "QUORUM", size, 1
    if kind == "eager-solo":
        return "QUORUM", 1, sync_period
    return {"eager-majority": "MAJORITY", "wagma": "WAGMA"}.get(kind, "QUORUM"), quorum, sync_period


def _explain(count: int, what: str, x: Any) -> np.ndarray:
    """What the binding makes of a vector it cannot take as it is: the error a user reads, or (for post) a
    contiguous copy of a float32 vector of ``count``. (A function of the count, not a method: the binding keeps it,
    and a bound method would tie the handle to its Collective in a cycle.)"""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise TypeError(f"{what} needs a float32 numpy array, not {getattr(x, 'dtype', type(x).__name__)}")
    if x.shape != (count,):
        raise ValueError(f"{what} needs shape ({count},), not {x.shape}")
    if what == "post":
        return np.ascontiguousarray(x)
    raise ValueError(f"{what} needs a writable C-contiguous array")


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(allowed)}")
    return str(value)


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

    In the core, sync, eager-solo and quorum are one mechanism, a k-of-P quorum: sync is a quorum of every rank
    with every round synchronous, eager-solo a quorum of one.
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
        self.kind = _choice("kind", kind, KINDS)
        options = dict(
            group_size=_integer("group_size", group_size, 1),
            sync_period=_integer("sync_period", sync_period, 0),
            seed=_integer("seed", seed, 0) % 2**64,
            ring_min_bytes=_integer("ring_min_bytes", ring_min_bytes, 0),
        )
        late, divide_by = _choice("late", late, LATE), _choice("divide_by", divide_by, DIVIDE_BY)
        self.count = _integer("count", count, 1)
        if not hasattr(comm, "py2f"):
            raise TypeError(f"comm must be an mpi4py communicator, not {type(comm).__name__}")
        from mpi4py import MPI

        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise UserError("the native core needs MPI initialised with MPI_THREAD_MULTIPLE")
        self.size = comm.Get_size()
        k = 0 if quorum is None else _integer("quorum", quorum, 1)
        if k > self.size:
            raise ValueError(f"quorum={quorum!r} must be at most the {self.size} ranks of the communicator")
        lib = binding(comm)
        core_kind, k, options["sync_period"] = mechanism(kind, self.size, k, options["sync_period"])
        handle = lib.Handle(
            comm.py2f(),
            self.count,
            getattr(lib, core_kind),
            lib.LATE_DROP if late == "drop" else lib.LATE_ACCUMULATE,
            lib.DIVIDE_CONTRIBUTORS if divide_by == "contributors" else lib.DIVIDE_WORKERS,
            quorum=k,
            info_type=RoundInfo,
            explain=partial(_explain, self.count),
            empty=partial(np.empty, self.count, dtype=np.float32),
            **options,
        )
        self._handle: Any = handle
        self._post, self._wait = handle.post, handle.wait
        # Stop the progress thread before MPI finalises if the owner never closes (no collective at exit).
        self._finalizer = weakref.finalize(self, handle.abort)

    def post(self, x: np.ndarray) -> None:
        """Post this rank's contribution of the next call (a float32 array of ``count``, copied in)."""
        self._post(x)

    def wait(self, out: np.ndarray | None = None) -> tuple[np.ndarray, RoundInfo]:
        """Block until the round of the posted call completes; its result (float32, ``count``) and RoundInfo.

        The result goes into a new array, or into ``out`` (a writable C-contiguous float32 array of ``count``),
        which a loop can pass every time to spare an allocation per round.
        """
        return self._wait(out)

    def test(self) -> bool:
        """Whether ``wait`` would return at once (drives the core's progress once)."""
        return bool(self._handle.test())

    def _records(self, first: int) -> np.ndarray:
        """This rank's records of the rounds it completed so far, from index ``first`` on (none if it has fewer)."""
        return np.frombuffer(self._handle.records(first), dtype=ROUND_DTYPE)

    def triggers(self, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The round indices and ``t_trigger`` of the rounds this rank completed so far, from record ``first`` on:
        rounds whose results are queued but not yet waited for (a rank that lags) included. Cheap (a copy of the new
        records), for a loop that reads only the records it has not seen."""
        records = self._records(first)
        return records["round"].astype(np.int64), records["t_trigger"].copy()

    def rounds(self) -> pd.DataFrame:
        """The rounds this rank completed so far: the run folder's ``rounds`` table."""
        records = self._records(0)
        kinds = np.array(ROUND_KINDS, dtype=object)
        return pd.DataFrame(
            {
                "round": records["round"].astype(np.int64),
                "kind": kinds[records["kind"]].tolist(),
                "initiator": records["initiator"].astype(np.int64),
                "t_trigger": records["t_trigger"].copy(),
                "t_done": records["t_done"].copy(),
                "contributors": records["contributors"].astype(np.int64),
                "fresh": records["fresh"].astype(np.int64),
                "group": records["group"].astype(np.int64),
            },
            columns=ROUND_COLUMNS,
        )

    def close(self) -> None:
        """Collective: complete every round any rank started, then free the handle (idempotent)."""
        if self._finalizer.detach() is not None:
            self._handle.close()

    def __enter__(self) -> Collective:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            # Another rank may never reach close: stop locally and let the job abort instead of hanging.
            self._finalizer()
