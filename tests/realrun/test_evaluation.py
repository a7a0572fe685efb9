"""Real runs evaluate what the simulator evaluates: the mean of the replicas (worker −1), also where the replicas
differ (WAGMA between global averages, LSGD, local SGD after its last average)."""

from __future__ import annotations

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


@pytest.mark.parametrize("algorithm", ["wagma", "lsgd", "local-sgd"])
def test_the_final_evaluation_is_of_the_replicas_mean(native_ready, tmp_path, algorithm):
    from stragglerlab.realrun.commands.run import launch

    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.replace("[algorithm]\n", f'[algorithm]\nname = "{algorithm}"\n'))
    script = ROOT / "tests" / "realrun" / "replicas_run.py"
    command = [*launch(3, [])[:-2], str(script), str(path), str(tmp_path / "run"), str(tmp_path / "w")]
    proc = run_bounded(command, 90, environment(), ROOT)
    assert proc.returncode == 0, proc.stderr
    replicas = np.array([np.load(tmp_path / f"w{r}.npy") for r in range(3)])
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
