"""One fit of the network model's physical parameters to every round measured, at every rank count, at once.

``stragglerlab calibrate --collectives`` times each algorithm's rounds at some message sizes (:mod:`.roundtimes`),
with ``--np 2,3`` at several rank counts. A measured table prices exactly what it measured; the network model
(:mod:`stragglerlab.simulator.network`: each exchange the messages it sends, on links they share) prices everything
else, once its few parameters are known: ``alpha`` and ``beta`` (latency and seconds per byte of a node's link),
``message_overhead`` (LogGP's o, per message), ``gamma`` (seconds per byte added), ``fabric_beta`` (the fabric's
aggregate bandwidth; on one machine whose ranks are each a node of their own, what the ranks share of its memory and
cores) and ``overhead`` (software cost per round). They are the parameters whose model times come closest to all the
measured ones together, in relative error (least squares, :func:`fit`), the ping-pong's one-way times included.

**What a measured figure is predicted by**: the algorithm's own rules, built with a cost model that records what they
ask it (:class:`Recorded`), so a figure is priced exactly as the simulator will price that round: a round kind's
allreduce (``collective``), a WAGMA phase's concurrent groups (the slowest, the phase's round), a gossip exchange (a
worker's latest message among those it sends and receives, all workers' messages travelling at once), a ping-pong's
one-way message. Each kind's residual is reported. Rounds the model does not price by messages alone are not
fitted: a parameter server's push (its measured round holds the queue behind the other pushes) and the activation
token (a round's least wait does not hold it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stragglerlab.simulator import algorithms
from stragglerlab.simulator.imbalance import Spread
from stragglerlab.simulator.links import Links
from stragglerlab.simulator.network import NetworkModel, Ranks, members
from stragglerlab.simulator.scenario import Scenario

#: the model's parameters, in order
PARAMETERS = ("alpha", "beta", "message_overhead", "gamma", "fabric_beta", "overhead", "uplink_beta")
#: those fitted where nothing is known of the fabric: one host, or hosts of a cluster
FITTED_PARAMETERS = PARAMETERS[:-1]
#: the kinds whose figures the fit uses
FITTED = ("p2p", "burst", "allreduce", "sync", "async", "group", "average", "leader", "gossip")


@dataclass
class Recorded:
    """A cost model that records what an algorithm's rules ask of it (and answers with ``model``'s prices), so each
    figure of that algorithm can be priced again under other parameters."""

    model: NetworkModel
    calls: list[tuple[str, str, tuple[Any, ...]]] = field(default_factory=list)  # (method, kind, arguments)

    def collective(self, kind: str, nbytes: float, ranks: Ranks) -> float:
        self.calls.append(("collective", kind, (nbytes, members(ranks))))
        return self.model.collective(kind, nbytes, ranks)

    def concurrent(self, kind: str, nbytes: float, groups: Sequence[Sequence[int]]) -> list[float]:
        self.calls.append(("concurrent", kind, (nbytes, tuple(members(g) for g in groups))))
        return self.model.concurrent(kind, nbytes, groups)

    def gossip(self, n: float, src: np.ndarray, dst: np.ndarray, messages: int = 1) -> np.ndarray:
        self.calls.append(("gossip", "gossip", (n, np.asarray(src), np.asarray(dst), messages)))
        return self.model.gossip(n, src, dst, messages)

    def spread(self, kind: str, nbytes: float, ranks: Ranks) -> Spread:
        return self.model.spread(kind, nbytes, ranks)

    def activation(self, p: int) -> float:
        return self.model.activation(p)

    def p2p(self, n: float, intra: bool = False) -> float:
        return self.model.p2p(n, intra)

    def serve(self, n: float) -> float:
        return self.model.serve(n)

    def describe(self, p: int, n: float) -> dict[str, float | str]:
        return self.model.describe(p, n)

    def ranks(self) -> dict[tuple[str, int], int]:
        """(kind, i) -> the rank count the rules priced an exchange of that kind at: the i-th phase of concurrent
        rounds (its largest group; phase i prices the rounds whose ``group`` is i), else (i = 0) a collective's ranks
        or a gossip exchange's workers."""
        out: dict[tuple[str, int], int] = {}
        phased = self._phased()
        for method, kind, args in self.calls:
            if method == "concurrent":
                out[(kind, sum(1 for k, _ in out if k == kind))] = max(len(g) for g in args[1])
            elif kind not in phased:
                out.setdefault((kind, 0), self._size(method, args))
        return out

    def _phased(self) -> set[str]:
        """The kinds priced as phases of concurrent rounds (their collectives, if any, price nothing measured)."""
        return {kind for method, kind, _ in self.calls if method == "concurrent"}

    @staticmethod
    def _size(method: str, args: tuple[Any, ...]) -> int:
        if method == "concurrent":
            return max(len(g) for g in args[1])
        if method == "collective":
            return len(args[1])
        return 1 + int(max(args[1].max(), args[2].max()))

    def figure(self, model: NetworkModel, kind: str, ranks: int) -> float | None:
        """What ``model`` makes the mean exchange of ``kind`` over ``ranks`` ranks that these rules priced (None when
        they priced none)."""
        times = []
        phased = self._phased()
        for method, called, args in self.calls:
            if called != kind or self._size(method, args) != ranks or (kind in phased) != (method == "concurrent"):
                continue
            if method == "collective":
                times.append(model.collective(kind, *args))
            elif method == "concurrent":
                times.append(max(model.concurrent(kind, *args)))
            else:
                n, src, dst, messages = args
                each = model.gossip(n, src, dst, messages)
                latest = np.zeros(ranks)
                np.maximum.at(latest, dst, each)
                np.maximum.at(latest, src, each)
                times.append(float(latest.mean()))
        return float(np.mean(times)) if times else None


