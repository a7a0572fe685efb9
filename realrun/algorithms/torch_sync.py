"""``sync`` through ``torch.distributed``: the baseline a user would otherwise run (``--backend torch``).

A torch workload runs under PyTorch's DistributedDataParallel (gloo on CPU, NCCL on GPU): the gradient is all-reduced
in buckets while backward still runs, the overlap the simulator models with ``workload.buckets``. DDP's bucket cap is
set to the scenario's bucket size: ``bucket_cap_mb`` = the gradient's bytes / ``workload.buckets``. DDP fills its
buckets with whole parameters, so it may make fewer (:mod:`~stragglerlab.realrun.buckets`): the run folder records
the count it makes, which is what a simulation of the run is to be given. A rank's post time is when its last bucket
was ready (a communication hook notes it before all-reducing the bucket), its release when backward returns, every
bucket all-reduced; then it steps with the mean gradient, as the native ``sync`` does, so the two give the same model
up to the order of float32 additions. The injected delay of ``random-delay`` is spread as the simulator's bucketed
sync spreads a worker's compute time: its forward share (1 − ``workload.backward``) before the forward pass, its
backward share while the gradients come (:class:`Slowdown`; with DDP the computation and the exchange are one call,
so it cannot follow the gradient); other imbalance kinds need a computation measured before the delay, which DDP does
not allow, and are refused.

A timing-only workload (``model = "none"``) has nothing to back-propagate: its zero gradient is all-reduced whole
with ``torch.distributed.all_reduce`` after the computation.

The process group is set up over TCP at rank 0's host, on a port rank 0 picks and shares through MPI. Rank 0 records
each round's last poster from every rank's post times, gathered when the run ends (DDP) or riding along with the
gradient as P slots (timing only). With a time budget, every rank stops after the first round whose last post (its
``t_trigger``) is at or after it: read off the slots, or under DDP from a max of the post times over the ranks.
"""

from __future__ import annotations

import socket
from typing import Any

import numpy as np

from stragglerlab.analysis.errors import UserError
from stragglerlab.realrun import testbed
from stragglerlab.realrun.algorithms.base import Exchange, iteration_row, synchronous_round
from stragglerlab.realrun.buckets import ddp_buckets, describe
from stragglerlab.realrun.injection import Injection
from stragglerlab.realrun.replica import Replica, TorchReplica
from stragglerlab.simulator.network import BYTES_PER_ELEMENT
from stragglerlab.simulator.scenario import Scenario


def _address() -> str:
    """Where the other ranks reach this one: its node's address on an emulated cluster (whose host names no resolver
    knows), else its host name."""
    tb = testbed.active()
    host = socket.gethostname()
    return next((n.address for n in tb.nodes if n.name == host), host) if tb else host


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class Slowdown:
    """The backward's share of an iteration's injected delay, spent while the gradients come, each parameter's
    gradient followed by its share by size (on a deadline from the first gradient, so the sleeps' overshoots do not
    add up): a delayed rank's backward is then as much slower as its forward, as the simulator's bucketed sync
    assumes when it spreads a worker's whole compute time, imbalance included, over forward and backward."""

    def __init__(self, clock: Any, d: int):
        self.clock, self.d = clock, d
        self.begin(None, 0.0)

    def begin(self, injection: Injection | None, seconds: float) -> None:
        """Spend ``seconds`` over the next backward pass."""
        self.injection, self.seconds, self.started, self.elements = injection, seconds, -1.0, 0

    def __call__(self, p: Any) -> None:  # a parameter's gradient has been accumulated
        if self.injection is None or self.seconds <= 0:
            return
        now = self.clock.now()
        self.started = now if self.started < 0 else self.started
        self.elements += p.numel()
        self.injection.spend(self.started + self.seconds * self.elements / self.d - now)


def _cap_mb(d: int, buckets: int) -> float:
    """DDP's ``bucket_cap_mb`` for ``buckets`` buckets of a gradient of ``d`` elements: the scenario's bucket size."""
    return d * BYTES_PER_ELEMENT / buckets / 2**20


