"""How a real run's ranks exchange, one module per family, behind one small interface (:class:`Exchange`).

- :mod:`.native`: ``sync``, ``eager-solo``, ``eager-majority`` and ``wagma`` through the native core's
  :class:`~stragglerlab.realrun.collectives.Collective`;
- :mod:`.torch_sync`: ``sync`` through ``torch.distributed`` (gloo on CPU, NCCL on GPU), the baseline a user would
  otherwise run (``stragglerlab run --backend torch``);
- :mod:`.local_sgd` and :mod:`.lsgd`: model averaging and leader pulls with plain MPI collectives (mpi4py).

Every exchange follows docs/semantics.md, hands this rank's ``iterations`` rows to the sink (a row may wait until
its round is known) and, on rank 0, the ``rounds`` rows; times come from the run's aligned clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from stragglerlab.realrun.clock import RunClock
from stragglerlab.realrun.replica import Replica
from stragglerlab.simulator.scenario import Scenario

Sink = Callable[[str, tuple], None]


def iteration_row(
    worker: int, n: int, t_start: float, t_post: float, t_done: float, round_: int, model_version: int, fresh: bool
) -> tuple:
    """What a rank records of one iteration (:data:`~stragglerlab.analysis.runfolder.RECORDED`)."""
    return (worker, n, t_start, t_post, t_done, round_, model_version, bool(fresh))


def synchronous_round(m: int, kind: str, posts: np.ndarray, t_done: float, group: int = -1) -> tuple:
    """A ``rounds`` row of a round every rank joined: its initiator is the last to post (DESIGN §3)."""
    last = int(np.argmax(posts))
    return (m, kind, last, float(posts[last]), t_done, len(posts), len(posts), group)


class Exchange:
    """One rank's side of an algorithm. ``iteration`` is called after each computation (gradient ``g`` of
    iteration ``n``, training ``loss``) and returns ``(t_done, iterations)`` when a round completed on this rank
    (``iterations``: per worker, in the model it produced), else None."""

    #: replicas are identical after every round, so rank 0's evaluations describe the averaged model (worker -1)
    identical = True

    def __init__(self, scenario: Scenario, comm: Any, replica: Replica, clock: RunClock, sink: Sink):
        self.scenario, self.comm, self.replica, self.clock, self.sink = scenario, comm, replica, clock, sink
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.d = replica.dimension

    def iteration(self, n: int, g: Any, loss: float, t_start: float, t_post: float) -> tuple[float, int] | None:
        raise NotImplementedError

    def rounds(self) -> list[tuple]:
        """``rounds`` rows completed since the last call (rank 0 writes them)."""
        return []

    def close(self) -> None:
        """Collective: finish the exchange and hand over every row still held."""


def make_exchange(
    scenario: Scenario, backend: str, comm: Any, replica: Replica, clock: RunClock, sink: Sink
) -> Exchange:
    """The exchange of ``algorithm.name`` (``backend = "torch"``: sync through torch.distributed)."""
    name = scenario.algorithm.name
    if backend == "torch":
        from stragglerlab.realrun.algorithms.torch_sync import TorchSync

        return TorchSync(scenario, comm, replica, clock, sink)
    if name == "local-sgd":
        from stragglerlab.realrun.algorithms.local_sgd import LocalSgd

        return LocalSgd(scenario, comm, replica, clock, sink)
    if name == "lsgd":
        from stragglerlab.realrun.algorithms.lsgd import Lsgd

        return Lsgd(scenario, comm, replica, clock, sink)
    from stragglerlab.realrun.algorithms.native import NativeExchange

    return NativeExchange(scenario, comm, replica, clock, sink)
