"""Cross-plane conformance: every algorithm's real run takes the decisions the simulator's rules take on that run's
own post times.

Each algorithm runs for real on 2 and 3 ranks, timing only (every rank sleeps its compute time), with persistent
stragglers. The simulator then replays the run with every worker posting exactly when it really posted: a
trace-driven simulation whose compute times are corrected until the simulated posts are the real ones (the real
waits are longer than the modelled ones, which the correction absorbs). The two must agree on every round (kind,
initiator, contributors, fresh, group) and on what carried every worker-iteration (round, freshness, model version,
staleness). Times themselves are not compared.

The scenario makes the outcome certain, not a race: compute of 200 ms and stragglers 1.3 and 2.3 times slower put
every post at least 60 ms from every other post and from every exchange start that could decide its fate (within an
LSGD segment, and between eager's synchronous rounds, which realign the workers every other round), while the
native core and MPI take well under a millisecond to act on a post, and even a machine loaded with twice as many
busy processes as cores wakes a ready rank within a few tens of milliseconds. With P = 2, period = 2 and
global_period = 3, LSGD exchanges at counts 4, 6, 8, 12, ...: a real counting server that only knew P·period would
skip 6.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stragglerlab.analysis.runfolder import Run, load_run
from stragglerlab.realrun.validate import timing_scenario
from stragglerlab.simulator import algorithms
from stragglerlab.simulator.run import simulate

#: every algorithm with a real-run exchange whose ranks post when the rules would have them post; a preempted rank
#: of ``preempt`` posts at the next micro-batch boundary after the cut, past the instant the simulator cuts it at
#: (its own test: ``test_preempt.py``)
REAL = [record.name for record in algorithms.RECORDS if record.exchanges and record.name != "preempt"]
pytestmark = [pytest.mark.mpi, pytest.mark.timeout(240)]

ITERATIONS = 8
FACTORS = {2: "{ 1 = 2.3 }", 3: "{ 1 = 1.3, 2 = 2.3 }"}
SCENARIO = """
seed = 3
iterations = {iterations}
[cluster]
workers = {workers}
[workload]
params = 64
compute = {{ dist = "constant", mean = 0.2 }}
[imbalance]
kind = "persistent"
factors = {factors}
[algorithm]
name = "{algorithm}"
sync_period = 2
group_size = 2
period = 2
global_period = 3
"""
ROUND_COLUMNS = ["round", "kind", "initiator", "contributors", "fresh", "group"]
ITERATION_COLUMNS = ["worker", "iteration", "round", "fresh", "model_version", "staleness"]


def matrix(run: Run, column: str) -> np.ndarray:
    """An iterations column as an iterations x workers matrix."""
    return run.iterations.pivot(index="iteration", columns="worker", values=column).to_numpy()


def on_real_posts(real: Run, folder) -> Run:
    """The simulation of ``real`` in which every worker posts when it really posted (module docstring). Each pass
    corrects every compute time by how far its post missed; a post is right once every event before it is, so at
    least the earliest wrong post is put right by each pass."""
    posts = matrix(real, "t_post")
    trace = matrix(real, "compute")
    for attempt in range(posts.size + 1):
        np.save(folder / f"trace-{attempt}.npy", np.maximum(trace, 0.0))
        imbalance = {"kind": "trace", "file": str(folder / f"trace-{attempt}.npy")}
        sim = load_run(
            simulate(timing_scenario(real.meta["scenario"], None, imbalance=imbalance), folder / f"sim-{attempt}")
        )
        if np.allclose(matrix(sim, "t_post"), posts, rtol=0, atol=1e-9):
            return sim
        trace = posts - matrix(sim, "t_start")  # post at the real time from where the simulation started the iteration
    pytest.fail("the simulated posts do not settle on the real ones")


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("algorithm", REAL)
def test_real_runs_decide_as_the_simulators_rules_on_their_own_posts(
    spawn, scenario_file, tmp_path, algorithm, workers
):
    text = SCENARIO.format(iterations=ITERATIONS, workers=workers, factors=FACTORS[workers], algorithm=algorithm)
    proc = spawn(workers, ["run", str(scenario_file(text)), "-o", str(tmp_path / "real")], timeout=180)
    assert proc.returncode == 0, proc.stderr
    real = load_run(tmp_path / "real")
    sim = on_real_posts(real, tmp_path)
    pd.testing.assert_frame_equal(real.rounds[ROUND_COLUMNS], sim.rounds[ROUND_COLUMNS])
    pd.testing.assert_frame_equal(real.iterations[ITERATION_COLUMNS], sim.iterations[ITERATION_COLUMNS])


@pytest.mark.parametrize("k", [1, 3])
def test_quorum_runs_with_its_own_k(spawn, scenario_file, tmp_path, k):
    """The real run takes algorithm.quorum from the scenario, not the core's default (2 of 3 ranks): k = 1 and k = 3
    decide differently from it on these posts."""
    text = SCENARIO.format(iterations=ITERATIONS, workers=3, factors=FACTORS[3], algorithm="quorum") + f"quorum = {k}\n"
    proc = spawn(3, ["run", str(scenario_file(text)), "-o", str(tmp_path / "real")], timeout=180)
    assert proc.returncode == 0, proc.stderr
    real = load_run(tmp_path / "real")
    sim = on_real_posts(real, tmp_path)
    pd.testing.assert_frame_equal(real.rounds[ROUND_COLUMNS], sim.rounds[ROUND_COLUMNS])
    asynchronous = real.rounds[real.rounds.kind == "async"]
    assert len(asynchronous) and ((asynchronous.fresh == 3) if k == 3 else (asynchronous.fresh < 3)).all()


def test_sgp_pushing_to_two_runs_as_its_rules(spawn, scenario_file, tmp_path):
    """The released SGP's graph for real: each rank receives from two sources and waits for its two sends."""
    text = SCENARIO.format(iterations=ITERATIONS, workers=3, factors=FACTORS[3], algorithm="sgp") + "push_peers = 2\n"
    proc = spawn(3, ["run", str(scenario_file(text)), "-o", str(tmp_path / "real")], timeout=180)
    assert proc.returncode == 0, proc.stderr
    real = load_run(tmp_path / "real")
    sim = on_real_posts(real, tmp_path)
    pd.testing.assert_frame_equal(real.rounds[ROUND_COLUMNS], sim.rounds[ROUND_COLUMNS])
    pd.testing.assert_frame_equal(real.iterations[ITERATION_COLUMNS], sim.iterations[ITERATION_COLUMNS])
    assert (real.rounds["contributors"] == 3).all()