class TorchSync(Exchange):
    bytes_per_parameter = 8

    @classmethod
    def check(cls, scenario: Scenario, replica: Replica) -> None:
        kind = scenario.imbalance.kind
        if isinstance(replica, TorchReplica) and kind not in ("none", "random-delay"):
            raise UserError(
                f'--backend torch: imbalance.kind = "{kind}" needs a computation measured before its '
                "delay, which DistributedDataParallel does not allow; use none or random-delay"
            )

    @classmethod
    def as_run(cls, scenario: Scenario, replica: Replica) -> tuple[Scenario, str]:
        if not isinstance(replica, TorchReplica):
            return scenario, ""
        asked = scenario.workload.buckets
        made = ddp_buckets(replica.gradient_order(), _cap_mb(replica.dimension, asked))
        if len(made) == asked:
            return scenario, ""
        note = (
            f"workload.buckets = {asked} sets DistributedDataParallel's bucket cap to "
            f"{describe([replica.dimension // asked])}; DDP fills buckets with whole parameters and makes "
            f"{len(made)} of this model ({describe(made)}), which the run folder records"
        )
        return scenario.replace(**{"workload.buckets": len(made)}), note

    @classmethod
    def stops(cls, rules) -> bool:
        return True  # every round is synchronous

    def __init__(self, scenario, rules, comm, replica, clock, sink):
        super().__init__(scenario, rules, comm, replica, clock, sink)
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        device = getattr(replica, "device", torch.device("cpu"))
        self.device = device
        address = comm.bcast((_address(), _free_port()) if self.rank == 0 else None, root=0)
        if not dist.is_initialized():
            dist.init_process_group(
                "nccl" if device.type == "cuda" else "gloo",
                init_method=f"tcp://{address[0]}:{address[1]}",
                rank=self.rank,
                world_size=self.size,
            )
        self.ddp = isinstance(replica, TorchReplica)
        self.posts: list[float] = []  # this rank's post time of every iteration
        self.dones: list[float] = []
        self.done: list[tuple] = []
        if self.ddp:
            self._wrap(replica, scenario.workload.buckets)
        else:
            self.buffer = torch.zeros(self.d + self.size, dtype=torch.float32, device=device)

    def _wrap(self, replica: TorchReplica, buckets: int) -> None:
        """Run the replica's model under DDP, noting when each gradient bucket is ready."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
        from torch.nn.parallel import DistributedDataParallel

        # each rank keeps its own buffers, as the native exchanges do (DDP would send rank 0's at every forward)
        replica.model = DistributedDataParallel(
            replica.model, bucket_cap_mb=_cap_mb(self.d, buckets), broadcast_buffers=False
        )
        self.ready: list[float] = []

        def hook(state, bucket):  # (DDP rejects annotations other than its own types)
            self.ready.append(self.clock.now())
            return allreduce_hook(state, bucket)

        replica.model.register_comm_hook(None, hook)
        self.slowdown = Slowdown(self.clock, self.d)
        for p in replica.params_list:
            p.register_post_accumulate_grad_hook(self.slowdown)

    def compute(self, n: int, injection: Injection, t_start: float) -> tuple[Any, float, float]:
        if not self.ddp:
            return super().compute(n, injection, t_start)
        delay, backward = injection.extra(n, 0.0), self.scenario.workload.backward
        injection.spend(delay * (1 - backward))  # the forward's share, before the forward pass
        self.slowdown.begin(injection, delay * backward)
        self.ready.clear()
        g, loss = self.replica.gradient(n)  # DDP's mean gradient, all-reduced bucket by bucket during backward
        self.dones.append(self.clock.now())
        return g, loss, self.ready[-1]

    def iteration(self, n, g, loss, t_start, t_post):
        if self.ddp:
            t_done = self.dones[-1]
            self.replica.step(g)
            self.stopped = self._budget_reached(t_post)
        else:
            torch, buf, d = self.torch, self.buffer, self.d
            buf[:d] = g if isinstance(g, torch.Tensor) else torch.from_numpy(np.asarray(g, dtype=np.float32))
            buf[d:] = 0.0
            buf[d + self.rank] = t_post
            self.dist.all_reduce(buf)
            self.replica.step(buf[:d] / self.size if self.device.type == "cuda" else (buf[:d] / self.size).numpy())
            t_done = self.clock.now()
            posts = buf[d:].double().cpu().numpy()
            self.stopped = bool(posts.max() >= self.rules.budget)
            if self.rank == 0:
                self.done.append(synchronous_round(n, self.rules.kind(n), posts, t_done))
        self.posts.append(t_post)
        self.sink("iterations", iteration_row(self.rank, n, t_start, t_post, t_done, n, n, True, self.batch))
        return t_done, n + 1

    def _budget_reached(self, t_post: float) -> bool:
        """DDP: whether this round's last post over the ranks is at or after the time budget (a collective, made
        only with a budget)."""
        if self.rules.budget == float("inf"):
            return False
        from mpi4py import MPI

        return self.comm.allreduce(t_post, op=MPI.MAX) >= self.rules.budget

    def rounds(self):
        rows, self.done = self.done, []
        return rows

    def close(self):
        if self.ddp:  # every round's last poster, from every rank's post times
            posts = np.array(self.comm.allgather(self.posts)).T
            if self.rank == 0:
                kinds = [self.rules.kind(n) for n in range(len(posts))]
                self.done = [synchronous_round(n, kinds[n], posts[n], self.dones[n]) for n in range(len(posts))]
        self.dist.barrier()
        if self.ddp:
            # DDP keeps its process group alive: unwrapped, the group ends with destroy_process_group. Left wrapped,
            # every run in one process (calibrate's blocks) added a live group and its threads, under which the
            # later blocks' rounds were a quarter faster than a fresh run's.
            self.replica.model = self.replica.model.module
        self.dist.destroy_process_group()
