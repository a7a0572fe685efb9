"""Real runs evaluate what the simulator evaluates: the mean of the replicas (worker −1), also where the replicas
differ (WAGMA between global averages, LSGD, local SGD after its last average); and the final replicas hold every
exchange served after their rank's last iteration (ad-psgd)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stragglerlab.analysis.runfolder import load_run
from stragglerlab.simulator.scenario import load
from stragglerlab.simulator.workloads import load as load_workload
from tests.processes import run_bounded
from tests.realrun.conftest import ROOT, environment

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]

SCENARIO = """
seed = 4
iterations = 14
[cluster]
workers = 3
[workload]
model = "logistic"
compute = { dist = "constant", mean = 0.002 }
[imbalance]
kind = "random-delay"
slow = [1, 1]
delay = 0.01
[algorithm]
lr = 0.2
sync_period = 5
group_size = 2
period = 4
global_period = 8
[evals]
every_iterations = 4
"""


def final_replicas(tmp_path, text: str, ranks: int) -> tuple[Path, np.ndarray]:
    """Run the scenario ``text`` on ``ranks`` ranks into ``tmp_path / "run"``: its path and every rank's final
    replica (one row each)."""
    from stragglerlab.realrun.mpiexec import launch

    path = tmp_path / "s.toml"
    path.write_text(text)
    script = ROOT / "tests" / "realrun" / "replicas_run.py"
    command = [*launch(ranks, [])[:-2], str(script), str(path), str(tmp_path / "run"), str(tmp_path / "w")]
    proc = run_bounded(command, 90, environment(), ROOT)
    assert proc.returncode == 0, proc.stderr
    return path, np.array([np.load(tmp_path / f"w{r}.npy") for r in range(ranks)])


@pytest.mark.parametrize("algorithm", ["wagma", "lsgd", "local-sgd"])
def test_the_final_evaluation_is_of_the_replicas_mean(native_ready, tmp_path, algorithm):
    text = SCENARIO.replace("[algorithm]\n", f'[algorithm]\nname = "{algorithm}"\n')
    path, replicas = final_replicas(tmp_path, text, 3)
    assert np.abs(replicas - replicas[0]).max() > 1e-6, "the replicas must differ for this test to mean anything"
    scenario = load(path)
    workload = load_workload(scenario)
    evals = load_run(tmp_path / "run").evals
    assert (evals["worker"] == -1).all()
    final = evals.iloc[-1]
    mean_loss, mean_accuracy = workload.evaluate(replicas.mean(axis=0))
    own_loss, _ = workload.evaluate(replicas[0])
    assert final["iteration"] == 14
    assert final["loss"] == pytest.approx(mean_loss, rel=1e-5)
    assert final["accuracy"] == pytest.approx(mean_accuracy, abs=1e-9)
    assert abs(own_loss - mean_loss) > 1e-4 * abs(mean_loss)  # rank 0's own replica would have been told apart


def test_an_ad_psgd_rank_that_ends_first_keeps_what_it_serves_after(native_ready, tmp_path):
    # rank 1 computes 50 times longer than rank 0, which ends its 30 iterations while rank 1 is at its first few and
    # then serves the rest of rank 1's exchanges: its final model is the average of rank 1's last one, which rank 1
    # then stepped from, so the two final replicas differ by rank 1's last step alone
    N, lr = 30, 0.2
    trace = np.tile([0.001, 0.05], (N, 1))
    np.save(tmp_path / "trace.npy", trace)
    text = f"""
seed = 4
iterations = {N}
[cluster]
workers = 2
[workload]
model = "logistic"
[imbalance]
kind = "trace"
file = "{tmp_path / "trace.npy"}"
[algorithm]
name = "ad-psgd"
lr = {lr}
"""
    path, (w0, w1) = final_replicas(tmp_path, text, 2)
    rounds = load_run(tmp_path / "run").rounds
    assert rounds[rounds["initiator"] == 1]["t_trigger"].max() > rounds[rounds["initiator"] == 0]["t_done"].max()
    workload = load_workload(load(path))
    g, _ = workload.gradient(w1[None, :], workload.batches(np.array([1]), np.array([N - 1])))
    step = lr * g[0]  # rank 1's last step, its gradient taken on a model one step away
    # rank 0's model as its own last iteration left it, without what it served after, is some ten steps away
    assert np.linalg.norm(w0 - w1 - step) < 0.25 * np.linalg.norm(step)
