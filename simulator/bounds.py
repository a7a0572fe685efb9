"""The bounds on a scenario's magnitudes: beyond them a value is a typo, and the sums the engines make of it would
overflow to infinity or NaN (or never end).

- **Times.** Every key that is a time a worker spends in each iteration (a compute time, a delay, a latency, an
  overhead) and every time per byte times the message's bytes, every persistent factor times the mean compute time,
  every trace entry, and the iteration these make together (its slowest compute time, the update, a call, and the
  least time an exchange of the whole model among all workers takes, :func:`_exchange`), times ``iterations``, stays
  within :data:`HORIZON` seconds of simulated time; ``duration`` too.
- **Spreads.** A coefficient of variation is at most :data:`MAX_CV` (a gamma's shape at least 1/MAX_CV²).
- **Sizes.** ``workload.params`` and ``workload.samples`` are at most :data:`MAX_ELEMENTS`, ``workload.batch`` at
  most :data:`MAX_BATCH`, ``algorithm.servers`` at most :data:`MAX_SERVERS`, ``workload.buckets`` at most
  :data:`MAX_BUCKETS`, ``algorithm.period`` and ``global_period`` at most :data:`MAX_PERIOD`.

:func:`check` raises the one-line error that names the key, its value and its bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stragglerlab.simulator.keys import ScenarioError
from stragglerlab.simulator.modelsize import model_parameters
from stragglerlab.simulator.network import BYTES_PER_ELEMENT, log2ceil

if TYPE_CHECKING:
    from stragglerlab.simulator.scenario import Origins, Scenario

#: the longest run a scenario may ask for, in simulated seconds (30,000 years)
HORIZON = 1e12
#: the largest coefficient of variation of a compute time, a call's cost or a measured exchange's spread
MAX_CV = 100.0
#: the most elements of a model (a message of 4 TiB) and the most samples of a data set
MAX_ELEMENTS = 2**40
#: the most samples of one worker-iteration
MAX_BATCH = 2**31
#: the most shards of a parameter server
MAX_SERVERS = 2**20
#: the most gradient buckets of a synchronous round
MAX_BUCKETS = 2**16
#: the longest period of an algorithm's exchanges (``algorithm.period``, ``global_period``), in iterations
MAX_PERIOD = 2**31

#: keys that are seconds every iteration may take
SECONDS = (
    "workload.compute.mean",
    "workload.call.mean",
    "imbalance.delay",
    "workload.update",
    "network.alpha",
    "network.intra_alpha",
    "network.overhead",
    "network.message_overhead",
    "network.activation_delay",
)
#: keys that are seconds per byte of a message
PER_BYTE = ("network.beta", "network.intra_beta", "network.gamma", "network.fabric_beta", "algorithm.server_gamma")


def _value(s: Scenario, dotted: str) -> float | None:
    node: Any = s
    for part in dotted.split("."):
        node = getattr(node, part, None)
    return node


def _message_bytes(s: Scenario) -> int:
    """Bytes of one model or gradient: ``workload.params``, or a built-in model's parameter count, of float32."""
    return (model_parameters(s) or s.workload.params) * BYTES_PER_ELEMENT


def check(s: Scenario, origins: Origins, trace_max: float = 0.0) -> None:
    """Refuse ``s`` in one line when a time, a time per byte, a factor or an iteration's time is beyond the horizon
    (module doc); ``origins`` say where each key came from, ``trace_max`` is the largest compute time of its trace,
    if it has one."""
    fail, N = origins.fail, s.iterations
    most = HORIZON / N
    if s.duration > HORIZON:
        raise fail("duration", s.duration, f"at most {HORIZON:.0e} s of simulated time")
    for dotted in SECONDS:
        seconds = _value(s, dotted)
        if seconds is not None and seconds > most:
            raise fail(dotted, seconds, f"at most {most:.3g} s, so that {N} iterations of it {_within()}")
    nbytes = _message_bytes(s)
    for dotted in PER_BYTE:
        per_byte = _value(s, dotted)
        if per_byte is not None and per_byte * nbytes > most:
            raise fail(
                dotted,
                per_byte,
                f"at most {most / nbytes:.3g} s per byte, so that {N} iterations of a {nbytes:,}-byte message "
                + _within(),
            )
    w, im = s.workload, s.imbalance
    slowest = w.compute.mean
    if im.kind == "persistent":
        factor = max(im.factors.values())
        if factor * w.compute.mean > most:
            raise fail(
                "imbalance.factors",
                dict(im.factors),
                f"factors of at most {most / w.compute.mean:.3g}, so that {N} iterations of workload.compute.mean "
                f"= {w.compute.mean} s times them {_within()}",
            )
        slowest *= factor
    elif im.kind == "trace":
        if trace_max > most:
            raise fail(
                "imbalance.file", str(im.file), f"compute times of at most {most:.3g} s (one is {trace_max:.3g})"
            )
        slowest = trace_max
    elif im.kind == "random-delay":
        slowest += im.delay
    exchange = _exchange(s, nbytes)
    local = slowest + w.update + (w.call.mean if w.call else 0.0)
    if local + exchange <= most:
        return
    exceed = f"so that {N} iterations of {local + exchange:.3g} s exceed {HORIZON:.0e} s of simulated time"
    if exchange >= local:  # the network makes most of it
        network = next((k for k in origins if k.startswith("network.")), "")  # a --set of the network's, or the file
        raise ScenarioError(
            f"{origins.of(network).label}: network: an exchange of {nbytes:,} bytes among {s.workers} workers takes "
            f"{exchange:.3g} s, {exceed}: lower network.alpha, beta, gamma, fabric_beta, overhead or "
            "activation_delay, or workload.params"
        )
    raise ScenarioError(
        f"{origins.of('workload.compute.mean').label}: workload: an iteration's slowest compute time, update and call "
        f"take {local:.3g} s, {exceed}: lower workload.compute.mean, imbalance.delay or imbalance.factors, "
        "workload.update or workload.call"
    )


def _within() -> str:
    return f"stay within {HORIZON:.0e} s of simulated time"


def _exchange(s: Scenario, nbytes: int) -> float:
    """Seconds a synchronous round of ``nbytes`` among all workers takes at least, in closed form (instant even at
    millions of workers): ⌈log2 P⌉ steps of latency, message overhead and activation, and 2(P − 1)/P of the message
    through each rank's link (beta, and gamma for half of it), and the fabric's share of it from every node, plus the
    round's overhead."""
    net, P = s.network, s.workers
    nodes = -(-P // s.cluster.workers_per_node)
    share = 2 * (P - 1) / P * nbytes
    latency = log2ceil(P) * (net.alpha + net.message_overhead + net.activation_delay)
    return net.overhead + latency + share * (net.beta + net.gamma / 2 + nodes * net.fabric_beta)
