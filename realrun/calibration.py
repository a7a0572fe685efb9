"""Calibration of the simulator's models on the machine itself: the network's alpha, beta, gamma and the workload's
compute-time distribution, written as a scenario fragment that ``stragglerlab simulate`` loads as is.

- **Ping-pong** between rank 0 and a partner (a rank on another host when there is one: ``alpha``/``beta``; a rank
  on rank 0's host: ``intra_alpha``/``intra_beta`` when the job spans hosts), message sizes 1 B … 4 MiB; the one-way
  time is half the median round trip. Fit: t = alpha + n·beta.
- **Allreduce** (``MPI_Allreduce`` of float32 vectors, 4 B … 4 MiB, all ranks): with alpha and beta known, the
  remainder of the scenario's ``network.allreduce`` formula is linear in gamma, fitted ≥ 0.
- **Compute**: each rank times ``compute_iterations`` gradient computations of the scenario's workload (after a
  warm-up); all ranks' times give the mean and coefficient of variation (``lognormal`` when it varies, else
  ``constant``). A timing-only scenario (``model = "none"``) has no computation to measure; its compute model is
  kept.

Fits are least squares weighted by 1/t (relative error, so microsecond latencies count as much as millisecond
transfers); each coefficient comes with its standard error, and the fit with its RMS relative residual.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from stragglerlab.realrun.replica import make_replica
from stragglerlab.simulator.network import flat_allreduce
from stragglerlab.simulator.scenario import Scenario

SIZES = [2**k for k in range(0, 23, 2)]  # bytes, 1 B … 4 MiB
TAG = 7302
#: more comment lines, and keys (TOML values) per section, for a fragment
Extra = tuple[list[str], dict[str, dict[str, str]]]
#: what makes them from the fitted one-way time of a message (seconds for n bytes)
Extras = Callable[[Callable[[float], float]], Extra]


@dataclass
class Fit:
    """Coefficients of a linear model, their standard errors, and the RMS relative residual."""

    coef: np.ndarray
    stderr: np.ndarray
    residual: float


def fit_linear(X: np.ndarray, t: np.ndarray) -> Fit:
    """Least squares of ``t ≈ X·coef`` weighted by 1/t."""
    X, t = np.asarray(X, dtype=float), np.asarray(t, dtype=float)
    A, b = X / t[:, None], np.ones_like(t)
    coef, *_ = np.linalg.lstsq(A, b, rcond=None)
    rel = A @ coef - b
    dof = max(len(t) - X.shape[1], 1)
    cov = float(rel @ rel) / dof * np.linalg.pinv(A.T @ A)
    return Fit(coef, np.sqrt(np.maximum(np.diag(cov), 0.0)), float(np.sqrt(np.mean(rel**2))))


def _repeats(nbytes: int) -> int:
    return 50 if nbytes <= 65536 else 10


def ping_pong(comm: Any, partner: int) -> np.ndarray | None:
    """One-way times (s) of :data:`SIZES` between rank 0 and ``partner`` (on rank 0; None elsewhere)."""
    from mpi4py import MPI

    rank, out = comm.Get_rank(), []
    for n in SIZES:
        buf = np.zeros(n, dtype=np.uint8)
        times = []
        for k in range(_repeats(n) + 2):
            if rank == 0:
                t = MPI.Wtime()
                comm.Send(buf, dest=partner, tag=TAG)
                comm.Recv(buf, source=partner, tag=TAG)
                if k >= 2:
                    times.append((MPI.Wtime() - t) / 2)
            elif rank == partner:
                comm.Recv(buf, source=0, tag=TAG)
                comm.Send(buf, dest=0, tag=TAG)
        out.append(np.median(times) if rank == 0 else 0.0)
    comm.Barrier()
    return np.array(out) if rank == 0 else None


def allreduce_times(comm: Any) -> np.ndarray:
    """Median time (s, slowest rank) of ``MPI_Allreduce`` of each of :data:`SIZES` (rounded to float32s)."""
    from mpi4py import MPI

    out = []
    for n in SIZES:
        x = np.ones(max(n // 4, 1), dtype=np.float32)
        y = np.empty_like(x)
        times = []
        for k in range(_repeats(n) + 2):
            comm.Barrier()
            t = MPI.Wtime()
            comm.Allreduce(x, y, op=MPI.SUM)
            if k >= 2:
                times.append(MPI.Wtime() - t)
        out.append(comm.allreduce(float(np.median(times)), op=MPI.MAX))
    return np.array(out)


def fit_network(one_way: np.ndarray, allreduce: np.ndarray, P: int, algorithm: str) -> dict[str, Fit]:
    """``p2p``: (alpha, beta); ``gamma``: (gamma,) from the allreduce times given alpha and beta."""
    sizes = np.array(SIZES, dtype=float)
    p2p = fit_linear(np.column_stack([np.ones_like(sizes), sizes]), one_way)
    alpha, beta = (max(float(c), 0.0) for c in p2p.coef)
    nbytes = 4.0 * np.maximum(sizes // 4, 1)
    base = np.array([flat_allreduce(algorithm, P, n, alpha, beta, 0.0) for n in nbytes])
    slope = np.array([flat_allreduce(algorithm, P, n, alpha, beta, 1.0) for n in nbytes]) - base
    rest = allreduce - base
    keep = slope > 0
    gamma = (
        fit_linear(slope[keep, None], np.maximum(rest[keep], 1e-12))
        if keep.any() and P > 1
        else Fit(np.zeros(1), np.zeros(1), 0.0)
    )
    gamma.coef = np.maximum(gamma.coef, 0.0)
    predicted = base + slope * gamma.coef[0]
    gamma.residual = float(np.sqrt(np.mean(((predicted - allreduce) / allreduce) ** 2)))
    return {"p2p": p2p, "gamma": gamma}


def compute_times(replica: Any, iterations: int, warmup: int = 3) -> np.ndarray:
    """Seconds of each of ``iterations`` gradient computations on this rank (after ``warmup`` untimed ones)."""
    import time

    for n in range(warmup):
        replica.gradient(n)
    out = []
    for n in range(warmup, warmup + iterations):
        t = time.perf_counter()
        g, _ = replica.gradient(n)
        replica.host(g)  # a GPU computation is done when its gradient reaches the host
        out.append(time.perf_counter() - t)
    return np.array(out)


#: the interquartile range of a standard normal, in standard deviations
NORMAL_IQR = 1.3489795


def quartile_sigma(q25: float, q75: float) -> float:
    """The sigma of the lognormal whose interquartile range is [q25, q75] (0 < q25 <= q75)."""
    return math.log(q75 / q25) / NORMAL_IQR


def lognormal_cv(sigma: float) -> float:
    """The coefficient of variation of a lognormal of this sigma."""
    return math.sqrt(math.expm1(sigma**2))


def lognormal_model(mean: float, cv: float) -> dict[str, Any]:
    """A ``workload.compute``-like table: lognormal with this mean and cv, constant if cv < 1 %."""
    return {"dist": "constant", "mean": mean} if cv < 0.01 else {"dist": "lognormal", "mean": mean, "cv": cv}


def compute_model(times: np.ndarray) -> dict[str, Any]:
    """The ``workload.compute`` table of measured times: lognormal with their mean and cv, constant if cv < 1 %."""
    return lognormal_model(float(np.mean(times)), float(np.std(times) / np.mean(times)))


def fragment(
    scenario: Scenario,
    P: int,
    hosts: list[str],
    fits: dict[str, dict[str, Fit]],
    compute: dict[str, Any] | None,
    mpi: str,
    extra: Extra = ([], {}),
) -> str:
    """The scenario fragment: comments with the fits' errors, then ``[network]`` and ``[workload]``; ``extra``:
    more comment lines and keys (TOML values) per section (the collectives' table, overhead, update gap and server
    cost)."""
    lines = [
        f"# stragglerlab calibrate: {P} ranks on {', '.join(sorted(set(hosts)))} "
        f"({datetime.now(UTC).isoformat(timespec='seconds')}), {mpi}"
    ]
    net = {"allreduce": f'"{scenario.network.allreduce}"'}
    for prefix, fit in fits.items():
        (alpha, beta), (da, db) = fit["p2p"].coef, fit["p2p"].stderr
        lines.append(
            f"# {prefix}ping-pong: alpha = {alpha:.3e} ± {da:.1e} s, beta = {beta:.3e} ± {db:.1e} s/B "
            f"(RMS relative residual {fit['p2p'].residual:.1%})"
        )
        net[f"{prefix}alpha"], net[f"{prefix}beta"] = f"{max(alpha, 0.0):.6e}", f"{max(beta, 0.0):.6e}"
        if not prefix:
            g = fit["gamma"]
            lines.append(
                f"# allreduce ({scenario.network.allreduce}, {P} ranks): gamma = {g.coef[0]:.3e} ± "
                f"{g.stderr[0]:.1e} s/B (RMS relative residual of the model {g.residual:.1%})"
            )
            net["gamma"] = f"{g.coef[0]:.6e}"
    comments, keys = extra
    lines += [f"# {line}" for line in comments]
    net.update(keys.get("network", {}))
    lines += ["", "[network]", *(f"{k} = {v}" for k, v in net.items()), ""]
    for section, values in keys.items():
        if section not in ("network", "workload"):
            lines += [f"[{section}]", *(f"{k} = {v}" for k, v in values.items()), ""]
    c = (
        compute
        if compute is not None
        else {"dist": scenario.workload.compute.dist, "mean": scenario.workload.compute.mean}
    )
    if compute is None:
        lines.insert(1, '# compute: the scenario has no model to time (model = "none"); its compute model is kept')
        for key in ("cv", "shape"):
            value = getattr(scenario.workload.compute, key)
            if value is not None:
                c[key] = value
    else:
        lines.insert(
            1,
            f"# compute: {scenario.workload.model}, batch {scenario.workload.batch}, "
            f"device {scenario.workload.device}, measured on every rank",
        )
    inline = ", ".join(f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v:.6g}" for k, v in c.items())
    lines += [
        "[workload]",
        f"compute = {{ {inline} }}",
        *(f"{k} = {v}" for k, v in keys.get("workload", {}).items()),
        "",
    ]
    return "\n".join(lines)


def partners(hosts: list[str]) -> dict[str, int]:
    """Ping-pong partners of rank 0: ``""`` (alpha, beta) another host's first rank, or rank 1 on one host;
    ``"intra_"`` a rank on rank 0's host, measured too when the job spans hosts."""
    other = [r for r, h in enumerate(hosts) if h != hosts[0]]
    same = [r for r, h in enumerate(hosts) if h == hosts[0] and r]
    if not other:
        return {"": same[0]}
    return {"": other[0], **({"intra_": same[0]} if same else {})}