def record(scenario: Scenario) -> Recorded:
    """What ``scenario``'s algorithm asks the cost model for, under the scenario's own network."""
    recorded = Recorded(NetworkModel.of(scenario))
    rules = algorithms.get(scenario.algorithm.name).rules(scenario, recorded)
    getattr(rules, "global_times", None)  # round rules price their whole-world rounds when first asked
    return recorded


@dataclass(frozen=True)
class Observation:
    """One measured figure: its kind (a rounds kind; ``p2p``, a ping-pong's one-way time; ``burst``, the round trip
    of ``nbytes`` one-byte messages sent one after another and a one-byte reply, which the message overhead sets
    apart from the latency; ``allreduce``, an ``MPI_Allreduce`` under the model's algorithm), rank count, bytes
    (messages, for a burst) and mean seconds, and the rules that priced it (a round's; None for the others)."""

    kind: str
    ranks: int
    nbytes: float
    seconds: float
    rules: Recorded | None = None


def predict(model: NetworkModel, obs: Observation) -> float:
    """The model's time for an observation."""
    if obs.kind == "burst":
        k = int(obs.nbytes)
        return float(model.links.arrivals(np.zeros(k), np.ones(k), np.ones(k)).max()) + model.p2p(1.0)
    if obs.kind == "allreduce":
        return model.allreduce(obs.ranks, obs.nbytes)
    if obs.rules is None:
        return model.p2p(obs.nbytes)
    per_rack = obs.rules.model.links.per_rack  # the job's own racks (a smaller job has fewer nodes in each)
    if per_rack != model.links.per_rack:
        model = dataclasses.replace(model, links=dataclasses.replace(model.links, per_rack=per_rack))
    predicted = obs.rules.figure(model, obs.kind, obs.ranks)
    return math.nan if predicted is None else predicted


@dataclass
class NetworkFit:
    """The fitted parameters, their model, each kind's RMS relative residual and number of figures, and the standard
    error of each fitted parameter (from the residuals' Jacobian; nan where the figures do not determine it)."""

    params: dict[str, float]
    model: NetworkModel
    residuals: dict[str, tuple[float, int]]
    errors: dict[str, float] = field(default_factory=dict)

    def residual(self) -> float:
        """The RMS relative residual over every figure."""
        squares = sum(r**2 * n for r, n in self.residuals.values())
        return math.sqrt(squares / max(sum(n for _, n in self.residuals.values()), 1))


def with_params(base: NetworkModel, params: dict[str, float], intra: tuple[float, float] | None) -> NetworkModel:
    """``base`` with the fitted parameters in place (its layout and allreduce algorithm kept), its intra-node links
    ``intra`` (alpha, beta), or the fitted ones where None."""
    alpha, beta = params["alpha"], params["beta"]
    inside = intra or (alpha, beta)
    links = Links(
        alpha,
        beta,
        *inside,
        base.links.per_node,
        params["message_overhead"],
        params["fabric_beta"],
        base.links.per_rack,
        params["uplink_beta"],
    )
    return NetworkModel(links, params["gamma"], base.allreduce_algorithm, params["overhead"], base.activation_delay)


