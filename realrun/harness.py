"""One rank of a real run: train the scenario's model under MPI, inject its imbalance, write the run folder.

Every rank runs :func:`run_rank`. Iteration n: compute the gradient on this rank's batch (``t_start`` →), add the
injected delay (:mod:`.injection`), post (``t_post``), exchange by the algorithm's rules
(:mod:`.algorithms`), and apply the result (``t_done``). Rows go to this rank's parts of the run folder
every couple of seconds (:mod:`.parts`); rank 0 also writes ``rounds`` and ``evals`` (the mean of the replicas,
worker −1, as the simulator evaluates it: :mod:`.evaluation`) and ``meta.json`` (``source = "real"``), and
merges the parts when every rank has finished. A watchdog (:mod:`.watchdog`) turns a lost rank into a one-line
error and a bounded exit on every other rank, leaving the folder readable with ``finished = false``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.runfolder import NEVER, RunWriter
from stragglerlab.realrun import testbed
from stragglerlab.realrun.algorithms.base import exchange_class
from stragglerlab.realrun.clock import RunClock
from stragglerlab.realrun.evaluation import MeanEvaluations
from stragglerlab.realrun.injection import Injection
from stragglerlab.realrun.parts import RankParts
from stragglerlab.realrun.replica import make_replica
from stragglerlab.realrun.watchdog import LIVE, Watchdog
from stragglerlab.simulator import algorithms
from stragglerlab.simulator.plan import Plan, plan
from stragglerlab.simulator.provenance import meta
from stragglerlab.simulator.scenario import Scenario


def _meta(run: Plan, backend: str, comm: Any, hosts: list[str]) -> dict[str, Any]:
    from mpi4py import MPI

    mpi = MPI.Get_library_version().splitlines()[0].strip()
    tb = testbed.active()
    where = {"testbed": tb.describe()} if tb else {}
    return meta(
        run, "real", backend=backend, versions={"mpi": mpi}, host=hosts[0], hosts=hosts, ranks=comm.Get_size(), **where
    )


class SharedError(UserError):
    """A setup error every rank raises (rank 0 reports it)."""


def _agree(comm: Any, error: str | None) -> None:
    """Raise on every rank when any rank failed a setup step (a lone failure would leave the others waiting)."""
    errors = [e for e in comm.allgather(error) if e]
    if errors:
        raise SharedError(errors[0])


def run_rank(
    scenario: Scenario,
    folder: Path,
    backend: str = "native",
    heartbeat_timeout: float = 10.0,
    save_model: Path | None = None,
    replace: str = NEVER,
    notes: bool = True,
) -> Path:
    """This rank's part of the real run of ``scenario`` into ``folder``; collective over ``MPI.COMM_WORLD``.
    ``save_model``: rank 0 saves its final model there (a flat float32 ``.npy``). ``replace``: which earlier run
    the folder may hold (:func:`~stragglerlab.analysis.runfolder.check_replaceable`). ``notes``: print what the
    run does differently from what the scenario asked (DDP's bucket count)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if size != scenario.workers:
        raise SharedError(
            f"cluster.workers = {scenario.workers} but the job has {size} ranks; "
            f"run it on {scenario.workers} ranks or --set cluster.workers={size}"
        )
    record = algorithms.get(scenario.algorithm.name)
    try:
        exchange_type = exchange_class(record, backend)
    except UserError as err:
        raise SharedError(str(err)) from None
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank, ranks_here = node.Get_rank(), node.Get_size()
    error, replica, run = None, None, None
    try:
        replica = make_replica(scenario, rank, local_rank, ranks_here)
        exchange_type.check(scenario, replica)
        tb = testbed.active()  # its layout is the run's: the simulation that validates it places ranks alike
        placed = testbed.layout(tb, size, scenario.cluster.workers_per_node) if tb else {}
        scenario = scenario.replace(**{"workload.params": replica.dimension, **placed})
        run = plan(scenario)
        if scenario.duration > 0 and not exchange_type.stops(run.rules):
            raise UserError(f"duration = {scenario.duration}: {record.name} has no time budget in real runs yet")
    except Exception as err:  # every rank must learn of it, or the others would wait in the next collective
        error = str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}"
    _agree(comm, error)
    assert replica is not None and run is not None  # made, or every rank raised in _agree
    host = socket.gethostname()
    peers = comm.allgather((host, os.getpid()))
    writer = None
    if rank == 0:
        recorded, note = exchange_type.as_run(scenario, replica)
        if note and notes:
            print(f"stragglerlab run: note: {note}", file=sys.stderr, flush=True)
        try:
            # what the run did differently (DDP's buckets) changes neither the cost model nor the style
            recorded_run = dataclasses.replace(run, scenario=recorded)
            writer = RunWriter(folder, _meta(recorded_run, backend, comm, [h for h, _ in peers]), replace=replace)
            shutil.rmtree(Path(folder) / LIVE, ignore_errors=True)  # an earlier run's heartbeats
        except UserError as err:
            error = str(err)
    _agree(comm, error)
    parts = RankParts(folder, rank)
    lock = threading.Lock()

    def sink(table: str, row: tuple) -> None:
        with lock:
            parts.add(table, row)

    def stop(message: str) -> None:
        print(f"stragglerlab run: error: rank {rank}: {message}; stopping", file=sys.stderr, flush=True)
        with lock:
            parts.flush()
        if writer is not None:
            writer.close(finished=False, error=message)

    watchdog = Watchdog(folder, rank, dict(enumerate(peers)), host, stop, timeout=heartbeat_timeout).start()
    try:
        clock = RunClock(comm)
        exchange = exchange_type(scenario, run.rules, comm, replica, clock, sink)
        evals = MeanEvaluations(scenario, replica, exchange, sink) if scenario.workload.model != "none" else None
        end = _train(scenario, rank, replica, exchange, clock, sink, parts, lock, evals)
        exchange.close()
        if evals is not None:  # (after the exchange's close: a parameter server's last models are known then)
            evals.finish(*end)
        if save_model is not None and rank == 0:
            np.save(save_model, replica.host(replica.params()))
        for row in exchange.rounds():
            sink("rounds", row)
        with lock:
            parts.flush()
        comm.Barrier()
    except BaseException as err:
        # Leave at once: the other ranks may be blocked in MPI, where this rank's normal exit (MPI_Finalize)
        # could wait on them forever; its death stops them (see realrun.watchdog).
        if not isinstance(err, UserError | KeyboardInterrupt):
            traceback.print_exc()
        stop(str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}")
        os._exit(2 if isinstance(err, UserError) else 1)
    watchdog.finish()
    if writer is not None:
        watchdog.clear()
        writer.close(finished=True, wall_seconds=round(clock.now(), 3))
    return folder


def _train(scenario, rank, replica, exchange, clock, sink, parts, lock, evals) -> tuple[float, int]:
    """The training loop of this rank; returns where its last evaluation is (the time and the iterations)."""
    injection = Injection(scenario, rank, timing_only=scenario.workload.model == "none")
    if evals is not None:
        evals.start()
    clock.start(exchange.comm)  # every rank set up: what came before is not the run's time (realrun.clock)
    released = (0.0, 0)  # (time, iterations) of this rank's last release
    for n in range(scenario.iterations):
        t_start = clock.now()
        g, loss, t_post = exchange.compute(n, injection, t_start)
        completed = exchange.iteration(n, g, loss, t_start, t_post)
        released = (clock.now() if completed is None else completed[0], n + 1)
        if evals is not None:
            evals.after_iteration(completed)
        if parts.due():
            for row in exchange.rounds():
                sink("rounds", row)
            with lock:
                parts.flush()
        injection.spend(injection.update)
        if exchange.stopped:
            break
    if evals is not None and scenario.duration > 0:  # ranks may stop apart: the latest release, the most iterations
        return evals.latest(*released)
    return released
