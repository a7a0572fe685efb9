"""Round contents of real runs follow the rules of docs/semantics.md, read off the probe slots, where the timing
makes the outcome certain: two ranks, one far slower than the other, 180 ms behind it from its first post on, more
than a loaded machine delays a rank (with more fast ranks, which of them activates a round first is a race); and
real sync through the native core equals sync through torch.distributed."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.analysis.runfolder import load_run
from tests.native.test_probe import splitmix_initiator

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
