"""Misuse of a Collective, spawned by test_probe.py under ``mpiexec``: every mistake must raise, none hang; and
``test()`` says whether a wait would return at once.

Exits 0 when each expected exception was raised (and the handle stayed usable afterwards); an AssertionError
otherwise.
"""

import weakref

import numpy as np
from mpi4py import MPI

from stragglerlab.realrun.collectives import Collective


def raises(kind: type[Exception], call, *args, **kwargs) -> None:
    try:
        call(*args, **kwargs)
    except kind:
        return
    raise AssertionError(f"{call.__name__}{args} did not raise {kind.__name__}")


def main() -> None:
    comm = MPI.COMM_WORLD
    good = np.ones(4, dtype=np.float32)
    raises(ValueError, Collective, "eager-bogus", count=4, comm=comm)
    raises(TypeError, Collective, "eager-solo", count=4, comm=comm, sync_perod=3)
    raises(ValueError, Collective, "eager-solo", count=4, comm=comm, late="later")
    raises(ValueError, Collective, "eager-solo", count=4, comm=comm, divide_by="all")
    raises(ValueError, Collective, "eager-solo", count=0, comm=comm)
    raises(ValueError, Collective, "eager-solo", count=4, comm=comm, sync_period=-1)
    raises(ValueError, Collective, "wagma", count=4, comm=comm, group_size=0)
    raises(ValueError, Collective, "eager-majority", count=4, comm=comm, seed=-2)
    raises(TypeError, Collective, "eager-solo", count=4, comm="world")
    for k in (0, -1, comm.Get_size() + 1, 1.5):
        raises(ValueError, Collective, "quorum", count=4, comm=comm, quorum=k)
    for kind in ("sync", "eager-solo", "eager-majority", "wagma", "quorum"):
        coll = Collective(kind, count=4, comm=comm, sync_period=2)
        assert not coll.test(), "test() before any post"
        raises(RuntimeError, coll.wait)
        raises(TypeError, coll.post, np.ones(4, dtype=np.float64))
        raises(TypeError, coll.post, [1.0, 2.0, 3.0, 4.0])
        raises(ValueError, coll.post, np.ones(5, dtype=np.float32))
        raises(ValueError, coll.post, np.ones((2, 2), dtype=np.float32))
        coll.post(good)
        raises(RuntimeError, coll.post, good)
        raises(TypeError, coll.wait, np.empty(4, dtype=np.float64))
        raises(ValueError, coll.wait, np.empty(5, dtype=np.float32))
        raises(ValueError, coll.wait, np.empty(8, dtype=np.float32)[::2])
        frozen = np.empty(4, dtype=np.float32)
        frozen.flags.writeable = False
        raises(ValueError, coll.wait, frozen)
        while not coll.test():  # drives progress until the round is in
            pass
        out, info = coll.wait()
        assert info.round == 0 and not coll.test(), info
        raises(RuntimeError, coll.wait)
        mine = np.full(4, np.nan, dtype=np.float32)
        for n in (1, 2):  # the same buffers twice: their addresses are cached
            coll.post(good)
            out, info = coll.wait(mine)
            assert out is mine and info.round == n and np.isfinite(mine).all(), (info, mine)
        coll.close()
        coll.close()
        raises(RuntimeError, coll.test)
        raises(RuntimeError, coll.post, good)
        raises(RuntimeError, coll.wait)
        raises(RuntimeError, coll.rounds)
        gone = weakref.ref(coll)
        del coll
        assert gone() is None, "a closed Collective outlived its last reference (a reference cycle)"
    print("ok")


if __name__ == "__main__":
    main()
