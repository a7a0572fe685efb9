"""One rank of a probe run (docs/semantics.md), spawned by test_probe.py under ``mpiexec -n P``.

Rank r posts, for call n, a vector of 2P floats that is zero except slot r = n + 1 and slot P + r = 1, so each
result tells exactly which calls of which ranks it summed. Random per-rank delays (before the post and between
post and wait) make ranks arrive in every order and lag several rounds. Each rank saves what its waits returned,
when it posted and when its waits returned (``time.monotonic``, one clock for every process of a machine), how many
round records it had when each wait returned (rounds completed while it lagged included), and its rounds table
to DIR/<color>/rank<r>.npz for the checks in the test process; with --split the ranks run one collective per
communicator of a split (color = world rank mod split), all at once.
"""

import argparse
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from stragglerlab.realrun.collectives import ROUND_COLUMNS, Collective


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--kind", default="eager-solo")
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--sync-period", type=int, default=0)
    parser.add_argument("--late", default="accumulate")
    parser.add_argument("--divide-by", default="workers")
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ring-min-bytes", type=int, default=0)
    parser.add_argument("--quorum", type=int, default=0, help="quorum: k; 0: the core's default")
    parser.add_argument("--max-delay", type=float, default=0.001, help="seconds; uniform random sleep per call")
    parser.add_argument("--straggler-delay", type=float, default=0.0, help="rank 0 sleeps this before each post")
    parser.add_argument("--split", type=int, default=1, help="run on COMM_WORLD split into this many communicators")
    args = parser.parse_args()

    world = MPI.COMM_WORLD
    color = world.Get_rank() % args.split
    comm = world.Split(color, world.Get_rank()) if args.split > 1 else world
    rank, size = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng([args.seed, rank])
    n_calls = args.rounds
    fields = {name: np.zeros(n_calls, dtype=np.int64) for name in ("round", "contributors", "fresh", "gradients")}
    fields["group"] = np.zeros(n_calls, dtype=np.int64)
    kinds, outs = [], np.zeros((n_calls, 2 * size), dtype=np.float32)
    masks = np.zeros((n_calls, size), dtype=bool)
    waits, cpu, posted, returned = np.zeros(n_calls), np.zeros(n_calls), np.zeros(n_calls), np.zeros(n_calls)
    records = np.zeros(n_calls, dtype=np.int64)
    with Collective(
        args.kind,
        count=2 * size,
        comm=comm,
        sync_period=args.sync_period,
        late=args.late,
        divide_by=args.divide_by,
        seed=args.seed,
        group_size=args.group_size,
        ring_min_bytes=args.ring_min_bytes,
        quorum=args.quorum or None,
    ) as coll:
        for n in range(n_calls):
            if args.straggler_delay and rank == 0:
                time.sleep(args.straggler_delay)
            elif args.max_delay:
                # Now and then a long pause, so that a rank falls several rounds behind.
                scale = 8.0 if rng.random() < 0.03 else 1.0
                time.sleep(rng.uniform(0.0, args.max_delay * scale))
            x = np.zeros(2 * size, dtype=np.float32)
            x[rank] = n + 1
            x[size + rank] = 1
            posted[n] = time.monotonic()
            coll.post(x)
            if args.max_delay and rng.random() < 0.2:
                time.sleep(rng.uniform(0.0, args.max_delay))
            t, used = time.perf_counter(), time.process_time()
            out, info = coll.wait()
            waits[n], cpu[n] = time.perf_counter() - t, time.process_time() - used
            returned[n] = time.monotonic()
            records[n] = n + len(coll.triggers(n)[0])
            outs[n] = out
            for name in fields:
                fields[name][n] = getattr(info, name)
            kinds.append(info.kind)
            masks[n] = info.mask
        table = coll.rounds()
        _, triggers = coll.triggers()
    folder = Path(args.out) / str(color)
    folder.mkdir(exist_ok=True)
    np.savez(
        folder / f"rank{rank}.npz",
        out=outs,
        kind=np.array(kinds),
        mask=masks,
        wait=waits,
        cpu=cpu,
        posted=posted,
        returned=returned,
        records=records,
        triggers=triggers,
        **fields,
        **{f"rounds_{c}": np.asarray(table[c].tolist()) for c in ROUND_COLUMNS},
    )


if __name__ == "__main__":
    main()