def calibrate(scenario: Scenario, compute_iterations: int = 30, extra: Extras | None = None) -> str | None:
    """Collective over ``MPI.COMM_WORLD`` (at least 2 ranks): the fragment on rank 0, None elsewhere; ``extra``
    (rank 0's): more comment lines and keys for it (:func:`fragment`), given the fitted message time."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, P = comm.Get_rank(), comm.Get_size()
    hosts = comm.allgather(socket.gethostname())
    one_way = {prefix: ping_pong(comm, partner) for prefix, partner in partners(hosts).items()}
    allreduce = allreduce_times(comm)
    compute = None
    if scenario.workload.model != "none":
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        local_rank, ranks_here = node.Get_rank(), node.Get_size()
        here = scenario.replace(**{"cluster.workers": P, "cluster.workers_per_node": 1})  # shards for these ranks
        times = compute_times(make_replica(here, rank, local_rank, ranks_here), compute_iterations)
        gathered = comm.gather(times, root=0)  # None except on rank 0
        if gathered is not None:
            compute = compute_model(np.concatenate(gathered))
    if rank != 0:
        return None
    fits = {  # rank 0 holds every ping-pong's times
        prefix: fit_network(t, allreduce, P, scenario.network.allreduce)
        for prefix, t in one_way.items()
        if t is not None
    }
    alpha, beta = (max(float(c), 0.0) for c in fits[""]["p2p"].coef)
    more = extra(lambda n: alpha + n * beta) if extra else ([], {})
    return fragment(scenario, P, hosts, fits, compute, MPI.Get_library_version().splitlines()[0].strip(), more)
