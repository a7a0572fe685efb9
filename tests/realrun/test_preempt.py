"""``preempt``'s real runs stop the stragglers as the rules say, at micro-batch boundaries: on 3 ranks with
persistent stragglers (timing only, every rank sleeping its compute time in micro-batch shares), the two fastest
finish every step with their whole batch, the slowest stops at the first boundary after it heard of them, and every
step applies one sync round; with f = 1 nobody stops.

Ranks compute 200, 260 and 460 ms in 4 micro-batches of 32 samples: the 260 ms finisher is 85 ms (most of a
micro-batch) before the slow rank's third boundary (345 ms) and 30 ms after its second (230 ms), so it stops after
three micro-batches (96 samples) unless a control message takes 30 ms to be read, or 85 ms late.
"""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.analysis.runfolder import load_run

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(240)]

SCENARIO = """
seed = 3
iterations = 6
[cluster]
workers = 3
[workload]
params = 64
batch = 128
compute = {{ dist = "constant", mean = 0.2 }}
[imbalance]
kind = "persistent"
factors = {{ 1 = 1.3, 2 = 2.3 }}
[algorithm]
name = "preempt"
fraction = {fraction}
microbatches = 4
"""


@pytest.mark.parametrize("fraction", [0.6, 1.0])
def test_the_slowest_rank_stops_at_the_boundary_after_the_fraction_finished(spawn, scenario_file, tmp_path, fraction):
    proc = spawn(3, ["run", str(scenario_file(SCENARIO.format(fraction=fraction))), "-o", str(tmp_path / "r")])
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r")
    it = run.iterations
    samples = it.pivot(index="iteration", columns="worker", values="samples").to_numpy()
    posts = it.pivot(index="iteration", columns="worker", values="t_post").to_numpy()
    starts = it.pivot(index="iteration", columns="worker", values="t_start").to_numpy()
    assert (samples[:, :2] == 128).all()
    if fraction == 1.0:
        assert (samples[:, 2] == 128).all()
    else:
        assert (samples[:, 2] == 96).all()
        assert (posts[:, 2] >= posts[:, 1]).all()  # it stopped only after the second finisher
        assert (posts[:, 2] - starts[:, 2] < 0.43).all()  # well before its whole 460 ms
    rounds = run.rounds
    assert list(rounds["round"]) == list(range(6)) and (rounds.kind == "sync").all()
    assert (rounds.contributors == 3).all() and (rounds.initiator == 2).all()
    done = it.pivot(index="iteration", columns="worker", values="t_done").to_numpy()
    assert (done >= posts.max(axis=1, keepdims=True) - 0.005).all()  # the ranks' clocks agree within milliseconds
    assert np.allclose(rounds.t_trigger, posts.max(axis=1), rtol=0, atol=0.01)  # the core's clock, aligned
