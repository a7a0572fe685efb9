"""The cost seam: one object says what communication costs, and the engines, the convergence replay and real runs all
receive it instead of building their own. ``cost_model(scenario)`` makes it from the scenario's ``[network]``: the
network model of :mod:`.network` (messages on shared links), or, with ``network.table``, the measured times of
:mod:`.measured` where they reach. Another model needs only the methods of :class:`CostModel`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from stragglerlab.simulator.imbalance import Spread
from stragglerlab.simulator.measured import MeasuredModel, read_table
from stragglerlab.simulator.network import NetworkModel

if TYPE_CHECKING:
    from stragglerlab.simulator.scenario import Scenario


class CostModel(Protocol):
    """Seconds that communication takes."""

    def collective(self, kind: str, nbytes: float, ranks: Sequence[int] | int) -> float:
        """The data exchange of a round of ``kind`` (a ``rounds`` table kind: sync, async, group, average, leader)
        moving ``nbytes`` per rank among ``ranks`` (the ranks, or a count meaning ranks 0 .. count − 1), with the
        per-round software overhead."""
        ...

    def concurrent(self, kind: str, nbytes: float, groups: Sequence[Sequence[int]]) -> list[float]:
        """The data exchanges of rounds that run at the same time, one per group of ranks."""
        ...

    def spread(self, kind: str, nbytes: float, ranks: Sequence[int] | int) -> Spread:
        """How single exchanges of ``kind`` (a rounds kind, ``gossip`` or ``push``) vary about their time: exact when
        each takes exactly its time, else each takes its time times a factor of mean 1 (a lognormal bulk and rare
        stalls), drawn per exchange from the scenario's seed."""
        ...

    def activation(self, p: int) -> float:
        """An activation token's broadcast to ``p`` ranks."""
        ...

    def p2p(self, n: float, intra: bool = False) -> float:
        """One message of ``n`` bytes alone on its links (between two ranks of one node when ``intra``)."""
        ...

    def serve(self, n: float) -> float:
        """A receiver taking in ``n`` bytes through its link and adding them (a server shard applying a push); its link
        takes one such message at a time."""
        ...

    def gossip(self, n: float, src: np.ndarray, dst: np.ndarray, messages: int = 1) -> np.ndarray:
        """The time of each pair's exchange (``src[i]`` → ``dst[i]``) when all of them travel at once, ``messages``
        models of ``n`` bytes one after the other (d-psgd's and sgp's model, ad-psgd's request and reply)."""
        ...

    def describe(self, p: int, n: float) -> dict[str, float | str]:
        """Figures a run records in its ``meta.json`` for messages of ``n`` bytes among ``p`` ranks."""
        ...


def cost_model(scenario: Scenario) -> CostModel:
    """The cost model of a scenario."""
    formulas = NetworkModel.of(scenario)
    table = scenario.network.table
    if table is None:
        return formulas
    return MeasuredModel(formulas, read_table(table), table.name)
