"""The notebooks: stored without outputs, and each one runs start to finish with the quick setting
(``STRAGGLERLAB_NOTEBOOK_QUICK=1``) and writes its figures and tables.

A notebook runs as Jupyter would run it, minus the kernel: its code cells in order, in one fresh namespace, in a
subprocess (so no Jupyter packages are needed to test them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import mpiexec_or_skip

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
#: notebook -> the files it must leave in its output folder
PRODUCES = {
    "eager_injection": ["throughput.csv", "throughput.png", "curves.png"],
    "wagma_scaling": ["scaling.csv", "scaling.png", "throughput.png"],
    "lsgd_heavy_tail": ["time_to_loss.csv", "curves.png"],
    "sim_vs_real": ["calibration.toml", "validation.csv", "trace.png", "out-of-sample.png"],
    "baselines": [
        "eager-throughput.csv",
        "eager-throughput.png",
        "eager-loss.csv",
        "eager-curves.png",
        "gossip.csv",
        "gossip-speedup.png",
        "lsgd-loss.csv",
        "lsgd-curves.png",
    ],
}
#: runs the code cells of the notebook named on the command line, in order, in one namespace
RUNNER = """
import json, sys
namespace = {"__name__": "__main__"}
for number, cell in enumerate(json.load(open(sys.argv[1]))["cells"]):
    if cell["cell_type"] == "code":
        exec(compile("".join(cell["source"]), f"{sys.argv[1]} cell {number}", "exec"), namespace)
"""


def test_every_notebook_is_tested():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(PRODUCES)


@pytest.mark.parametrize("name", sorted(PRODUCES))
def test_stored_without_outputs(name):
    notebook = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    assert notebook["nbformat"] == 4
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, "clear the outputs before committing"
    assert any(c["cell_type"] == "markdown" for c in notebook["cells"])


def execute(name: str, out: Path, timeout: float) -> None:
    env = dict(
        os.environ,
        STRAGGLERLAB_NOTEBOOK_QUICK="1",
        STRAGGLERLAB_NOTEBOOK_OUT=str(out),
        MPLBACKEND="Agg",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(NOTEBOOKS / f"{name}.ipynb")],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for produced in PRODUCES[name]:
        path = out / name / produced
        assert path.is_file() and path.stat().st_size > 0, f"{name} did not write {produced}"
        if path.suffix == ".png":
            assert path.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("name", ["eager_injection", "wagma_scaling", "lsgd_heavy_tail", "baselines"])
def test_simulation_notebook_runs(name, tmp_path):
    execute(name, tmp_path, timeout=120)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_sim_vs_real_notebook_runs(tmp_path):
    pytest.importorskip("mpi4py", reason="real runs need mpi4py (the mpi extra)")
    mpiexec_or_skip()
    from stragglerlab.analysis.errors import UserError
    from stragglerlab.realrun.build import build

    try:
        build()
    except UserError as err:
        pytest.skip(f"stragglerlab run is unavailable: the native core does not build ({err})")
    execute("sim_vs_real", tmp_path, timeout=280)
