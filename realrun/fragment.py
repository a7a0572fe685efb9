"""The scenario fragment ``stragglerlab calibrate`` writes, from what its jobs measured (one job per rank count).

- ``[network]``: the network model's parameters fitted to every measurement of every job at once
  (:mod:`.networkfit`): the ping-pongs' one-way times, the bursts, and the rounds timed through the harness at every
  rank count (without them, ``MPI_Allreduce``'s times under the scenario's ``network.allreduce``); the intra-node
  latency and bandwidth from the ping-pong inside a host where a job spans hosts; with rounds, ``allreduce =
  "native"`` (what the native core does) and ``table``, the measured rounds of every rank count, which price the
  (kind, rank count, size) they measured, the fitted model pricing the rest.
- ``[algorithm] server_gamma``: the parameter server's work per byte beyond what the model gives a push, from the
  measured push rounds.
- ``[workload]``: the compute model of every job's measured compute times together, and ``update``, the mean gap
  between a round's end and the next computation in the timed blocks.

**(choice)** On one host every rank is a node of its own (``workers_per_node`` = 1 in the fit), so ``fabric_beta``
holds what the ranks share of the host (its memory and cores); with several hosts, the ranks of one host are a node.
On an emulated cluster (``--testbed``) the switch is a bridge with no limit of its own: ``fabric_beta`` stays 0 and,
where the testbed has racks, their uplinks' ``uplink_beta`` is fitted instead, each job's racks holding the nodes its
placement gave them. The comments say what each figure and fit came to: each parameter's standard error, how well a
fit without each rank count prices that count (where there are several), and, on a testbed, the fitted per-node
bandwidth beside the rate its links were shaped to.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from stragglerlab.realrun import roundtimes, testbed
from stragglerlab.realrun.calibration import BURSTS, SIZES, JobMeasurement, compute_model, fit_linear
from stragglerlab.realrun.networkfit import (
    FITTED,
    FITTED_PARAMETERS,
    PARAMETERS,
    NetworkFit,
    Observation,
    fit,
    held_out,
    record,
)
from stragglerlab.simulator.links import Links
from stragglerlab.simulator.network import NetworkModel
from stragglerlab.simulator.scenario import Scenario, from_dict


def base_model(scenario: Scenario, jobs: Sequence[JobMeasurement]) -> tuple[NetworkModel, tuple[float, float] | None]:
    """What the fit leaves as it is: the layout (fragment doc), the allreduce algorithm (the native core's where
    rounds were timed through it), and the intra-node (alpha, beta) of a ping-pong inside a host where a job spans
    hosts (None: one host, whose links are the fitted ones)."""
    spans = [j for j in jobs if j.spans]
    measured = next((j.one_way["intra_"] for j in spans if "intra_" in j.one_way), None)
    intra = line(measured) if measured is not None else None
    per_node = max((j.per_host for j in spans), default=1)
    native = any(j.rounds is not None and j.rounds.backend == "native" for j in jobs)
    algorithm = "native" if native else scenario.network.allreduce
    return NetworkModel(Links(0.0, 0.0, 0.0, 0.0, per_node), 0.0, algorithm), intra


def line(one_way: np.ndarray) -> tuple[float, float]:
    """(alpha, beta) of a ping-pong's one-way times at :data:`SIZES`, each at least 0."""
    sizes = np.array(SIZES, dtype=float)
    coef = fit_linear(np.column_stack([np.ones_like(sizes), sizes]), one_way).coef
    return max(float(coef[0]), 0.0), max(float(coef[1]), 0.0)


