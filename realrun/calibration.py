"""What one calibration job measures on its ranks: messages between two of them and the workload's compute times.
:mod:`.fragment` puts them together with the rounds timed through the harness (:mod:`.roundtimes`) and the network
model's fit (:mod:`.networkfit`) into the scenario fragment that ``stragglerlab calibrate`` writes.

- **Ping-pong** between rank 0 and a partner (a rank on another host when there is one: ``alpha``/``beta``; a rank
  on rank 0's host: ``intra_alpha``/``intra_beta`` when the job spans hosts), message sizes 1 B … 4 MiB; the one-way
  time is half the median round trip.
- **Bursts**: k one-byte messages sent one after another and one reply, k = 1, 4, 16, 64: each further message adds
  its software overhead (LogGP's o).
- **Allreduce** (``MPI_Allreduce`` of float32 vectors, 4 B … 4 MiB, all ranks): what gives ``gamma`` when no round
  is timed through the harness.
- **Compute**: each rank times ``compute_iterations`` gradient computations of the scenario's workload (after a
  warm-up); all ranks' times give the mean and coefficient of variation (``lognormal`` when it varies, else
  ``constant``). A timing-only scenario (``model = "none"``) has no computation to measure; its compute model is
  kept.

Line fits here are least squares weighted by 1/t (relative error, so microsecond latencies count as much as
millisecond transfers); each coefficient comes with its standard error, and the fit with its RMS relative residual.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass
from typing import Any

import numpy as np

from stragglerlab.realrun.replica import make_replica
from stragglerlab.simulator.scenario import Scenario

SIZES = [2**k for k in range(0, 23, 2)]  # bytes, 1 B … 4 MiB
TAG = 7302


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


#: message counts of a burst (:func:`burst`)
BURSTS = (1, 4, 16, 64)


def burst(comm: Any, partner: int) -> np.ndarray | None:
    """Round trips (s) of k one-byte messages that rank 0 sends ``partner`` one after another, answered by one byte,
    for each k of :data:`BURSTS` (on rank 0; None elsewhere): what each further message adds is its software
    overhead (LogGP's o), which a ping-pong cannot tell from the latency."""
    from mpi4py import MPI

    rank, out = comm.Get_rank(), []
    one = np.zeros(1, dtype=np.uint8)
    for k in BURSTS:
        bufs = [np.zeros(1, dtype=np.uint8) for _ in range(k)]
        times = []
        for rep in range(52):
            if rank == 0:
                t = MPI.Wtime()
                MPI.Request.Waitall([comm.Isend(b, dest=partner, tag=TAG) for b in bufs])
                comm.Recv(one, source=partner, tag=TAG)
                if rep >= 2:
                    times.append(MPI.Wtime() - t)
            elif rank == partner:
                MPI.Request.Waitall([comm.Irecv(b, source=0, tag=TAG) for b in bufs])
                comm.Send(one, dest=0, tag=TAG)
        out.append(np.median(times) if rank == 0 else 0.0)
    comm.Barrier()
    return np.array(out) if rank == 0 else None


def partners(hosts: list[str]) -> dict[str, int]:
    """Ping-pong partners of rank 0: ``""`` (alpha, beta) another host's first rank, or rank 1 on one host;
    ``"intra_"`` a rank on rank 0's host, measured too when the job spans hosts."""
    other = [r for r, h in enumerate(hosts) if h != hosts[0]]
    same = [r for r, h in enumerate(hosts) if h == hosts[0] and r]
    if not other:
        return {"": same[0]}
    return {"": other[0], **({"intra_": same[0]} if same else {})}


@dataclass
class JobMeasurement:
    """What one job of P ranks measured (on its rank 0): the ping-pongs' one-way times at :data:`SIZES` per partner
    (:func:`partners`), the bursts' round trips, ``MPI_Allreduce`` at :data:`SIZES`, every rank's compute times
    (None for a timing-only scenario), and the rounds through the harness (``--collectives``)."""

    ranks: int
    hosts: list[str]
    mpi: str
    one_way: dict[str, np.ndarray]
    bursts: np.ndarray
    allreduce: np.ndarray
    compute: np.ndarray | None
    rounds: Any = None  # roundtimes.Measurement

    @property
    def per_host(self) -> int:
        """Ranks on each host (the most on one)."""
        return max(self.hosts.count(h) for h in set(self.hosts))

    @property
    def spans(self) -> bool:
        """Whether the job's ranks sit on more than one host."""
        return len(set(self.hosts)) > 1


def measure_job(scenario: Scenario, comm: Any, compute_iterations: int = 30) -> JobMeasurement | None:
    """Collective over ``comm`` (at least 2 ranks): the ping-pongs, bursts, allreduces and compute times, on rank 0
    (None elsewhere)."""
    from mpi4py import MPI

    rank, P = comm.Get_rank(), comm.Get_size()
    hosts = comm.allgather(socket.gethostname())
    pairs = partners(hosts)
    one_way = {prefix: ping_pong(comm, partner) for prefix, partner in pairs.items()}
    bursts = burst(comm, pairs[""])
    allreduce = allreduce_times(comm)
    compute = None
    if scenario.workload.model != "none":
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        local_rank, ranks_here = node.Get_rank(), node.Get_size()
        here = scenario.replace(**{"cluster.workers": P, "cluster.workers_per_node": 1})  # shards for these ranks
        times = compute_times(make_replica(here, rank, local_rank, ranks_here), compute_iterations)
        gathered = comm.gather(times, root=0)  # None except on rank 0
        compute = np.concatenate(gathered) if gathered is not None else None
    if rank != 0:
        return None
    assert bursts is not None
    mpi = MPI.Get_library_version().splitlines()[0].strip()
    return JobMeasurement(
        P, hosts, mpi, {k: v for k, v in one_way.items() if v is not None}, bursts, allreduce, compute
    )
