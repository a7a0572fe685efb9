"""The notebooks: stored with the outputs of one execution from the top, every number their prose states printed by
one of their cells, and each one executed again (``notebooks/execute.py --check``) printing exactly what is stored
and saving the figures ``docs/`` shows."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
DOCS = ROOT / "docs"
#: notebook -> the figures it saves in docs/figures
FIGURES = {
    "eager_injection": ["eager-throughput.png", "eager-freshness.png", "eager-curves.png"],
    "wagma_scaling": ["wagma-scaling.png", "wagma-throughput.png"],
    "lsgd_heavy_tail": ["lsgd-curves.png"],
    "sim_vs_real": ["sim-vs-real-trace.png", "sim-vs-real-out-of-sample.png"],
    "baselines": [
        "baselines-eager-throughput.png",
        "baselines-eager-curves.png",
        "baselines-gossip-speedup.png",
        "baselines-lsgd-curves.png",
    ],
    "papers": ["papers-sensitivity.png", "papers-wagma.png"],
}


def _execute_module():
    spec = importlib.util.spec_from_file_location("notebook_execute", NOTEBOOKS / "execute.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


execute = _execute_module()


def code_cells(name: str) -> list[dict]:
    return [c for c in json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())["cells"] if c["cell_type"] == "code"]


def test_every_notebook_is_tested():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(FIGURES)


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_stored_with_the_outputs_of_one_execution(name):
    cells = code_cells(name)
    assert [c["execution_count"] for c in cells] == list(range(1, len(cells) + 1)), "run notebooks/execute.py"
    assert any(c["outputs"] for c in cells)
    shown = [o for c in cells for o in c["outputs"] if "image/png" in o.get("data", {})]
    assert len(shown) == len(FIGURES[name]), "every figure the notebook saves is shown in it"


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_every_number_of_the_prose_is_printed_by_a_cell(name):
    assert execute.unsourced(NOTEBOOKS / f"{name}.ipynb") == []


def test_the_prose_check_finds_a_number_no_cell_printed(tmp_path):
    notebook = json.loads((NOTEBOOKS / "wagma_scaling.ipynb").read_text())
    notebook["cells"].append(
        {"cell_type": "markdown", "metadata": {}, "source": ["WAGMA is 3.17x sync on ResNet-50 (`0.123`), 1,024 …"]}
    )
    path = tmp_path / "edited.ipynb"
    path.write_text(json.dumps(notebook))
    assert [n.split(" ")[0] for n in execute.unsourced(path)] == ["3.17"]


@pytest.mark.parametrize("name", sorted(FIGURES))
@pytest.mark.timeout(600)
def test_executed_again_it_prints_what_is_stored_and_saves_its_figures(name, tmp_path):
    """The simulations are seeded, so an execution prints exactly what the stored one did; sim_vs_real simulates its
    stored real runs again (no MPI)."""
    proc = subprocess.run(
        [sys.executable, str(NOTEBOOKS / "execute.py"), "--check", name, "--scratch", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    saved = sorted(p.name for p in (tmp_path / name / "figures").iterdir())
    assert saved == sorted(FIGURES[name])
    for figure in saved:
        assert (tmp_path / name / "figures" / figure).read_bytes().startswith(b"\x89PNG")


def test_the_docs_show_every_figure_and_only_those():
    committed = sorted(p.name for p in (DOCS / "figures").iterdir())
    assert committed == sorted(f for figures in FIGURES.values() for f in figures)
    linked = set()
    for page in [*DOCS.glob("*.md"), ROOT / "README.md"]:
        linked |= set(re.findall(r"figures/([\w.-]+\.png)", page.read_text()))
    assert linked == set(committed)
