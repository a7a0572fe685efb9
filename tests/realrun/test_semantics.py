"""Round contents of real runs follow the rules of docs/semantics.md, read off the probe slots, where the timing
makes the outcome certain: two ranks, one far slower than the other, 180 ms behind it from its first post on, more
than a loaded machine delays a rank (with more fast ranks, which of them activates a round first is a race); and
real sync through the native core equals sync through torch.distributed, whose runs end their process group."""

from __future__ import annotations

import os

import numpy as np
import pytest

from stragglerlab.analysis.runfolder import load_run
from tests.native.test_probe import splitmix_initiator
from tests.processes import run_bounded
from tests.realrun.conftest import ROOT, environment

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]

SLOW = 1

SCENARIO = """
seed = 2
iterations = 16
[cluster]
workers = 2
[workload]
params = 64
compute = { dist = "constant", mean = 0.02 }
[imbalance]
kind = "persistent"
factors = { 1 = 10.0 }
[algorithm]
sync_period = 0
"""


def real_run(spawn, scenario_file, tmp_path, *sets: str):
    out = tmp_path / "run"
    argv = ["run", str(scenario_file(SCENARIO)), *[x for kv in sets for x in ("--set", kv)], "-o", str(out)]
    proc = spawn(2, argv)
    assert proc.returncode == 0, proc.stderr
    return load_run(out)


def test_eager_solo_a_straggler_is_never_fresh_and_its_gradients_join_the_next_exchange(spawn, scenario_file, tmp_path):
    run = real_run(spawn, scenario_file, tmp_path, "algorithm.name=eager-solo", "algorithm.late=accumulate")
    it, rounds = run.iterations, run.rounds.set_index("round")
    fast = it[it["worker"] != SLOW]
    slow = it[it["worker"] == SLOW]
    # the fast rank activates every round and is in it with its own call
    assert fast["fresh"].all() and (fast["round"] == fast["iteration"]).all()
    # the straggler posts every call long after its round completed: never fresh, always stale
    assert not slow["fresh"].any()
    carried = slow[slow["round"] >= 0]
    assert len(carried) >= 1 and (carried["round"] > carried["iteration"]).all()
    # its gradient goes into the first exchange that starts after its post
    for row in carried.itertuples():
        assert rounds.loc[row.round, "t_trigger"] > row.t_post - 0.003
        assert row.round == 0 or rounds.loc[row.round - 1, "t_trigger"] < row.t_post + 0.003
    # the rounds table (the core's records) agrees with the probe: one fresh rank, the straggler counted exactly
    # in the rounds its gradients went to
    assert (rounds["fresh"] == 1).all()
    with_slow = set(carried["round"])
    assert all(rounds.loc[m, "contributors"] == (2 if m in with_slow else 1) for m in rounds.index)


def test_eager_drop_discards_every_late_gradient(spawn, scenario_file, tmp_path):
    run = real_run(spawn, scenario_file, tmp_path, "algorithm.name=eager-solo", "algorithm.late=drop")
    slow = run.iterations[run.iterations["worker"] == SLOW]
    assert (slow["round"] == -1).all() and (run.rounds["contributors"] == 1).all()


def test_eager_majority_rounds_wait_for_their_drawn_initiator(spawn, scenario_file, tmp_path):
    run = real_run(spawn, scenario_file, tmp_path, "algorithm.name=eager-majority")
    it, rounds = run.iterations, run.rounds
    expected = [splitmix_initiator(2, n, 2) for n in rounds["round"]]
    assert list(rounds["initiator"]) == expected
    waited = rounds[rounds["initiator"] == SLOW]["round"]
    assert len(waited) > 0
    slow = it[it["worker"] == SLOW].set_index("iteration")
    assert slow.loc[waited, "fresh"].all() and (slow.loc[waited, "round"] == waited.to_numpy()).all()


@pytest.mark.timeout(150)
def test_sync_through_the_native_core_equals_sync_through_torch_distributed(spawn, scenario_file, tmp_path):
    pytest.importorskip("torch")
    models = {}
    for backend in ("native", "torch"):
        saved = tmp_path / f"{backend}.npy"
        proc = spawn(
            3,
            [
                "run",
                str(scenario_file(SCENARIO)),
                "--set",
                "imbalance.kind=none",
                "--set",
                "cluster.workers=3",
                "--set",
                "workload.model=torch:mlp",
                "--set",
                "workload.batch=16",
                "--set",
                "algorithm.name=sync",
                "--set",
                "algorithm.momentum=0.9",
                "--set",
                "algorithm.lr=0.1",
                "--backend",
                backend,
                "--save-model",
                str(saved),
                "-o",
                str(tmp_path / backend),
            ],
        )
        assert proc.returncode == 0, proc.stderr
        models[backend] = np.load(saved)
        assert load_run(tmp_path / backend).finished
    assert models["native"].shape == models["torch"].shape
    assert np.abs(models["native"] - models["torch"]).max() <= 1e-5


DDP_SCENARIO = """
iterations = 4
[cluster]
workers = 2
[workload]
model = "torch:mlp"
batch = 8
[algorithm]
name = "sync"
"""

#: run under mpiexec: two DDP runs in one process; each rank prints its thread count after each
DDP_TWICE = """
import os, sys, time
from pathlib import Path
from mpi4py import MPI
from stragglerlab.realrun.harness import run_rank
from stragglerlab.simulator.scenario import load

def threads():
    return len(os.listdir("/proc/self/task"))

scenario, out = load(Path(sys.argv[1])), Path(sys.argv[2])
counts = []
for k in range(2):
    run_rank(scenario.replace(seed=k), out / f"run-{k}", "torch", notes=False)
    deadline = time.monotonic() + 10
    while k and threads() > counts[0] and time.monotonic() < deadline:  # threads still winding down
        time.sleep(0.05)
    counts.append(threads())
print(MPI.COMM_WORLD.Get_rank(), *counts)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_a_ddp_run_ends_its_process_group(native_ready, scenario_file, tmp_path):
    # DDP holds its process group: a run that left the model wrapped kept the group and its threads alive after
    # destroying it, and calibrate's blocks, runs in one process, piled them up (and timed rounds a quarter faster
    # than fresh runs meet them)
    pytest.importorskip("torch")
    from stragglerlab.realrun.mpiexec import launch

    script = tmp_path / "twice.py"
    script.write_text(DDP_TWICE)
    command = [*launch(2, [])[:-2], str(script), str(scenario_file(DDP_SCENARIO)), str(tmp_path)]
    proc = run_bounded(command, 90, environment(), ROOT)
    assert proc.returncode == 0, proc.stderr
    counts = [line.split()[1:] for line in proc.stdout.splitlines()]
    # no more threads after the second run than after the first (fewer where the first's were still winding down)
    assert len(counts) == 2 and all(int(second) <= int(first) for first, second in counts), counts