def fit(
    observations: Sequence[Observation],
    base: NetworkModel,
    intra: tuple[float, float] | None,
    start: dict[str, float],
    free: Sequence[str] = FITTED_PARAMETERS,
) -> NetworkFit:
    """The parameters ``free`` (of :data:`PARAMETERS`; the others stay at ``start``) whose model comes closest to
    every observation of a fitted kind, in relative error, all at once (bounded least squares from ``start`` and, when
    the fabric is free, from fabrics of a few widths, keeping the best); ``base`` gives the layout and allreduce
    algorithm, ``intra`` the intra-node (alpha, beta) (None: the same as the fitted ones)."""
    from scipy.optimize import least_squares

    start = {p: start.get(p, 0.0) for p in PARAMETERS}
    first = with_params(base, start, intra)  # a figure its rules do not price (a round kind they never ask) is left out
    used = [o for o in observations if o.kind in FITTED and o.seconds > 0 and math.isfinite(predict(first, o))]
    measured = np.array([o.seconds for o in used])
    scale = {p: max(start[p], 1e-15) for p in PARAMETERS}
    for per_byte in ("fabric_beta", "gamma", "uplink_beta"):
        scale[per_byte] = scale["beta"]
    scale["message_overhead"] = scale["alpha"]
    scale["overhead"] = max(scale["overhead"], scale["alpha"])
    steps = np.array([scale[p] for p in free])

    def params_of(x: np.ndarray) -> dict[str, float]:
        return {**start, **dict(zip(free, (float(v) for v in np.maximum(x, 0.0) * steps), strict=True))}

    def residuals(x: np.ndarray) -> np.ndarray:
        model = with_params(base, params_of(x), intra)
        return np.array([predict(model, o) for o in used]) / measured - 1

    best = None
    x0 = np.array([start[p] for p in free]) / steps
    fabrics = (x0[free.index("fabric_beta")], 0.5, 2.0) if "fabric_beta" in free else (None,)
    for fabric in dict.fromkeys(fabrics):
        x = x0.copy()
        if fabric is not None:
            x[free.index("fabric_beta")] = fabric
        found = least_squares(residuals, x, bounds=(0.0, np.inf), method="trf", diff_step=1e-3, x_scale=1.0)
        if best is None or found.cost < best.cost:
            best = found
    assert best is not None
    params = params_of(best.x)
    model = with_params(base, params, intra)
    errors: dict[str, list[float]] = {}
    for o in used:
        errors.setdefault(o.kind, []).append(predict(model, o) / o.seconds - 1)
    residual = {k: (float(np.sqrt(np.nanmean(np.square(v)))), len(v)) for k, v in errors.items()}
    return NetworkFit(params, model, residual, standard_errors(best, free, steps, len(used)))


def standard_errors(found: Any, free: Sequence[str], steps: np.ndarray, figures: int) -> dict[str, float]:
    """Each free parameter's standard error: the least-squares covariance (JᵀJ)⁻¹·s², s² the residuals' variance
    over ``figures`` − ``len(free)`` degrees of freedom; nan without degrees of freedom or where JᵀJ is singular in
    that parameter."""
    dof = figures - len(free)
    if dof <= 0:
        return dict.fromkeys(free, math.nan)
    jac = np.asarray(found.jac, dtype=float)
    s2 = 2 * float(found.cost) / dof
    information = jac.T @ jac
    covariance = np.linalg.pinv(information)
    return {
        name: float(np.sqrt(max(covariance[i, i], 0.0) * s2) * steps[i]) if information[i, i] > 0 else math.nan
        for i, name in enumerate(free)
    }


def held_out(
    observations: Sequence[Observation],
    base: NetworkModel,
    intra: tuple[float, float] | None,
    start: dict[str, float],
    free: Sequence[str],
) -> dict[int, tuple[float, int]]:
    """Leave one rank count out: for each rank count the figures were measured at (where there are several), the RMS
    relative error with which a fit to the other counts' figures prices that count's, and how many there are."""
    counts = sorted({o.ranks for o in observations if o.kind in FITTED})
    out: dict[int, tuple[float, int]] = {}
    for count in counts if len(counts) > 1 else ():
        rest = fit([o for o in observations if o.ranks != count], base, intra, start, free)
        mine = [o for o in observations if o.ranks == count and o.kind in FITTED and o.seconds > 0]
        errors = np.array([predict(rest.model, o) / o.seconds - 1 for o in mine])
        errors = errors[np.isfinite(errors)]
        if len(errors):
            out[count] = (float(np.sqrt(np.mean(np.square(errors)))), len(errors))
    return out