def observations(scenario: Scenario, jobs: Sequence[JobMeasurement], shaped: float = 0.0) -> list[Observation]:
    """Every measured figure of every job that the fit prices (:mod:`.networkfit`); with ``shaped`` > 0 (links shaped
    by a token bucket, which lets a burst through at full speed) the ping-pongs of messages smaller than ``shaped``
    bytes and the bursts are left out: the model's links have no bucket. Where some job spans hosts, the ping-pongs
    and bursts of a job on one host are left out too: they crossed its shared memory, which the intra-node links
    measured in a spanning job (:func:`base_model`) price, not the fitted ones."""
    spanning = any(j.spans for j in jobs)
    out = []
    for job in jobs:
        inside = spanning and not job.spans
        pings = [(float(n), float(t)) for n, t in zip(SIZES, job.one_way[""], strict=True) if n >= shaped]
        out += [Observation("p2p", job.ranks, n, t) for n, t in pings if not inside]
        if not shaped and not inside:
            out += [Observation("burst", 2, float(k), float(t)) for k, t in zip(BURSTS, job.bursts, strict=True)]
        if job.rounds is None:  # MPI_Allreduce of float32 vectors (allreduce_times)
            nbytes = 4.0 * np.maximum(np.array(SIZES) // 4, 1)
            out += [Observation("allreduce", job.ranks, n, t) for n, t in zip(nbytes, job.allreduce, strict=True)]
            continue
        recorded = {key: record(from_dict(stored, "calibration")) for key, stored in job.rounds.scenarios.items()}
        for (name, kind, ranks, nbytes), figure in job.rounds.rounds.items():
            out.append(Observation(kind, ranks, nbytes, figure.mean, recorded[(name, nbytes)]))
    return out


def start(jobs: Sequence[JobMeasurement]) -> dict[str, float]:
    """Where the fit starts: the first spanning job's ping-pong line (else the first job's), its bursts' slope, a
    little of the rest."""
    first = next((j for j in jobs if j.spans), jobs[0])
    alpha, beta = line(first.one_way[""])
    bursts = first.bursts
    o = max(float(np.median(np.diff(bursts) / np.diff(BURSTS))), 0.0)
    return {
        "alpha": max(alpha - o, alpha / 2),
        "beta": beta,
        "message_overhead": min(o, alpha / 2),
        "gamma": beta / 2,
        "fabric_beta": 0.0,
        "overhead": alpha,
        "uplink_beta": 0.0,
    }


def free_parameters(tb: testbed.Testbed | None) -> tuple[str, ...]:
    """The parameters the fit finds (module doc): on a testbed no fabric and no message overhead apart from the
    latency (without the bursts, which its shapers' buckets pass whole, nothing tells them apart), and the uplinks
    where it has racks."""
    if tb is None:
        return FITTED_PARAMETERS
    kept = tuple(p for p in FITTED_PARAMETERS if p not in ("fabric_beta", "message_overhead"))
    return (*kept, "uplink_beta") if tb.racks > 1 else kept


def testbed_notes(found: NetworkFit, tb: testbed.Testbed) -> list[str]:
    """The fitted per-node bandwidth (and uplinks') beside the rates the testbed's links were shaped to."""
    out = []
    for name, what, rate in (("beta", "per-node", tb.rate), ("uplink_beta", "uplink", tb.uplink_rate)):
        if rate and name in found.errors:
            fitted = 1 / found.params[name] if found.params[name] > 0 else float("inf")
            out.append(
                f"testbed {tb.prefix}: fitted {what} bandwidth {fitted / 1e6:.3f} MB/s, "
                f"{fitted / rate:.1%} of the {rate / 1e6:.3f} MB/s its links were shaped to"
            )
    return out


def fragment(scenario: Scenario, jobs: Sequence[JobMeasurement], table: Path | None, tolerance: float) -> str:
    """The fragment's text from every job's measurements (module doc); ``table``: where the measured rounds go (the
    jobs' rounds are then measured, with ``--collectives``)."""
    tb = testbed.active()
    figures = observations(scenario, jobs, testbed.SHAPED if tb else 0.0)
    free, base, first = free_parameters(tb), base_model(scenario, jobs), start(jobs)
    if tb is not None:  # what the testbed does not have: no fabric limit, no overhead apart from the latency
        first.update({name: 0.0 for name in PARAMETERS if name not in free})
    if "uplink_beta" in free:
        first["uplink_beta"] = first["beta"]
    found = fit(figures, *base, first, free)
    holdout = held_out(figures, *base, first, free)
    ranks = sorted({j.ranks for j in jobs})
    hosts = sorted({h for j in jobs for h in j.hosts})
    lines = [
        f"# stragglerlab calibrate: {', '.join(map(str, ranks))} ranks on {', '.join(hosts)} "
        f"({datetime.now(UTC).isoformat(timespec='seconds')}), {jobs[0].mpi}",
        *compute_note(scenario, jobs),
    ]
    for job in jobs:
        for prefix, one_way in job.one_way.items():
            alpha, beta = line(one_way)
            lines.append(f"# {prefix}ping-pong over {job.ranks} ranks: {alpha:.3e} s + {beta:.3e} s/B")
    unfitted = {o.kind for o in figures} - set(FITTED)
    lines += [f"# {line_}" for line_ in fit_notes(found, ranks, unfitted)]
    lines += [
        f"# fitted without its {count}-rank figures, the model prices those {n} with an RMS error of {error:.1%}"
        for count, (error, n) in holdout.items()
    ]
    lines += [f"# {line_}" for line_ in testbed_notes(found, tb)] if tb else []
    network: dict[str, Any] = {"allreduce": found.model.allreduce_algorithm}
    network.update({name: found.params[name] for name in PARAMETERS if name != "uplink_beta" or name in free})
    if any(j.spans for j in jobs):
        network.update(intra_alpha=found.model.links.intra_alpha, intra_beta=found.model.links.intra_beta)
    net = {k: f'"{v}"' if isinstance(v, str) else f"{v:.6e}" for k, v in network.items()}
    sections: dict[str, dict[str, str]] = {"network": net}
    measured = [j.rounds for j in jobs if j.rounds is not None]
    gaps: list[float] = []
    if table is not None and measured:
        rows = roundtimes.table_rows(measured)
        roundtimes.write_table(table, rows)
        net["table"] = f'"{table.name}"'
        for m in measured:
            lines += [f"# {line_}" for line_ in roundtimes.notes(m, tolerance)]
            gaps += m.gap.samples
        gamma = roundtimes.server_gamma(measured, network)
        if gamma is not None:
            lines.append(f"# server: {gamma:.3e} s per pushed byte beyond the model's push and queue (median of sizes)")
            sections["algorithm"] = {"server_gamma": f"{gamma:.6e}"}
    lines += [""]
    for section, values in sections.items():
        lines += [f"[{section}]", *(f"{k} = {v}" for k, v in values.items()), ""]
    workload = {"compute": inline(compute_of(scenario, jobs))}
    if gaps:
        workload["update"] = f"{np.mean(gaps):.6e}"
    lines += ["[workload]", *(f"{k} = {v}" for k, v in workload.items()), ""]
    return "\n".join(lines)


def fit_notes(found: NetworkFit, ranks: list[int], unfitted: set[str]) -> list[str]:
    """The comments on the network fit: its parameters and each kind's residual."""
    p = found.params
    out = [
        f"network model fitted to every figure over {', '.join(map(str, ranks))} ranks at once: "
        f"alpha {p['alpha']:.3e} s, beta {p['beta']:.3e} s/B, message overhead {p['message_overhead']:.3e} s, "
        f"gamma {p['gamma']:.3e} s/B, fabric {p['fabric_beta']:.3e} s/B, overhead {p['overhead']:.3e} s per round"
        + (f", uplinks {p['uplink_beta']:.3e} s/B" if "uplink_beta" in found.errors else "")
        + f" (RMS relative residual {found.residual():.1%})",
        "  standard errors: "
        + ", ".join(f"{name} {_relative(found.errors[name], p[name])}" for name in found.errors)
        + " (fixed: "
        + (", ".join(name for name in PARAMETERS if name not in found.errors) or "none")
        + ")",
    ]
    for kind, (residual, count) in sorted(found.residuals.items()):
        flag = "  FLAGGED: over 20 %, the model does not describe it" if residual > 0.2 else ""
        out.append(f"  {kind}: RMS relative residual {residual:.1%} over {count} figures{flag}")
    if unfitted:
        out.append(f"  not fitted (the table prices them): {', '.join(sorted(unfitted))}")
    return out


def _relative(error: float, value: float) -> str:
    """A standard error as a share of its parameter's value."""
    if not np.isfinite(error):
        return "undetermined"
    return f"±{error / value:.0%}" if error < value else f"{value:.1e} ± {error:.1e}"


def compute_of(scenario: Scenario, jobs: Sequence[JobMeasurement]) -> dict[str, Any]:
    """The compute model: every job's measured times together, or the scenario's own when none were timed."""
    times = [j.compute for j in jobs if j.compute is not None]
    if times:
        return compute_model(np.concatenate(times))
    c = scenario.workload.compute
    return {k: getattr(c, k) for k in ("dist", "mean", "cv", "shape") if getattr(c, k) is not None}


def compute_note(scenario: Scenario, jobs: Sequence[JobMeasurement]) -> list[str]:
    if all(j.compute is None for j in jobs):
        return ['# compute: the scenario has no model to time (model = "none"); its compute model is kept']
    w = scenario.workload
    return [f"# compute: {w.model}, batch {w.batch}, device {w.device}, measured on every rank"]


def inline(table: dict[str, Any]) -> str:
    """A TOML inline table."""
    items = ", ".join(f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v:.6g}" for k, v in table.items())
    return f"{{ {items} }}"
