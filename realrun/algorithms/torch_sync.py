"""``sync`` through ``torch.distributed``: the baseline a user would otherwise run (``--backend torch``).

Every iteration all-reduces the gradient with ``torch.distributed.all_reduce`` (backend gloo on CPU, NCCL when the
replica is on a GPU, where the gradient stays on the device) and steps with Σ/P, as the native ``sync`` does, so the
two give the same model (up to the order of float32 additions). The process group is set up over TCP at rank 0's
host, on a port rank 0 picks and shares through MPI. P post-time slots ride along so rank 0 records each round's
last poster, as the native core does.
"""

from __future__ import annotations

import socket

import numpy as np

from stragglerlab.realrun.algorithms.base import Exchange, iteration_row, synchronous_round


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class TorchSync(Exchange):
    def __init__(self, scenario, rules, comm, replica, clock, sink):
        super().__init__(scenario, rules, comm, replica, clock, sink)
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        device = getattr(replica, "device", torch.device("cpu"))
        self.device = device
        address = comm.bcast((socket.gethostname(), _free_port()) if self.rank == 0 else None, root=0)
        if not dist.is_initialized():
            dist.init_process_group(
                "nccl" if device.type == "cuda" else "gloo",
                init_method=f"tcp://{address[0]}:{address[1]}",
                rank=self.rank,
                world_size=self.size,
            )
        self.buffer = torch.zeros(self.d + self.size, dtype=torch.float32, device=device)
        self.done: list[tuple] = []

    def iteration(self, n, g, loss, t_start, t_post):
        torch, buf, d = self.torch, self.buffer, self.d
        buf[:d] = g if isinstance(g, torch.Tensor) else torch.from_numpy(np.asarray(g, dtype=np.float32))
        buf[d:] = 0.0
        buf[d + self.rank] = t_post
        self.dist.all_reduce(buf)
        self.replica.step(buf[:d] / self.size if self.device.type == "cuda" else (buf[:d] / self.size).numpy())
        t_done = self.clock.now()
        self.sink("iterations", iteration_row(self.rank, n, t_start, t_post, t_done, n, n, True))
        if self.rank == 0:
            self.done.append(synchronous_round(n, self.rules.kind(n), buf[d:].double().cpu().numpy(), t_done))
        return t_done, n + 1

    def rounds(self):
        rows, self.done = self.done, []
        return rows

    def close(self):
        self.dist.barrier()
        self.dist.destroy_process_group()
